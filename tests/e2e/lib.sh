# SPDX-License-Identifier: Apache-2.0
# lib.sh — helpers for end-to-end tests (sourced). Each test gets a fresh
# temporary directory $T with a store $STORE, the built binaries on PATH,
# and a cleanup trap that stops what the test started.
#   CAIRN_BIN  build directory with cairn, cairn-pin, cairnfs
#   CAIRN_SRC  source directory
set -uo pipefail

CAIRN_SRC=${CAIRN_SRC:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
CAIRN_BIN=$(cd "${CAIRN_BIN:-$CAIRN_SRC/build}" && pwd)
export PATH="$CAIRN_BIN:$PATH"
T=$(mktemp -d /tmp/cairn-e2e.XXXXXX)
STORE=$T/store
export CAIRN_STORE=$STORE
PASSED=0
FAILED=0
CLEANUPS=()

# on_exit CMD: run CMD (eval'd) when the test ends, last registered first.
on_exit() { CLEANUPS=("$*" "${CLEANUPS[@]}"); }
_e2e_exit() {
  local c
  for c in "${CLEANUPS[@]}"; do eval "$c" >/dev/null 2>&1 || true; done
  rm -rf "$T"
}
trap _e2e_exit EXIT

# sanitizer_build: whether the binaries are a sanitizer build.
sanitizer_build() { [ "${CAIRN_SANITIZE:-OFF}" = ON ] || ldd "$CAIRN_BIN/cairn" | grep -q asan; }

# release_build_only WHY: ends the test as skipped (ctest's 77) when the
# binaries are a sanitizer build.
release_build_only() {
  if sanitizer_build; then
    echo "skip: $*"
    exit 77
  fi
}

ok() { PASSED=$((PASSED + 1)); echo "ok - $*"; }
not_ok() { FAILED=$((FAILED + 1)); echo "not ok - $*"; }

# check NAME CMD...: the command must succeed.
check() { local n=$1; shift; if "$@"; then ok "$n"; else not_ok "$n"; fi; }

# check_json NAME FILTER CMD...: CMD's stdout must satisfy jq -e FILTER.
check_json() {
  local n=$1 f=$2; shift 2
  if "$@" | jq -e "$f" >/dev/null; then ok "$n"; else not_ok "$n"; fi
}

# expect_exit CODE NAME CMD...: the command must exit with CODE; its
# stderr is kept in $T/stderr.
expect_exit() {
  local want=$1 n=$2; shift 2
  "$@" >"$T/stdout" 2>"$T/stderr"
  local got=$?
  if [ "$got" = "$want" ]; then ok "$n"; else not_ok "$n (exit $got, want $want: $(head -c 300 "$T/stderr"))"; fi
}

# wait_for SECONDS CMD...: polls CMD every 0.05 s, bounded.
wait_for() {
  local limit=$1 i; shift
  for ((i = 0; i < limit * 20; i++)); do "$@" && return 0; sleep 0.05; done
  return 1
}

# mktar DIR OUT [tar options]: a layer tar of DIR's contents, names relative.
mktar() { local d=$1 out=$2; shift 2; tar -C "$d" --numeric-owner "$@" -cf "$out" .; }

# two_layers: $T/1.tar (a file "base") and $T/2.tar (a file "top").
two_layers() {
  mkdir -p "$T/l1" "$T/l2"
  echo base >"$T/l1/base"
  echo top >"$T/l2/top"
  mktar "$T/l1" "$T/1.tar"
  mktar "$T/l2" "$T/2.tar"
}

# hold_image IMAGE: `cairn-pin hold IMAGE -- sleep 60` in the background,
# killed at exit; once it holds, $holder is its pid and $sleeper its
# command's.
hold_image() {
  cairn-pin hold "$1" -- sleep 60 &
  holder=$!
  on_exit "kill -9 $holder"
  wait_for 5 pgrep -P "$holder" sleep >/dev/null
  sleeper=$(pgrep -P "$holder" sleep)
  on_exit "kill -9 $sleeper"
}

finish() {
  echo "$PASSED passed, $FAILED failed"
  [ "$FAILED" = 0 ]
}
