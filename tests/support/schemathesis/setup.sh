#!/usr/bin/env bash
# Makes the virtualenv with Schemathesis (from PyPI), which the contract's fuzzing test runs
# against a live server, and prints its python. Idempotent and safe to run from many test
# processes at once.
#   EBB_SCHEMATHESIS_VENV  where the virtualenv goes (default: target/schemathesis-venv)
set -euo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
exec "$root/tests/support/venv.sh" "${EBB_SCHEMATHESIS_VENV:-$root/target/schemathesis-venv}" schemathesis 4.32.5
