#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench_fs.sh — cairnfs against its peers on one multi-layer image built
# from real data: a Debian bookworm minbase rootfs (debootstrap, cached)
# split into three layers, plus a layer holding one 512 MiB file.
#
# The same layers are served four ways: a native directory (the layers
# extracted on top of each other), kernel overlayfs (ro, lowerdirs),
# fuse-overlayfs (lowerdirs) and cairnfs (`cairn import` + `cairn mount`).
# Rows: cold / warm metadata walk (find -printf over every entry), read
# every file (tar -c | wc -c), sequential read of the large file (also
# the first read on a fresh mount), parallel
# reads of many small files (each cold and warm), and mount + unmount time
# (also for a 100,000-file image), and unmount alone. Cold = page, dentry and inode caches
# dropped before each run. The systems' runs are interleaved, a new order
# each round (benchlib.sh: the VM's drift falls on all alike); prints the
# median of each and ratios of cairnfs to native and to fuse-overlayfs.
#
#   CAIRN_BIN=build-dir [ROWS='walk-cold bigfile-cold ...'] bench/bench_fs.sh [RESULTS.txt]
# The table is also written to RESULTS.txt (default bench/results/fs.txt).
# PASSTHROUGH=1 adds a contender, cairnfs-pt: cairnfs with -o passthrough
# (what FUSE passthrough buys and costs, in the same run); CAIRN_BIN_BEFORE
# another, cairnfs-before: the cairnfs of that build directory (main
# before a change, say), with a store of its own.
# ROWS runs only the rows named (the keys in the table code below; mount,
# umount and mount100k are the mount rows); the default is every row.
# Measured, never asserted. Needs root (mounts, drop_caches).
CAIRN_BIN=${CAIRN_BIN:-$(cd "$(dirname "$0")/.." && pwd)/build}
source "$(dirname "$0")/../tests/lib/test-lib.sh"
use_lib mount
set -e
source "$(dirname "$0")/benchlib.sh"
unset ASAN_OPTIONS UBSAN_OPTIONS
out_file=${1:-$(cd "$(dirname "$0")" && pwd)/results/fs.txt}
mkdir -p "$(dirname "$out_file")"

RUNS_COLD=${RUNS_COLD:-5}
RUNS_WARM=${RUNS_WARM:-10}
ROWS=" ${ROWS:-walk-cold walk-warm readall-cold readall-warm bigfile-cold bigfile-warm bigfile-first smallfiles-par-cold smallfiles-par-warm mount umount mount100k} "
wanted() { [[ $ROWS == *" $1 "* ]]; }
DROP='sync; echo 3 > /proc/sys/vm/drop_caches'

echo "# preparing layers and the four trees" >&2
minbase_layers "$T/layers"
mkdir -p "$T/bigsrc"
head -c $((512 << 20)) /dev/urandom >"$T/bigsrc/big.bin"
tar -C "$T/bigsrc" -cf "$T/layers/layer4.tar" big.bin
rm -rf "$T/bigsrc"
layers=("$T"/layers/layer{1,2,3,4}.tar)

mkdir -p "$T/native" "$T/l1" "$T/l2" "$T/l3" "$T/l4"
for i in 1 2 3 4; do
  tar -C "$T/native" --xattrs --xattrs-include='*' --numeric-owner -xf "$T/layers/layer$i.tar"
  tar -C "$T/l$i" --xattrs --xattrs-include='*' --numeric-owner -xf "$T/layers/layer$i.tar"
done
lower="$T/l4:$T/l3:$T/l2:$T/l1"

