#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_sparse.sh — a sparse file in a layer tar stays sparse in the store:
# a 10 KiB tar holding a 2 GiB sparse file (GNU `tar -S`, and pax
# `tar --sparse --format=pax`) imports into a store on a 20 MiB tmpfs, the
# file reads back through a mount as its bytes (data where the tar had it,
# zeros elsewhere); a file that is all hole is accepted, 100 GiB of holes
# are not (hashing them would take minutes); `cairn df` counts
# the blobs' allocated bytes; `cairn export` writes them sparse (and tar
# extracts the same bytes); push regenerates the layer byte for byte (its
# diff_id kept); a sparse file written through a --rw mount stays sparse
# in the layer cairn commit stores, its export and its push.
source "$(dirname "$0")/../lib/test-lib.sh"

GiB2=$((2 * 1024 * 1024 * 1024))
mkdir -p "$T/src" "$T/small" "$T/mnt"
truncate -s $GiB2 "$T/src/big"
printf 'hello' | dd of="$T/src/big" bs=1 seek=1000000 conv=notrunc status=none
printf 'tail' | dd of="$T/src/big" bs=1 seek=$((GiB2 - 4)) conv=notrunc status=none
truncate -s $GiB2 "$T/src/hole"
tar -C "$T/src" --numeric-owner -S -cf "$T/gnu.tar" big hole
tar -C "$T/src" --numeric-owner --sparse --format=pax -cf "$T/pax.tar" big hole
tar -C "$T/src" --numeric-owner -S -cf "$T/allhole.tar" hole
[ "$(stat -c %s "$T/gnu.tar")" -le 20480 ] || fail "tar -S made a $(stat -c %s "$T/gnu.tar") byte tar"

mount -t tmpfs -o size=20m tmpfs "$T/small" || {
  echo "skip: cannot mount a tmpfs"
  exit 77
}
on_exit "umount -l '$T/small'"
on_exit "cairn --store '$T/small/store' umount '$T/mnt'"
S=(--store "$T/small/store")

expect_exit 0 "import a 10 KiB GNU sparse tar (2 GiB files) into a 20 MiB store" \
  cairn "${S[@]}" import -q gnu:1 "$T/gnu.tar"
expect_exit 0 "import the pax sparse tar" cairn "${S[@]}" import -q pax:1 "$T/pax.tar"
expect_exit 0 "import a tar whose one file is all hole" cairn "${S[@]}" import -q hole:1 "$T/allhole.tar"
used=$(du -sk "$T/small/store" | cut -f1)
check "the store takes $used KiB, not GiBs" [ "$used" -lt 4096 ]

expect_exit 0 "mount the GNU sparse image" cairn "${S[@]}" mount gnu:1 "$T/mnt"
check "big is 2 GiB through the mount" [ "$(stat -c %s "$T/mnt/big")" = $GiB2 ]
check "big holds its data at 1000000" [ "$(dd if="$T/mnt/big" bs=1 skip=1000000 count=5 status=none)" = hello ]
check "big holds its data at its end" [ "$(tail -c 4 "$T/mnt/big")" = tail ]
check "big is zeros in its holes" cmp -n 1000000 "$T/mnt/big" /dev/zero
check "big is zeros at 1 GiB" cmp -n 4096 <(dd if="$T/mnt/big" bs=4096 skip=262144 count=1 status=none) /dev/zero
check "hole is zeros at 2 GiB - 4 KiB" \
  cmp -n 4096 <(dd if="$T/mnt/hole" bs=4096 skip=524287 count=1 status=none) /dev/zero
# Holes are served: SEEK_DATA/SEEK_HOLE (the lseek operation) and st_blocks
# the blob's allocated blocks, so that du, cp --sparse and the like see a
# sparse file (before: all data, 2 GiB of blocks).
# seek FILE OFFSET SEEK_DATA|SEEK_HOLE: the offset lseek(2) gives, or its errno's name
seek() {
  python3 -c 'import errno, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
try:
    print(os.lseek(fd, int(sys.argv[2]), getattr(os, sys.argv[3])))
except OSError as e:
    print(errno.errorcode[e.errno])' "$@"
}
# within LO X HI: LO < X <= HI
within() { [ "$2" -gt "$1" ] 2>/dev/null && [ "$2" -le "$3" ]; }
data=$(seek "$T/mnt/big" 0 SEEK_DATA)
check "SEEK_DATA in big finds its data at $data (by 1000000)" within 0 "$data" 1000000
hole=$(seek "$T/mnt/big" 1000000 SEEK_HOLE)
check "SEEK_HOLE in big finds the hole after it at $hole" within 1000000 "$hole" 2000000
check "SEEK_DATA in hole: none (ENXIO)" [ "$(seek "$T/mnt/hole" 0 SEEK_DATA)" = ENXIO ]
check "du of big through the mount: $(du -k "$T/mnt/big" | cut -f1) KiB" [ "$(du -k "$T/mnt/big" | cut -f1)" -lt 64 ]
expect_exit 0 "umount" cairn "${S[@]}" umount "$T/mnt"

