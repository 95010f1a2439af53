#!/usr/bin/env bash
# Makes the virtualenv holding the moto server that the aws-ec2 tests run against, and prints
# its python. Idempotent and safe to run from many test processes at once.
#   EBB_MOTO_VENV  where the virtualenv goes (default: target/moto-venv in the repository)
set -euo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
exec "$root/tests/support/venv.sh" "${EBB_MOTO_VENV:-$root/target/moto-venv}" moto 5.2.5 server