declare -A DIR
DIR[native]=$T/native
DIR[overlayfs]=$T/ovl
DIR[fuse-overlayfs]=$T/fovl
DIR[cairnfs]=$T/cfs
mkdir -p "$T/ovl" "$T/fovl" "$T/cfs"
mount -t overlay overlay -o "ro,lowerdir=$lower" "$T/ovl"
fuse-overlayfs -o "lowerdir=$lower" "$T/fovl"
cairn import bench:1 "${layers[@]}" >/dev/null
cairn mount bench:1 "$T/cfs"
SYSTEMS=(native overlayfs fuse-overlayfs cairnfs)
if [ "${PASSTHROUGH:-0}" = 1 ]; then
  DIR[cairnfs-pt]=$T/cfs-pt
  mkdir -p "$T/cfs-pt"
  cairn mount -o passthrough bench:1 "$T/cfs-pt"
  SYSTEMS+=(cairnfs-pt)
fi
if [ -n "${CAIRN_BIN_BEFORE:-}" ]; then
  DIR[cairnfs-before]=$T/cfs-before
  mkdir -p "$T/cfs-before"
  "$CAIRN_BIN_BEFORE/cairn" --store "$T/store-before" import bench:1 "${layers[@]}" >/dev/null
  "$CAIRN_BIN_BEFORE/cairn" --store "$T/store-before" mount bench:1 "$T/cfs-before"
  SYSTEMS+=(cairnfs-before)
fi

# The small files for the parallel-read row: every regular file < 16 KiB.
(cd "$T/native" && find . -type f -size -16k -print0) >"$T/small.list"
echo "# $(tr -cd '\0' <"$T/small.list" | wc -c) small files," \
  "$(find "$T/native" | wc -l) entries" >&2

mkdir -p "$T/json"

# bench ROW KIND(cold|warm) COMMAND-TEMPLATE: @ in the template is the tree.
# The systems' runs are interleaved (benchlib.sh): cold, the caches are
# dropped before each; warm, two rounds go first, untimed.
bench() {
  local row=$1 kind=$2 tmpl=$3 sys prepare=: runs=$RUNS_WARM warmup=2
  wanted "$row" || return 0
  if [ "$kind" = cold ]; then prepare=$DROP runs=$RUNS_COLD warmup=0; fi
  local args=()
  for sys in "${SYSTEMS[@]}"; do
    args+=("$sys" "$prepare" "${tmpl//@/${DIR[$sys]}}")
  done
  echo "# $row" >&2
  interleaved "$T/json/$row.json" "$runs" "$warmup" "${args[@]}" || fail "row $row failed"
}

bench walk-cold cold "find @ -printf '%p %s %m %u %g %T@ %l\n' >/dev/null"
bench walk-warm warm "find @ -printf '%p %s %m %u %g %T@ %l\n' >/dev/null"
bench readall-cold cold "tar -C @ -cf - . | wc -c >/dev/null"
bench readall-warm warm "tar -C @ -cf - . | wc -c >/dev/null"
bench bigfile-cold cold "dd if=@/big.bin of=/dev/null bs=1M status=none"
bench bigfile-warm warm "dd if=@/big.bin of=/dev/null bs=1M status=none"
# The big file's first read on a fresh mount, as a container's start meets
# it: before each run every tree is mounted anew (native: nothing) and the
# caches dropped.
if wanted bigfile-first; then
  echo "# bigfile-first" >&2
  declare -A REMOUNT
  REMOUNT[native]=:
  # An unmount's failure is not the row's: a container started meanwhile
  # may hold a copy of the mount (exit 4), and our view goes all the same.
  REMOUNT[overlayfs]="umount $T/ovl; mount -t overlay overlay -o ro,lowerdir=$lower $T/ovl"
  REMOUNT[fuse-overlayfs]="fusermount3 -u $T/fovl; $(daemon_gone_cmd "$T/fovl");
    fuse-overlayfs -o lowerdir=$lower $T/fovl"
  REMOUNT[cairnfs]="cairn umount $T/cfs; cairn mount -q bench:1 $T/cfs"
  REMOUNT[cairnfs-pt]="cairn umount $T/cfs-pt; cairn mount -q -o passthrough bench:1 $T/cfs-pt"
  b="$CAIRN_BIN_BEFORE/cairn --store $T/store-before"
  REMOUNT[cairnfs-before]="$b umount $T/cfs-before; $b mount -q bench:1 $T/cfs-before"
  args=()
  for sys in "${SYSTEMS[@]}"; do
    args+=("$sys" "${REMOUNT[$sys]} && $DROP" "dd if=${DIR[$sys]}/big.bin of=/dev/null bs=1M status=none")
  done
  interleaved "$T/json/bigfile-first.json" "$RUNS_COLD" 0 "${args[@]}" || fail "row bigfile-first failed"