# A --rw mount serves them the same, and a copy-up keeps the holes: a byte
# written into big copies it up into the upper, on the 20 MiB tmpfs.
expect_exit 0 "mount the GNU sparse image --rw" cairn "${S[@]}" mount --rw gnu:1 "$T/mnt"
data=$(seek "$T/mnt/big" 0 SEEK_DATA)
check "rw, lower: SEEK_DATA in big at $data" within 0 "$data" 1000000
check "rw, lower: du of big $(du -k "$T/mnt/big" | cut -f1) KiB" [ "$(du -k "$T/mnt/big" | cut -f1)" -lt 64 ]
check "a byte written into big (its copy-up) fits the 20 MiB store" \
  sh -c "printf x | dd of='$T/mnt/big' bs=1 seek=5 conv=notrunc status=none"
up=$(find "$T/small/store/uppers" -path '*/root/big' | head -1)
check "the upper's big is sparse: $(du -k "$up" | cut -f1) KiB" within -1 "$(du -k "$up" | cut -f1)" 255
check "rw, upper: du of big $(du -k "$T/mnt/big" | cut -f1) KiB" [ "$(du -k "$T/mnt/big" | cut -f1)" -lt 256 ]
hole=$(seek "$T/mnt/big" 0 SEEK_HOLE)
check "rw, upper: SEEK_HOLE in big at $hole, after the byte" within 5 "$hole" 999999
check "rw, upper: big holds x, its data and its tail" sh -c "
  [ \$(dd if='$T/mnt/big' bs=1 skip=5 count=1 status=none) = x ] &&
  [ \$(dd if='$T/mnt/big' bs=1 skip=1000000 count=5 status=none) = hello ] &&
  [ \$(tail -c 4 '$T/mnt/big') = tail ] && [ \$(stat -c %s '$T/mnt/big') = $GiB2 ]"
expect_exit 0 "umount the rw mount" cairn "${S[@]}" umount "$T/mnt"

blobs=$(cairn "${S[@]}" df --json | jq '.[] | select(.type == "blobs") | .bytes')
check "df counts the blobs' allocated bytes ($blobs), not their 4 GiB" \
  [ "$blobs" -gt 0 ] && [ "$blobs" -lt 1048576 ]

expect_exit 0 "export the pax image" sh -c "cairn --store '$T/small/store' export pax:1 >'$T/export.tar'"
check "the export is sparse: $(stat -c %s "$T/export.tar") bytes" \
  [ "$(stat -c %s "$T/export.tar")" -gt 0 ] && [ "$(stat -c %s "$T/export.tar")" -lt 65536 ]
mkdir -p "$T/small/x"
tar -C "$T/small/x" -xf "$T/export.tar"
check "tar extracts big from the export, sparse, as it was" sh -c "
  [ \$(stat -c %s '$T/small/x/big') = $GiB2 ] && [ \$(du -k '$T/small/x/big' | cut -f1) -lt 64 ] &&
  [ \$(dd if='$T/small/x/big' bs=1 skip=1000000 count=5 status=none) = hello ] &&
  [ \$(tail -c 4 '$T/small/x/big') = tail ] && cmp -n 1000000 '$T/small/x/big' /dev/zero"
check "tar extracts hole from the export, 2 GiB of hole" sh -c "
  [ \$(stat -c %s '$T/small/x/hole') = $GiB2 ] && [ \$(du -k '$T/small/x/hole' | cut -f1) = 0 ]"
rm -rf "$T/small/x"
expect_exit 0 "the export imports again" cairn "${S[@]}" import -q again:1 "$T/export.tar"

# cairn commit keeps a sparse file of the upper sparse: a 2 GiB file with
# two islands of data written through a --rw mount commits into the 20 MiB
# store (before: the layer's tar and blob held its 2 GiB, ENOSPC here); the
# committed image gives the same bytes, its holes found by SEEK_HOLE, and
# exports and pushes as a sparse tar that extracts to the same file.
head -c 100000 /dev/urandom >"$T/island1"
head -c 200000 /dev/urandom >"$T/island2"
off1=3145728 off2=$((GiB2 / 4 * 3 + 12345))
truncate -s $GiB2 "$T/islands"
dd if="$T/island1" of="$T/islands" bs=4096 seek=$off1 oflag=seek_bytes conv=notrunc status=none
dd if="$T/island2" of="$T/islands" bs=4096 seek=$off2 oflag=seek_bytes conv=notrunc status=none
want=$(sha256sum <"$T/islands" | cut -d' ' -f1)
expect_exit 0 "mount hole:1 --rw" cairn "${S[@]}" mount --rw hole:1 "$T/mnt"
check "a 2 GiB file with two islands written through the rw mount" sh -c "
  truncate -s $GiB2 '$T/mnt/islands' &&
  dd if='$T/island1' of='$T/mnt/islands' bs=4096 seek=$off1 oflag=seek_bytes conv=notrunc status=none &&
  dd if='$T/island2' of='$T/mnt/islands' bs=4096 seek=$off2 oflag=seek_bytes conv=notrunc status=none"
