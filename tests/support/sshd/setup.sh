#!/bin/sh
# Makes sure OpenSSH's server is installed, for the tests that run clusters on machines
# reached over SSH (a real sshd on loopback addresses). Idempotent; run by .ci/run, and by the
# tests themselves when sshd is missing. Fails loudly when it cannot install it.
set -eu
if [ -x /usr/sbin/sshd ] && command -v ssh-keygen >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "sshd is missing and installing it needs root: run 'sudo apt-get install -y openssh-server'" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
# Two test binaries may get here at once: one installs, the other waits.
exec 9>/tmp/ebb-sshd-setup.lock
flock 9
if [ ! -x /usr/sbin/sshd ]; then
    apt-get install -y --no-install-recommends openssh-server >/dev/null 2>&1 \
        || { apt-get update >/dev/null && apt-get install -y --no-install-recommends openssh-server >/dev/null; }
fi
test -x /usr/sbin/sshd
