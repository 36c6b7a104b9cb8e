#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_cli_version.sh — cairn, cairn-pin and cairnfs say their version with
# --version and `version`: CMake's project(VERSION), plus the git describe
# of the checkout they were configured in; a source tree without .git (a
# tarball) still configures and builds, with the project version alone.
source "$(dirname "$0")/../lib/test-lib.sh"

want=$(sed -n 's/^project(cairn VERSION \([0-9.]*\) .*/\1/p' "$CAIRN_SRC/CMakeLists.txt")
check "CMakeLists.txt has a project version" [ -n "$want" ]

for prog in cairn cairn-pin cairnfs; do
  for arg in --version version; do
    expect_exit 0 "$prog $arg: exit 0" "$prog" "$arg"
    check "$prog $arg: nothing on stderr" [ ! -s "$T/stderr" ]
    check "$prog $arg: '$prog $want' first on stdout" \
      grep -qE "^$prog ${want//./\\.}( \\(git [0-9a-f]{7,}(-dirty)?\\))?$" <(head -1 "$T/stdout")
  done
done
check "cairnfs --version names libfuse's" grep -qE '^libfuse 3\.' <(cairnfs --version)
expect_exit 0 "cairnfs -V: exit 0" cairnfs -V
check "cairn --store DIR --version works" grep -q "^cairn $want" <(cairn --store "$T/x" --version)
expect_exit 2 "cairn version with an argument is a usage error" cairn version now
check "cairn --help names --version" grep -qE '^  --version +[a-z]' <(cairn --help)
check "cairn --help lists version" grep -qE '^  version +[A-Z]' <(cairn --help)
check "cairn-pin --help names --version" grep -qE '^  --version +[a-z]' <(cairn-pin --help)
check "cairnfs --help names --version" grep -qE '^  -V, --version +[a-z]' <(cairnfs --help)

# Built from a git checkout: the git describe of a commit of it.
if git -C "$CAIRN_SRC" rev-parse --git-dir >/dev/null 2>&1; then
  described=$(cairn --version | sed -n 's/.*(git \([0-9a-f]*\).*/\1/p')
  check "a checkout's build names its commit" [ -n "$described" ]
  check "which is a commit of the checkout" git -C "$CAIRN_SRC" cat-file -e "$described^{commit}"
fi

# A source tarball: no .git. It configures, version.c builds, and names the
# project version alone.
mkdir -p "$T/src"
tar -C "$CAIRN_SRC" --exclude=./.git --exclude='./build*' -cf - . | tar -x -C "$T/src"
check "the tarball has no .git" [ ! -e "$T/src/.git" ]
check "a tarball configures" sh -c "cmake -G 'Unix Makefiles' -S '$T/src' -B '$T/tb' \
  -DCAIRN_TESTS=OFF >'$T/tb.log' 2>&1"
check "its version.c builds" sh -c "make -s -C '$T/tb/common' version.o >>'$T/tb.log' 2>&1"
check "with the project version" grep -qE "CAIRN_VERSION=[\\\\\"]+${want//./\\.}[\\\\\"]" \
  "$T/tb/compile_commands.json"
check "and no git describe" sh -c "! grep -q CAIRN_GIT_DESCRIBE '$T/tb/compile_commands.json'"
check "the object holds the version" grep -qx "$want" <(strings "$T/tb/common/CMakeFiles/cairn-common.dir/version.c.o")

finish