fi
bench smallfiles-par-cold cold "cd @ && xargs -0 -P 8 -n 32 cat <$T/small.list >/dev/null"
bench smallfiles-par-warm warm "cd @ && xargs -0 -P 8 -n 32 cat <$T/small.list >/dev/null"

# Mount + unmount. Native has nothing to mount.
if wanted mount; then
  echo "# mount+umount" >&2
  cairn umount "$T/cfs"
  umount "$T/ovl"
  fusermount3 -u "$T/fovl"
  interleaved "$T/json/mount.json" "$RUNS_WARM" 1 \
    overlayfs : "mount -t overlay overlay -o ro,lowerdir=$lower $T/ovl && stat $T/ovl/etc >/dev/null && umount $T/ovl" \
    fuse-overlayfs : "fuse-overlayfs -o lowerdir=$lower $T/fovl && stat $T/fovl/etc >/dev/null && fusermount3 -u $T/fovl" \
    cairnfs : "$CAIRN_BIN/cairn --store $STORE mount -q bench:1 $T/cfs && stat $T/cfs/etc >/dev/null && $CAIRN_BIN/cairn --store $STORE umount $T/cfs" \
    || fail "the mount row failed"
fi

# Unmount alone, with the caches dropped after the mount (as a host's
# teardown meets them): from the command until it returns. fusermount3 -u
# returns before fuse-overlayfs's daemon exits; the next run waits for
# that, untimed. cairnfs-before: CAIRN_BIN_BEFORE's cairn umount.
if wanted umount; then
  echo "# umount" >&2
  for d in cfs cfs-pt ovl fovl cfs-before; do
    if mountpoint -q "$T/$d"; then umount "$T/$d"; fi
  done
  eval "$(daemon_gone_cmd "$T/fovl")"
  fovl_gone=$(daemon_gone_cmd "$T/fovl")
  # cairn umount returns before its daemon exits (it forgets its record
  # first): found by their store (their DIR is an fd).
  cfs_gone="for i in \$(seq 500); do pgrep -f -- '--store $STORE ' >/dev/null || break; sleep 0.01; done"
  args=(overlayfs "mount -t overlay overlay -o ro,lowerdir=$lower $T/ovl && stat $T/ovl/etc >/dev/null && $DROP" "umount $T/ovl"
    fuse-overlayfs "$fovl_gone; fuse-overlayfs -o lowerdir=$lower $T/fovl && stat $T/fovl/etc >/dev/null && $DROP" "fusermount3 -u $T/fovl"
    cairnfs "$cfs_gone; $CAIRN_BIN/cairn --store $STORE mount -q bench:1 $T/cfs && stat $T/cfs/etc >/dev/null && $DROP" "$CAIRN_BIN/cairn --store $STORE umount $T/cfs")
  if [ -n "${CAIRN_BIN_BEFORE:-}" ]; then
    b="$CAIRN_BIN_BEFORE/cairn --store $T/store-before"
    gone="for i in \$(seq 500); do pgrep -f -- '--store $T/store-before ' >/dev/null || break; sleep 0.01; done"
    args+=(cairnfs-before "$gone; $b mount -q bench:1 $T/cfs-before && stat $T/cfs-before/etc >/dev/null && $DROP" "$b umount $T/cfs-before")
  fi
  interleaved "$T/json/umount.json" "$RUNS_WARM" 1 "${args[@]}" || fail "the umount row failed"
