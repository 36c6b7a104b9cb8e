#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# benchlib.sh — what the benchmarks share. Sourced, after tests/lib/test-lib.sh (its $T).

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
