#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_links.sh — scripts/check-links.sh, the CI check that the README, the
# pages of doc/ and the man pages link to nothing that is not there: it
# passes on this tree, and it fails, naming the file and line, on a copy
# with a dead link planted: a Markdown link to a missing file, to a missing
# heading of an existing page, a path of the tree written as code that does
# not exist, a bare name of a missing .md, and a missing path in a man page.
# URLs are not followed (no network), and links inside code blocks are
# examples, not links.
source "$(dirname "$0")/../lib/test-lib.sh"

check_links() { bash "$CAIRN_SRC/scripts/check-links.sh" "$@" >"$T/out" 2>&1; }

release_build_only "the check reads the documentation; the build type does not change it"

check "passes on the real tree" check_links "$CAIRN_SRC"

# fresh_copy: the documentation and what it names into $T/src.
fresh_copy() {
  rm -rf "$T/src" && mkdir "$T/src"
  (cd "$CAIRN_SRC" && tar --exclude='./build*' --exclude=./.git --exclude=./bench/results -cf - .) |
    tar -C "$T/src" -xf -
}

fresh_copy
check "passes on the copy" check_links "$T/src"

fresh_copy
printf '\nSee [the guide](doc/nowhere.md).\n' >>"$T/src/README.md"
expect_exit 1 "a link to a missing file fails" check_links "$T/src"
check "the failure names README.md, its line and the target" \
  grep -q "^README.md:$(wc -l <"$T/src/README.md"): doc/nowhere.md: no such file" "$T/out"

fresh_copy
printf '\nSee [design](design.md#no-such-heading).\n' >>"$T/src/doc/README.md"
expect_exit 1 "a link to a missing heading fails" check_links "$T/src"
check "the failure names the heading" grep -q 'doc/README.md:.*no heading #no-such-heading' "$T/out"

fresh_copy
first=$(grep -m1 -o '^## .*' "$T/src/doc/design.md" | sed 's/^## //')
anchor=$(printf '%s' "$first" | tr 'A-Z' 'a-z' | sed 's/[^a-z0-9 _-]//g; s/ /-/g')
printf '\nSee [it](design.md#%s).\n' "$anchor" >>"$T/src/doc/README.md"
check "a link to an existing heading ($anchor) passes" check_links "$T/src"

fresh_copy
printf '\nRun `tests/e2e/test_gone.sh`.\n' >>"$T/src/doc/testing.md"
expect_exit 1 "a missing path of the tree written as code fails" check_links "$T/src"
check "the failure names it" grep -q 'doc/testing.md:.*tests/e2e/test_gone.sh: no such file' "$T/out"

fresh_copy
printf '\nOn these hosts it needs what TESTING.md says.\n' >>"$T/src/README.md"
expect_exit 1 "a bare name of a missing .md fails" check_links "$T/src"
check "the failure names TESTING.md" grep -q 'README.md:.*TESTING.md: no such file' "$T/out"

fresh_copy
printf '\n# SEE ALSO\n\ndoc/gone.md in the sources.\n' >>"$T/src/doc/cairn.1.scd"
expect_exit 1 "a missing path in a man page fails" check_links "$T/src"
check "the failure names the man page" grep -q 'doc/cairn.1.scd:.*doc/gone.md' "$T/out"

fresh_copy
printf '\n[web](https://example.invalid/x.md) and\n\n```\n[not a link](gone.md)\n```\n' \
  >>"$T/src/README.md"
check "URLs and code blocks are not checked" check_links "$T/src"

finish
