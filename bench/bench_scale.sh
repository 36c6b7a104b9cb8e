#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench_scale.sh — how what a mount costs grows with the image, and with
# the number of mounts of one image: kernel overlayfs (ro, lowerdirs),
# fuse-overlayfs (lowerdirs) and cairnfs (the cairnfs command, as
# `mount -t fuse.cairnfs` runs it; `cairn mount` adds its own start, see
# bench_mount.sh) side by side. The listings at scale are
# bench/bench_listing.sh's.
#
# Images (entries = files + directories):
#   1k    10 directories of 100 files (one layer)
#   15k   the Debian minbase rootfs in 3 layers (bench_mount.sh's)
#   100k  1,000 directories of 100 files (bench_mount.sh's)
#   1M    10,000 directories of 100 files; 100 distinct contents, so that
#         the store holds 100 blobs rather than a million (the tree is the
#         same size either way)
# Rows, for each image:
#   - mount latency with page, dentry and inode caches dropped, from the
#     mount command until one file of the image (d0009/f099,
#     etc/os-release, d0999/f099, d9999/f099) has been read (hyperfine,
#     mean ± sd, one warm-up run);
#   - one mount walked shallowly (find -maxdepth 2, the file read): the
#     daemon's RSS and PSS (/proc/PID/smaps_rollup; a cairnfs mount's two
#     processes, supervisor and server, summed); kernel overlayfs has
#     no daemon. And cairnfs's index file size.
# Then N mounts (N=100) of the 15k image at once, caches dropped before
# the first: the time to mount them one after the other (each until its
# file was read), per mount, and the sum of the daemons' PSS after each
# was walked shallowly.
# Prints one table, with cairnfs's ratios to fuse-overlayfs and overlayfs.
#
#   CAIRN_BIN=build-dir bench/bench_scale.sh --prepare      # build the images (slow, no timing)
#   flock /work/bench.lock bench/bench_scale.sh [RESULTS.txt]
# The table is also written to RESULTS.txt (default bench/results/scale.txt).
# The images (layer tars, trees extracted for the overlays, a cairn store)
# are kept in SCALE_DIR (default /var/tmp/cairn-bench-scale, about 6 GB
# and 1.1M inodes) between runs; the 1M one takes some minutes to make.
# Measured, never asserted. Needs root (mounts, drop_caches).
CAIRN_BIN=${CAIRN_BIN:-$(cd "$(dirname "$0")/.." && pwd)/build}
source "$(dirname "$0")/../tests/lib/test-lib.sh"
use_lib mount
set -e
unset ASAN_OPTIONS UBSAN_OPTIONS

RUNS=${RUNS:-5}
N_MOUNTS=${N_MOUNTS:-100}
SCALE_DIR=${SCALE_DIR:-/var/tmp/cairn-bench-scale}
DROP='sync; echo 3 > /proc/sys/vm/drop_caches'
IMAGES=(1k 15k 100k 1M)
declare -A DIRS PROBE
DIRS[1k]=10 DIRS[100k]=1000 DIRS[1M]=10000
PROBE[1k]=d0009/f099 PROBE[15k]=etc/os-release PROBE[100k]=d0999/f099 PROBE[1M]=d9999/f099
S=$SCALE_DIR/store

# The layers of each image, extracted under SCALE_DIR/IMAGE/lN, and one
# store holding all of them; each step is skipped once done.
prepare() {
  local img=$1 dir=$SCALE_DIR/$1 i tars=()
  [ -f "$dir/done" ] && return 0
  rm -rf "$dir"
  mkdir -p "$dir/empty"
  echo "# preparing $img" >&2
  if [ "$img" = 15k ]; then
    minbase_layers "$dir/layers"
    tars=("$dir"/layers/layer{1,2,3}.tar)
  else
    mkdir -p "$dir/layers"
    many_files_layer "$dir/layers/layer1.tar" "${DIRS[$img]}" 100 "$([ "$img" = 1M ] && echo 100 || echo 0)"
    tars=("$dir/layers/layer1.tar")
  fi
  for i in "${!tars[@]}"; do
    mkdir -p "$dir/l$((i + 1))"
    tar -C "$dir/l$((i + 1))" --xattrs --xattrs-include='*' --numeric-owner -xf "${tars[$i]}"
  done
  "$CAIRN_BIN/cairn" --store "$S" import "s${img,,}:1" "${tars[@]}" >/dev/null
  touch "$dir/done"
}
for img in "${IMAGES[@]}"; do prepare "$img"; done
# An index of another version (the store made by another build) is
# rewritten by the first mount: mount each once before timing.
mkdir -p "$T/m"
for img in "${IMAGES[@]}"; do
  "$CAIRN_BIN/cairnfs" --store "$S" "s${img,,}:1" "$T/m" && fusermount3 -u "$T/m"
