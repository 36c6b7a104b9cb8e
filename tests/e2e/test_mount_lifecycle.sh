#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_mount_lifecycle.sh — cairnfs's lifecycle under faults and by every
# way in: kill -9 leaves a stale mount that `cairn mounts` marks stale, that
# no longer blocks rm and that `cairn umount` cleans; SIGTERM and SIGINT
# unmount cleanly and release everything; errors of the daemon reach
# `cairn mount`'s caller with the contract's exit codes; `mount -t
# fuse.cairnfs` works; a busy mount is not torn down under its user, and a
# SIGTERM only detaches it: the daemon serves its user until it leaves.
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib mount
set -e

$FSTREE make-layers "$T/layers"
cairn import app:1 "$T"/layers/layer{1,2,3}.tar >/dev/null
cairn import app:2 "$T"/layers/layer{1,2}.tar >/dev/null
mnt=$T/mnt
mkdir "$mnt"

# ---- errors reach the caller
expect_exit 3 "cairn mount nosuch:1 $mnt" cairn mount nosuch:1 "$mnt"
grep -q "^cairn: mount: nosuch:1: " "$T/stderr" || fail "message: $(cat "$T/stderr")"
expect_exit 3 "cairn mount app:1 $T/nodir" cairn mount app:1 "$T/nodir"
expect_exit 2 "cairn mount app:1" cairn mount app:1
expect_exit 2 "cairn mount --resume app:1 $mnt" cairn mount --resume app:1 "$mnt"
expect_exit 3 "$CAIRN_BIN/cairnfs --store $STORE nosuch:1 $mnt" "$CAIRN_BIN/cairnfs" --store "$STORE" nosuch:1 "$mnt"
grep -q "^cairnfs: nosuch:1: " "$T/stderr" || fail "cairnfs message: $(cat "$T/stderr")"
not_mounted "$mnt" || fail "a failed mount left a mount"
[ "$(cairn mounts --json | jq length)" = 0 ] || fail "a failed mount left a record"
ok "errors: not found (3), usage (2), nothing left behind"

# ---- kill -9: stale, does not block rm, umount cleans
cairn mount app:2 "$mnt"
pid=$(mount_pid "$mnt")
kill -9 "$pid"
wait_for 5 pid_gone "$pid" || fail "daemon survived kill -9"
[ "$(mount_state "$mnt")" = stale ] || fail "not stale: $(cairn mounts --json)"
expect_exit 2 "ls $mnt" ls "$mnt"
grep -q "not connected" "$T/stderr" || fail "ls on a dead mount: $(cat "$T/stderr")"
cairn rm app:2 >/dev/null || fail "a stale mount blocked rm"
is_mounted "$mnt" || fail "rm should not have touched the mount"
expect_exit 4 "cairn mount app:1 $mnt" cairn mount app:1 "$mnt"
grep -q "cairn umount" "$T/stderr" || fail "no hint on a stale dir: $(cat "$T/stderr")"
cairn umount "$mnt"
not_mounted "$mnt" || fail "stale mount still there"
[ "$(cairn mounts --json | jq length)" = 0 ] || fail "stale record left"
cairn umount "$mnt"
ok "kill -9 → stale, rm not blocked, umount cleans, idempotent"

# kill -9 then umount first, then rm.
cairn import app:3 "$T"/layers/layer1.tar >/dev/null
cairn mount app:3 "$mnt"
pid=$(mount_pid "$mnt")
kill -9 "$pid"
wait_for 5 pid_gone "$pid" || fail "daemon survived kill -9"
cairn mounts | grep -q stale || fail "mounts table: $(cairn mounts)"
cairn umount "$mnt"
cairn rm app:3 >/dev/null
ok "kill -9 → umount → rm"

# ---- SIGTERM and SIGINT unmount cleanly and release pins and the record
for sig in TERM INT; do
  cairn mount app:1 "$mnt"
  pid=$(mount_pid "$mnt")
  kill -s "$sig" "$pid"
  wait_for 10 pid_gone "$pid" || fail "daemon ignored SIG$sig"
  not_mounted "$mnt" || fail "SIG$sig left the mount"
  [ "$(cairn mounts --json | jq length)" = 0 ] || fail "SIG$sig left the record"
  [ "$(cairn_pin ls --json | jq length)" = 0 ] || fail "SIG$sig left pins: $(cairn_pin ls --json)"
done
ok "SIGTERM and SIGINT unmount cleanly"

# ---- unmounted from outside: the daemon notices and cleans up
cairn mount app:1 "$mnt"
pid=$(mount_pid "$mnt")
fusermount3 -u "$mnt"
wait_for 10 pid_gone "$pid" || fail "daemon outlived its mount"
[ "$(cairn mounts --json | jq length)" = 0 ] || fail "record left after fusermount3 -u"
ok "fusermount3 -u: daemon exits and forgets the record"

