#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# check-cmake.sh [ROOT] — each folder's CMakeLists.txt lists its files by
# hand, one a line, relative to the folder, sorted: exits 1, printing each
# fault, if a C source or test file of ROOT (default this checkout) is named
# in no list of its folder's CMakeLists.txt (store/, common/, fs/, tools/, snapshotter/,
# tests/: a test never run, a source never built) or a list is not sorted
# (C locale: byte order).
# It also fails if tests/e2e holds anything but tests that source
# tests/lib/test-lib.sh, and on a source file (C, shell, Python) of more
# than LIMIT lines whose opening comment (its first 40 lines) gives no
# reason, in a line "Over 1,000 lines: WHY": a long file is one a reader
# cannot hold, and most split into parts that each say what they keep
# true.
set -euo pipefail
cd "${1:-$(dirname "$0")/..}"
status=0
# listed DIR FILE...: each FILE (a path of the tree) is named, relative to
# DIR, in DIR/CMakeLists.txt.
listed() {
  local dir=$1 f
  shift
  for f in "$@"; do
    [ -e "$f" ] || continue
    awk -v f="${f#"$dir"/}" '{ for (i = 1; i <= NF; i++) if ($i == f) found = 1 } END { exit !found }' \
      "$dir/CMakeLists.txt" 2>/dev/null ||
      { echo "$f: not listed in $dir/CMakeLists.txt"; status=1; }
  done
}
listed store store/*.c store/remote/*.c
listed common common/*.c
listed fs fs/*.c
listed tools tools/*.c
listed snapshotter snapshotter/*.c
listed tests tests/unit/test_*.c tests/e2e/test_*.sh tests/fuzz/fuzz_*.c
# tests/e2e holds the tests only, each on the one library (tests/README.md):
# libraries are in tests/lib, the Python helpers in tests/helpers.
for f in tests/e2e/*; do
  [ -e "$f" ] || continue
  case $f in
  tests/e2e/test_*.sh)
    grep -q '^source "$(dirname "$0")/../lib/test-lib.sh"' "$f" ||
      { echo "$f: does not source tests/lib/test-lib.sh (tests/README.md)"; status=1; } ;;
  *) echo "$f: not a test: libraries go in tests/lib, helpers in tests/helpers"; status=1 ;;
  esac
done
# Each set(NAME ...) block's file lines (a variable, like the CLI's light
# list at the head of the full one, is not a file) in order, in every
# CMakeLists.txt.
for cm in CMakeLists.txt */CMakeLists.txt; do
  [ -e "$cm" ] || continue
  if ! LC_ALL=C awk -v file="$cm" '
    /^[[:space:]]*set\([A-Z0-9_]+$/ { name = $1; sub(/.*\(/, "", name); prev = ""; next }
    name != "" && /^[[:space:]]*\)/ { name = ""; next }
    name != "" && $1 ~ /^[a-z][A-Za-z0-9_.\/-]*$/ {
      if (prev != "" && $1 < prev) {
        printf "%s:%d: %s is not sorted: %s after %s\n", file, NR, name, $1, prev
        bad = 1
      }
      prev = $1
    }
    END { exit bad }' "$cm"; then
    status=1
  fi
done

LIMIT=1000
while IFS= read -r -d '' f; do
  n=$(wc -l <"$f")
  ((n > LIMIT)) || continue
  head -n 40 "$f" | grep -qi 'Over 1,000 lines: [^[:space:]]' && continue
  echo "$f: $n lines, over $LIMIT, and its opening comment gives no reason (\"Over 1,000 lines: WHY\")"
  status=1
done < <(find include store common fs tools snapshotter tests scripts bench -type f \
  \( -name '*.[ch]' -o -name '*.sh' -o -name '*.py' \) -print0 2>/dev/null | sort -z)
exit $status