done
[ "${1:-}" = --prepare ] && exit 0
out_file=${1:-$(cd "$(dirname "$0")" && pwd)/results/scale.txt}
mkdir -p "$(dirname "$out_file")"

# lower IMAGE: the overlay lowerdir list (top first; overlayfs needs two
# lowerdirs without an upperdir).
lower() {
  local dir=$SCALE_DIR/$1
  if [ "$1" = 15k ]; then echo "$dir/l3:$dir/l2:$dir/l1"; else echo "$dir/l1:$dir/empty"; fi
}
SYSTEMS=(overlayfs fuse-overlayfs cairnfs)
mount_cmd() { # SYSTEM IMAGE DIR
  case $1 in
  overlayfs) echo "mount -t overlay overlay -o ro,lowerdir=$(lower "$2") $3" ;;
  fuse-overlayfs) echo "fuse-overlayfs -o lowerdir=$(lower "$2") $3" ;;
  cairnfs) echo "$CAIRN_BIN/cairnfs --store $S s${2,,}:1 $3" ;;
  esac
}
umount_cmd() { # SYSTEM DIR
  if [ "$1" = overlayfs ]; then echo "umount $2"; else echo "fusermount3 -u $2"; fi
}
# pid_of SYSTEM DIR IMAGE: the processes serving DIR (a cairnfs mount:
# its supervisor and the server it runs, both counted).
pid_of() {
  case $1 in
  cairnfs)
    # shellcheck disable=SC2046 # a list of pids
    mount_procs $("$CAIRN_BIN/cairn" --store "$S" mounts --json | jq -r --arg d "$2" '.[] | select(.dir == $d) | .pid')
    ;;
  fuse-overlayfs) pgrep -f -x "fuse-overlayfs -o lowerdir=$(lower "$3") $2" ;;
  esac
}
# smaps KEY PID...: the sum of KEY (Rss, Pss) over the processes, in KiB.
smaps() {
  local k=$1 p t=0
  shift
  for p in "$@"; do t=$((t + $(awk -v k="$k:" '$1 == k { print $2 }' "/proc/$p/smaps_rollup"))); done
  echo "$t"
}
# gone_cmd SYSTEM DIR: waits until the daemon of DIR has exited
# (fusermount3 -u returns before it), so that no teardown is in the next
# run's time.
gone_cmd() {
  if [ "$1" = overlayfs ]; then echo true; else daemon_gone_cmd "$2"; fi
}

J=$T/json
mkdir -p "$J"
for img in "${IMAGES[@]}"; do
  echo "# mount latency, caches dropped: $img" >&2
  args=(--style none --runs "$RUNS" --warmup 1 --export-json "$J/latency-$img.json")
  for s in "${SYSTEMS[@]}"; do
    dir=$T/m/$s
    mkdir -p "$dir"
    args+=(--prepare "mountpoint -q $dir && $(umount_cmd "$s" "$dir"); $(gone_cmd "$s" "$dir"); $DROP"
      -n "$s" "$(mount_cmd "$s" "$img" "$dir") && cat $dir/${PROBE[$img]} >/dev/null")
  done
  hyperfine "${args[@]}" >/dev/null
  for s in "${SYSTEMS[@]}"; do
    dir=$T/m/$s
    mountpoint -q "$dir" && eval "$(umount_cmd "$s" "$dir")"
    [ "$s" = overlayfs ] && continue
    echo "# memory of one mount: $s, $img" >&2
    eval "$(mount_cmd "$s" "$img" "$dir")"
    find "$dir" -maxdepth 2 -printf '%p %s %m\n' >/dev/null
    cat "$dir/${PROBE[$img]}" >/dev/null
    pids=$(pid_of "$s" "$dir" "$img")
    # shellcheck disable=SC2086 # a list of pids
    echo "$(smaps Rss $pids) $(smaps Pss $pids)" >"$J/mem-$img-$s"
    eval "$(umount_cmd "$s" "$dir")"
  done
  stat -c %s "$S/index/$("$CAIRN_BIN/cairn" --store "$S" inspect "s${img,,}:1" | jq -r .id)" \
    >"$J/index-$img"
