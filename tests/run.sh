#!/usr/bin/env bash
# Runs every test: the whole workspace on the embedded store (redb), then the integration
# suite again with every test server keeping its state in a real etcd (EBB_TEST_STORE=etcd).
# Extra arguments go to both nextest runs (e.g. a test name filter).
set -euo pipefail
cd "$(dirname "$0")/.."
tests/support/etcd/setup.sh
echo "== tests on redb"
began=$SECONDS
cargo nextest run --workspace --features ebb/paused-clock "$@"
echo "-- tests on redb: $((SECONDS - began)) s"
echo "== the integration suite on etcd"
began=$SECONDS
# --workspace with a filter, not -p ebb: the same features as above, so nothing is rebuilt.
# The etcd store's own tests, the several-server tests and the tests of what a writer of etcd's
# keys can do run on etcd in the first pass already;
# the conformance kit (provisioners and plugins driven directly, no server), the Ansible
# automator's playbooks, the real engines (Spark, Dask, ZooKeeper), the web UI in a browser,
# the CLI's words, the OpenAPI document and the HTTP listener's TLS, which test nothing of the
# store, run once.
EBB_TEST_STORE=etcd cargo nextest run --workspace --features ebb/paused-clock \
  -E 'binary_id(ebb::api) and not test(/^(etcd|servers|partitions|conformance|engines|security::etcd_writers|automators|ui|cli|openapi|tls)::/) and not test(/conformance_kit/)' "$@"
echo "-- the integration suite on etcd: $((SECONDS - began)) s"
