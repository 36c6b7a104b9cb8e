# SPDX-License-Identifier: Apache-2.0
# mountlib.sh — helpers for the cairnfs end-to-end tests (sourced).
#
# Gives: $TMP (removed at exit), $STORE, cairn/cairnfs/cairn_pin wrappers,
# fail/assert helpers, bounded waits, and a cached Debian minbase rootfs.
# At exit every mount under $TMP is unmounted (lazily if stale) and every
# process started through `bg_start` is killed: nothing outlives a test.
set -euo pipefail

: "${CAIRN_BIN:?CAIRN_BIN must name the build directory}"
CAIRN_SRC=${CAIRN_SRC:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
FSTREE="python3 $CAIRN_SRC/tests/helpers/fstree.py"
CACHE=${CAIRN_TEST_CACHE:-/var/cache/cairn-test}

TMP=$(mktemp -d /tmp/cairn-e2e.XXXXXX)
STORE=$TMP/store
BG_PIDS=()
# Sanitizer reports (ASan builds) of every process, daemons included, whose
# stderr is /dev/null: any report fails the test at exit.
export ASAN_OPTIONS="log_path=$TMP/sanitizer:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="log_path=$TMP/sanitizer:print_stacktrace=1:${UBSAN_OPTIONS:-}"

cleanup() {
  local rc=$? pid m daemons=""
  for pid in "${BG_PIDS[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  [ -d "$STORE" ] && daemons=$(cairn mounts --json 2>/dev/null | jq -r '.[].pid' || true)
  # Topmost first: mounts listed later sit on top of earlier ones.
  for m in $(awk -v t="$TMP" 'index($5, t) == 1 { print $5 }' /proc/self/mountinfo | tac); do
    umount -l "$m" 2>/dev/null || true
  done
  # Daemons of those mounts exit once unmounted; kill any left over.
  for pid in $daemons; do
    grep -qs cairnfs "/proc/$pid/comm" && kill -9 "$pid" 2>/dev/null || true
  done
  if compgen -G "$TMP/sanitizer.*" >/dev/null; then
    cat "$TMP"/sanitizer.* >&2
    echo "FAIL: sanitizer reports above" >&2
    rc=1
  fi
  rm -rf "$TMP"
  exit "$rc"
}
trap cleanup EXIT

cairn() { "$CAIRN_BIN/cairn" --store "$STORE" "$@"; }
cairn_pin() { "$CAIRN_BIN/cairn-pin" --store "$STORE" "$@"; }

fail() {
  echo "FAIL: $*" >&2
  exit 1
}
pass() { echo "ok - $*"; }

# assert_status CODE COMMAND...: runs COMMAND, fails unless it exits CODE.
assert_status() {
  local want=$1 got=0
  shift
  "$@" >"$TMP/out" 2>"$TMP/err" || got=$?
  [ "$got" = "$want" ] || fail "$* exited $got, wanted $want: $(cat "$TMP/err")"
}

# wait_for TENTHS COMMAND...: polls COMMAND every 0.1 s, at most TENTHS times.
wait_for() {
  local n=$1 i
  shift
  for ((i = 0; i < n; i++)); do
    if "$@" 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  return 1
}

is_mounted() { awk -v d="$1" '$5 == d { f = 1 } END { exit !f }' /proc/self/mountinfo; }
not_mounted() { ! is_mounted "$1"; }
# A zombie (exited, waiting for a slow reaper) counts as gone.
pid_gone() { ! awk '$3 != "Z" && $3 != "X" { f = 1 } END { exit !f }' "/proc/$1/stat" 2>/dev/null; }

# mount_pid DIR: the daemon pid `cairn mounts` records for DIR.
mount_pid() { cairn mounts --json | jq -r --arg d "$1" '.[] | select(.dir == $d) | .pid'; }
mount_state() { cairn mounts --json | jq -r --arg d "$1" '.[] | select(.dir == $d) | .state'; }
# mount_is_live DIR: its record says live (for wait_for, which runs it anew each try).
mount_is_live() { [ "$(mount_state "$1")" = live ]; }
# server_of SUPERVISOR: the server a mount's supervisor runs (its child),
# or nothing while none does.
server_of() { cat "/proc/$1/task/$1/children" 2>/dev/null | tr ' ' '\n' | grep -m1 . || true; }
# mount_procs SUPERVISOR...: each supervisor, then the server it runs: a
# mount's processes, for what they cost together (bench/).
mount_procs() {
  local p
  for p in "$@"; do
    echo "$p"
    server_of "$p"
  done
}
# daemon_gone_cmd DIR: a shell command that waits (5 s at most) until no
# process whose command line ends with DIR runs: a FUSE daemon of DIR
# after fusermount3 -u, which returns before it exits (bench/).
daemon_gone_cmd() {
  echo "for i in \$(seq 500); do pgrep -f -- ' $1\$' >/dev/null || break; sleep 0.01; done"
}

# stream_reader R MNT FILE...: reads each FILE of MNT with O_DIRECT (every
# read a FUSE request), round after round (10,000 at most) until $TMP/stop
# exists, checking each against $TMP/want (md5sum lines): a failed read or
# a wrong checksum is a line in $TMP/bad, each file read a line in
# $TMP/reads.R.
stream_reader() {
  local r=$1 mnt=$2 n f sum
  shift 2
  for ((n = 0; n < 10000; n++)); do
    [ -e "$TMP/stop" ] && break
    for f in "$@"; do
      if ! sum=$(dd if="$mnt/$f" iflag=direct bs=64k 2>>"$TMP/rerr.$r" | md5sum); then
        echo "reader $r: $f: read failed" >>"$TMP/bad"
      fi
      grep -q "^${sum%% *}  $f\$" "$TMP/want" || echo "reader $r: $f: checksum ${sum%% *}" >>"$TMP/bad"
      echo x >>"$TMP/reads.$r"
    done
  done
}

bg_start() {
  "$@" &
  BG_PIDS+=($!)
}

# A Debian bookworm minbase rootfs, built once (about 2 minutes) and cached.
ensure_minbase() {
  if [ ! -d "$CACHE/minbase/usr/bin" ]; then
    mkdir -p "$CACHE"
    rm -rf "$CACHE/minbase.tmp"
    debootstrap --variant=minbase bookworm "$CACHE/minbase.tmp" >"$CACHE/debootstrap.log" 2>&1 ||
      fail "debootstrap failed: $(tail -3 "$CACHE/debootstrap.log")"
    mv "$CACHE/minbase.tmp" "$CACHE/minbase"
  fi
  echo "$CACHE/minbase"
}

# many_files_layer OUT [DIRS [FILES [CONTENTS]]]: a layer tar of DIRS
# directories (default 1,000) of FILES small files each (default 100): the
# benchmarks' large images. Every file's content differs, unless CONTENTS
# says how many distinct ones to cycle through (fewer blobs to store).
many_files_layer() {
  python3 - "$1" "${2:-1000}" "${3:-100}" "${4:-0}" <<'PY'
import io, sys, tarfile
dirs, files, contents = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
w = max(4, len(str(dirs - 1)))
with tarfile.open(sys.argv[1], "w") as tf:
    for d in range(dirs):
        ti = tarfile.TarInfo(f"d{d:0{w}}"); ti.type = tarfile.DIRTYPE; ti.mode = 0o755
        tf.addfile(ti)
        for f in range(files):
            n = d * files + f
            data = (f"{d}/{f}\n" if contents == 0 else f"{n % contents}\n").encode()
            ti = tarfile.TarInfo(f"d{d:0{w}}/f{f:03}"); ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))
