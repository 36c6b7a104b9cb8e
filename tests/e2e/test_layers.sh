#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_layers.sh — scripts/check-layers.sh, the CI check of libcairn's
# layering: it passes on this tree, and it fails, naming the file, on a copy
# with a violation planted: a file of store/pull/ that includes internal.h
# or calls an internal function; a lower layer that includes a higher
# layer's header or calls a higher layer's function; a front end (fs/,
# tools/) that includes a private header or calls an internal function, or
# includes the other front end's header (they share common/ only); a
# file of store/ in no layer; a global symbol of libcairn without its
# prefix; two files that call each other, in one layer (store/) or in a
# front end (fs/), each named with the symbols that make the cycle. A copy
# with only an allowed include (a unit test including
# pull/pull.h) still passes. Then scripts/check-cmake.sh: it fails on an
# unsorted list of CMakeLists.txt, on a source no list names, on a file
# in tests/e2e that is not a test and on a test that does not source
# tests/lib/test-lib.sh.
source "$(dirname "$0")/../lib/test-lib.sh"

# The copies differ in a file or two: each object compiled once (the cache
# is keyed by the source's, the headers' and the flags' contents).
check_layers() {
  CHECK_LAYERS_CACHE=$T/objects bash "$CAIRN_SRC/scripts/check-layers.sh" "$@" >"$T/out" 2>&1
}

release_build_only "the check reads the sources; the build type does not change it"

check "passes on the real tree" check_layers "$CAIRN_SRC"

