#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench_mount.sh — what a mount costs, cairnfs against its peers, on the
# 3-layer Debian minbase image (debootstrap, cached; the layers of
# bench_fs.sh without the big file) and on a generated image of 100,000
# small files (one layer, 1,000 directories of 100 files).
#
# Rows, for kernel overlayfs (ro, lowerdirs), fuse-overlayfs (lowerdirs),
# cairnfs (the cairnfs command, as `mount -t fuse.cairnfs` runs it: the
# peer of the fuse-overlayfs command) and cairn-mount (`cairn mount`, which
# starts cairnfs), and for the same two of a second cairn build when
# CAIRN_BIN_BEFORE names one (say, main's, to show a change):
#   - mount latency with page, dentry and inode caches dropped before each
#     run: from the mount command until a file of the image
#     (etc/os-release; d0999/f099) has been read, with every system's
#     mount taken down before each run (a live daemon keeps its binary and
#     libraries cached through drop_caches): RUNS rounds that run
#     each system once, in a new random order each round (mean ± sd, and
#     the median); LATENCY=hyperfine runs each system's RUNS runs one
#     after another instead (hyperfine, mean ± sd);
#   - umount latency with the caches dropped after the mount: from the
#     unmount command (umount, fusermount3 -u, cairn umount) until it
#     returns, RUNS interleaved rounds after one untimed (mean ± sd, and
#     the median);
#   - N mounts of one image (N=20), each walked shallowly (find -maxdepth
#     2, one file read): the sum of the daemons' PSS (from
#     /proc/PID/smaps_rollup) and one daemon's RSS. Kernel overlayfs has no
#     daemon; cairn-mount's daemons are cairnfs's. A cairnfs mount is two
#     processes, the supervisor and its server (doc/restarts.md):
#     both are counted, and "one daemon's RSS" is the server's.
# Prints one table, ratios against fuse-overlayfs.
#
#   CAIRN_BIN=build-dir [CAIRN_BIN_BEFORE=other-build-dir] [ROWS='latency umount pss'] [RUNS=10]
#     [LATENCY=interleaved|hyperfine] bench/bench_mount.sh [RESULTS.txt]
# The table is also written to RESULTS.txt (default bench/results/mount.txt).
# Measured, never asserted. Needs root (mounts, drop_caches).
CAIRN_BIN=${CAIRN_BIN:-$(cd "$(dirname "$0")/.." && pwd)/build}
source "$(dirname "$0")/../tests/lib/test-lib.sh"
use_lib mount
set -e
source "$(dirname "$0")/benchlib.sh"
unset ASAN_OPTIONS UBSAN_OPTIONS
out_file=${1:-$(cd "$(dirname "$0")" && pwd)/results/mount.txt}
mkdir -p "$(dirname "$out_file")"

RUNS=${RUNS:-10}
LATENCY=${LATENCY:-interleaved} # or hyperfine: each system's runs one after another
ROWS=" ${ROWS:-latency umount pss} " # which rows to run
wanted() { [[ $ROWS == *" $1 "* ]]; }
N_MOUNTS=${N_MOUNTS:-20}
DROP='sync; echo 3 > /proc/sys/vm/drop_caches'

echo "# preparing the images" >&2
minbase_layers "$T/layers"
many_files_layer "$T/layers/100k.tar"
for i in 1 2 3; do
  mkdir -p "$T/l$i"
  tar -C "$T/l$i" --xattrs --xattrs-include='*' --numeric-owner -xf "$T/layers/layer$i.tar"
done
mkdir -p "$T/l100k" "$T/empty"
tar -C "$T/l100k" -xf "$T/layers/100k.tar"

# Each image: its cairn name, layer tars, overlay lowerdir and the file read.
declare -A LAYERS LOWER PROBE
LAYERS[debian]="$T/layers/layer1.tar $T/layers/layer2.tar $T/layers/layer3.tar"
LOWER[debian]=$T/l3:$T/l2:$T/l1
PROBE[debian]=etc/os-release
LAYERS[100k]=$T/layers/100k.tar
LOWER[100k]=$T/l100k:$T/empty # overlayfs needs two lowerdirs without an upperdir
PROBE[100k]=d0999/f099

# Contenders: NAME -> the bin dir of a cairn build (cairnfs ones only).
SYSTEMS=(overlayfs fuse-overlayfs cairnfs cairn-mount)
declare -A BIN
BIN[cairnfs]=$CAIRN_BIN
BIN[cairn-mount]=$CAIRN_BIN
if [ -n "${CAIRN_BIN_BEFORE:-}" ]; then
  SYSTEMS+=(cairnfs-before cairn-mount-before)
  BIN[cairnfs-before]=$CAIRN_BIN_BEFORE
  BIN[cairn-mount-before]=$CAIRN_BIN_BEFORE
