#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# pjdfstest.sh [--load] [DIR...] — the POSIX file-system suite (pjdfstest)
# on a `cairn mount --rw` of a real image: Debian bookworm minbase, as three
# layers (tests/lib/mount.sh builds and caches it). With no DIR, the
# whole suite (238 files, 8,798 tests, about 7 minutes on 2 cores); else
# only those subdirectories or files of its tests (rename, rename/00.t,
# unlink, ...). --load runs two busy processes (CPU and file churn) on the
# machine meanwhile.
# Prints prove's summary; exits 0 only when every test passes.
#
#   CAIRN_BIN=build scripts/pjdfstest.sh            # the longer target
#   CAIRN_BIN=build scripts/pjdfstest.sh rename link
#
# pjdfstest is built once (autoconf, automake) from $PJDFSTEST_SRC (default
# ../shared/peers/pjdfstest beside the checkout) into
# $CAIRN_TEST_CACHE/pjdfstest (default /var/cache/cairn-test). As root.
set -euo pipefail
export CAIRN_BIN=${CAIRN_BIN:-$(cd "$(dirname "$0")/.." && pwd)/build}
source "$(dirname "$0")/../tests/lib/test-lib.sh"
use_lib mount
set -e

load=false
if [ "${1:-}" = --load ]; then
  load=true
  shift
fi
src=${PJDFSTEST_SRC:-$CAIRN_SRC/../shared/peers/pjdfstest}
pjd=$CACHE/pjdfstest
if [ ! -x "$pjd/pjdfstest" ]; then
  [ -d "$src/tests" ] || fail "no pjdfstest source in $src (set PJDFSTEST_SRC)"
  rm -rf "$pjd.tmp"
  cp -r "$src" "$pjd.tmp"
  (cd "$pjd.tmp" && autoreconf -ifs && ./configure && make) >"$T/build.log" 2>&1 ||
    fail "pjdfstest does not build: $(tail -5 "$T/build.log")"
  rm -rf "$pjd"
  mv "$pjd.tmp" "$pjd"
fi

minbase_layers "$T/layers"
cairn import debian:12 "$T"/layers/layer{1,2,3}.tar >/dev/null 2>&1
m=$T/mnt
mkdir "$m"
cairn mount --rw debian:12 "$m" >/dev/null
mkdir "$m/pjdfstest"

if $load; then
  bg_start sh -c 'while :; do :; done'
  bg_start sh -c "while :; do cp -r '$m/etc' '$m/load' && rm -rf '$m/load'; done 2>/dev/null"
fi

dirs=()
for d in "$@"; do dirs+=("$pjd/tests/$d"); done
[ ${#dirs[@]} -gt 0 ] || dirs=("$pjd/tests")
status=0
(cd "$m/pjdfstest" && prove -r "${dirs[@]}") >"$T/prove.log" 2>&1 || status=$?
grep -v '\.\. ok$' "$T/prove.log" || true
exit "$status"
