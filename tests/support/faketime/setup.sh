#!/bin/sh
# Makes sure libfaketime is installed, for the tests that step a server's wall clock (it is
# preloaded into the server, which reads the offset from a file the test writes). Run by
# .ci/run, and by the tests themselves when it is missing.
exec "$(dirname "$0")/../apt-install.sh" faketime faketime