fi

# A 100,000-file image (one layer, 1,000 directories of 100 small files).
if wanted mount100k; then
  echo "# 100k-file image" >&2
  many_files_layer "$T/100k.tar"
  mkdir -p "$T/l100k"
  tar -C "$T/l100k" -xf "$T/100k.tar"
  cairn import big100k:1 "$T/100k.tar" >/dev/null
  interleaved "$T/json/mount100k.json" "$RUNS_WARM" 1 \
    overlayfs : "mount -t overlay overlay -o ro,lowerdir=$T/l100k:$T/l1 $T/ovl && stat $T/ovl/d0999/f099 >/dev/null && umount $T/ovl" \
    fuse-overlayfs : "fuse-overlayfs -o lowerdir=$T/l100k:$T/l1 $T/fovl && stat $T/fovl/d0999/f099 >/dev/null && fusermount3 -u $T/fovl" \
    cairnfs : "$CAIRN_BIN/cairn --store $STORE mount -q big100k:1 $T/cfs && stat $T/cfs/d0999/f099 >/dev/null && $CAIRN_BIN/cairn --store $STORE umount $T/cfs" \
    || fail "the 100,000-file mount row failed"
fi

python3 - "$T/json" <<'PY' | tee ${out_file:+"$out_file"}
import json, os, platform, sys
d = sys.argv[1]
rows = [("walk-cold", "metadata walk, cold (find -printf)"),
        ("walk-warm", "metadata walk, warm"),
        ("readall-cold", "read every file, cold (tar|wc)"),
        ("readall-warm", "read every file, warm"),
        ("bigfile-cold", "sequential read 512 MiB, cold"),
        ("bigfile-warm", "sequential read 512 MiB, warm"),
        ("bigfile-first", "the same, cold, on a fresh mount"),
        ("smallfiles-par-cold", "parallel small-file reads, cold"),
        ("smallfiles-par-warm", "parallel small-file reads, warm"),
        ("mount", "mount + umount (minbase, 4 layers)"),
        ("umount", "umount, caches dropped (minbase)"),
        ("mount100k", "mount + umount (100,000 files)")]
extras = ["cairnfs-pt", "cairnfs-before"]  # contenders a run may add
results = {key: {r["command"]: r["median"] * 1000
                 for r in json.load(open(f"{d}/{key}.json"))["results"]}
           for key, _ in rows if os.path.exists(f"{d}/{key}.json")}  # else not in ROWS
extras = [s for s in extras if any(s in res for res in results.values())]
systems = ["native", "overlayfs", "fuse-overlayfs", "cairnfs"] + extras
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
print(f"# cairnfs benchmark — {platform.node()}: {os.cpu_count()} cpus ({cpu}), "
      f"kernel {platform.release()}, median of interleaved runs in ms")
hdr = (f"{'row':38} " + " ".join(f"{s:>15}" for s in systems) +
       f" {'ovl/native':>11} {'cfs/native':>11} {'cfs/fuse-ovl':>12}" +
       "".join(f" {s.replace('cairnfs', 'cfs') + '/native':>18}" for s in extras))
print(hdr)
print("-" * len(hdr))
for key, label in rows:
    if key not in results:
        continue
    res = results[key]
    cells = " ".join(f"{res[s]:15.1f}" if s in res else f"{'-':>15}" for s in systems)
    c = res["cairnfs"]
    vs_native = (f"{res['overlayfs'] / res['native']:11.2f} {c / res['native']:11.2f}"
                 if "native" in res else f"{'-':>11} {'-':>11}")
    more = "".join(f" {res[s] / res['native']:18.2f}" if s in res and "native" in res
                   else f" {'-':>18}" for s in extras)
    print(f"{label:38} {cells} {vs_native} {c / res['fuse-overlayfs']:12.2f}{more}")
PY
