#!/bin/sh
# Fetches the UI's vendored scripts again from their npm packages and checks that they are
# the files ebb ships: htmx (Zero-Clause BSD) and its server-sent-events extension (BSD
# Zero Clause). To upgrade, change the versions, run with UPDATE=1, and review the diff.
set -eu
here="$(cd "$(dirname "$0")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"
npm pack --silent htmx.org@2.0.11 htmx-ext-sse@2.2.4 >/dev/null
mkdir htmx sse
tar xzf htmx.org-2.0.11.tgz -C htmx
tar xzf htmx-ext-sse-2.2.4.tgz -C sse
if [ "${UPDATE:-}" = 1 ]; then
    cp htmx/package/dist/htmx.min.js "$here/htmx.min.js"
    cp sse/package/dist/sse.min.js "$here/htmx-sse.min.js"
fi
cmp htmx/package/dist/htmx.min.js "$here/htmx.min.js"
cmp sse/package/dist/sse.min.js "$here/htmx-sse.min.js"
sha256sum "$here/htmx.min.js" "$here/htmx-sse.min.js"
