#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_umount_churn.sh — `cairn umount DIR && cairn rm IMAGE` succeeds
# every time nothing else uses the mount, however slow the daemon's own
# bookkeeping: the daemon lets go of its pins as soon as the kernel ends
# its session, and umount waits for that, not for the daemon's exit (which
# waits for SQLite's write lock to forget its record). First with the
# write lock held for 5 s by another process. Then a mount recording
# itself (it holds STORE/mounting.lock shared and waits for the write
# lock; python stands in for it, to order the two) and an rm must not wait
# for each other: rm, holding the write lock, used to wait up to 5 s for
# mounting.lock (cn_mounts_settle) while the mount waited for rm, so that
# under a churn a umount found no record (it waits 5 s at most for one),
# did not wait for the daemon, and the rm after it found the image pinned
# ("pinned by pid N (cairnfs)" or "by another process"). Last the churn:
# 4 workers mounting, reading, unmounting and removing while 2 others
# import and gc, CAIRN_CHURN_ROUNDS rounds each (8 by default, 4 in a
# sanitizer build), bounded by CHURN_LIMIT seconds. Fails without the fix
# (store/mount.c: no settle inside a transaction): rm takes 15 s in the
# second part, and the churn's rm fails now and then (2 runs in 4).
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib mount
set -e

# About 15 s of churn on 2 loaded cores (release; ASan: 4 rounds, 30 s)
ROUNDS=8
ldd "$CAIRN_BIN/cairn" | grep -q asan && ROUNDS=4
ROUNDS=${CAIRN_CHURN_ROUNDS:-$ROUNDS}
CHURN_LIMIT=100 # seconds: the churn fails if it takes longer
layer() { # layer NAME: a small tar of its own
  mkdir -p "$T/src/$1"
  echo "$1" >"$T/src/$1/file"
  tar -C "$T/src/$1" -cf "$T/$1.tar" file
}

layer base
cairn import app:1 "$T/base.tar" >/dev/null 2>&1
mkdir "$T/m"
cairn mount -q app:1 "$T/m"
python3 -c "
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute('BEGIN IMMEDIATE')
open(sys.argv[2], 'w').close()
time.sleep(5)
db.execute('COMMIT')" "$STORE/meta.db" "$T/locked" &
BG_PIDS+=($!)
wait_for 5 test -e "$T/locked" || fail "the write lock was not taken"
expect_exit 0 "cairn umount $T/m" cairn umount "$T/m"
expect_exit 0 "cairn rm app:1" cairn rm app:1
ok "umount && rm succeed while another process holds SQLite's write lock for 5 s"

# A mount recording itself, and an rm (its transactions, then its sweep's)
layer other
cairn import other:1 "$T/other.tar" >/dev/null 2>&1
[ -e "$STORE/mounting.lock" ] || fail "no STORE/mounting.lock: the mount above took the slow way"
python3 -c "
import fcntl, sqlite3, sys, time
lock = open(sys.argv[1])
fcntl.flock(lock, fcntl.LOCK_SH)  # as cairn_mount_pending_begin
open(sys.argv[3], 'w').close()
time.sleep(1)  # rm holds the write lock by now
t = time.monotonic()
db = sqlite3.connect(sys.argv[2], timeout=30, isolation_level=None)
db.execute('BEGIN IMMEDIATE')  # as the record's INSERT
db.execute('COMMIT')
print('%d' % ((time.monotonic() - t) * 1000))" \
  "$STORE/mounting.lock" "$STORE/meta.db" "$T/pending" >"$T/pending.ms" &
pending=$!
BG_PIDS+=($pending)
wait_for 5 test -e "$T/pending" || fail "the pending mount did not start"
start=$(date +%s%N)
expect_exit 0 "cairn rm other:1" cairn rm other:1
took=$((($(date +%s%N) - start) / 1000000))
wait "$pending" || fail "the pending mount's write failed"
[ "$took" -lt 4000 ] || fail "rm took $took ms while a mount was recording itself"
[ "$(cat "$T/pending.ms")" -lt 3000 ] ||
  fail "the mount waited $(cat "$T/pending.ms") ms for rm to write its record"
ok "rm ($took ms) and a mount recording itself ($(cat "$T/pending.ms") ms) do not wait for each other"

worker() { # worker N: mount, read, umount && rm, ROUNDS times
  local n=$1 r dir=$T/w$1
  mkdir "$dir"
  for ((r = 0; r < ROUNDS; r++)); do
    layer "w$n-$r"
    cairn import "w$n:$r" "$T/w$n-$r.tar" >/dev/null 2>&1 || { echo "import w$n:$r failed"; return 1; }
    cairn mount -q "w$n:$r" "$dir" || { echo "mount w$n:$r failed"; return 1; }
    [ "$(cat "$dir/file")" = "w$n-$r" ] || { echo "read w$n:$r failed"; return 1; }
    cairn umount -q "$dir" 2>"$T/w$n.err" || { echo "umount w$n:$r: $(cat "$T/w$n.err")"; return 1; }
    cairn rm -q "w$n:$r" 2>"$T/w$n.err" || { echo "rm w$n:$r: $(cat "$T/w$n.err")"; return 1; }
  done
}
loader() { # loader N: import and gc, ROUNDS times
  local n=$1 r
  for ((r = 0; r < ROUNDS; r++)); do
    layer "l$n-$r"
    cairn import "l$n:$r" "$T/l$n-$r.tar" >/dev/null 2>&1 || true
    cairn gc -q >/dev/null 2>&1 || true
  done
}
pids=()
for n in 1 2 3 4; do
  worker "$n" >"$T/worker$n.log" 2>&1 &
  pids+=($!)
done
for n in 1 2; do
  loader "$n" >/dev/null 2>&1 &
  pids+=($!)
done
failed=0
for ((i = 0; i < CHURN_LIMIT * 10; i++)); do # bounded: CHURN_LIMIT s
  running=0
  for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && running=1; done
  [ "$running" = 0 ] && break
  sleep 0.1
done
for n in 1 2 3 4 5 6; do # the workers, then the loaders
  pid=${pids[$((n - 1))]}
  if kill -0 "$pid" 2>/dev/null; then
    kill -9 "$pid" 2>/dev/null || true
    echo "worker or loader $n: still running after $CHURN_LIMIT s" >&2
    failed=1
  fi
  wait "$pid" && continue
  [ "$n" -le 4 ] && failed=1 && cat "$T/worker$n.log" >&2
done
[ "$failed" = 0 ] || fail "umount && rm failed under the churn (above)"
ok "4 workers x $ROUNDS rounds of mount, read, umount && rm, with 2 importing and gc-ing: all succeed"
echo "all passed"