# ---- busy: not torn down under its user, then fine
cairn mount app:1 "$mnt"
pid=$(mount_pid "$mnt")
bg_start bash -c "cd '$mnt' && exec sleep 60"
holder=${BG_PIDS[-1]}
cwd_is() { [ "$(readlink "/proc/$1/cwd")" = "$2" ]; }
wait_for 5 cwd_is "$holder" "$mnt" || fail "holder not in mount"
expect_exit 4 "cairn umount $mnt" cairn umount "$mnt"
is_mounted "$mnt" || fail "busy mount was torn down"
[ "$(mount_state "$mnt")" = live ] || fail "busy mount not live"
kill "$holder"
wait_for 5 pid_gone "$holder" || fail "holder survived"
cairn umount "$mnt"
# umount returns once the daemon lets go of its pins; it exits after its
# own bookkeeping
not_mounted "$mnt" && wait_for 10 pid_gone "$pid" || fail "umount after busy"
ok "busy mount refused (exit 4), then unmounted"

# ---- SIGTERM on a busy mount detaches the host's view; its user keeps reading
cairn mount app:1 "$mnt"
pid=$(mount_pid "$mnt")
bg_start bash -c "cd '$mnt' && exec sleep 60"
holder=${BG_PIDS[-1]}
wait_for 5 cwd_is "$holder" "$mnt" || fail "holder not in mount"
kill -TERM "$pid"
wait_for 5 not_mounted "$mnt" || fail "SIGTERM did not detach the mount"
[ "$(mount_state "$mnt")" = detached ] || fail "not detached: $(cairn mounts --json)"
grep -q cairntest "/proc/$holder/cwd/etc/os-release" || fail "the user lost its files"
[ "$(cairn_pin ls --json | jq '[.[] | select(.stale | not)] | length')" -gt 0 ] ||
  fail "a detached mount's pins went"
expect_exit 4 "cairn umount $mnt" cairn umount "$mnt"
grep -q "detached here, still in use" "$T/stderr" || fail "umount: $(cat "$T/stderr")"
pid_gone "$pid" && fail "umount stopped the daemon of a used mount"
# A new mount on the directory takes it over; the old daemon, when its
# user leaves, forgets only its own record.
cairn mount app:1 "$mnt"
new=$(mount_pid "$mnt")
[ "$new" != "$pid" ] && [ "$(mount_state "$mnt")" = live ] || fail "remount: $(cairn mounts --json)"
kill "$holder"
wait_for 5 pid_gone "$holder" || fail "holder survived"
wait_for 10 pid_gone "$pid" || fail "daemon outlived the last user of its mount"
[ "$(mount_pid "$mnt")" = "$new" ] && [ "$(mount_state "$mnt")" = live ] ||
  fail "the old daemon took the new mount's record: $(cairn mounts --json)"
cairn umount "$mnt"
[ "$(cairn mounts --json | jq length)" = 0 ] || fail "record left: $(cairn mounts --json)"
# umount returns once the daemon let go of its pins (their locks); the
# daemon then deletes their annotations, listed as stale meanwhile
[ "$(cairn_pin ls --json | jq '[.[] | select(.stale | not)] | length')" = 0 ] ||
  fail "pins held: $(cairn_pin ls)"
no_pins() { [ "$(cairn_pin ls --json | jq length)" = 0 ]; }
wait_for 10 no_pins || fail "pins left: $(cairn_pin ls)"
ok "SIGTERM detaches a busy mount, the daemon serves its user to the end"

# ---- umount of a directory that was never mounted
mkdir "$T/plain"
cairn umount "$T/plain" || fail "umount of a plain directory"
ok "umount of a directory that is not mounted: exit 0"

# ---- foreground daemon, and mount -t fuse.cairnfs (mount.fuse3 → cairnfs)
bg_start "$CAIRN_BIN/cairnfs" -f --store "$STORE" app:1 "$mnt"
fg=${BG_PIDS[-1]}
wait_for 10 is_mounted "$mnt" || fail "cairnfs -f did not mount"
cmp "$mnt/etc/os-release" <(tar --warning=no-unknown-keyword -xOf "$T/layers/layer1.tar" etc/os-release) || fail "content"
kill -INT "$fg"
wait_for 10 pid_gone "$fg" || fail "cairnfs -f ignored SIGINT"
not_mounted "$mnt" || fail "cairnfs -f left its mount"
# mount(8) runs helpers with no PATH, so `-t fuse.cairnfs` needs cairnfs
# installed; the "PROGRAM#SOURCE" form runs this build's cairnfs the same
# way (mount.fuse3 calls `PROGRAM SOURCE DIR -o OPTS`).
mount -t fuse -o "store=$STORE" "$CAIRN_BIN/cairnfs#app:1" "$mnt"
[ "$(mount_state "$mnt")" = live ] || fail "mount -t: $(cairn mounts --json)"
grep -q cairntest "$mnt/etc/os-release" || fail "mount -t: content"
cairn umount "$mnt"
not_mounted "$mnt" || fail "mount -t: umount"
ok "cairnfs -f, and mount -t fuse.cairnfs"
