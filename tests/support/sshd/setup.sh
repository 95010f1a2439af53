#!/bin/sh
# Makes sure OpenSSH's server is installed, for the tests that run clusters on machines
# reached over SSH (a real sshd on loopback addresses). Run by .ci/run, and by the tests
# themselves when sshd is missing.
exec "$(dirname "$0")/../apt-install.sh" openssh-server /usr/sbin/sshd ssh-keygen
