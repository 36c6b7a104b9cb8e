#!/bin/bash
# test.sh — sets up (tools/setup.sh) and runs every test twice: in the
# release build and under AddressSanitizer + UndefinedBehaviorSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
status=0
for b in build build-asan; do
  echo "== tests: $b"
  ctest --test-dir "$b" --output-on-failure --timeout 1200 --output-log "$b/ctest.log" || status=1
done
# Criterion runs each test in a child whose sanitizer report does not fail
# the test: any report in the full log fails the run.
if grep -nE "ERROR: (Leak|Address)Sanitizer|runtime error:" build-asan/ctest.log; then
  echo "sanitizer reports above (full log: build-asan/ctest.log)"
  status=1
fi
exit $status
