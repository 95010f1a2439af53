#!/usr/bin/env bash
# Makes the virtualenv with the OpenAPI validator the contract's tests use
# (openapi-spec-validator from PyPI), and prints its python. Idempotent and safe to run from
# many test processes at once.
#   EBB_OPENAPI_VENV  where the virtualenv goes (default: target/openapi-venv)
set -euo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
exec "$root/tests/support/venv.sh" "${EBB_OPENAPI_VENV:-$root/target/openapi-venv}" openapi-spec-validator 0.9.0
