#!/usr/bin/env bash
# Makes the virtualenv with the OpenAPI validator the contract's tests use
# (openapi-spec-validator from PyPI), and prints its python. Idempotent and safe to run from
# many test processes at once.
#   EBB_OPENAPI_VENV  where the virtualenv goes (default: target/openapi-venv)
set -euo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
venv="${EBB_OPENAPI_VENV:-$root/target/openapi-venv}"
version="0.9.0"
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9
if ! "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('openapi-spec-validator') != '$version')" 2>/dev/null; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "openapi-spec-validator==$version" >&2
fi
echo "$venv/bin/python"
