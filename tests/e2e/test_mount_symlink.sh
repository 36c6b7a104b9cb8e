#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_mount_symlink.sh — a mountpoint named through a symlink (as its last
# component, relative or absolute, or in a parent) is the same mountpoint
# for cairnfs, `cairn mount`, `cairn umount` and `cairn mounts`: mount and
# umount through the link exit 0 at once, the record names the real
# directory, and the daemon's pins go with the umount — also when the
# daemon died and the mount answers ENOTCONN.
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib mount
set -e

$FSTREE make-layers "$T/layers"
cairn import app:1 "$T"/layers/layer{1,2,3}.tar >/dev/null
real=$T/real
mkdir -p "$real" "$T/parent/mnt" "$T/sub"
ln -s "$real" "$T/abslink"
ln -s ../real "$T/sub/rellink"
ln -s "$T/sub/rellink" "$T/chain"
ln -s "$T/parent" "$T/plink"

# timed LIMIT ARGS...: `cairn ARGS` must exit 0 within LIMIT seconds.
timed() {
  local limit=$1 start end rc=0
  shift
  start=$(date +%s%N)
  timeout 30 "$CAIRN_BIN/cairn" --store "$STORE" "$@" >"$T/stdout" 2>"$T/stderr" || rc=$?
  end=$(date +%s%N)
  [ "$rc" = 0 ] || fail "cairn $* exited $rc: $(cat "$T/stderr")"
  (((end - start) / 1000000 < limit * 1000)) || fail "cairn $* took $(((end - start) / 1000000)) ms"
}

no_pins() { [ "$(cairn_pin ls --json | jq length)" = 0 ]; }
no_records() { [ "$(cairn mounts --json | jq length)" = 0 ]; }

# mount_and_umount NAME LINK REALDIR: through LINK both ways, nothing left.
mount_and_umount() {
  local name=$1 link=$2 dir=$3 pid
  timed 5 mount app:1 "$link"
  is_mounted "$dir" || fail "$name: $dir is not the mount point"
  [ "$(mount_state "$dir")" = live ] || fail "$name: record: $(cairn mounts --json)"
  grep -q cairntest "$link/etc/os-release" || fail "$name: content through the link"
  pid=$(mount_pid "$dir")
  expect_exit 4 "cairn mount app:1 $link" cairn mount app:1 "$link"
  grep -q "already a live cairnfs mount" "$T/stderr" || fail "$name: remount: $(cat "$T/stderr")"
  timed 5 umount "$link"
  not_mounted "$dir" || fail "$name: umount through the link left the mount"
  wait_for 5 pid_gone "$pid" || fail "$name: daemon outlived umount"
  no_pins || fail "$name: pins left: $(cairn_pin ls)"
  no_records || fail "$name: record left: $(cairn mounts --json)"
  ok "$name: mount and umount exit 0 at once, nothing left"
}

mount_and_umount "absolute symlink" "$T/abslink" "$real"
mount_and_umount "relative symlink" "$T/sub/rellink" "$real"
mount_and_umount "chain of symlinks, trailing slash" "$T/chain/" "$real"
mount_and_umount "symlinked parent" "$T/plink/mnt" "$T/parent/mnt"

# cairnfs itself (as mount -t fuse.cairnfs runs it) resolves the same way.
"$CAIRN_BIN/cairnfs" --store "$STORE" app:1 "$T/abslink" || fail "cairnfs through a link"
[ "$(mount_state "$real")" = live ] || fail "cairnfs record: $(cairn mounts --json)"
timed 5 umount "$T/abslink"
not_mounted "$real" || fail "cairnfs mount left"
wait_for 5 no_pins || fail "cairnfs pins left: $(cairn_pin ls)"
no_records || fail "cairnfs record left"
ok "cairnfs through a link, umount through the link"

# A dead daemon's mount, reached through a link (its root answers ENOTCONN).
cairn mount app:1 "$T/abslink"
pid=$(mount_pid "$real")
kill -9 "$pid"
wait_for 5 pid_gone "$pid" || fail "daemon survived kill -9"
[ "$(mount_state "$real")" = stale ] || fail "not stale: $(cairn mounts --json)"
expect_exit 4 "cairn mount app:1 $T/abslink" cairn mount app:1 "$T/abslink"
grep -q "already a stale cairnfs mount" "$T/stderr" || fail "stale remount: $(cat "$T/stderr")"
timed 5 umount "$T/abslink"
not_mounted "$real" || fail "stale mount left"
no_records || fail "stale record left"
cairn rm app:1 >/dev/null || fail "rm after umount through the link"
ok "stale mount through a link: refused remount, umount cleans"
