#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_mount_restart_evict.sh — a writable mount's server restarted while
# the kernel forgets inodes the dead server handed out (FORGET), never
# knowing how many lookups of a restored inode the kernel holds:
# - deterministic: a directory made before a kill, held by a process's
#   cwd, gets a single FORGET after the restart (the kernel's revalidation
#   of a name the server now answers with that directory's nodeid: the
#   upper changed behind the kernel's cache, by the test); a mkdir in it
#   through the cwd must work (it answered ESTALE, 7 times in 8, before
#   the fix: the restored inode was dropped with its record on that one
#   FORGET, as mkdir in test_mount_restart_rw.sh once failed under ASan);
# - a workload: 4 writers (rw_writer.py: mkdir in directories made just
#   before, creates, renames, unlinks) while the server is killed again
#   and again, each time with the caches dropped (drop_caches) while it is
#   stopped, so that FORGETs queued for the dead server reach the new one
#   among fresh lookups of the same nodeids, and a listing runs on: no
#   error, trees as written.
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib mount
set -e

KILLS=${KILLS:-10}
WRITERS=4
rw_mount_file data:1 lower/file lower
has_server() { [ -n "$(server_of "$sup")" ]; }
kill_server() {
  server_kill "$1"
  # asked again each round (a $(...) in wait_for's arguments is expanded
  # once, before the supervisor could start the next server)
  wait_for 5 has_server || fail "no server after $1"
}

# ---- a single FORGET of a restored directory the kernel still holds
upper_root=$(echo "$STORE"/uppers/*/root)
for ((n = 0; n < 4; n++)); do
  mkdir "$mnt/d$n"
  echo x >"$mnt/x$n"
  (cd "$mnt/d$n" && exec sleep 60) &
  holder=$!
  BG_PIDS+=("$holder")
  stat "$mnt/x$n" >/dev/null # the kernel caches x$n's entry
  kill_server "try $n"
  # x$n is now d$n's directory: the kernel's revalidation of its cached
  # x$n gets d$n's nodeid, and forgets that one lookup
  rm "$upper_root/x$n"
  mv "$upper_root/d$n" "$upper_root/x$n"
  sleep 1.1 # the entry's timeout
  stat "$mnt/x$n" >/dev/null 2>&1 || true
  mkdir "/proc/$holder/cwd/sub" 2>"$T/stderr" || fail "try $n: $(cat "$T/stderr")"
  kill "$holder"
done
ok "a restored directory still held serves on after a single FORGET of it"

# ---- writers, kills, evictions
: >"$T/bad"
rw_writers_start "$WRITERS"
# lister ROUNDS: lists the mount and drops the caches, ROUNDS times.
lister() {
  local n
  for ((n = 0; n < $1; n++)); do
    find "$mnt" >/dev/null 2>>"$T/find.err" || true
    echo 2 >/proc/sys/vm/drop_caches
  done
}
sleep 0.5
for ((k = 1; k <= KILLS; k++)); do
  lister 3
  s=$(server_of "$sup")
  for ((i = 0; i < 50 && ${#s} == 0; i++)); do sleep 0.1; s=$(server_of "$sup"); done
  [ -n "$s" ] || fail "no server to kill (kill $k)"
  # Evicted while the server is stopped: the FORGETs wait in the queue
  # for the next server, behind and among the listing's lookups.
  kill -STOP "$s"
  echo 2 >/proc/sys/vm/drop_caches
  lister 1 &
  sleep 0.05
  kill -9 "$s"
  wait $!
  lister 3
  sleep "0.$((RANDOM % 3 + 1))"
done
touch "$T/stop"
for ((i = 0; i < WRITERS; i++)); do wait "${BG_PIDS[i]}" || true; done
[ ! -s "$T/errors" ] || fail "writer errors: $(sort "$T/errors" | head -20)"
! grep -q "Stale\|not connected" "$T/find.err" ||
  fail "listing errors: $(grep "Stale\|not connected" "$T/find.err" | sort | uniq -c | head)"
[ "$(mount_state "$mnt")" = live ] || fail "state: $(mount_state "$mnt")"
ops=0
for ((w = 1; w <= WRITERS; w++)); do
  python3 "$HELPERS/rw_writer.py" --check "$mnt/w$w" "$T/manifest.$w" ||
    fail "writer $w's tree"
  ops=$((ops + $(jq .ops "$T/manifest.$w")))
done
ok "$KILLS kills with inodes evicted around each, $WRITERS writers ($ops operations): no error, trees as written"
