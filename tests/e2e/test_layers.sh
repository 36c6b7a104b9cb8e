#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_layers.sh — scripts/check-layers.sh, the CI check of libcairn's
# layering: it passes on this tree, and it fails, naming the file, on a copy
# with a violation planted: a file of store/remote/ that includes libcairn_store.h
# or calls an internal function; a lower layer that includes a higher
# layer's header or calls a higher layer's function; a front end (fs/,
# tools/) that includes a private header or calls an internal function, or
# includes the other front end's header (they share common/ only); a
# file of store/ in no layer; a global symbol of libcairn without its
# prefix; two files that call each other, in one layer (store/) or in a
# front end (fs/), each named with the symbols that make the cycle; a
# program that defines a function of a library libcairn calls. A copy
# with only an allowed include (a unit test including
# remote/libcairn_remote.h) still passes. Then scripts/check-cmake.sh: it fails on an
# unsorted list of CMakeLists.txt, on a source no list names, and on a
# source of over 1,000 lines whose header gives no reason. Then
# scripts/check-doc-tables.sh: it fails when doc/hacking.md's layer table
# or its map of commands and FUSE operations, or the README's map by file,
# differs from the sources, and
# --write mends the page.
source "$(dirname "$0")/../lib/test-lib.sh"

# The copies differ in a file or two: each object compiled once (the cache
# is keyed by the source's, the headers' and the flags' contents; test.sh's
# own run of the check fills the one it names in CHECK_LAYERS_CACHE).
check_layers() {
  CHECK_LAYERS_CACHE=${CHECK_LAYERS_CACHE:-$T/objects} bash "$CAIRN_SRC/scripts/check-layers.sh" "$@" >"$T/out" 2>&1
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
printf '#include "libcairn_store.h"\nint x;\n' >"$T/src/store/remote/x.c"
expect_exit 1 "store/remote/x.c including libcairn_store.h fails" check_layers "$T/src"
check "the failure names store/remote/x.c and libcairn_store.h" \
  grep -q 'store/remote/x.c includes store/libcairn_store.h' "$T/out"

fresh_copy
printf '#include "remote/libcairn_registry.h"\n' >>"$T/src/fs/main.c"
expect_exit 1 "fs/main.c including store/remote/libcairn_registry.h fails" check_layers "$T/src"
check "the failure names fs/main.c" grep -q 'fs/main.c includes store/remote/libcairn_registry.h' "$T/out"

fresh_copy
printf '#include "../tools/cli.h"\n' >>"$T/src/fs/main.c"
expect_exit 1 "fs/main.c including tools/cli.h fails" check_layers "$T/src"
check "the failure names it" \
  grep -q 'fs/main.c includes tools/cli.h: the front ends share only common/' "$T/out"

fresh_copy
printf '#include "remote/libcairn_remote.h"\n' >>"$T/src/tools/cmd-pull.c"
expect_exit 1 "tools/cmd-pull.c including store/remote/libcairn_remote.h fails" check_layers "$T/src"

fresh_copy
printf 'int cn_db_exec(void *st, const char *sql);\nint x(void) { return cn_db_exec(0, ""); }\n' \
  >>"$T/src/store/remote/pull_blob.c"
expect_exit 1 "store/remote calling cn_db_exec (internal) fails" check_layers "$T/src"
check "the failure names the call" \
  grep -q 'store/remote/pull_blob.c calls cn_db_exec (store/db.c): layer remote uses only cairn.h' "$T/out"

fresh_copy
printf 'int x(cairn_store *st) { return cairn_gc(st, true, 0); }\n' >>"$T/src/store/blob.c"
expect_exit 1 "blob.c calling cairn_gc (rm/gc layer) fails" check_layers "$T/src"
check "the failure names the upward call" \
  grep -q 'store/blob.c calls cairn_gc (store/gc.c): layer rm-gc is above blobs' "$T/out"

fresh_copy
printf '#include "libcairn_image.h"\n' >>"$T/src/store/pin.c"
expect_exit 1 "pin.c including libcairn_image.h fails" check_layers "$T/src"
check "the failure names pin.c and libcairn_image.h" grep -q 'store/pin.c includes store/libcairn_image.h' "$T/out"

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
printf '#include "libcairn_store.h"\n' >"$T/src/store/stray.c"
expect_exit 1 "a store file in no layer fails" check_layers "$T/src"
check "the failure names it" grep -q 'store/stray.c is in no layer' "$T/out"

# A cycle inside the bottom layer, which the rows alone allow: proc.c and
# backoff.c, in one row, each calling the other.
fresh_copy
printf 'int cn_planted_a(void) { return (int)cairn_backoff_ms(0, 1, 1, 0); }\n' >>"$T/src/store/proc.c"
printf '#include "libcairn_store.h"\nint cn_planted_b(void) { return (int)cn_proc_start_time(1); }\n' \
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

# A program defining a function of a library libcairn calls (SQLite's),
# which its store code would then run instead of the library's.
fresh_copy
printf 'int sqlite3_close(void *db) { (void)db; return 0; }\n' >"$T/src/fs/planted.c"
expect_exit 1 "fs/planted.c defining sqlite3_close fails" check_layers "$T/src"
check "the failure names it" grep -q \
  'fs/planted.c defines sqlite3_close: a function of a library libcairn calls' "$T/out"

fresh_copy
printf '#include "remote/libcairn_remote.h"\n' >>"$T/src/tests/unit/test_store.c"
check "a unit test including remote/libcairn_remote.h passes" check_layers "$T/src"

# scripts/check-cmake.sh, test.sh's other check of the tree: every source and
# test named in its folder's CMakeLists.txt, in sorted lists.
check_cmake() { bash "$CAIRN_SRC/scripts/check-cmake.sh" "$@" >"$T/out" 2>&1; }
check "check-cmake passes on the real tree" check_cmake "$CAIRN_SRC"
fresh_copy
cp "$CAIRN_SRC/CMakeLists.txt" "$T/src/" && cp "$CAIRN_SRC/tests/CMakeLists.txt" "$T/src/tests/"
mkdir -p "$T/src/tests/e2e" && cp "$CAIRN_SRC"/tests/e2e/test_*.sh "$T/src/tests/e2e/"
check "check-cmake passes on the copy" check_cmake "$T/src"
sed -i 's|^  ops.c$|  zz.c|; s|^  als_serve.c$|  ops.c|; s|^  zz.c$|  als_serve.c|' "$T/src/fs/CMakeLists.txt"
expect_exit 1 "an unsorted CAIRNFS_SOURCES fails" check_cmake "$T/src"
check "the failure names the list" grep -q 'CAIRNFS_SOURCES is not sorted: ' "$T/out"
touch "$T/src/store/stray.c"
expect_exit 1 "a source named in no list fails" check_cmake "$T/src"
check "the failure names it" grep -q 'store/stray.c: not listed in store/CMakeLists.txt' "$T/out"

# A source file of more than 1,000 lines fails, unless its opening comment
# says why.
fresh_copy
cp "$CAIRN_SRC/CMakeLists.txt" "$T/src/" && cp "$CAIRN_SRC/tests/CMakeLists.txt" "$T/src/tests/"
{
  printf '/* long.c — planted. */\n'
  for ((i = 0; i < 1000; i++)); do echo "int cn_planted_$i;"; done
} >"$T/src/store/long.c"
sed -i 's|^  lock.c$|  lock.c\n  long.c|' "$T/src/store/CMakeLists.txt"
expect_exit 1 "a 1,001-line source fails" check_cmake "$T/src"
check "the failure names it" grep -q 'store/long.c: 1001 lines, over 1000' "$T/out"
sed -i '1s|.*|/* long.c — planted. Over 1,000 lines: a test of the check. */|' "$T/src/store/long.c"
check_cmake "$T/src" || true
absent() { ! grep -q "$@"; }
check "with a reason in its header it is not named" absent 'store/long.c' "$T/out"

# scripts/check-doc-tables.sh: doc/hacking.md's layer table and its map
# of commands and FUSE operations, the README's map by file, and
# doc/podman.md's podman words, are what the sources give.
check_doc() { bash "$CAIRN_SRC/scripts/check-doc-tables.sh" "$@" >"$T/out" 2>&1; }
check "check-doc-tables passes on the real tree" check_doc "$CAIRN_SRC"
doc_copy() {
  fresh_copy
  mkdir -p "$T/src/doc" "$T/src/scripts"
  cp "$CAIRN_SRC/doc/hacking.md" "$CAIRN_SRC/doc/podman.md" "$T/src/doc/"
  cp "$CAIRN_SRC/README.md" "$T/src/"
  cp "$CAIRN_SRC/scripts/check-layers.sh" "$T/src/scripts/"
}
doc_copy
check "check-doc-tables passes on the copy" check_doc "$T/src"
sed -i 's#^  "als | store/als.c |#  "als | store/als.c store/als_more.c |#' "$T/src/scripts/check-layers.sh"
expect_exit 1 "a layer's new file, not in the page's table, fails" check_doc "$T/src"
check "the failure names the table" grep -q 'doc/hacking.md: layers differs from the sources' "$T/out"
doc_copy
sed -i 's|^    .statfs = cfs_statfs,$|&\n    .flush = cfs_statfs,|' "$T/src/fs/ops.c"
expect_exit 1 "a new FUSE operation of a read-only mount, not in the map, fails" check_doc "$T/src"
check "the failure names the map and the operation" grep -q 'doc/hacking.md: map differs' "$T/out"
check "the diff shows the operation" grep -q '`flush` | `cfs_statfs` (`fs/ops.c`)' "$T/out"
doc_copy
sed -i 's|^    .name = "tag",$|    .name = "retag",|' "$T/src/tools/cmd-tag.c"
expect_exit 1 "a renamed command, not in the map, fails" check_doc "$T/src"
check "the diff shows it" grep -q '`cairn retag` | `tools/cmd-tag.c`' "$T/out"
check "the README's map by file differs too" grep -q 'README.md: files differs from the sources' "$T/out"
check "its diff shows the file's new command" grep -q '`tools/cmd-tag.c` | `cairn retag`' "$T/out"
bash "$CAIRN_SRC/scripts/check-doc-tables.sh" --write "$T/src" >"$T/out" 2>&1
check "--write puts it in the page" grep -q '`cairn retag` | `tools/cmd-tag.c`' "$T/src/doc/hacking.md"
check "and in the README" grep -q '`tools/cmd-tag.c` | `cairn retag`' "$T/src/README.md"
check "after --write the check passes" check_doc "$T/src"
doc_copy
sed -i 's|^    {"rmi", NULL, "rm", NULL, NULL},$|&\n    {"rmi", "x", "tag", NULL, NULL},|' "$T/src/tools/cairn.c"
expect_exit 1 "a new podman habit, not in doc/podman.md's table, fails" check_doc "$T/src"
check "the diff shows it" grep -q '`podman rmi x` | `cairn tag`' "$T/out"

finish
