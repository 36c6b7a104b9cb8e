#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# fuzz.sh [SECONDS] [TARGET...] — builds the libFuzzer targets (clang, ASan +
# UBSan, in build-fuzz/) and runs each TARGET (NAME of tests/fuzz/fuzz_NAME.c;
# default: all) for SECONDS (default 20) on a copy of its seed corpus
# tests/fuzz/corpus/NAME/. Prints per target the inputs run and the
# crashes; exits 1 if any target crashed, leaked, hung or ran out of memory.
# As many targets run at once as there are cores.
# The copies, logs and crash inputs go to $CAIRN_FUZZ_WORK (default a new
# directory under /tmp, removed when no target failed); the source tree
# is never written to. `scripts/fuzz.sh 1800` is the long run.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-20}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in tests/fuzz/fuzz_*.c; do
    n=${f##*/fuzz_}
    targets+=("${n%.c}")
  done
fi

if [ ! -f build-fuzz/CMakeCache.txt ]; then
  CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCAIRN_FUZZ=ON \
    -DCAIRN_WERROR=ON >/dev/null
fi
if ! cmake --build build-fuzz -j"$(nproc)" --target fuzz >build-fuzz/build.log 2>&1; then
  grep -E "error|warning" build-fuzz/build.log || tail -20 build-fuzz/build.log
  echo "fuzz: building the targets failed (log: build-fuzz/build.log)"
  exit 1
fi

work=${CAIRN_FUZZ_WORK:-$(mktemp -d /tmp/cairn-fuzz.XXXXXX)}
mkdir -p "$work"
status=0
# fuzz_one T: runs target T; its lines go to $work/T/summary, and
# $work/T/failed marks a failure.
fuzz_one() {
  local t=$1 dir=$work/$1 exe=build-fuzz/fuzz_$1 rc=0 runs crashes
  mkdir -p "$dir/corpus" "$dir/crashes"
  cp -r "tests/fuzz/corpus/$t/." "$dir/corpus/"
  {
    echo "fuzz $t: $secs s, log $dir/log"
    "$exe" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$dir/crashes/" "$dir/corpus" >"$dir/log" 2>&1 || rc=$?
    runs=$(sed -n 's/^Done \([0-9]*\) runs.*/\1/p' "$dir/log" | tail -1)
    crashes=$(find "$dir/crashes" -type f | wc -l)
    echo "fuzz $t: ${runs:-?} execs, $crashes crashes, exit $rc"
    if [ "$rc" != 0 ] || [ "$crashes" != 0 ]; then
      touch "$dir/failed"
      grep -E "ERROR|SUMMARY|runtime error|Test unit written" "$dir/log" | head -20 || true
      echo "fuzz $t FAILED: log $dir/log, inputs in $dir/crashes/"
    fi
  } >"$dir/summary"
}
# Each target is one process on one core: nproc of them run at once (CI's
# 9 targets took 9 x SECONDS one after another).
ran=()
for t in "${targets[@]}"; do
  t=${t#fuzz_}
  if [ ! -x "build-fuzz/fuzz_$t" ] || [ ! -d "tests/fuzz/corpus/$t" ]; then
    echo "fuzz $t: no target build-fuzz/fuzz_$t or no corpus tests/fuzz/corpus/$t"
    status=1
    continue
  fi
  rm -f "$work/$t/failed" # a kept WORK's corpus and crashes stay, as before
  ran+=("$t")
  fuzz_one "$t" &
  while [ "$(jobs -rp | wc -l)" -ge "$(nproc)" ]; do wait -n || true; done
done
wait
for t in "${ran[@]}"; do
  cat "$work/$t/summary"
  [ ! -e "$work/$t/failed" ] || status=1
done
if [ "$status" = 0 ] && [ -z "${CAIRN_FUZZ_WORK:-}" ]; then rm -rf "$work"; fi
exit $status
