#!/bin/sh
# Makes sure etcd's server (Debian's etcd-server, 3.4) is installed, for the tests that run on
# the etcd store. Idempotent; run by .ci/run, and by the tests themselves when etcd is
# missing. Fails loudly when it cannot install it.
set -eu
if command -v etcd >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "etcd is missing and installing it needs root: run 'sudo apt-get install -y etcd-server'" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
# Two test binaries may get here at once: one installs, the other waits.
exec 9>/tmp/ebb-etcd-setup.lock
flock 9
if ! command -v etcd >/dev/null 2>&1; then
    apt-get install -y --no-install-recommends etcd-server >/dev/null 2>&1 \
        || { apt-get update >/dev/null && apt-get install -y --no-install-recommends etcd-server >/dev/null; }
fi
command -v etcd >/dev/null
