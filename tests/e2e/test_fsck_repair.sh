#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_fsck_repair.sh — `cairn fsck --repair` of a corrupt blob that a live
# mount uses removes nothing: it quarantines the blob (reads of that one
# file fail with EIO, the rest of the image keeps working), names the mount
# that holds the image and exits 4; a plain fsck then reports the missing
# blob (exit 5). Importing the same layer again heals the blob. Once the
# mount is gone, a repair removes the image and fsck is clean.
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib mount
set -e

mkdir -p "$T/layer/etc"
echo "the first file" >"$T/layer/etc/one"
echo "the second file" >"$T/layer/etc/two"
tar -C "$T/layer" --numeric-owner -cf "$T/layer.tar" .
mnt=$T/mnt
mkdir "$mnt"

# corrupt PATH: overwrites one byte of the blob of the layer's entry PATH,
# as disk rot would (blobs are read-only files).
corrupt() {
  local blob
  blob=$(sqlite3 "$STORE/meta.db" "SELECT blob FROM entries WHERE path = '$1'")
  [ -n "$blob" ] || fail "no blob for $1"
  chmod 0644 "$STORE/blobs/${blob:0:2}/$blob"
  printf X | dd of="$STORE/blobs/${blob:0:2}/$blob" bs=1 count=1 conv=notrunc status=none
}
has_image() { cairn images --json | jq -e --arg n "$1" 'any(.[].names[]; . == $n or . == "localhost/" + $n)' >/dev/null; }

# ---- a mounted image: kept, its corrupt blob quarantined, exit 4
cairn import app:1 "$T/layer.tar" >/dev/null
cairn mount app:1 "$mnt"
pid=$(mount_pid "$mnt")
corrupt etc/one
assert_status 4 cairn fsck --repair
grep -q "^cairn: fsck: .*pinned by pid $pid (cairnfs) mount $mnt" "$T/stderr" ||
  fail "the error does not name the mount: $(cat "$T/stderr")"
[ "$(wc -l <"$T/stderr")" = 1 ] || fail "more than one error line: $(cat "$T/stderr")"
grep -q "quarantined" "$T/stdout" || fail "no report of the quarantine: $(cat "$T/stdout")"
has_image app:1 || fail "repair removed a mounted image: $(cairn images)"
[ "$(cairn_pin ls --json | jq length)" -gt 0 ] || fail "the mount's pins are gone"
[ "$(cat "$mnt/etc/two")" = "the second file" ] || fail "a healthy file of the image broke"
cat "$mnt/etc/one" >/dev/null 2>"$T/cat.err" && fail "the corrupt file still reads"
grep -q "Input/output error" "$T/cat.err" || fail "not EIO: $(cat "$T/cat.err")"
assert_status 5 cairn fsck
grep -q "missing" "$T/stdout" || fail "fsck does not report the quarantined blob: $(cat "$T/stdout")"
ok "a mounted image is kept (exit 4 naming the mount); its corrupt file reads EIO, the rest works"

# ---- the same layer imported again heals the blob, even under the mount
cairn import app:2 "$T/layer.tar" >/dev/null
[ "$(cat "$mnt/etc/one")" = "the first file" ] || fail "the healed file does not read"
assert_status 0 cairn fsck
ok "importing the layer again heals the quarantined blob"

# ---- corrupt again; once unmounted, a repair removes the image
corrupt etc/one
assert_status 4 cairn fsck --repair
cairn umount "$mnt"
assert_status 0 cairn fsck --repair
has_image app:1 && fail "repair kept the image after the mount went: $(cairn images)"
[ "$(cairn images --json | jq length)" = 0 ] || fail "images left: $(cairn images)"
[ "$(cairn layers --json | jq length)" = 0 ] || fail "layers left: $(cairn layers)"
[ -z "$(find "$STORE/blobs" -type f)" ] || fail "blob files left: $(find "$STORE/blobs" -type f)"
[ -z "$(find "$STORE/pins" -type f)" ] || fail "pin files left: $(find "$STORE/pins" -type f)"
assert_status 0 cairn fsck
ok "unmounted: the repair removes the image, its layer and blobs; fsck is clean"
