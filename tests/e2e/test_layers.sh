#!/bin/bash
# test_layers.sh — tools/check-layers.sh, the CI check of libcairn's
# layering: it passes on this tree, and it fails, naming the file, on a copy
# with a violation planted: a file of store/pull/ that includes internal.h,
# and a file outside store/pull/ (fs/, tools/) that includes a private
# header of store/pull/. A copy with only an allowed include (a unit test
# including pull/pull.h) still passes.
source "$(dirname "$0")/lib.sh"

check_layers() { bash "$CAIRN_SRC/tools/check-layers.sh" "$@" >"$T/out" 2>&1; }

check "passes on the real tree" check_layers "$CAIRN_SRC"

# fresh_copy: the tracked source files (not the build folders) into $T/src.
fresh_copy() {
  rm -rf "$T/src" && mkdir "$T/src"
  (cd "$CAIRN_SRC" && tar -cf - store fs tools tests/unit tests/fuzz/*.c) | tar -C "$T/src" -xf -
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
printf '#include "pull/pull.h"\n' >>"$T/src/tools/cmd-pull.c"
expect_exit 1 "tools/cmd-pull.c including store/pull/pull.h fails" check_layers "$T/src"

fresh_copy
printf '#include "pull/pull.h"\n' >>"$T/src/tests/unit/test_store.c"
check "a unit test including pull/pull.h passes" check_layers "$T/src"

finish
