#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench_rw.sh — writable mounts: `cairn mount --rw` against kernel overlayfs
# (upper on the same disk) and fuse-overlayfs (upperdir on the same disk),
# all over the same Debian bookworm minbase image (three layers; the
# overlays' lowers are those layers extracted). One run of each row, in
# this order, on one fresh mount per system (each row leaves its files):
#   untar     tar -x of minbase's usr/share layer (52 MB, ~9,000 entries) + sync
#   seqwrite  dd 256 MiB, 1 MiB blocks, conv=fsync
#   rand4k    2,000 random 4 KiB pwrites into a 64 MiB file, fsync after each
#   creates   10,000 small files (100 B each) in one directory, then sync
#   rmlower   rm -rf of the lower tree usr (whiteouts / copy-up of dirs)
#   commit    cairn commit of the changes; for the overlays, tar -c of the
#             upper directory to /dev/null (what a commit must at least read)
# Then the commit of that same change three ways, in the same run:
#   cairn commit   of the --rw mount (a layer and an image in the store)
#   podman commit  of a podman container (storage driver overlay, its own
#                  --root in $T) of the same image (cairn push to an
#                  oci-archive, podman load), the same rows written
#                  through podman mount's merged directory
#   tar -c         of cairn's upper directory (uppers/ID/root) into a file
#                  on the same disk, then sync of that file: the bytes a
#                  layer holds, read once and written once, durably
# Wall-clock seconds, and cairn's ratio to each peer (below 1: cairn
# faster). Measured, never asserted. Root only. Other helpers may load the
# machine: run it under `flock /work/bench.lock`.
#
#   CAIRN_BIN=build-dir bench/bench_rw.sh [RESULTS.txt]
# The table is also written to RESULTS.txt (default bench/results/rw.txt).
CAIRN_BIN=${CAIRN_BIN:-$(cd "$(dirname "$0")/.." && pwd)/build}
source "$(dirname "$0")/../tests/lib/test-lib.sh"
use_lib mount
set -e
unset ASAN_OPTIONS UBSAN_OPTIONS
out_file=${1:-$(cd "$(dirname "$0")" && pwd)/results/rw.txt}
mkdir -p "$(dirname "$out_file")"

echo "# preparing the image and the lowers" >&2
minbase_layers "$T/layers"
cairn import bench:1 "$T"/layers/layer{1,2,3}.tar >/dev/null 2>&1
mkdir -p "$T/l1" "$T/l2" "$T/l3"
for i in 1 2 3; do
  tar -C "$T/l$i" --xattrs --xattrs-include='*' --numeric-owner -xf "$T/layers/layer$i.tar"
done
lower="$T/l3:$T/l2:$T/l1"
untar_src=$T/layers/layer2.tar

now() { date +%s%N; }
declare -A T
run_rows() { # run_rows SYSTEM MNT UPPERDIR
  local sys=$1 m=$2 up=$3 t0
  sync
  echo 3 >/proc/sys/vm/drop_caches
  t0=$(now); mkdir "$m/untar" && tar -C "$m/untar" -xf "$untar_src" && sync; T[$sys,untar]=$(($(now) - t0))
  t0=$(now); dd if=/dev/zero of="$m/seq" bs=1M count=256 conv=fsync status=none; T[$sys,seqwrite]=$(($(now) - t0))
  t0=$(now)
  python3 - "$m/rand" <<'PY'
import os, random, sys
fd = os.open(sys.argv[1], os.O_CREAT | os.O_RDWR, 0o644)
os.ftruncate(fd, 64 << 20)
rnd, buf = random.Random(1), b"x" * 4096
for _ in range(2000):
    os.pwrite(fd, buf, rnd.randrange(0, (64 << 20) // 4096) * 4096)
    os.fsync(fd)
os.close(fd)
PY
  T[$sys,rand4k]=$(($(now) - t0))
  t0=$(now)
  python3 - "$m/many" <<'PY'
import os, sys
os.mkdir(sys.argv[1])
data = b"y" * 100
for i in range(10000):
    with open(os.path.join(sys.argv[1], f"f{i:05}"), "wb") as f:
        f.write(data)
PY
  sync; T[$sys,creates]=$(($(now) - t0))
  t0=$(now); rm -rf "$m/usr" && sync; T[$sys,rmlower]=$(($(now) - t0))
  if [ "$sys" = cairnfs ]; then
    local u
    u=$(upper_ids)
    t0=$(now); tar -C "$STORE/uppers/$u/root" -cf "$T/upper.tar" . && sync "$T/upper.tar"
    C[tar]=$(($(now) - t0))
    rm -f "$T/upper.tar"; sync
  fi
  t0=$(now)
  case $sys in
  cairnfs) cairn commit -q "$m" bench-committed:1 >/dev/null ;;
  podman)
    "${P[@]}" umount "$ctr" >/dev/null
    "${P[@]}" commit -q "$ctr" localhost/bench-committed:1 >/dev/null
    ;;
  *) tar -C "$up" -cf /dev/null . ;;
  esac
  T[$sys,commit]=$(($(now) - t0))
}
declare -A C

