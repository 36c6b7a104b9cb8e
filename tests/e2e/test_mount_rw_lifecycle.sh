#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_mount_rw_lifecycle.sh — the life of a --rw mount's upper layer:
# `cairn umount` keeps it and says how much (only `--discard` drops it,
# saying so); after a commit, an upper with nothing left in it goes
# silently; `cairn mounts` lists a kept one (kept, with its size), gc
# leaves it, and `cairn mount --rw --resume DIR` serves it again with the
# same inode numbers; after kill -9 of the daemon, what was fsynced is in
# the upper, `cairn mounts` shows it stale, once, `cairn gc` never takes
# it, --resume serves it again and `cairn umount` keeps it, `--discard`
# drops it, saying so.
# Fails without keeping by default: umount dropped the changes.
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib mount
set -e

$FSTREE make-layers "$T/layers"
cairn import test:1 "$T"/layers/layer{1,2,3}.tar >/dev/null
m=$T/mnt
mkdir "$m"

# umount keeps, and says so; --discard drops, and says so.
cairn mount --rw test:1 "$m" >/dev/null
echo hello >"$m/new"
cairn umount "$m" >"$T/stdout"
grep -q "^Kept: upper [0-9a-f]\{12\} (1 entries, 6 B): cairn mount --rw --resume $m$" "$T/stdout" ||
  fail "umount said: $(cat "$T/stdout")"
[ "$(upper_count)" = 1 ] && [ "$(cairn mounts --json | jq -r '.[0].state')" = kept ] ||
  fail "umount did not keep the upper: $(cairn mounts --json)"
cairn mount --rw --resume "$m" >/dev/null
[ "$(cat "$m/new")" = hello ] || fail "the kept change is not served again"
cairn umount --discard "$m" >"$T/stdout"
grep -q "^Dropped: upper [0-9a-f]\{12\} (1 entries, 6 B)$" "$T/stdout" || fail "umount --discard said: $(cat "$T/stdout")"
[ "$(upper_count)" = 0 ] || fail "the dropped upper is still in the store"
ok "umount of a --rw mount keeps its changes, saying so; --discard drops them, saying how much"

# Nothing uncommitted (committed, or never changed): nothing kept, nothing said.
cairn mount --rw test:1 "$m" >/dev/null
echo hello >"$m/new"
cairn commit "$m" test:2 >/dev/null
cairn umount "$m" >"$T/stdout"
[ "$(cat "$T/stdout")" = "$m" ] || fail "umount after commit said: $(cat "$T/stdout")"
[ "$(upper_count)" = 0 ] && [ "$(cairn mounts --json | jq length)" = 0 ] ||
  fail "umount after commit left: $(cairn mounts --json)"
cairn mount --rw test:1 "$m" >/dev/null
cairn umount "$m" >"$T/stdout"
[ "$(cat "$T/stdout")" = "$m" ] && [ "$(upper_count)" = 0 ] || fail "umount of an unchanged mount: $(cat "$T/stdout")"
cairn rm test:2 >/dev/null
ok "umount after a commit, or of an unchanged mount, drops the empty upper silently"

# --keep, listing, gc, --resume.
cairn mount --rw test:1 "$m" >/dev/null
echo kept >"$m/new"
echo changed >>"$m/etc/config"
ino_new=$(stat -c %i "$m/new")
ino_cfg=$(stat -c %i "$m/etc/config")
cairn umount --keep "$m" >"$T/stdout"
grep -q "^Kept: upper .*cairn mount --rw --resume $m$" "$T/stdout" || fail "umount --keep said: $(cat "$T/stdout")"
cairn mounts --json >"$T/mounts"
[ "$(jq -r '.[0].state' "$T/mounts")" = kept ] && [ "$(jq -r '.[0].rw' "$T/mounts")" = true ] &&
  [ "$(jq -r '.[0].upper_bytes' "$T/mounts")" -gt 0 ] || fail "mounts: $(cat "$T/mounts")"
cairn gc >/dev/null
[ "$(upper_count)" = 1 ] || fail "gc removed a kept upper"
expect_exit 2 "cairn mount --resume $m" cairn mount --resume "$m"
cairn mount --rw --resume "$m" >/dev/null
[ "$(cat "$m/new")" = kept ] && tail -1 "$m/etc/config" | grep -q changed || fail "resumed mount lost changes"
[ "$(stat -c %i "$m/new")" = "$ino_new" ] && [ "$(stat -c %i "$m/etc/config")" = "$ino_cfg" ] ||
  fail "inode numbers changed across a remount"
