#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# benchlib.sh — what the benchmarks share. Sourced; interleaved needs
# tests/lib/test-lib.sh sourced before it (its $T), the rest nothing.

BENCHLIB_SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# The command prefix of a mount namespace of its own (propagation private)
# without the tests' mounts (tests/lib/private-ns): a plain `unshare -m`
# copies every mount there is, and would hold a test's cairnfs mount for
# as long as the bench's command runs, which makes that test's `cairn
# umount` exit 4, "still in use". "${BENCH_NS[@]}" CMD...
BENCH_NS=("$BENCHLIB_SRC/tests/lib/private-ns" "")

# crun_run ROOT BUNDLE NAME [PREFIX...]: `crun run` of BUNDLE as NAME (its
# state under ROOT) in a mount namespace of its own (BENCH_NS) without the
# cgroup2 mount (crun 1.8 refuses hybrid cgroups: /work/shared/TESTING.md),
# run by PREFIX if given (`timeout 600 nice -n 5`, say).
crun_run() {
  local root=$1 bundle=$2 name=$3
  shift 3
  "$@" "${BENCH_NS[@]}" sh -c '
    umount /sys/fs/cgroup/unified 2>/dev/null
    exec crun --root "$1" --cgroup-manager=disabled run --bundle "$2" "$3"' sh \
    "$root" "$bundle" "$name"
}

# podman_storage_conf DIR PARTIAL: writes DIR/storage.conf, podman's own
# store (CONTAINERS_STORAGE_CONF) with the overlay driver (vfs does no
# partial pull), its roots DIR/pm and DIR/pm.run; its pulls of zstd:chunked
# layers partial if PARTIAL is "true".
podman_storage_conf() {
  cat >"$1/storage.conf" <<EOC
[storage]
driver = "overlay"
graphroot = "$1/pm"
runroot = "$1/pm.run"
[storage.options]
pull_options = {enable_partial_images = "$2", use_hard_links = "false", ostree_repos = ""}
EOC
}

# recorded_run CAIRN STORE IMAGE DIR CMD...: a recorded run of CMD in a
# container of IMAGE (`cairn bundle --record-access`, crun_run: the bundle
# and crun's state in DIR, crun's stderr appended to DIR/crun.log), which
# records the image's access list (waited for, 10 s at most); prints how
# many files it holds. CAIRN is the cairn binary, STORE its store.
recorded_run() {
  local cairn=$1 store=$2 image=$3 dir=$4 i
  shift 4
  "$cairn" --store "$store" bundle -q --record-access "$image" "$dir/bundle-rec" -- "$@" >/dev/null
  crun_run "$dir/crun" "$dir/bundle-rec" "bench-rec-$$" </dev/null >/dev/null 2>>"$dir/crun.log"
  "$cairn" --store "$store" bundle --rm -q "$dir/bundle-rec"
  rm -rf "$dir/crun"
  for ((i = 0; i < 100; i++)); do
    [[ $("$cairn" --store "$store" inspect -f '{{json .AccessList}}' "$image") != null ]] && break
    sleep 0.1
  done
  "$cairn" --store "$store" inspect -f '{{.AccessList.Files}}' "$image"
}

# interleaved OUT.json RUNS WARMUP NAME PREPARE COMMAND [NAME PREPARE COMMAND ...]
# Times each COMMAND RUNS times, in rounds that run every one of them once,
# in a new random order each round, after WARMUP rounds that are not
# timed. PREPARE runs before each run, untimed (dropping the caches, say;
# "" for nothing). Run one after another, as hyperfine runs its commands,
# the commands each met another spell of this VM's disk, whose cold reads
# swing by tens of percent from one minute to the next (and by 4x in one
# run of bench_fs.sh); interleaved, the drift falls on all of them alike.
# Each runs in a subshell, as under hyperfine (a `cd` stays in it), and
# what it prints goes to /dev/null; a command that fails stops the
# benchmark. Writes hyperfine's JSON shape
# (results: command, mean, stddev, median, min, max, times; seconds).
interleaved() {
  local out=$1 runs=$2 warmup=$3 r i t0 t1
  shift 3
  local -a names=() prepares=() cmds=()
  while (($# >= 3)); do
    names+=("$1") prepares+=("$2") cmds+=("$3")
    shift 3
  done
  local log
  log=$(mktemp "$T/interleaved.XXXXXX")
  for ((r = 0; r < warmup + runs; r++)); do
    for i in $(seq 0 $((${#names[@]} - 1)) | shuf); do
      (eval "${prepares[i]}")
      t0=$EPOCHREALTIME
      (eval "${cmds[i]}") >/dev/null || {
        echo "bench: ${names[i]} failed: ${cmds[i]}" >&2
        return 1
      }
      t1=$EPOCHREALTIME
      ((r < warmup)) || echo "$i $t0 $t1" >>"$log"
    done
  done
  python3 - "$out" "$log" "${names[@]}" <<'PY'
import json, statistics, sys
out, log, names = sys.argv[1], sys.argv[2], sys.argv[3:]
times = {n: [] for n in names}
for line in open(log):
    i, t0, t1 = line.split()
    times[names[int(i)]].append(float(t1) - float(t0))
json.dump({"results": [{"command": n, "mean": statistics.mean(t), "stddev": statistics.pstdev(t),
                        "median": statistics.median(t), "min": min(t), "max": max(t), "times": t}
                       for n, t in times.items()]}, open(out, "w"), indent=1)
PY
  rm -f "$log"
}
