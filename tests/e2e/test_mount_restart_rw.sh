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
source "$(dirname "$0")/mountlib.sh"

KILLS=10
UPGRADES=3
WRITERS=4
READERS=4
mkdir "$TMP/src"
for i in 1 2 3 4; do head -c $((1 << 20)) /dev/urandom >"$TMP/src/f$i"; done
mkdir "$TMP/src/lower"
echo lower >"$TMP/src/lower/file"
tar -C "$TMP/src" -cf "$TMP/data.tar" .
cairn import data:1 "$TMP/data.tar" >/dev/null 2>&1
(cd "$TMP/src" && md5sum f?) >"$TMP/want"
mnt=$TMP/mnt
mkdir "$mnt"
cairn mount -q --rw data:1 "$mnt"
sup=$(mount_pid "$mnt")
[ -n "$(server_of "$sup")" ] || fail "the recorded daemon $sup has no server child"
uppers() { find "$STORE/uppers" -mindepth 1 -maxdepth 1 -name '[0-9a-f]*' | sort; }
upper=$(uppers)
[ -n "$upper" ] || fail "no upper in the store"

# ---- the restart window, held open: the upper stays locked (gc's test
# for "owned by a live mount": gc itself would wait for the mount here, as
# any access to it does), a write waiting in it is served.
echo before >"$mnt/window"
kill -STOP "$sup"
s=$(server_of "$sup")
kill -9 "$s"
wait_for 50 pid_gone "$s" || { kill -CONT "$sup"; fail "server survived kill -9"; }
locked=yes
flock -n -x "$upper" true && locked=no
(echo during >>"$mnt/window") 2>"$TMP/window.err" &
window_writer=$!
BG_PIDS+=("$window_writer")
sleep 0.3
kill -CONT "$sup"
[ "$locked" = yes ] || fail "the upper's lock was free in the restart window"
wait "$window_writer" || fail "a write during the window failed: $(cat "$TMP/window.err")"
[ "$(cat "$mnt/window")" = "$(printf 'before\nduring')" ] || fail "window: $(cat "$mnt/window")"
cairn gc >"$TMP/out" 2>&1 || fail "gc failed: $(cat "$TMP/out")"
! grep -q upper "$TMP/out" || fail "gc removed an upper: $(cat "$TMP/out")"
pass "restart window: the upper stays locked, a write waiting in it is served, gc keeps the upper"

# A file held open for writing across the kills, by the shell: fd 7 (opened
# only now: every child of the shell inherits it and flushes it at exit).
exec 7>>"$mnt/lower/file"

: >"$TMP/bad"
rw_writers_start "$WRITERS"
for ((r = 1; r <= READERS; r++)); do
  stream_reader "$r" "$mnt" f1 f2 f3 f4 &
  BG_PIDS+=($!)
done
gc_loop() {
  local n
  for ((n = 0; n < 10000; n++)); do
    [ -e "$TMP/stop" ] && break
    cairn gc >>"$TMP/gc.out" 2>&1 || echo "gc failed" >>"$TMP/bad"
    sleep 0.05
  done
}
gc_loop &
BG_PIDS+=($!)
sleep 1
for ((k = 1; k <= KILLS; k++)); do
  sleep "0.$((RANDOM % 8 + 2))"
  server_kill "kill $k"
  echo "written $k" >&7 || echo "write through held fd 7 failed after kill $k" >>"$TMP/bad"
done
for ((u = 1; u <= UPGRADES; u++)); do
  sleep "0.$((RANDOM % 8 + 2))"
  cairn mount --upgrade "$mnt" >/dev/null || echo "upgrade $u failed" >>"$TMP/bad"
  echo "upgraded $u" >&7 || echo "write through held fd 7 failed after upgrade $u" >>"$TMP/bad"
done
sleep 1
touch "$TMP/stop"
for ((i = 0; i < WRITERS + READERS + 1; i++)); do wait "${BG_PIDS[-1 - i]}" || true; done
exec 7>&-
[ ! -s "$TMP/errors" ] || fail "writer errors: $(sort "$TMP/errors" | head -20)"
[ ! -s "$TMP/bad" ] || fail "$(sort "$TMP/bad" | uniq -c | head)"
! grep -qi "not connected\|error" "$TMP"/rerr.* || fail "read errors: $(grep -hi "not connected\|error" "$TMP"/rerr.* | sort | uniq -c | head)"
! grep -q "upper" "$TMP/gc.out" || fail "gc reclaimed an upper: $(grep upper "$TMP/gc.out")"
[ "$(uppers)" = "$upper" ] || fail "the upper changed: $(uppers)"
[ "$(mount_pid "$mnt")" = "$sup" ] || fail "the supervisor changed: $(cairn mounts --json)"
[ "$(mount_state "$mnt")" = live ] || fail "state: $(mount_state "$mnt")"

# The tree each writer has equals its manifest.
check_tree() { python3 "$(dirname "$0")/rw_writer.py" --check "$1" "$2"; } # DIR MANIFEST
ops=0
for ((w = 1; w <= WRITERS; w++)); do
  check_tree "$mnt/w$w" "$TMP/manifest.$w" || fail "writer $w's tree"
  ops=$((ops + $(jq .ops "$TMP/manifest.$w")))
done
[ "$ops" -ge $((WRITERS * 50)) ] || fail "only $ops operations done"
want_lower=$(printf 'lower\n'; for ((k = 1; k <= KILLS; k++)); do echo "written $k"; done
  for ((u = 1; u <= UPGRADES; u++)); do echo "upgraded $u"; done)
[ "$(cat "$mnt/lower/file")" = "$want_lower" ] || fail "lower/file: $(cat "$mnt/lower/file")"
pass "$KILLS kills and $UPGRADES upgrades under $WRITERS writers ($ops operations) and $READERS readers: 0 errors, trees as written, held fds write on, upper kept by gc"

# Everything was in the upper: it survives umount --keep and a resume.
cairn umount --keep "$mnt" >/dev/null
wait_for 50 pid_gone "$sup" || fail "the supervisor did not exit after umount"
cairn mount -q --rw --resume "$mnt" 2>"$TMP/err" || fail "resume: $(cat "$TMP/err")"
for ((w = 1; w <= WRITERS; w++)); do
  check_tree "$mnt/w$w" "$TMP/manifest.$w" || fail "writer $w's tree after resume"
done
[ "$(cat "$mnt/lower/file")" = "$want_lower" ] || fail "lower/file after resume"
cairn umount "$mnt" >/dev/null
pass "the upper as written after umount --keep and --resume"
