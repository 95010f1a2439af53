#!/bin/sh
# Installs the engines the engine tests run on ebb's clusters: Java 17 and Debian's ZooKeeper
# (apt), and a virtualenv with Dask's distributed and PySpark (PyPI, pinned) at
# $EBB_ENGINES_VENV (default: target/engines-venv in the repository). Prints the virtualenv's
# path. Idempotent, and safe to run from many test processes at once (they take turns on a
# lock beside the virtualenv). Run by .ci/run and by the engine tests when something is
# missing.
set -eu
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
"$here/../apt-install.sh" openjdk-17-jre-headless java >&2
"$here/../apt-install.sh" zookeeper /usr/share/zookeeper/bin/zkCli.sh >&2
venv="${EBB_ENGINES_VENV:-$root/target/engines-venv}"
pins="distributed==2026.8.0 pyspark==4.0.1"
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9
if [ "$(cat "$venv/.ebb-pins" 2>/dev/null)" != "$pins" ]; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    # shellcheck disable=SC2086
    "$venv/bin/pip" install --quiet --disable-pip-version-check $pins >&2
    echo "$pins" > "$venv/.ebb-pins"
fi
echo "$venv"
