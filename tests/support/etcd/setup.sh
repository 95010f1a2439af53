#!/bin/sh
# Makes sure etcd's server (Debian's etcd-server, 3.4) is installed, for the tests that run on
# the etcd store. Run by .ci/run, and by the tests themselves when etcd is missing.
exec "$(dirname "$0")/../apt-install.sh" etcd-server etcd