fi
for s in "${SYSTEMS[@]}"; do
  [ -n "${BIN[$s]:-}" ] || continue
  for img in debian 100k; do
    # shellcheck disable=SC2086 # a list of tars
    "${BIN[$s]}/cairn" --store "$T/store-$s" import "$img:1" ${LAYERS[$img]} >/dev/null
  done
done

# mount_cmd SYS IMAGE DIR / umount_cmd SYS DIR: shell commands.
mount_cmd() {
  case $1 in
  overlayfs) echo "mount -t overlay overlay -o ro,lowerdir=${LOWER[$2]} $3" ;;
  fuse-overlayfs) echo "fuse-overlayfs -o lowerdir=${LOWER[$2]} $3" ;;
  cairnfs*) echo "${BIN[$1]}/cairnfs --store $T/store-$1 $2:1 $3" ;;
  *) echo "${BIN[$1]}/cairn --store $T/store-$1 mount $2:1 $3" ;;
  esac
}
umount_cmd() {
  case $1 in
  overlayfs) echo "umount $2" ;;
  fuse-overlayfs | cairnfs*) echo "fusermount3 -u $2" ;;
  *) echo "${BIN[$1]}/cairn --store $T/store-$1 umount $2" ;;
  esac
}

# gone_cmd SYS DIR: waits until the daemon of DIR has exited, so that a
# run's teardown (fusermount3 -u returns before it; cairn umount once the
# daemon let go of its pins, before it forgets its record and exits) is
# not in the next run's time. cairn mount's daemons are found by their
# store (their DIR is an fd).
gone_cmd() {
  case $1 in
  overlayfs) echo true ;;
  cairn-mount*)
    echo "for i in \$(seq 500); do pgrep -f -- '--store $T/store-$1 ' >/dev/null || break; sleep 0.01; done"
    ;;
  *) daemon_gone_cmd "$2" ;;
  esac
}

mkdir -p "$T/json" "$T/m"
for img in debian 100k; do
  wanted latency || continue
  echo "# mount latency, caches dropped: $img ($LATENCY)" >&2
  for s in "${SYSTEMS[@]}"; do mkdir -p "$T/m/$s"; done
  # Before each run every system's mount goes, not only the one about to
  # run: a live daemon keeps what it maps (its binary, its libraries) in
  # the page cache through drop_caches, and a system whose libraries
  # another system's daemon had mapped measured them warm.
  prepare=
  for s in "${SYSTEMS[@]}"; do
    dir=$T/m/$s
    prepare+="if mountpoint -q $dir; then $(umount_cmd "$s" "$dir"); fi; $(gone_cmd "$s" "$dir"); "
  done
  prepare+=$DROP
  args=() hargs=(--style none --runs "$RUNS" --export-json "$T/json/latency-$img.json")
  for s in "${SYSTEMS[@]}"; do
    dir=$T/m/$s
    run="$(mount_cmd "$s" "$img" "$dir") && cat $dir/${PROBE[$img]} >/dev/null"
    args+=("$s" "$prepare" "$run")
    hargs+=(--prepare "$prepare" -n "$s" "$run")
  done
  if [ "$LATENCY" = interleaved ]; then
    interleaved "$T/json/latency-$img.json" "$RUNS" 0 "${args[@]}" || fail "the latency row failed"
  else
    hyperfine "${hargs[@]}" >/dev/null
  fi
  for s in "${SYSTEMS[@]}"; do
    mountpoint -q "$T/m/$s" && eval "$(umount_cmd "$s" "$T/m/$s")"
  done
done

# Unmount latency, caches dropped after the mount (as a host's teardown
# meets them): from the unmount command until it returns; each system's
# daemon is waited for (untimed) before its next mount.
for img in debian 100k; do
  wanted umount || continue
  echo "# umount latency, caches dropped: $img" >&2
  args=()
  for s in "${SYSTEMS[@]}"; do
    dir=$T/m/$s
    mkdir -p "$dir"
    if mountpoint -q "$dir"; then eval "$(umount_cmd "$s" "$dir")"; fi
    prepare="$(gone_cmd "$s" "$dir"); $(mount_cmd "$s" "$img" "$dir") && cat $dir/${PROBE[$img]} >/dev/null && $DROP"
    args+=("$s" "$prepare" "$(umount_cmd "$s" "$dir")")
  done
  interleaved "$T/json/umount-$img.json" "$RUNS" 1 "${args[@]}" || fail "the umount row failed"
done

# daemon_pids SYS DIR...: the pids serving those mounts.
daemon_pids() {
  local s=$1
  shift
  if [ "$s" = fuse-overlayfs ]; then
    cat "$T/fovl.pids"
  else
    # The supervisor a mount record names and the server it runs.
    # shellcheck disable=SC2046 # a list of pids
    mount_procs $("${BIN[$s]}/cairn" --store "$T/store-$s" mounts --json | jq -r '.[].pid')
  fi
}

