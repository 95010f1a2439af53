#!/usr/bin/env bash
# Makes what the web UI's browser tests need, and prints the python that drives them:
# Debian's chromium (headless) and a virtualenv with Playwright from PyPI. Playwright drives
# the system's chromium (no browser download). Idempotent and safe to run from many test
# processes at once.
#   EBB_UI_VENV  where the virtualenv goes (default: target/ui-venv in the repository)
set -euo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
"$root/tests/support/apt-install.sh" chromium chromium >&2
# A font, so pages (and the README's screenshots) render text as a person sees it.
"$root/tests/support/apt-install.sh" fonts-dejavu-core /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf >&2
exec "$root/tests/support/venv.sh" "${EBB_UI_VENV:-$root/target/ui-venv}" playwright 1.65.2
