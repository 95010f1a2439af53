#!/usr/bin/env bash
# Makes the virtualenv holding the moto server that the aws-ec2 tests run against, and prints
# its python. Idempotent and safe to run from many test processes at once.
#   EBB_MOTO_VENV  where the virtualenv goes (default: target/moto-venv in the repository)
set -euo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
venv="${EBB_MOTO_VENV:-$root/target/moto-venv}"
version="5.2.5"
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9
if ! "$venv/bin/python" -c "import moto, sys; sys.exit(moto.__version__ != '$version')" 2>/dev/null; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "moto[server]==$version" >&2
fi
echo "$venv/bin/python"