[ "$(cairn mounts --json | jq -r '.[0].state')" = live ] || fail "resumed mount not live"
cairn gc >/dev/null
[ "$(upper_count)" = 1 ] && [ "$(cat "$m/new")" = kept ] || fail "gc touched a live mount's upper"
ok "umount --keep, mounts lists it, gc keeps it, mount --rw --resume serves it (same inodes)"

# kill -9 of the supervisor and its server: fsynced data survives in the
# upper; gc never takes it; mounts lists the crashed mount once; --resume
# serves it again over the dead mount; umount drops it, saying so.
python3 -c "
import os, sys
fd = os.open(sys.argv[1], os.O_CREAT | os.O_WRONLY, 0o644)
os.write(fd, b'synced\n'); os.fsync(fd); os.close(fd)" "$m/synced"
echo important >"$m/important.txt"
sync "$m/important.txt"
pid=$(mount_pid "$m")
kill -9 "$pid" $(cat "/proc/$pid/task/$pid/children" 2>/dev/null || true)
wait_for 5 pid_gone "$pid" || fail "daemon did not die"
up=$(find "$STORE/uppers" -mindepth 1 -maxdepth 1 -type d)
[ "$(cat "$up/root/synced")" = synced ] || fail "fsynced data lost by kill -9"
# A server killed with its supervisor may hold the upper's lock a moment
# longer (its exit is slow under load): a flock of the upper stands in for
# it while gc sweeps stale records. Fails without it: gc forgot the
# record, and cairn mounts listed nothing for the mount.
bg_start python3 -c "
import fcntl, os, sys, time
fcntl.flock(os.open(sys.argv[1], os.O_RDONLY), fcntl.LOCK_EX)
time.sleep(60)" "$up"
holder=$!
wait_for 5 sh -c "grep -q '^[0-9]*: FLOCK .*:$(stat -c %i "$up") ' /proc/locks" ||
  fail "the stand-in did not take the upper's lock"
cairn gc >"$T/stdout"
[ "$(cairn mounts --json | jq --arg d "$m" '[.[] | select(.dir == $d and .pid > 0)] | length')" = 1 ] ||
  fail "gc forgot a crashed mount whose server's lock was still held: $(cairn mounts)"
kill "$holder"
wait "$holder" 2>/dev/null || true
cairn gc >"$T/stdout"
! grep -q "upper" "$T/stdout" || fail "gc said: $(cat "$T/stdout")"
[ "$(upper_count)" = 1 ] && [ "$(cat "$up/root/important.txt")" = important ] ||
  fail "gc removed a crashed mount's changes"
cairn mounts --json >"$T/mounts"
[ "$(jq length "$T/mounts")" = 1 ] || fail "a crashed mount is not listed once: $(cat "$T/mounts")"
[ "$(jq -r '.[0].state' "$T/mounts")" = stale ] && [ "$(jq -r '.[0].upper' "$T/mounts")" = "$(basename "$up")" ] &&
  [ "$(jq -r '.[0].pid' "$T/mounts")" -gt 0 ] ||
  fail "mounts does not show the crashed upper: $(cat "$T/mounts")"
cairn mount --rw --resume "$m" >/dev/null
[ "$(cat "$m/important.txt")" = important ] || fail "--resume did not bring the changes back"
ok "kill -9 keeps the changes: gc leaves them, mounts lists the mount once (stale), --resume serves them"

pid=$(mount_pid "$m")
kill -9 "$pid" $(cat "/proc/$pid/task/$pid/children" 2>/dev/null || true)
wait_for 5 pid_gone "$pid" || fail "daemon did not die"
cairn gc >/dev/null
cairn umount "$m" >"$T/stdout"
grep -q "^Kept: upper [0-9a-f]\{12\} ([0-9]* entries, [0-9.]* [KMG]*i*B): cairn mount --rw --resume $m$" "$T/stdout" ||
  fail "umount of the crashed mount said: $(cat "$T/stdout")"
[ "$(upper_count)" = 1 ] && [ "$(cairn mounts --json | jq -r '.[0].state')" = kept ] && not_mounted "$m" ||
  fail "umount did not keep the crashed mount's upper: $(cairn mounts --json)"
cairn umount --discard "$m" >"$T/stdout"
grep -q "^Dropped: upper [0-9a-f]\{12\} ([0-9]* entries, [0-9.]* [KMG]*i*B)$" "$T/stdout" ||
  fail "umount --discard of the crashed mount said: $(cat "$T/stdout")"
[ "$(upper_count)" = 0 ] && [ "$(cairn mounts --json | jq length)" = 0 ] ||
  fail "umount --discard left the crashed mount: $(cairn mounts --json)"
ok "umount of a crashed --rw mount keeps its changes, --discard drops them, each saying so"