done

# N mounts of the 15k image at once: "SECONDS SUM_PSS_KIB" per system.
for s in "${SYSTEMS[@]}"; do
  echo "# $N_MOUNTS mounts of 15k: $s" >&2
  dirs=()
  for i in $(seq "$N_MOUNTS"); do
    dirs+=("$T/m/$s-$i")
    mkdir -p "$T/m/$s-$i"
  done
  eval "$DROP"
  start=$(date +%s%N)
  for dir in "${dirs[@]}"; do
    eval "$(mount_cmd "$s" 15k "$dir")"
    cat "$dir/${PROBE[15k]}" >/dev/null
  done
  end=$(date +%s%N)
  pss=0
  for dir in "${dirs[@]}"; do
    find "$dir" -maxdepth 2 -printf '%p %s %m\n' >/dev/null
    # shellcheck disable=SC2046 # a list of pids
    [ "$s" = overlayfs ] || pss=$((pss + $(smaps Pss $(pid_of "$s" "$dir" 15k))))
  done
  echo "$(((end - start) / 1000)) $pss" >"$J/many-$s"
  for dir in "${dirs[@]}"; do eval "$(umount_cmd "$s" "$dir")" || true; done
done

python3 - "$J" "$N_MOUNTS" "$RUNS" "${IMAGES[@]}" <<'PY' | tee ${out_file:+"$out_file"}
import json, os, platform, sys
d, n, runs, images = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
systems = ["overlayfs", "fuse-overlayfs", "cairnfs"]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
print(f"# cairnfs scale benchmark — {platform.node()}: {os.cpu_count()} cpus ({cpu}), "
      f"kernel {platform.release()}; {runs} runs per latency cell")
hdr = f"{'row':44} " + " ".join(f"{s:>16}" for s in systems) + f" {'cairnfs/f-ovl':>14} {'cairnfs/ovl':>12}"
print(hdr)
print("-" * len(hdr))
def line(label, vals, fmt):
    cells = " ".join(f"{fmt(vals[s]):>16}" if s in vals else f"{'-':>16}" for s in systems)
    r = lambda o: f"{vals['cairnfs'][0] / vals[o][0]:.2f}" if o in vals and vals[o][0] else "-"
    print(f"{label:44} {cells} {r('fuse-overlayfs'):>14} {r('overlayfs'):>12}")
for img in images:
    res = {r["command"]: (r["mean"] * 1000, (r["stddev"] or 0) * 1000)
           for r in json.load(open(f"{d}/latency-{img}.json"))["results"]}
    line(f"{img}: mount, caches dropped, ms", res, lambda v: f"{v[0]:.1f} ± {v[1]:.1f}")
    rss, pss = {}, {}
    for s in systems:
        p = f"{d}/mem-{img}-{s}"
        if os.path.exists(p):
            a, b = open(p).read().split()
            rss[s], pss[s] = (int(a) / 1024,), (int(b) / 1024,)
    line(f"{img}: one daemon's RSS, MiB", rss, lambda v: f"{v[0]:.1f}")
    line(f"{img}: one daemon's PSS, MiB", pss, lambda v: f"{v[0]:.1f}")
    size = int(open(f"{d}/index-{img}").read()) / 2**20
    line(f"{img}: cairnfs index file, MiB", {"cairnfs": (size,)}, lambda v: f"{v[0]:.1f}")
t, p = {}, {}
for s in systems:
    us, kib = map(int, open(f"{d}/many-{s}").read().split())
    t[s] = (us / 1000 / n,)
    if s != "overlayfs":
        p[s] = (kib / 1024,)
line(f"{n} mounts of 15k: ms per mount (first cold)", t, lambda v: f"{v[0]:.1f}")
line(f"{n} mounts of 15k: sum of PSS, MiB", p, lambda v: f"{v[0]:.1f}")
PY