PY
}

# minbase_layers OUTDIR: the minbase rootfs as three real layer tars
# (system, usr/share, etc+var), cached like the rootfs.
minbase_layers() {
  local out=$1 root
  root=$(ensure_minbase)
  if [ ! -f "$CACHE/minbase-layer3.tar" ]; then
    local t=(tar -C "$root" --format=posix --xattrs --xattrs-include='*' --numeric-owner
      --sort=name)
    "${t[@]}" -cf "$CACHE/minbase-layer1.tar.tmp" --exclude=./usr/share --exclude=./etc \
      --exclude=./var .
    "${t[@]}" -cf "$CACHE/minbase-layer2.tar.tmp" ./usr/share
    "${t[@]}" -cf "$CACHE/minbase-layer3.tar.tmp" ./etc ./var
    for i in 1 2 3; do mv "$CACHE/minbase-layer$i.tar.tmp" "$CACHE/minbase-layer$i.tar"; done
  fi
  mkdir -p "$out"
  for i in 1 2 3; do ln -sf "$CACHE/minbase-layer$i.tar" "$out/layer$i.tar"; done
}

# rw_mount_file IMAGE PATH CONTENT: imports IMAGE, one layer holding the
# file PATH with CONTENT, and mounts it --rw at $TMP/mnt; sets mnt and sup
# (the mount's supervisor).
rw_mount_file() {
  mkdir -p "$TMP/src/$(dirname "$2")"
  echo "$3" >"$TMP/src/$2"
  tar -C "$TMP/src" -cf "$TMP/layer.tar" .
  cairn import "$1" "$TMP/layer.tar" >/dev/null 2>&1
  mnt=$TMP/mnt
  mkdir "$mnt"
  cairn mount -q --rw "$1" "$mnt"
  sup=$(mount_pid "$mnt")
}

# rw_writers_start N: N rw_writer.py writers in $mnt/w1 .. wN, in the
# background, until $TMP/stop exists (manifests $TMP/manifest.W, errors
# in $TMP/errors, which starts empty).
rw_writers_start() {
  local w
  : >"$TMP/errors"
  for ((w = 1; w <= $1; w++)); do
    python3 "$CAIRN_SRC/tests/helpers/rw_writer.py" "$mnt/w$w" "$TMP/stop" "$TMP/manifest.$w" \
      "$TMP/errors" "$w$RANDOM" &
    BG_PIDS+=($!)
  done
}

# server_kill WHY: kill -9 of the server of the mount whose supervisor is
# $sup (waiting for one to run, 5 s at most); WHY names the kill if none.
server_kill() {
  local s i
  s=$(server_of "$sup")
  for ((i = 0; i < 50 && ${#s} == 0; i++)); do sleep 0.1; s=$(server_of "$sup"); done
  [ -n "$s" ] || fail "no server to kill ($1)"
  kill -9 "$s"
}
