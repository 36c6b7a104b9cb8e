# SPDX-License-Identifier: Apache-2.0
# mount.sh — test-lib.sh's helpers for cairnfs mounts (`use_lib mount`).
#
# Gives: cairn and cairn_pin, which run the built binaries on $STORE (with
# --store: CAIRN_STORE is unset, as a user's shell would have it), FSTREE
# (tests/helpers/fstree.py), the mount queries (mount_pid, mount_state,
# image_of, server_of, ...), readers and writers on a mount, and a cached Debian
# minbase rootfs. The mounts and processes a test starts are stopped by
# test-lib.sh's cleanup stack.

unset CAIRN_STORE
FSTREE="python3 $HELPERS/fstree.py"
CACHE=${CAIRN_TEST_CACHE:-/var/cache/cairn-test}

cairn() { "$CAIRN_BIN/cairn" --store "$STORE" "$@"; }
cairn_pin() { "$CAIRN_BIN/cairn-pin" --store "$STORE" "$@"; }


# mount_pid DIR: the daemon pid `cairn mounts` records for DIR.
mount_pid() { cairn mounts --json | jq -r --arg d "$1" '.[] | select(.dir == $d) | .pid'; }
mount_state() { cairn mounts --json | jq -r --arg d "$1" '.[] | select(.dir == $d) | .state'; }
# image_of DIR: the image id `cairn mounts` records for DIR (commit moves it).
image_of() { cairn mounts --json | jq -r --arg d "$1" '.[] | select(.dir == $d) | .image'; }
# upper_ids: the ids of the store's upper layers (kept, stale or a live
# --rw mount's), sorted, one a line; upper_count: how many there are.
upper_ids() { find "$STORE/uppers" -mindepth 1 -maxdepth 1 -name '[0-9a-f]*' -printf '%f\n' 2>/dev/null | sort; }
upper_count() { upper_ids | wc -l; }
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
# read a FUSE request), round after round (10,000 at most) until $T/stop
# exists, checking each against $T/want (md5sum lines): a failed read or
# a wrong checksum is a line in $T/bad, each file read a line in
# $T/reads.R.
stream_reader() {
  local r=$1 mnt=$2 n f sum
  shift 2
  for ((n = 0; n < 10000; n++)); do
    [ -e "$T/stop" ] && break
    for f in "$@"; do
      if ! sum=$(dd if="$mnt/$f" iflag=direct bs=64k 2>>"$T/rerr.$r" | md5sum); then
        echo "reader $r: $f: read failed" >>"$T/bad"
      fi
      grep -q "^${sum%% *}  $f\$" "$T/want" || echo "reader $r: $f: checksum ${sum%% *}" >>"$T/bad"
      echo x >>"$T/reads.$r"
    done
  done
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
# file PATH with CONTENT, and mounts it --rw at $T/mnt; sets mnt and sup
# (the mount's supervisor).
rw_mount_file() {
  mkdir -p "$T/src/$(dirname "$2")"
  echo "$3" >"$T/src/$2"
  tar -C "$T/src" -cf "$T/layer.tar" .
  cairn import "$1" "$T/layer.tar" >/dev/null 2>&1
  mnt=$T/mnt
  mkdir "$mnt"
  cairn mount -q --rw "$1" "$mnt"
  sup=$(mount_pid "$mnt")
}

# rw_writers_start N: N rw_writer.py writers in $mnt/w1 .. wN, in the
# background, until $T/stop exists (manifests $T/manifest.W, errors
# in $T/errors, which starts empty).
rw_writers_start() {
  local w
  : >"$T/errors"
  for ((w = 1; w <= $1; w++)); do
    python3 "$HELPERS/rw_writer.py" "$mnt/w$w" "$T/stop" "$T/manifest.$w" \
      "$T/errors" "$w$RANDOM" &
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
