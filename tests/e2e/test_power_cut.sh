#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_power_cut.sh — a power cut (tests/crash/inject.c, mode cut: writes
# not yet fsynced are forgotten, unlinks are kept) just after rm and gc
# unlink their first blob file. The commit that deleted the blob rows must
# have reached the disk before that unlink: otherwise the rows come back
# pointing at files that are gone, and fsck finds missing blobs.
source "$(dirname "$0")/../lib/test-lib.sh"
INJECT=$CAIRN_BIN/cairn-inject.so
UNDO=$CAIRN_BIN/inject-undo
release_build_only "$CAIRN_BIN is a sanitizer build (LD_PRELOAD of the injector conflicts)"

for l in keep gone; do
  mkdir -p "$T/$l/etc"
  for i in 1 2 3; do printf '%s %s\n' "$l" "$i" >"$T/$l/etc/$l$i"; done
  mktar "$T/$l" "$T/$l.tar"
done
cairn import keep:1 "$T/keep.tar" >/dev/null
cairn import gone:1 "$T/gone.tar" >/dev/null
keep_sum=$(cairn export keep:1 | sha256sum)
cp -a "$STORE" "$T/template"

# cut_after_unlink NAME CMD...: runs CMD once to find the step after its
# first blob unlink, then again from the template with the power cut there.
cut_after_unlink() {
  local name=$1; shift
  rm -rf "$STORE" && cp -a "$T/template" "$STORE"
  if [ "$name" = gc ]; then # garbage for gc: the image record goes, its layer and blobs stay
    sqlite3 "$STORE/meta.db" "PRAGMA foreign_keys=ON; DELETE FROM images WHERE id IN
      (SELECT image_id FROM names WHERE name LIKE 'localhost/gone:1%')"
    rm -f "$STORE/refs" # a hand edit of images drops STORE/refs, as cairn's writers do
  fi
  cp -a "$STORE" "$T/before"
  CAIRN_INJECT_DIR=$STORE CAIRN_INJECT_TRACE=$T/trace LD_PRELOAD=$INJECT "$@" >/dev/null 2>&1
  local k
  k=$(awk -v d="$STORE/blobs/" '$2 == "unlinkat" && index($3, d) == 1 { print $1; exit }' "$T/trace")
  rm -f "$T/trace"
  if [ -z "$k" ]; then fail "$name: unlinks a blob file"; return; fi
  rm -rf "$STORE" && cp -a "$T/before" "$STORE" && rm -rf "$T/before"
  (
    CAIRN_INJECT_DIR=$STORE CAIRN_INJECT_AT=$((k + 1)) CAIRN_INJECT_MODE=cut CAIRN_INJECT_LOG=$T/log \
      CAIRN_INJECT_COUNT=$T/count LD_PRELOAD=$INJECT "$@" >/dev/null 2>&1
    exit $?
  ) 2>/dev/null
  check "$name: the power is cut at step $((k + 1)), after the first blob unlink" [ $? = 137 ]
  "$UNDO" "$T/log" >/dev/null
  rm -f "$T/log"
  expect_exit 0 "$name: fsck finds no missing blob after the cut" cairn fsck
  check "$name: the image it did not touch exports the same bytes" [ "$(cairn export keep:1 | sha256sum)" = "$keep_sum" ]
  expect_exit 3 "$name: the removed image stays removed" cairn inspect gone:1
  check "$name: the removed layer stays removed" [ "$(cairn layers --json | jq length)" = 1 ]
}
cut_after_unlink rm cairn rm gone:1
cut_after_unlink gc cairn gc
finish