# The PSS row: N mounts, each walked; "SUM_PSS_KIB ONE_RSS_KIB" per system.
for img in debian 100k; do
  wanted pss || continue
  for s in "${SYSTEMS[@]}"; do
    [ "$s" = overlayfs ] || [[ $s == cairn-mount* ]] && continue
    echo "# $N_MOUNTS mounts: $s, $img" >&2
    : >"$T/fovl.pids"
    dirs=()
    for i in $(seq "$N_MOUNTS"); do
      dir=$T/m/$s-$i
      mkdir -p "$dir"
      dirs+=("$dir")
      if [ "$s" = fuse-overlayfs ]; then
        fuse-overlayfs -f -o "lowerdir=${LOWER[$img]}" "$dir" &
        echo $! >>"$T/fovl.pids"
        BG_PIDS+=($!)
        wait_for 10 mountpoint -q "$dir" || fail "fuse-overlayfs did not mount $dir"
      else
        eval "$(mount_cmd "$s" "$img" "$dir")"
      fi
    done
    for dir in "${dirs[@]}"; do
      find "$dir" -maxdepth 2 -printf '%p %s %m\n' >/dev/null
      cat "$dir/${PROBE[$img]}" >/dev/null
    done
    pss=0 rss=0
    for pid in $(daemon_pids "$s"); do
      pss=$((pss + $(awk '/^Pss:/ { print $2 }' "/proc/$pid/smaps_rollup")))
      rss=$(awk '/^Rss:/ { print $2 }' "/proc/$pid/smaps_rollup")
    done
    echo "$pss $rss" >"$T/json/pss-$img-$s"
    # A mount another namespace copied (a container started meanwhile)
    # may refuse to go: the cleanup at exit unmounts it lazily.
    for dir in "${dirs[@]}"; do eval "$(umount_cmd "$s" "$dir")" || true; done
    while read -r pid; do
      wait_for 10 bash -c "! kill -0 $pid" || fail "fuse-overlayfs $pid did not exit"
    done <"$T/fovl.pids"
  done
done

python3 - "$T/json" "$N_MOUNTS" "${SYSTEMS[@]}" <<'PY' | tee ${out_file:+"$out_file"}
import json, os, platform, sys
d, n, systems = sys.argv[1], sys.argv[2], sys.argv[3:]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
print(f"# cairnfs mount benchmark — {platform.node()}: {os.cpu_count()} cpus ({cpu}), "
      f"kernel {platform.release()}")
hdr = f"{'row':44} " + " ".join(f"{s:>18}" for s in systems) + " " + " ".join(
    f"{s + '/f-ovl':>25}" for s in systems if s.startswith("cairn"))
print(hdr)
print("-" * len(hdr))
def line(label, vals, fmt):
    cells = " ".join(f"{fmt(vals[s]):>18}" if s in vals else f"{'-':>18}" for s in systems)
    ratios = " ".join(f"{vals[s][0] / vals['fuse-overlayfs'][0]:25.2f}" if s in vals else
                      f"{'-':>25}" for s in systems if s.startswith("cairn"))
    print(f"{label:44} {cells} {ratios}")
for img, name in (("debian", "Debian minbase, 3 layers"), ("100k", "100,000 files")):
    if os.path.exists(f"{d}/latency-{img}.json"):
        res = {r["command"]: (r["mean"] * 1000, (r["stddev"] or 0) * 1000)
               for r in json.load(open(f"{d}/latency-{img}.json"))["results"]}
        line(f"mount, caches dropped, ms ({name})", res, lambda v: f"{v[0]:.1f} ± {v[1]:.1f}")
        med = {r["command"]: (r["median"] * 1000,)
               for r in json.load(open(f"{d}/latency-{img}.json"))["results"]}
        line("  the same, median", med, lambda v: f"{v[0]:.1f}")
    if os.path.exists(f"{d}/umount-{img}.json"):
        rs = json.load(open(f"{d}/umount-{img}.json"))["results"]
        res = {r["command"]: (r["mean"] * 1000, (r["stddev"] or 0) * 1000) for r in rs}
        line(f"umount, caches dropped, ms ({name})", res, lambda v: f"{v[0]:.1f} ± {v[1]:.1f}")
        line("  the same, median", {r["command"]: (r["median"] * 1000,) for r in rs},
             lambda v: f"{v[0]:.1f}")
    pss, rss = {}, {}
    for s in systems:
        p = f"{d}/pss-{img}-{s}"
        if os.path.exists(p):
            a, b = open(p).read().split()
            pss[s], rss[s] = (int(a) / 1024,), (int(b) / 1024,)
    if pss:
        line(f"{n} mounts, sum of PSS, MiB ({name})", pss, lambda v: f"{v[0]:.1f}")
        line(f"one daemon's RSS, MiB ({name})", rss, lambda v: f"{v[0]:.1f}")
PY