# fresh_copy: the tracked source files (not the build folders) into $T/src.
fresh_copy() {
  rm -rf "$T/src" && mkdir "$T/src"
  (cd "$CAIRN_SRC" && tar -cf - include store common fs tools tests/unit tests/fuzz/*.c) | tar -C "$T/src" -xf -
}

fresh_copy
check "passes on the copy" check_layers "$T/src"

fresh_copy
printf '#include "internal.h"\nint x;\n' >"$T/src/store/pull/x.c"
expect_exit 1 "store/pull/x.c including internal.h fails" check_layers "$T/src"
check "the failure names store/pull/x.c and internal.h" \
  grep -q 'store/pull/x.c includes store/internal.h' "$T/out"

fresh_copy
printf '#include "pull/registry.h"\n' >>"$T/src/fs/main.c"
expect_exit 1 "fs/main.c including store/pull/registry.h fails" check_layers "$T/src"
check "the failure names fs/main.c" grep -q 'fs/main.c includes store/pull/registry.h' "$T/out"

fresh_copy
printf '#include "../tools/cli.h"\n' >>"$T/src/fs/main.c"
expect_exit 1 "fs/main.c including tools/cli.h fails" check_layers "$T/src"
check "the failure names it" \
  grep -q 'fs/main.c includes tools/cli.h: the front ends share only common/' "$T/out"

fresh_copy
printf '#include "pull/pull.h"\n' >>"$T/src/tools/cmd-pull.c"
expect_exit 1 "tools/cmd-pull.c including store/pull/pull.h fails" check_layers "$T/src"

fresh_copy
printf 'int cn_db_exec(void *st, const char *sql);\nint x(void) { return cn_db_exec(0, ""); }\n' \
  >>"$T/src/store/pull/pull_blob.c"
expect_exit 1 "store/pull calling cn_db_exec (internal) fails" check_layers "$T/src"
check "the failure names the call" \
  grep -q 'store/pull/pull_blob.c calls cn_db_exec (store/db.c): layer pull uses only cairn.h' "$T/out"

fresh_copy
printf 'int x(cairn_store *st) { return cairn_gc(st, true, 0); }\n' >>"$T/src/store/blob.c"
expect_exit 1 "blob.c calling cairn_gc (rm/gc layer) fails" check_layers "$T/src"
check "the failure names the upward call" \
  grep -q 'store/blob.c calls cairn_gc (store/gc.c): layer rm-gc is above blobs' "$T/out"

fresh_copy
printf '#include "image.h"\n' >>"$T/src/store/pin.c"
expect_exit 1 "pin.c including image.h fails" check_layers "$T/src"
check "the failure names pin.c and image.h" grep -q 'store/pin.c includes store/image.h' "$T/out"

fresh_copy
printf 'int cn_store_sweep(void *, int, int, void *);\nint y(void) { return cn_store_sweep(0, 0, 0, 0); }\n' \
  >>"$T/src/tools/cli.c"
expect_exit 1 "tools/cli.c calling cn_store_sweep (internal) fails" check_layers "$T/src"
check "the failure names the front end's call" \
  grep -q 'tools/cli.c calls cn_store_sweep (store/sweep.c): front ends use only cairn.h' "$T/out"

fresh_copy
printf 'int helper_without_prefix(void) { return 0; }\n' >>"$T/src/store/util.c"
expect_exit 1 "an unprefixed global function of libcairn fails" check_layers "$T/src"
check "the failure names it" \
  grep -q 'store/util.c defines helper_without_prefix: internal names of libcairn start with cn_' "$T/out"

fresh_copy
printf '#include "internal.h"\n' >"$T/src/store/stray.c"
expect_exit 1 "a store file in no layer fails" check_layers "$T/src"
check "the failure names it" grep -q 'store/stray.c is in no layer' "$T/out"

# A cycle inside the bottom layer, which the rows alone allow: proc.c and
# backoff.c, in one row, each calling the other.
fresh_copy
printf 'int cn_planted_a(void) { return (int)cairn_backoff_ms(0, 1, 1, 0); }\n' >>"$T/src/store/proc.c"
printf '#include "internal.h"\nint cn_planted_b(void) { return (int)cn_proc_start_time(1); }\n' \
  >>"$T/src/store/backoff.c"
expect_exit 1 "store/proc.c and store/backoff.c calling each other fails" check_layers "$T/src"
check "the failure names both files and the symbols" grep -q \
  "a call cycle: store/backoff.c calls store/proc.c's cn_proc_start_time; store/proc.c calls store/backoff.c's cairn_backoff_ms" \
  "$T/out"

# In a front end: fs/daemon.c, which supervisor.c calls, calling it back.
fresh_copy
printf 'int planted(void) { return cairnfs_supervise(0); }\n' \
  >>"$T/src/fs/daemon.c"
expect_exit 1 "fs/daemon.c calling fs/supervisor.c, which calls it, fails" check_layers "$T/src"
check "the failure names the cycle" \
  grep -q "fs/daemon.c calls fs/supervisor.c's cairnfs_supervise; .*fs/supervisor.c calls fs/daemon.c's" "$T/out"

fresh_copy
printf '#include "pull/pull.h"\n' >>"$T/src/tests/unit/test_store.c"
check "a unit test including pull/pull.h passes" check_layers "$T/src"

# scripts/check-cmake.sh, test.sh's other check of the tree: every source and
# test named in CMakeLists.txt, in sorted lists.
check_cmake() { bash "$CAIRN_SRC/scripts/check-cmake.sh" "$@" >"$T/out" 2>&1; }
check "check-cmake passes on the real tree" check_cmake "$CAIRN_SRC"
fresh_copy
cp "$CAIRN_SRC/CMakeLists.txt" "$T/src/"
mkdir -p "$T/src/tests/e2e" && cp "$CAIRN_SRC"/tests/e2e/test_*.sh "$T/src/tests/e2e/"
check "check-cmake passes on the copy" check_cmake "$T/src"
sed -i 's|^  fs/ops.c$|  fs/zz.c|; s|^  fs/als_serve.c$|  fs/ops.c|; s|^  fs/zz.c$|  fs/als_serve.c|' "$T/src/CMakeLists.txt"
expect_exit 1 "an unsorted CAIRNFS_SOURCES fails" check_cmake "$T/src"
check "the failure names the list" grep -q 'CAIRNFS_SOURCES is not sorted: ' "$T/out"
touch "$T/src/store/stray.c"
expect_exit 1 "a source named in no list fails" check_cmake "$T/src"
check "the failure names it" grep -q 'store/stray.c: not listed in CMakeLists.txt' "$T/out"
rm "$T/src/store/stray.c"
touch "$T/src/tests/e2e/helper.py"
expect_exit 1 "a helper in tests/e2e fails" check_cmake "$T/src"
check "the failure sends it to tests/helpers" grep -q 'tests/e2e/helper.py: not a test: .*tests/helpers' "$T/out"
rm "$T/src/tests/e2e/helper.py"
sed -i 's|^source .*test-lib.sh"$|source "$(dirname "$0")/lib.sh"|' "$T/src/tests/e2e/test_bundle.sh"
expect_exit 1 "a test on another library fails" check_cmake "$T/src"
check "the failure names it" grep -q 'tests/e2e/test_bundle.sh: does not source tests/lib/test-lib.sh' "$T/out"

finish
