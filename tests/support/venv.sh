#!/usr/bin/env bash
# Usage: venv.sh VENV DIST VERSION [EXTRAS]
# Makes, once, a virtualenv at VENV holding DIST==VERSION from PyPI (with EXTRAS, such as
# "server"), and prints its python. Idempotent and safe to run from many test processes at
# once (they take turns on a lock beside it). The setup scripts of moto, the OpenAPI
# validator and Playwright use it.
set -euo pipefail
venv=$1
dist=$2
version=$3
extras=${4:-}
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9
if ! "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('$dist') != '$version')" 2>/dev/null; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "$dist${extras:+[$extras]}==$version" >&2
fi
echo "$venv/bin/python"
