#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_cli_store_missing.sh — a command that only reads never makes a
# store: on a missing one (a mistyped --store) the listings answer as an
# empty store (exit 0) and say on stderr that it does not exist, the
# others exit 3 with one line, and nothing is
# made, not even the missing parents. import (and pull, login) make it,
# saying so once on stderr.
source "$(dirname "$0")/../lib/test-lib.sh"
two_layers
typo=$T/typo/store

for cmd in images layers mounts; do
  expect_exit 0 "$cmd on a missing store: exit 0" cairn --store "$typo" "$cmd"
  check "$cmd: an empty listing (its header)" [ "$(wc -l <"$T/stdout")" = 1 ]
  check "$cmd: one line on stderr says the store does not exist" \
    sh -c "[ \$(wc -l <'$T/stderr') = 1 ] && grep -q 'does not exist' '$T/stderr'"
  check "$cmd --json: []" [ "$(cairn --store "$typo" "$cmd" --json)" = "[]" ]
done
expect_exit 0 "images NAME on a missing store: exit 0" cairn --store "$typo" images app
expect_exit 0 "cairn-pin ls on a missing store: exit 0" cairn-pin --store "$typo" ls
check "cairn-pin ls: no pin" [ "$(wc -l <"$T/stdout")" = 1 ]
for cmd in "inspect app:1" "history app:1" "export app:1" "tag app:1 app:2" "rm app:1" gc fsck df \
  "mount app:1 $T/m" "umount $T/m"; do
  expect_exit 3 "$cmd on a missing store: exit 3" cairn --store "$typo" $cmd
  check "$cmd: says there is no store, one line" \
    [ "$(cat "$T/stderr")" = "cairn: store: $typo: no store here (cairn import or pull makes one)" ]
done
expect_exit 3 "cairn-pin hold on a missing store: exit 3" cairn-pin --store "$typo" hold app:1 -- true
expect_exit 3 "cairn-pin wait on a missing store: exit 3" cairn-pin --store "$typo" wait app:1
check "nothing was made, not even the parent" [ ! -e "$T/typo" ]

# A directory without meta.db is no store either, and stays as it was.
mkdir -p "$T/empty"
expect_exit 0 "images in an empty directory" cairn --store "$T/empty" images
expect_exit 3 "inspect in an empty directory" cairn --store "$T/empty" inspect app:1
check "the directory is still empty" [ -z "$(ls -A "$T/empty")" ]

# import makes the store, and says so once.
expect_exit 0 "import on a missing store" cairn --store "$typo" import app:1 "$T/1.tar"
check "says it made the store" grep -qxF "cairn: created store at $typo" "$T/stderr"
check "the store is there" [ -f "$typo/meta.db" ]
expect_exit 0 "a second import" cairn --store "$typo" import -q app:2 "$T/1.tar"
check "says nothing of the store" [ ! -s "$T/stderr" ]
expect_exit 0 "images now lists it" cairn --store "$typo" images
check "with its rows" [ "$(wc -l <"$T/stdout")" = 3 ]
finish
