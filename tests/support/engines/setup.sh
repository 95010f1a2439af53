#!/bin/sh
# Installs the engines the engine tests run on ebb's clusters: Java 17 and Debian's ZooKeeper.
# Idempotent; run by .ci/run and by the engine tests themselves when something is missing.
set -eu
here="$(dirname "$0")"
"$here/../apt-install.sh" openjdk-17-jre-headless java
"$here/../apt-install.sh" zookeeper /usr/share/zookeeper/bin/zkCli.sh
