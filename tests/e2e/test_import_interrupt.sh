#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_import_interrupt.sh — an import killed after it linked its blob
# files and before it committed (^C, SIGTERM, SIGKILL, delivered by strace
# at its syncfs, the step before the commit) leaves blob files; the next
# cairn command of any kind removes them, and only them: a blob of a stored
# image stays, and an import running meanwhile keeps its own. The same
# import then succeeds and fsck finds the store clean.
source "$(dirname "$0")/../lib/test-lib.sh"

blob_files() { find "$STORE/blobs" -type f | wc -l; }

mkdir -p "$T/base" && echo "base" >"$T/base/keep" && mktar "$T/base" "$T/base.tar"
expect_exit 0 "import base:1" cairn import base:1 "$T/base.tar"
stored=$(blob_files)

mkdir -p "$T/l" && for i in $(seq 1 40); do echo "file $i" >"$T/l/f$i"; done
mktar "$T/l" "$T/l.tar"
# LeakSanitizer cannot run under ptrace: off for the commands strace runs.
export ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0"

for sig in INT TERM KILL; do
  # (in sh, which does not announce a child killed by a signal)
  sh -c "strace -f -qq -o /dev/null -e trace=syncfs -e inject=syncfs:signal=$sig \
    cairn import big:1 '$T/l.tar' >/dev/null 2>&1"
  check "SIG$sig before the commit left the import's blob files" [ "$(blob_files)" -gt "$stored" ]
  expect_exit 0 "then cairn images (a command of any kind)" cairn images
  check "removed them, and only them (SIG$sig)" [ "$(blob_files)" = "$stored" ]
done

# A running import's journal is not recovered by a command meanwhile: the
# import is stopped (SIGSTOP at its syncfs, so its blobs are linked) while
# another command opens the store; then it goes on and commits.
strace -f -qq -o /dev/null -e trace=syncfs -e inject=syncfs:signal=STOP \
  cairn import big:1 "$T/l.tar" >"$T/import.out" 2>&1 &
importer=$!
on_exit "kill -9 $importer 2>/dev/null"
wait_for 10 sh -c "[ \$(find '$STORE/blobs' -type f | wc -l) -gt $stored ] && grep -q T /proc/\$(pgrep -P $importer -x cairn)/stat"
expect_exit 0 "cairn images while an import is stopped before its commit" cairn images
check "left the running import's blob files" [ "$(blob_files)" -gt "$stored" ]
pkill -CONT -P "$importer" -x cairn
wait "$importer"
check "the stopped import then commits" [ "$(cairn images --json | jq 'map(select(.names == ["localhost/big:1"])) | length')" = 1 ]
expect_exit 0 "fsck is clean" cairn fsck
check "its blob files are all there" [ "$(blob_files)" -gt "$stored" ]

finish
