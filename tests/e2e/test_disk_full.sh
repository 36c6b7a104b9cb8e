#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_disk_full.sh — a store on a small ext4 (a loop device) that fills up
# midway: `cairn import` and `cairn pull oci:` fail with one line naming
# the input and saying "no space left on device", exit 1, nothing half
# committed (images and blob files as before, fsck clean), and the same
# command succeeds once space is freed; an export onto the full disk says
# so; with no room left for SQLite, commands say the store's disk is full. Then reads through a mount whose
# blob is gone or broken fail with EIO for that file only, and the mount
# keeps answering.
source "$(dirname "$0")/../lib/test-lib.sh"

D=$T/disk
mkdir -p "$D"
truncate -s 96M "$T/disk.img"
mkfs.ext4 -q -m 0 "$T/disk.img" || { fail "mkfs.ext4"; finish; exit; }
mount -o loop "$T/disk.img" "$D" || { fail "loop mount (needs root)"; finish; exit; }
on_exit "umount -l '$D'"
STORE=$D/store
export CAIRN_STORE=$STORE
OCI="python3 $HELPERS/oci_image.py"
MiB=$((1024 * 1024))

mkdir -p "$T/base" && echo base >"$T/base/etc-release" && mktar "$T/base" "$T/base.tar"
expect_exit 0 "import base:1" cairn import base:1 "$T/base.tar"

# Two layers of 12 MiB that do not compress, and 12 MiB of text that does (the download
# of its gzip is small, its blobs are not).
mkdir -p "$T/big" "$T/big2" "$T/text"
for i in 1 2 3; do head -c $((4 * MiB)) /dev/urandom >"$T/big/r$i"; done
for i in 1 2 3; do head -c $((4 * MiB)) /dev/urandom >"$T/big2/r$i"; done
mktar "$T/big" "$T/big.tar"
mktar "$T/big2" "$T/big2.tar"
python3 -c "
import sys
for i in range(3):
    with open(f'$T/text/t{i}', 'w') as f:
        for j in range(4 * 1024 * 1024 // 32):
            f.write(f'file {i} line {j:020d}\n'[:32].ljust(32))
"
mktar "$T/text" "$T/text.tar"
# 20000 empty files: no blob, a lot of rows for SQLite to write.
mkdir -p "$T/many" && (cd "$T/many" && for i in $(seq 1 20000); do : >"an-empty-file-with-a-long-name-$i"; done)
mktar "$T/many" "$T/many.tar"
$OCI add "$T/oci" big:1 linux/amd64 "$T/big2.tar:gzip" >/dev/null
$OCI add "$T/oci" text:1 linux/amd64 "$T/text.tar:gzip" >/dev/null

snapshot() {
  cairn images --json | jq -c 'map({id, names}) | sort_by(.id)'
  find "$STORE/blobs" "$STORE/tmp" -type f | sort
}
# fill LEFT_BYTES: a filler file leaves that much free space.
fill() {
  rm -f "$D/filler"
  local avail
  avail=$(df -B1 --output=avail "$D" | tail -1)
  fallocate -l $((avail - $1)) "$D/filler"
}

# full NAME LEFT CMD...: with LEFT bytes free, CMD fails cleanly and leaves
# the store as it was; with the filler gone the same CMD succeeds.
full() {
  local name=$1 left=$2
  shift 2
  local before
  before=$(snapshot)
  fill "$left"
  expect_exit 1 "$name: exit 1 on a full disk" "$@"
  local err
  err=$(cat "$T/stderr")
  check "$name: exactly one line on stderr ($err)" [ "$(wc -l <"$T/stderr")" = 1 ]
  check "$name: it says no space left on device" grep -q "^cairn: .*: no space left on device$" "$T/stderr"
  check "$name: it names the store" grep -qF "$STORE" "$T/stderr"
  check "$name: images and blob files as before" [ "$(snapshot)" = "$before" ]
  expect_exit 0 "$name: fsck is clean on the full disk" cairn fsck
  rm -f "$D/filler"
  expect_exit 0 "$name: succeeds once space is freed" "$@"
}

full "import of a layer larger than the free space" $((4 * MiB)) cairn import big:1 "$T/big.tar"
full "import that fills the database" $((64 * 1024)) cairn import many:1 "$T/many.tar"
full "pull whose download does not fit" $((4 * MiB)) cairn pull "oci:$T/oci:big:1" bigpull:1
full "pull whose layer does not fit" $((4 * MiB)) cairn pull "oci:$T/oci:text:1" textpull:1
# With no room for SQLite's -shm file, no command can open the store.
fill 4096
expect_exit 1 "images on a full disk fails" cairn images
check "with one line: $(cat "$T/stderr")" [ "$(wc -l <"$T/stderr")" = 1 ]
check "naming the store, no space left on device" \
  grep -q "^cairn: store: .*$STORE: no space left on device$" "$T/stderr"
rm -f "$D/filler"
expect_exit 0 "images once space is freed" cairn images
expect_exit 1 "export onto a full device fails" sh -c "cairn export base:1 >/dev/full"
check "with one line: $(cat "$T/stderr")" [ "$(wc -l <"$T/stderr")" = 1 ]
check "saying no space left on device" grep -q "^cairn: base:1: .*No space left on device$" "$T/stderr"
expect_exit 0 "fsck clean at the end" cairn fsck
check "every image is there" [ "$(cairn images --json | jq length)" = 5 ]

# Reads through a mount: a blob removed, replaced by a directory, cut short.
mkdir -p "$T/io" "$T/m"
for f in a b c d; do head -c 300000 /dev/urandom >"$T/io/$f"; done
mktar "$T/io" "$T/io.tar"
expect_exit 0 "import io:1" cairn import io:1 "$T/io.tar"
expect_exit 0 "mount io:1" cairn mount io:1 "$T/m"
on_exit "cairn umount '$T/m'"
blob() {
  local b
  b=$(sqlite3 "$STORE/meta.db" "SELECT blob FROM entries WHERE path = '$1'")
  echo "$STORE/blobs/${b:0:2}/$b"
}
rm -f "$(blob b)"
p=$(blob c) && rm -f "$p" && mkdir "$p"
p=$(blob d) && rm -f "$p" && head -c 1000 "$T/io/d" >"$p"
for f in b c d; do
  expect_exit 1 "cat of $f, whose blob is broken, fails" cat "$T/m/$f"
  check "with EIO ($(cat "$T/stderr"))" grep -q "Input/output error" "$T/stderr"
done
check "the other file reads fine" cmp "$T/m/a" "$T/io/a"
check "the mount keeps answering" [ "$(ls "$T/m" | wc -l)" = 4 ]
check "stat still answers for a broken file" [ "$(stat -c %s "$T/m/b")" = 300000 ]
finish
