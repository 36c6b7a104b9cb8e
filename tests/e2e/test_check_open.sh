#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_check_open.sh — scripts/check-open.sh, the check that no file cairn
# creates can be redirected by a name another user planted: it passes on
# this tree, and it fails, naming the file and line, on a copy with a bad
# call planted: an open or openat with O_CREAT alone (also with its flags
# split over lines), creat(), an fopen for writing, and an annotation
# without a reason. A copy with O_EXCL, O_NOFOLLOW, O_TMPFILE or a
# reasoned "check-open: private:" comment still passes, and so do fopen
# for reading and O_CREAT in a comment.
source "$(dirname "$0")/../lib/test-lib.sh"

check_open() { bash "$CAIRN_SRC/scripts/check-open.sh" "$@" >"$T/out" 2>&1; }

release_build_only "the check reads the sources; the build type does not change it"

check "passes on the real tree" check_open "$CAIRN_SRC"
check_open -v "$CAIRN_SRC"
check "-v lists the sites, bundle's config.json writer among them" \
  grep -q 'store/remote/file_put.c:[0-9]*: O_CREAT: ok (safe flags)' "$T/out"

# fresh_copy: the C sources the check reads into $T/src.
fresh_copy() {
  rm -rf "$T/src" && mkdir "$T/src"
  (cd "$CAIRN_SRC" && tar -cf - store/*.c store/remote/*.c fs/*.c tools/*.c) |
    tar -C "$T/src" -xf -
}

fresh_copy
check "passes on the copy" check_open "$T/src"

# plant FILE TEXT: appends TEXT (printf format) to a fresh copy's FILE.
plant() {
  fresh_copy
  # shellcheck disable=SC2059
  printf "$2" >>"$T/src/$1"
}

lines() { wc -l <"$T/src/$1"; }

plant tools/cmd-bundle.c \
  'static int bad(int d) { return openat(d, "x", O_WRONLY | O_CREAT | O_TRUNC, 0644); }\n'
expect_exit 1 "openat with O_CREAT|O_TRUNC alone fails" check_open "$T/src"
check "the failure names tools/cmd-bundle.c and its line" \
  grep -q "check-open: tools/cmd-bundle.c:$(lines tools/cmd-bundle.c): O_CREAT without" "$T/out"

plant store/remote/login.c \
  'static int bad(const char *p) {\n  return open(p,\n              O_WRONLY | O_CREAT,\n              0600);\n}\n'
expect_exit 1 "open with O_CREAT on a line of its own fails" check_open "$T/src"
check "the failure names store/remote/login.c" grep -q 'check-open: store/remote/login.c:' "$T/out"

plant fs/als_serve.c 'static int bad(const char *p) { return creat(p, 0644); }\n'
expect_exit 1 "creat() fails" check_open "$T/src"
check "the failure names fs/als_serve.c and creat()" grep -q 'check-open: fs/als_serve.c:[0-9]*: creat()' "$T/out"

plant store/remote/push.c 'static FILE *bad(const char *p) { return fopen(p, "we"); }\n'
expect_exit 1 "fopen for writing fails" check_open "$T/src"
check "the failure names fopen" grep -q 'check-open: store/remote/push.c:[0-9]*: fopen() for writing' "$T/out"

plant store/store.c \
  'static int bad(int d) { return openat(d, "x", O_RDWR | O_CREAT, 0600); /* check-open: private: */ }\n'
expect_exit 1 "an annotation without a reason fails" check_open "$T/src"

plant store/store.c \
  'static int fine(int d) {\n  return openat(d, "x", O_RDWR | O_CREAT, 0600); /* check-open: private: STORE is 0700 */\n}\n'
check "an annotation with a reason passes" check_open "$T/src"

plant tools/cmd-push.c \
  'static int fine(int d) { return openat(d, "x", O_WRONLY | O_CREAT | O_EXCL, 0644); }\nstatic int fine2(int d) { return openat(d, "y", O_WRONLY | O_CREAT | O_NOFOLLOW, 0644); }\n'
check "O_EXCL and O_NOFOLLOW pass" check_open "$T/src"

plant tools/cmd-push.c \
  '/* O_CREAT in a comment is no call */\nstatic FILE *fine(void) { return fopen("/etc/containers/registries.conf", "re"); }\n'
check "a comment and fopen for reading pass" check_open "$T/src"

finish