before=$(du -sk "$T/small/store" | cut -f1)
start=$(date +%s%N)
expect_exit 0 "commit it" cairn "${S[@]}" commit "$T/mnt" islands:1
echo "# commit took $((($(date +%s%N) - start) / 1000000)) ms"
after=$(du -sk "$T/small/store" | cut -f1)
check "the store grew by $((after - before)) KiB, not 2 GiB" [ $((after - before)) -lt 2048 ]
blobs=$(cairn "${S[@]}" df --json | jq '.[] | select(.type == "blobs") | .bytes')
check "df: the blobs take $blobs bytes" [ "$blobs" -lt 2097152 ]
expect_exit 0 "umount the rw mount" cairn "${S[@]}" umount "$T/mnt"
expect_exit 0 "mount the committed image read-only" cairn "${S[@]}" mount islands:1 "$T/mnt"
check "committed: the islands are there" sh -c "
  [ \$(stat -c %s '$T/mnt/islands') = $GiB2 ] &&
  cmp -n 100000 -i $off1:0 '$T/mnt/islands' '$T/island1' &&
  cmp -n 200000 -i $off2:0 '$T/mnt/islands' '$T/island2'"
check "committed: the file's sha256 is the dense bytes'" \
  [ "$(sha256sum <"$T/mnt/islands" | cut -d' ' -f1)" = "$want" ]
hole=$(seek "$T/mnt/islands" $off1 SEEK_HOLE)
check "committed: SEEK_HOLE after the first island at $hole" within $off1 "$hole" $((off1 + 1048576))
data=$(seek "$T/mnt/islands" "$hole" SEEK_DATA)
check "committed: SEEK_DATA finds the second island at $data" within $((off2 - 1048576)) "$data" $off2
check "committed: du of the file $(du -k "$T/mnt/islands" | cut -f1) KiB" \
  [ "$(du -k "$T/mnt/islands" | cut -f1)" -lt 1024 ]
expect_exit 0 "umount" cairn "${S[@]}" umount "$T/mnt"
expect_exit 0 "export the committed image" \
  sh -c "cairn --store '$T/small/store' export islands:1 >'$T/export2.tar'"
check "the export is sparse: $(stat -c %s "$T/export2.tar") bytes" [ "$(stat -c %s "$T/export2.tar")" -lt 1048576 ]
mkdir -p "$T/x2"
tar -C "$T/x2" -xf "$T/export2.tar" islands
check "tar extracts the same file from the export" \
  [ "$(sha256sum <"$T/x2/islands" | cut -d' ' -f1)" = "$want" ]
rm -rf "$T/x2"
expect_exit 0 "push the committed image to an OCI layout, uncompressed" \
  cairn "${S[@]}" push -q --compress none islands:1 "oci:$T/layout-islands:v1"
lay=$T/layout-islands/blobs/sha256
manifest=$(jq -r '.manifests[0].digest' "$T/layout-islands/index.json" | cut -d: -f2)
layer=$lay/$(jq -r '.layers[-1].digest' "$lay/$manifest" | cut -d: -f2)
mkdir -p "$T/x3"
check "the pushed layer ($(stat -c %s "$layer") bytes) is a sparse tar of the same file" sh -c "
  tar -C '$T/x3' -xf '$layer' islands &&
  [ \$(sha256sum <'$T/x3/islands' | cut -d' ' -f1) = $want ]"
config=$lay/$(jq -r '.config.digest' "$lay/$manifest" | cut -d: -f2)
check "the pushed layer is the committed one byte for byte (its digest the diff_id)" \
  [ "$(jq -r '.rootfs.diff_ids[-1]' "$config")" = "sha256:$(basename "$layer")" ]
rm -rf "$T/x3" "$T/islands"

# Holes cost no disk but are hashed as zeros: a layer's are capped (64 GiB),
# so that 10 KiB of tar cannot keep an import hashing for hours.
mkdir -p "$T/huge"
truncate -s 100G "$T/huge/f"
tar -C "$T/huge" --numeric-owner -S -cf "$T/huge.tar" f
rm -rf "$T/huge"
start=$SECONDS
expect_exit 5 "a tar whose file has 100 GiB of holes is refused" \
  cairn "${S[@]}" import -q huge:1 "$T/huge.tar"
check "in $((SECONDS - start)) s" [ $((SECONDS - start)) -lt 120 ]
check "saying why" grep -q "holes of more than 64 GiB in a layer" "$T/stderr"

for kind in gnu pax; do
  expect_exit 0 "push $kind to an OCI layout, uncompressed" \
    cairn "${S[@]}" push -q --compress none $kind:1 "oci:$T/layout-$kind:v1"
  blob=$(find "$T/layout-$kind/blobs/sha256" -type f -size -100k -exec cmp -s {} "$T/$kind.tar" \; -print)
  check "$kind: the pushed layer is the imported tar, byte for byte" [ -n "$blob" ]
done
finish
