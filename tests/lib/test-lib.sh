# SPDX-License-Identifier: Apache-2.0
# test-lib.sh — the one library of the end-to-end tests (tests/README.md).
# Every tests/e2e/test_*.sh sources it first:
#
#   source "$(dirname "$0")/../lib/test-lib.sh"
#   use_lib mount registry     # only the helpers the test needs
#
# It gives the test:
#   $T          its scratch directory (mktemp -d, 0700), removed at exit
#   $STORE      a store path in it ($T/store, not created); CAIRN_STORE
#               names it (mount.sh's cairn wrapper passes --store instead)
#   $CAIRN_BIN  the build directory (cairn, cairn-pin, cairnfs), on PATH
#   $CAIRN_SRC  the source tree; $HELPERS its tests/helpers (the Python ones)
#   PRIVATE_NS  the command prefix of a mount namespace of the test's own,
#               other tests' mounts detached from it (tests/lib/private-ns)
#
# One way to fail: a failed check prints `not ok - WHAT` and the test STOPS
# there, exiting 1; every cleanup still runs (the EXIT trap below). A
# command the test did not check fails it only under `set -e` (which a
# test may turn on); the exit is then reported as `not ok - exit CODE
# after: COMMAND`. A check that fails in a subshell (`( ... )`, `$( ... )`,
# a background job) stops that subshell and fails the test at its end.
#
# One cleanup stack, run at exit whatever the exit: the processes of
# BG_PIDS (bg_start, kill_at_exit) are killed, then the on_exit commands
# run, last registered first, then every background job left is killed,
# every mount under $T is detached (topmost first) and the cairnfs daemons
# of $STORE's mounts left are killed; a sanitizer report of any process
# (ASan builds log them to $T/sanitizer.PID) fails the test; $T is removed.
set -uo pipefail

