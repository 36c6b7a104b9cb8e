#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_mount_restart_rw.sh — a kill -9 of a writable (--rw) mount's server
# is invisible to writers: 4 writers (rw_writer.py: create, append, fsync,
# rename, mkdir, rmdir, unlink, writes through fds held open since before
# the first kill, a directory fd listed again and again) and 4 readers of
# the image's files run while the server is killed 10 times at random
# instants, then upgraded 3 times (cairn mount --upgrade), and a loop of
# `cairn gc` runs; before that, in a restart window held open (supervisor
# stopped, server killed), the upper stays locked (what gc tests) and a
# waiting write is served. Passes with 0 errors (no ENOTCONN, no EEXIST/ENOENT
# from a replayed request), the tree equal to the writers' manifests, the
# held fds still writing after the last restart, the upper never reclaimed
# by gc, and the content still there after umount --keep and a resume.
# Fails without restarts of writable servers (before this test: the
# supervisor gave up on the first kill, every writer got ENOTCONN).
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib mount
set -e

KILLS=10
UPGRADES=3
WRITERS=4
READERS=4
mkdir "$T/src"
for i in 1 2 3 4; do head -c $((1 << 20)) /dev/urandom >"$T/src/f$i"; done
mkdir "$T/src/lower"
echo lower >"$T/src/lower/file"
tar -C "$T/src" -cf "$T/data.tar" .
cairn import data:1 "$T/data.tar" >/dev/null 2>&1
(cd "$T/src" && md5sum f?) >"$T/want"
mnt=$T/mnt
mkdir "$mnt"
cairn mount -q --rw data:1 "$mnt"
sup=$(mount_pid "$mnt")
[ -n "$(server_of "$sup")" ] || fail "the recorded daemon $sup has no server child"
upper=$STORE/uppers/$(upper_ids)
[ -n "$(upper_ids)" ] || fail "no upper in the store"

# ---- the restart window, held open: the upper stays locked (gc's test
# for "owned by a live mount": gc itself would wait for the mount here, as
# any access to it does), a write waiting in it is served.
echo before >"$mnt/window"
kill -STOP "$sup"
s=$(server_of "$sup")
kill -9 "$s"
wait_for 5 pid_gone "$s" || { kill -CONT "$sup"; fail "server survived kill -9"; }
locked=yes
flock -n -x "$upper" true && locked=no
(echo during >>"$mnt/window") 2>"$T/window.err" &
window_writer=$!
BG_PIDS+=("$window_writer")
sleep 0.3
kill -CONT "$sup"
[ "$locked" = yes ] || fail "the upper's lock was free in the restart window"
wait "$window_writer" || fail "a write during the window failed: $(cat "$T/window.err")"
[ "$(cat "$mnt/window")" = "$(printf 'before\nduring')" ] || fail "window: $(cat "$mnt/window")"
cairn gc >"$T/stdout" 2>&1 || fail "gc failed: $(cat "$T/stdout")"
! grep -q upper "$T/stdout" || fail "gc removed an upper: $(cat "$T/stdout")"
ok "restart window: the upper stays locked, a write waiting in it is served, gc keeps the upper"

# A file held open for writing across the kills, by the shell: fd 7 (opened
# only now: every child of the shell inherits it and flushes it at exit).
exec 7>>"$mnt/lower/file"

: >"$T/bad"
rw_writers_start "$WRITERS"
for ((r = 1; r <= READERS; r++)); do
  stream_reader "$r" "$mnt" f1 f2 f3 f4 &
  BG_PIDS+=($!)
done
gc_loop() {
  local n
  for ((n = 0; n < 10000; n++)); do
    [ -e "$T/stop" ] && break
    cairn gc >>"$T/gc.out" 2>&1 || echo "gc failed" >>"$T/bad"
    sleep 0.05
  done
}
gc_loop &
BG_PIDS+=($!)
sleep 1
for ((k = 1; k <= KILLS; k++)); do
  sleep "0.$((RANDOM % 8 + 2))"
  server_kill "kill $k"
  echo "written $k" >&7 || echo "write through held fd 7 failed after kill $k" >>"$T/bad"
done
for ((u = 1; u <= UPGRADES; u++)); do
  sleep "0.$((RANDOM % 8 + 2))"
  cairn mount --upgrade "$mnt" >/dev/null || echo "upgrade $u failed" >>"$T/bad"
  echo "upgraded $u" >&7 || echo "write through held fd 7 failed after upgrade $u" >>"$T/bad"
done
sleep 1
touch "$T/stop"
for ((i = 0; i < WRITERS + READERS + 1; i++)); do wait "${BG_PIDS[-1 - i]}" || true; done
exec 7>&-
[ ! -s "$T/errors" ] || fail "writer errors: $(sort "$T/errors" | head -20)"
[ ! -s "$T/bad" ] || fail "$(sort "$T/bad" | uniq -c | head)"
! grep -qi "not connected\|error" "$T"/rerr.* || fail "read errors: $(grep -hi "not connected\|error" "$T"/rerr.* | sort | uniq -c | head)"
! grep -q "upper" "$T/gc.out" || fail "gc reclaimed an upper: $(grep upper "$T/gc.out")"
[ "$STORE/uppers/$(upper_ids)" = "$upper" ] || fail "the upper changed: $(upper_ids)"
[ "$(mount_pid "$mnt")" = "$sup" ] || fail "the supervisor changed: $(cairn mounts --json)"
[ "$(mount_state "$mnt")" = live ] || fail "state: $(mount_state "$mnt")"

# The tree each writer has equals its manifest.
check_tree() { python3 "$HELPERS/rw_writer.py" --check "$1" "$2"; } # DIR MANIFEST
ops=0
for ((w = 1; w <= WRITERS; w++)); do
  check_tree "$mnt/w$w" "$T/manifest.$w" || fail "writer $w's tree"
  ops=$((ops + $(jq .ops "$T/manifest.$w")))
done
[ "$ops" -ge $((WRITERS * 50)) ] || fail "only $ops operations done"
want_lower=$(printf 'lower\n'; for ((k = 1; k <= KILLS; k++)); do echo "written $k"; done
  for ((u = 1; u <= UPGRADES; u++)); do echo "upgraded $u"; done)
[ "$(cat "$mnt/lower/file")" = "$want_lower" ] || fail "lower/file: $(cat "$mnt/lower/file")"
ok "$KILLS kills and $UPGRADES upgrades under $WRITERS writers ($ops operations) and $READERS readers: 0 errors, trees as written, held fds write on, upper kept by gc"

# Everything was in the upper: it survives umount --keep and a resume.
cairn umount --keep "$mnt" >/dev/null
wait_for 5 pid_gone "$sup" || fail "the supervisor did not exit after umount"
cairn mount -q --rw --resume "$mnt" 2>"$T/stderr" || fail "resume: $(cat "$T/stderr")"
for ((w = 1; w <= WRITERS; w++)); do
  check_tree "$mnt/w$w" "$T/manifest.$w" || fail "writer $w's tree after resume"
done
[ "$(cat "$mnt/lower/file")" = "$want_lower" ] || fail "lower/file after resume"
cairn umount "$mnt" >/dev/null
ok "the upper as written after umount --keep and --resume"
