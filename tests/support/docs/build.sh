#!/usr/bin/env bash
# Builds the book (docs/) into target/book and checks every link between its pages and every
# anchor they name; links to the web are not followed (the build needs no network). Fails,
# listing each broken link with the page it is on, if any is broken.
set -euo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
bin="$("$root/tests/support/docs/setup.sh")"
"$bin/mdbook" build "$root/docs"
# LinkChecker run as root reads as `nobody`: it checks a world-readable copy of the book.
copy="$(mktemp -d)"
trap 'rm -rf "$copy"' EXIT
cp -r "$root/target/book/." "$copy"
chmod -R a+rX "$copy"
# print.html is every chapter on one page: its links are the chapters' own, checked there.
"$bin/linkchecker" --config "$root/tests/support/docs/linkcheckerrc" --no-status \
	--ignore-url='/print\.html' "file://$copy/index.html"
