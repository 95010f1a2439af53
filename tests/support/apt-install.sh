#!/bin/sh
# Usage: apt-install.sh PACKAGE COMMAND...
# Makes sure every COMMAND (a name on PATH or an absolute path) is there, installing Debian's
# PACKAGE when one is missing. Idempotent; run by .ci/run and by the tests that need a real
# server (sshd, etcd). Fails loudly, saying how, when it cannot install it.
set -eu
package=$1
shift
present() {
    for c in "$@"; do
        command -v "$c" >/dev/null 2>&1 || return 1
    done
}
if present "$@"; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "$1 is missing and installing it needs root: run 'sudo apt-get install -y $package'" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
# Two test binaries may get here at once: one installs, the other waits.
exec 9>"/tmp/ebb-apt-$package.lock"
flock 9
if ! present "$@"; then
    apt-get install -y --no-install-recommends "$package" >/dev/null 2>&1 \
        || { apt-get update >/dev/null && apt-get install -y --no-install-recommends "$package" >/dev/null; }
fi
present "$@" || { echo "installed $package but $* is still missing" >&2; exit 1; }