CAIRN_SRC=${CAIRN_SRC:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
CAIRN_BIN=$(cd "${CAIRN_BIN:-$CAIRN_SRC/build}" && pwd)
TESTLIB=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
HELPERS=$(cd "$TESTLIB/../helpers" && pwd)
export PATH="$CAIRN_BIN:$PATH"
T=$(mktemp -d /tmp/cairn-e2e.XXXXXX)
STORE=$T/store
export CAIRN_STORE=$STORE
# A mount namespace of the test's own, without other tests' mounts
# (tests/lib/private-ns): "${PRIVATE_NS[@]}" CMD...
PRIVATE_NS=("$TESTLIB/private-ns" "$T")
# Sanitizer reports (ASan builds) of every process, daemons included, whose
# stderr is /dev/null: any report fails the test at exit.
export ASAN_OPTIONS="log_path=$T/sanitizer:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="log_path=$T/sanitizer:print_stacktrace=1:${UBSAN_OPTIONS:-}"
PASSED=0
FAILED=0
BG_PIDS=()
_TL_CLEANUPS=()
_TL_USED=" "
_TL_MAIN=$BASHPID

# use_lib NAME...: sources tests/lib/NAME.sh once each (mount: cairnfs
# mounts, registry: a docker-registry and the pull tests' setup).
use_lib() {
  local _tl_m
  for _tl_m in "$@"; do
    [[ $_TL_USED == *" $_tl_m "* ]] && continue
    _TL_USED+="$_tl_m "
    # shellcheck source=/dev/null
    source "$TESTLIB/$_tl_m.sh" || fail "use_lib: no tests/lib/$_tl_m.sh"
  done
}

# The library's functions name their locals _tl_*: a test's globals of
# the same name stay visible to the commands they run.

# ---- reporting ---------------------------------------------------------------
ok() {
  PASSED=$((PASSED + 1))
  echo "ok - $*"
}
# fail WHAT: the check WHAT failed; the test stops here.
fail() {
  FAILED=$((FAILED + 1))
  echo "not ok - $*"
  : >>"$T/.failed"
  exit 1
}

# check NAME CMD...: the command must succeed.
check() {
  local _tl_n=$1
  shift
  if "$@"; then ok "$_tl_n"; else fail "$_tl_n"; fi
}

# check_json NAME FILTER CMD...: CMD's stdout must satisfy jq -e FILTER.
check_json() {
  local _tl_n=$1 _tl_f=$2
  shift 2
  if "$@" | jq -e "$_tl_f" >/dev/null; then ok "$_tl_n"; else fail "$_tl_n"; fi
}

# expect_exit CODE NAME CMD...: the command must exit with CODE; its
# stdout is kept in $T/stdout, its stderr in $T/stderr.
expect_exit() {
  local _tl_want=$1 _tl_n=$2 _tl_got=0
  shift 2
  "$@" >"$T/stdout" 2>"$T/stderr" || _tl_got=$?
  if [ "$_tl_got" = "$_tl_want" ]; then
    ok "$_tl_n"
  else
    fail "$_tl_n (exit $_tl_got, want $_tl_want: $(head -c 300 "$T/stderr"))"
  fi
}

# setup CMD...: a step the test cannot go on without.
setup() { "$@" || fail "setup: $*"; }

# finish: the summary line; the test's last command.
finish() {
  [ ! -e "$T/.failed" ] || [ "$FAILED" != 0 ] || FAILED=1
  echo "$PASSED passed, $FAILED failed"
  [ "$FAILED" = 0 ]
}

# ---- waiting -----------------------------------------------------------------
# wait_for SECONDS CMD...: runs CMD (its stderr dropped) every 0.05 s until
# it succeeds, SECONDS (a fraction is allowed: 0.5) at most; fails (status
# 1) when time is up. CMD is run anew each try, so its arguments are
# expanded once, before the first: to wait for something a $(...) computes,
# give a function or `sh -c '...'`, never `test -n "$(...)"`.
wait_for() {
  local _tl_tries _tl_i
  [[ $1 =~ ^([0-9]+)(\.([0-9]))?[0-9]*$ ]] || fail "wait_for: not a number of seconds: $1"
  _tl_tries=$((BASH_REMATCH[1] * 20 + ${BASH_REMATCH[3]:-0} * 2))
  shift
  for ((_tl_i = 0; _tl_i < _tl_tries; _tl_i++)); do
    if "$@" 2>/dev/null; then return 0; fi
    sleep 0.05
  done
  "$@" 2>/dev/null
}

# sqlite3 ARGS...: the CLI on a store's database, waiting (10 s at most)
# for a daemon's write to end rather than failing "database is locked":
# cairnfs, the fill and the snapshotter write their bookkeeping while a
# test reads. (A command string run by sh -c calls the CLI itself.)
sqlite3() { command sqlite3 -cmd ".timeout 10000" "$@"; }

# ---- cleanup stack -----------------------------------------------------------
# on_exit CMD: runs CMD (eval'd, output dropped) when the test ends, last
# registered first.
on_exit() { _TL_CLEANUPS=("$*" "${_TL_CLEANUPS[@]}"); }
# kill_at_exit PID...: kill -9 of each when the test ends.
kill_at_exit() { BG_PIDS+=("$@"); }
# bg_start CMD...: CMD in the background ($! is its pid), killed at exit.
bg_start() {
  "$@" &
  BG_PIDS+=($!)
}

_tl_exit() {
  local _tl_rc=$? _tl_last=$BASH_COMMAND _tl_c _tl_p _tl_m _tl_daemons=""
  [ "$BASHPID" = "$_TL_MAIN" ] || return "$_tl_rc"
  set +e
  for _tl_p in "${BG_PIDS[@]}"; do kill -9 "$_tl_p" 2>/dev/null; done
  for _tl_c in "${_TL_CLEANUPS[@]}"; do eval "$_tl_c" >/dev/null 2>&1; done
  for _tl_p in $(jobs -p); do kill -9 "$_tl_p" 2>/dev/null; done
  [ -d "$STORE" ] && _tl_daemons=$("$CAIRN_BIN/cairn" --store "$STORE" mounts --json 2>/dev/null |
    jq -r '.[].pid' 2>/dev/null)
  # Topmost first: mounts listed later sit on top of earlier ones.
  for _tl_m in $(awk -v t="$T/" 'index($5, t) == 1 { print $5 }' /proc/self/mountinfo | tac); do
    umount -l "$_tl_m" 2>/dev/null
  done
  # Daemons of those mounts exit once unmounted; kill any left over.
  for _tl_p in $_tl_daemons; do
    grep -qs cairnfs "/proc/$_tl_p/comm" && kill -9 "$_tl_p" 2>/dev/null
  done
  # A report is any line of theirs but LeakSanitizer's note that a thread
  # exiting while it stopped the process could not be read (it checks on).
  if compgen -G "$T/sanitizer.*" >/dev/null &&
    grep -hvqE '^==[0-9]+==Unable to get registers from thread [0-9]+\.$' "$T"/sanitizer.*; then
    cat "$T"/sanitizer.* >&2
    echo "not ok - sanitizer reports above"
    : >>"$T/.failed"
  fi
  if [ -e "$T/.failed" ]; then
    [ "$_tl_rc" != 0 ] && [ "$_tl_rc" != 77 ] || _tl_rc=1
  elif [ "$_tl_rc" != 0 ] && [ "$_tl_rc" != 77 ]; then
    echo "not ok - exit $_tl_rc after: $_tl_last"
  fi
  rm -rf "$T"
  exit "$_tl_rc"
}
trap _tl_exit EXIT

# ---- builds ------------------------------------------------------------------
# sanitizer_build: whether the binaries are a sanitizer build.
sanitizer_build() { [ "${CAIRN_SANITIZE:-OFF}" = ON ] || ldd "$CAIRN_BIN/cairn" | grep -q asan; }
# injector_preload: LD_PRELOAD's value for the fault injector
# (cairn-inject.so) in the built programs: in a sanitizer build, its
# runtime first (the injector is no sanitized code).
injector_preload() {
  local _tl_rt=
  sanitizer_build && _tl_rt="$(ldd "$CAIRN_BIN/cairn" | awk '/libasan/ { print $3 }') "
  echo "$_tl_rt$CAIRN_BIN/cairn-inject.so"
}

# release_build_only WHY: ends the test as skipped (ctest's 77) when the
# binaries are a sanitizer build.
release_build_only() {
  if sanitizer_build; then
    echo "skip: $*"
    exit 77
  fi
}

# ---- processes, mounts -------------------------------------------------------
is_mounted() { awk -v d="$1" '$5 == d { f = 1 } END { exit !f }' /proc/self/mountinfo; }
not_mounted() { ! is_mounted "$1"; }
# pid_gone PID: a zombie (exited, waiting for a slow reaper) counts as gone.
pid_gone() { ! awk '$3 != "Z" && $3 != "X" { f = 1 } END { exit !f }' "/proc/$1/stat" 2>/dev/null; }
# as_nobody CMD...: CMD as the user nobody, with no groups: what a local
# user can do through root's mounts, bundles and files ($T must be 0755).
as_nobody() { setpriv --reuid=nobody --regid=nogroup --clear-groups "$@"; }

# ---- images ------------------------------------------------------------------
# mktar DIR OUT [tar options]: a layer tar of DIR's contents, names relative.
mktar() {
  local d=$1 out=$2
  shift 2
  tar -C "$d" --numeric-owner "$@" -cf "$out" .
}

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
