#!/usr/bin/env bash
# Makes what the web UI's browser tests need, and prints the python that drives them:
# Debian's chromium (headless) and a virtualenv with Playwright from PyPI. Playwright drives
# the system's chromium (no browser download). Idempotent and safe to run from many test
# processes at once.
#   EBB_UI_VENV  where the virtualenv goes (default: target/ui-venv in the repository)
set -euo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
venv="${EBB_UI_VENV:-$root/target/ui-venv}"
version="1.65.2"
"$root/tests/support/apt-install.sh" chromium chromium >&2
# A font, so pages (and the README's screenshots) render text as a person sees it.
"$root/tests/support/apt-install.sh" fonts-dejavu-core /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf >&2
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9
if ! "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('playwright') != '$version')" 2>/dev/null; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "playwright==$version" >&2
fi
echo "$venv/bin/python"
