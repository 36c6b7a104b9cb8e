#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_commit_msg.sh — scripts/check-commit-msg.sh, the check that keeps
# the history readable: it passes a message of the form "area: what
# changed" with a body, and fails, saying which rule broke, on a subject
# past 72 characters, a subject without an area, a missing blank line, a
# missing body and a merge that names only its branch; as a range it reads
# the messages of real commits of a scratch repository.
source "$(dirname "$0")/../lib/test-lib.sh"

release_build_only "the check reads commit messages; the build type does not change it"

msg() { printf '%b' "$1" >"$T/msg"; bash "$CAIRN_SRC/scripts/check-commit-msg.sh" "$T/msg" >"$T/out" 2>&1; }

check "a subject with its area and a body passes" msg 'store: keep the lock\n\nBecause gc races.\n'
check "git's comment lines are not the body" sh -c "printf 'tests: x\n\nwhy\n# a comment\n' >'$T/msg' &&
  bash '$CAIRN_SRC/scripts/check-commit-msg.sh' '$T/msg'"
long=$(printf 'store: %070d' 0)
expect_exit 1 "a subject of 77 characters fails" msg "$long\n\nwhy\n"
check "it says how long the subject is" grep -q "subject is 77 characters" "$T/out"
expect_exit 1 "a subject without an area fails" msg 'Fix the lock\n\nwhy\n'
check "it names the rule" grep -q 'not "area: what changed"' "$T/out"
expect_exit 1 "a subject without a body fails" msg 'store: keep the lock\n'
check "it asks why" grep -q "no body" "$T/out"
expect_exit 1 "a second line that is not blank fails" msg 'store: keep the lock\nmore\nwhy\n'

repo=$T/repo
setup git init -q "$repo"
g() { git -C "$repo" -c user.name=t -c user.email=t@t "$@"; }
setup g commit -q --allow-empty -m "doc: start" -m "A first commit."
setup g checkout -q -b h1
setup g commit -q --allow-empty -m "store: one thing" -m "Why it is done."
setup g checkout -q -
setup g commit -q --allow-empty -m "fs: another" -m "Why."
setup g merge -q --no-ff -m "Merge h1" h1
range() { (cd "$repo" && bash "$CAIRN_SRC/scripts/check-commit-msg.sh" --range "$1") >"$T/out" 2>&1; }
expect_exit 1 "a merge named after its branch fails the range" range HEAD~1..HEAD
check "it names the merge" grep -q "a merge names its branch" "$T/out"
setup g reset -q --hard HEAD~1
setup g merge -q --no-ff -m "store: one thing, kept" h1
check "a merge that says what it brings passes, with no body of its own" range HEAD~2..HEAD
finish
