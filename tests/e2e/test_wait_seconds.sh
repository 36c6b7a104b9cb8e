#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_wait_seconds.sh — the seconds of `cairn rm --wait=S` and `cairn-pin
# wait --timeout S`: a value that is not a number of seconds (nan, negative,
# "1e", "", trailing text) is a usage error (exit 2) whose first line names
# the option, and a huge one (1e10, 1e300, inf, beyond int64 milliseconds)
# waits that long: never a wrap to a short, negative or undefined wait.
source "$(dirname "$0")/../lib/test-lib.sh"

mkdir -p "$T/l" && echo hello >"$T/l/f"
mktar "$T/l" "$T/l.tar"
expect_exit 0 "import app:1" cairn import app:1 "$T/l.tar"

for v in nan -1 -inf 1e "" 5s " "; do
  expect_exit 2 "cairn-pin wait --timeout '$v' is a usage error" cairn-pin wait app:1 --timeout "$v"
  check "its first line names --timeout '$v'" \
    sh -c "head -1 '$T/stderr' | grep -qF -- '--timeout $v: not a number of seconds'"
  expect_exit 2 "cairn rm --wait='$v' is a usage error" cairn rm --wait="$v" no-such:1
  check "its first line names --wait='$v'" \
    sh -c "head -1 '$T/stderr' | grep -qF -- '--wait=$v: not a number of seconds'"
done

# Held: huge waits keep waiting (still running after a second), short ones
# time out as asked.
cairn-pin hold app:1 -- sleep 60 &
holder=$!
on_exit "kill -9 $holder"
wait_for 5 pgrep -P "$holder" sleep
sleeper=$(pgrep -P "$holder" sleep)
on_exit "kill -9 $sleeper"
for v in 2147483.648 4294967.296 1e10 9223372036854775.807 1e300 1e400 inf; do
  expect_exit 124 "cairn-pin wait --timeout $v still waits after 1 s" \
    timeout 1 cairn-pin wait app:1 --timeout "$v"
  expect_exit 124 "cairn rm --wait=$v still waits after 1 s" timeout 1 cairn rm --wait="$v" app:1
done
start=$(date +%s%N)
expect_exit 4 "cairn-pin wait --timeout 0.3 times out" cairn-pin wait app:1 --timeout 0.3
expect_exit 4 "cairn rm --wait=0.3 times out" cairn rm --wait=0.3 app:1
elapsed=$((($(date +%s%N) - start) / 1000000))
check "both waited about 0.3 s each ($elapsed ms)" [ "$elapsed" -ge 600 -a "$elapsed" -lt 5000 ]
expect_exit 4 "cairn rm --wait=0 gives up at once" cairn rm --wait=0 app:1
check "and names the holder" grep -q "is pinned by pid $holder (cairn-pin)" "$T/stderr"
kill -9 "$sleeper" "$holder"
wait "$holder" 2>/dev/null
expect_exit 0 "cairn rm --wait=1e300 returns once the hold is gone" timeout 10 cairn rm --wait=1e300 app:1
finish