echo "# kernel overlayfs" >&2
mkdir -p "$T/ovu" "$T/ovw" "$T/ovl"
mount -t overlay overlay -o "lowerdir=$lower,upperdir=$T/ovu,workdir=$T/ovw" "$T/ovl"
run_rows overlayfs "$T/ovl" "$T/ovu"
umount "$T/ovl"

echo "# fuse-overlayfs" >&2
mkdir -p "$T/fu" "$T/fw" "$T/fovl"
fuse-overlayfs -o "lowerdir=$lower,upperdir=$T/fu,workdir=$T/fw" "$T/fovl"
run_rows fuse-overlayfs "$T/fovl" "$T/fu"
fusermount3 -u "$T/fovl"

echo "# podman (overlay): its container's rows, then podman commit" >&2
P=(podman --root "$T/podman" --runroot "$T/podman-run" --storage-driver overlay
  --cgroup-manager=cgroupfs)
on_exit '"${P[@]}" rm -af >/dev/null 2>&1; "${P[@]}" rmi -af >/dev/null 2>&1'
cairn push -q --compress none bench:1 "oci-archive:$T/bench-oci.tar" >/dev/null 2>&1
"${P[@]}" load -q -i "$T/bench-oci.tar" >/dev/null
rm -f "$T/bench-oci.tar"
ctr=$("${P[@]}" create --net=none localhost/bench:1 /bin/true)
run_rows podman "$("${P[@]}" mount "$ctr")" ""
"${P[@]}" rm -f "$ctr" >/dev/null

echo "# cairnfs --rw" >&2
mkdir -p "$T/cfs"
cairn mount --rw bench:1 "$T/cfs" >/dev/null
run_rows cairnfs "$T/cfs" ""
# (exit 4 if another container's namespace holds a copy of the mount:
# detached here, the table still comes)
cairn umount "$T/cfs" >/dev/null || true

{
  echo "# bench_rw.sh, $(date -u +%FT%TZ), $(nproc) cores, one run each (seconds)"
  printf "%-10s %12s %16s %12s %14s %18s\n" row overlayfs fuse-overlayfs cairnfs "cairn/overlay" "cairn/fuse-ovl"
  for row in untar seqwrite rand4k creates rmlower commit; do
    awk -v r="$row" -v o="${T[overlayfs,$row]}" -v f="${T[fuse-overlayfs,$row]}" -v c="${T[cairnfs,$row]}" \
      'BEGIN { printf "%-10s %12.2f %16.2f %12.2f %14.2f %18.2f\n", r, o/1e9, f/1e9, c/1e9, c/o, c/f }'
  done
  echo
  echo "# the commit of the same change (seconds; load $(cut -d' ' -f1-3 /proc/loadavg))"
  printf "%-34s %8s %10s\n" commit seconds cairn/it
  awk -v c="${T[cairnfs,commit]}" -v p="${T[podman,commit]}" -v t="${C[tar]}" 'BEGIN {
    printf "%-34s %8.2f %10.2f\n", "cairn commit", c/1e9, 1
    printf "%-34s %8.2f %10.2f\n", "podman commit (overlay)", p/1e9, c/p
    printf "%-34s %8.2f %10.2f\n", "tar -c of cairn'"'"'s upper + sync", t/1e9, c/t }'
} | tee ${out_file:+"$out_file"}
