#!/usr/bin/env bash
# Installs mdBook and its link checker (mdbook-linkcheck2) from crates.io into target/tools,
# at the versions the book is built with, unless they are there already. Prints the bin dir.
set -euo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
tools="$root/target/tools"
install() {
	local crate=$1 version=$2 bin=$3
	shift 3
	if [ -x "$tools/bin/$bin" ] && "$tools/bin/$bin" --version 2>/dev/null | grep -q "$version"; then
		return
	fi
	echo "installing $crate $version into $tools" >&2
	cargo install --locked --quiet --root "$tools" "$crate" --version "$version" "$@" >&2
}
install mdbook 0.5.4 mdbook --no-default-features --features search,serve
install mdbook-linkcheck2 0.13.0 mdbook-linkcheck2
echo "$tools/bin"
