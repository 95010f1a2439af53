#!/usr/bin/env bash
# Runs every test: the whole workspace on the embedded store (redb), then the integration
# suite again with every test server keeping its state in a real etcd (EBB_TEST_STORE=etcd).
# Extra arguments go to both nextest runs (e.g. a test name filter).
set -euo pipefail
cd "$(dirname "$0")/.."
tests/support/etcd/setup.sh
echo "== tests on redb"
cargo nextest run --workspace "$@"
echo "== the integration suite on etcd"
EBB_TEST_STORE=etcd cargo nextest run -p ebb --test api "$@"
