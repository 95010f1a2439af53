#!/usr/bin/env bash
# Makes the virtualenv holding ansible-core, which the Ansible automator plugin
# (examples/plugins/ansible) runs, and prints its python. Idempotent and safe to run from many
# test processes at once.
#   EBB_ANSIBLE_VENV  where the virtualenv goes (default: target/ansible-venv in the repository)
set -euo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
exec "$root/tests/support/venv.sh" "${EBB_ANSIBLE_VENV:-$root/target/ansible-venv}" ansible-core 2.19.14
