#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_commit_freeze.sh — cairn commit of a live --rw mount loses no write
# made while it runs: from its read of the upper to the move onto the new
# image the mount's changes wait (reads go on), then land in the fresh
# upper; the committed image is the view at the freeze. commit is stopped
# between its read and its move (the injector's stop at the point "commit:
# upper read") while a writer creates, writes and closes files: three
# commits in a row, each file the writer finished is in the mount after
# (byte-exact), none in the image. A writer loop during commits in a row
# loses nothing either. commit killed -9 while frozen: the writes resume
# (one started before the kill completes), the mount stays, fsck is
# clean. The bound (60 s; CAIRNFS_TEST_FREEZE_S here): past it the writes
# go on and the mount does not move (exit 0, said), nothing lost. The
# server killed -9 while frozen: the next one goes on with the freeze and
# the move runs under it; killed with commit: the writes go on. A --rw
# mount asked for -o passthrough: a write through a handle open since
# before the freeze waits too. A second commit meanwhile exits 4; a
# commit that fails thaws at once. 100 writes of 1 MiB held by a freeze
# cost the server no copy of their data in memory (its VmRSS grows by
# less than 20 MiB, not 100), and land whole after the move.
# Fails without it: the files written in the window were in neither the
# image nor the mount after the move.
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib mount
set -e

INJECT=$CAIRN_BIN/cairn-inject.so
FULL=$CAIRN_BIN/libexec/cairn/cairn
[ -e "$INJECT" ] || fail "no injector at $INJECT"
PRELOAD=$INJECT
# A sanitizer build: its runtime first (the injector is no sanitized code).
if sanitizer_build; then PRELOAD="$(ldd "$FULL" | awk '/libasan/ { print $3 }') $INJECT"; fi

stopped() { grep -q '^State:.*(stopped)' "/proc/$1/status" 2>/dev/null; }

# commit_stopped DIR NAME: cairn commit DIR NAME in the background,
# stopped between its read of the upper and the move (cpid; its stdout in
# $T/commit.out, stderr in $T/commit.err).
commit_stopped() {
  CAIRN_INJECT_DIR="$STORE" CAIRN_INJECT_PROG=cairn CAIRN_INJECT_POINT="commit: upper read" \
    CAIRN_INJECT_MODE=stop CAIRN_INJECT_COUNT="$T/inject.count" LD_PRELOAD="$PRELOAD" \
    "$FULL" --store "$STORE" commit "$1" "$2" >"$T/commit.out" 2>"$T/commit.err" &
  cpid=$!
  BG_PIDS+=("$cpid")
  wait_for 30 stopped "$cpid" || fail "commit did not stop at its point: $(cat "$T/commit.err")"
}

# writer DIR PREFIX N: creates, writes and closes DIR/PREFIX.1..N (a line
# naming it), each recorded in $T/done.PREFIX once closed, in the
# background (wpid).
writer() {
  (
    for ((j = 1; j <= $3; j++)); do
      printf '%s %d %s\n' "$2" "$j" "$RANDOM$RANDOM" >"$1/$2.$j"
      md5sum "$1/$2.$j" >>"$T/done.$2"
    done
  ) &
  wpid=$!
  BG_PIDS+=("$wpid")
}

# check_done DIR PREFIX: every file of $T/done.PREFIX is in DIR as written.
check_done() {
  md5sum -c --quiet "$T/done.$2" >"$T/md5.err" 2>&1 ||
    fail "files the writer finished ($2) are lost or changed in the mount: $(head -3 "$T/md5.err")"
}

rw_mount_file base:1 base base
m=$mnt

# 1. commit stopped in its window, three times in a row.
prev=$(image_of "$m")
for k in 1 2 3; do
  for j in 1 2 3; do echo "before $k $j" >"$m/pre.$k.$j"; done
  $FSTREE scan "$m" >"$T/view.$k"
  commit_stopped "$m" "c:$k"
  # The read before the writer: a create the freeze holds keeps its
  # directory locked in the kernel, and once the name's 1 s entry timeout
  # has run out (a loaded machine), a lookup there waits for it too.
  [ "$(cat "$m/pre.$k.1")" = "before $k 1" ] || fail "a read during commit's freeze failed"
  writer "$m" "win$k" 5
  sleep 1
  early=0
  [ ! -e "$T/done.win$k" ] || early=$(wc -l <"$T/done.win$k")
  kill -CONT "$cpid"
  wait "$cpid" || fail "commit $k exited $?: $(cat "$T/commit.err")"
  wait_for 20 test -s "$T/done.win$k" || fail "the writer's files did not come after the move"
  wait "$wpid" || fail "the writer failed (round $k)"
  id=$(cat "$T/commit.out")
  [ "$(image_of "$m")" = "$id" ] || fail "commit $k did not move the mount: $(cat "$T/commit.err")"
  [ "$(wc -l <"$T/done.win$k")" = 5 ] || fail "the writer finished $(wc -l <"$T/done.win$k") files of 5"
  check_done "$m" "win$k"
  [ "$early" = 0 ] || fail "$early writes finished while commit was frozen (round $k)"
  cairn export "$id" >"$T/export.tar" 2>"$T/export.err"
  $FSTREE expect "$T/export.tar" >"$T/exported"
  diff -u "$T/view.$k" "$T/exported" >"$T/diff" || fail "image $k is not the view at its freeze: $(head -20 "$T/diff")"
  [ "$prev" != "$id" ] || fail "no new image"
  prev=$id
done
ok "writes during three commits wait for the move, land in the mount, the images are the views at the freeze"
for k in 1 2 3; do check_done "$m" "win$k"; done
ok "after three commits every file written in a window is in the mount"

# 2. a writer loop while commits run in a row (not stopped).
writer "$m" loop 300
for k in 4 5 6; do
  cairn commit "$m" "c:$k" >/dev/null 2>"$T/c.err" || fail "commit $k: $(cat "$T/c.err")"
done
wait_for 60 pid_gone "$wpid" || fail "the writer loop did not end"
wait "$wpid" || fail "the writer loop failed"
[ "$(wc -l <"$T/done.loop")" = 300 ] || fail "the writer loop finished $(wc -l <"$T/done.loop") of 300"
check_done "$m" loop
ok "a writer loop during three commits loses none of its 300 files"

# 3. commit killed -9 while frozen: the writes go on, nothing lost.
before=$(image_of "$m")
commit_stopped "$m" c:kill
writer "$m" killed 3
sleep 1
[ ! -s "$T/done.killed" ] || fail "a write finished while commit was frozen (before the kill)"
expect_exit 4 "a second commit while one pauses the mount exits 4" cairn commit "$m" c:second
grep -q "^cairn: commit: $m: another commit of this mount is under way$" "$T/stderr" ||
  fail "the second commit said: $(cat "$T/stderr")"
kill -9 "$cpid"
wait "$cpid" 2>/dev/null || true
wait_for 10 test -s "$T/done.killed" || fail "the writes did not resume after commit was killed"
wait "$wpid" || fail "the writer failed after the kill"
check_done "$m" killed
[ "$(image_of "$m")" = "$before" ] || fail "the killed commit moved the mount"
for k in 1 2 3; do check_done "$m" "win$k"; done
check_done "$m" loop
cairn fsck >"$T/fsck.out" 2>&1 || fail "fsck after the killed commit: $(cat "$T/fsck.out")"
ok "commit killed -9 while frozen: writes resume at once, nothing lost, fsck clean"

# 4. the bound: past it the writes go on, the mount does not move.
m2=$T/mnt2
mkdir "$m2"
CAIRNFS_TEST_FREEZE_S=3 cairn mount -q --rw base:1 "$m2"
echo kept >"$m2/kept"
before=$(image_of "$m2")
commit_stopped "$m2" c:bound
start=$(date +%s)
writer "$m2" bound 3
wait_for 20 test -s "$T/done.bound" || fail "the writes did not go on after the bound"
waited=$(($(date +%s) - start))
wait "$wpid" || fail "the writer failed after the bound"
[ "$waited" -ge 2 ] || fail "the write did not wait for the bound (${waited} s)"
kill -CONT "$cpid"
wait "$cpid" || fail "commit past the bound exited $?: $(cat "$T/commit.err")"
grep -q "^cairn: commit: $m2: the mount stays on its upper over the old image: its writes went on" \
  "$T/commit.err" || fail "commit past the bound did not say the mount stays: $(cat "$T/commit.err")"
[ "$(image_of "$m2")" = "$before" ] || fail "commit past the bound moved the mount"
id=$(cat "$T/commit.out")
cairn inspect "$id" >/dev/null || fail "commit past the bound made no image"
check_done "$m2" bound
[ "$(cat "$m2/kept")" = kept ] || fail "a file from before the commit is gone"
ok "past the bound the writes go on (after ${waited} s), the mount stays, nothing lost"

# 5. the server killed -9 while frozen: the next server goes on with the
# freeze (the writes it held wait on), and the move runs under it.
sup=$(mount_pid "$m2")
has_server() { [ -n "$(server_of "$sup")" ]; }
echo "before server" >"$m2/pre.server"
mkdir "$m2/w" # the held creates lock w, not the directory of the read below
$FSTREE scan "$m2" >"$T/view.server"
commit_stopped "$m2" c:server
writer "$m2/w" server 3
sleep 1
[ ! -s "$T/done.server" ] || fail "a write finished while commit was frozen (before the server's kill)"
s=$(server_of "$sup")
kill -9 "$s"
wait_for 5 pid_gone "$s" || fail "the server survived kill -9"
wait_for 10 has_server || fail "no server after the kill"
[ "$(cat "$m2/pre.server")" = "before server" ] || fail "a read after the server's restart, while frozen"
[ ! -s "$T/done.server" ] || fail "a write finished after the server's restart, while commit was frozen"
kill -CONT "$cpid"
wait "$cpid" || fail "commit after the server's restart exited $?: $(cat "$T/commit.err")"
[ ! -s "$T/commit.err" ] || fail "commit after the server's restart said: $(cat "$T/commit.err")"
id=$(cat "$T/commit.out")
[ "$(image_of "$m2")" = "$id" ] || fail "the mount did not move after the server's restart"
wait_for 20 test -s "$T/done.server" || fail "the writes did not go on after the move"
wait "$wpid" || fail "the writer failed after the move"
check_done "$m2" server
check_done "$m2" bound
cairn export "$id" >"$T/export.tar" 2>"$T/export.err"
$FSTREE expect "$T/export.tar" >"$T/exported"
diff -u "$T/view.server" "$T/exported" >"$T/diff" || fail "the image is not the view at the freeze: $(head -20 "$T/diff")"
ok "server killed -9 while frozen: the next server holds the writes on, the move runs, nothing lost"

# 6. both killed while frozen: the next server does not freeze for a dead
# commit (its holder is gone), the writes go on.
commit_stopped "$m2" c:both
writer "$m2" both 3
sleep 1
[ ! -s "$T/done.both" ] || fail "a write finished while commit was frozen (before both kills)"
s=$(server_of "$sup")
kill -9 "$cpid" "$s"
wait "$cpid" 2>/dev/null || true
wait_for 10 test -s "$T/done.both" || fail "the writes did not go on after commit and the server were killed"
wait "$wpid" || fail "the writer failed after both kills"
check_done "$m2" both
[ "$(image_of "$m2")" = "$id" ] || fail "the mount moved without its commit"
cairn fsck >"$T/fsck.out" 2>&1 || fail "fsck at the end: $(cat "$T/fsck.out")"
ok "commit and server killed -9 while frozen: the writes go on, nothing lost, fsck clean"

# 7. -o passthrough asked of a --rw mount (whose files the server serves,
# never passed through): a write through a handle open since before the
# freeze waits too, and lands in the fresh upper after the move.
m3=$T/mnt3
mkdir "$m3"
cairn mount -q --rw -o passthrough base:1 "$m3"
exec 8>>"$m3/held"
echo one >&8
$FSTREE scan "$m3" >"$T/view.pt"
commit_stopped "$m3" c:pt
(
  echo two >&8
  echo done >"$T/done.pt"
) &
wpid=$!
BG_PIDS+=("$wpid")
sleep 1
[ ! -e "$T/done.pt" ] || fail "a write through an open handle finished while commit was frozen"
kill -CONT "$cpid"
wait "$cpid" || fail "commit of the passthrough mount exited $?: $(cat "$T/commit.err")"
wait_for 20 test -e "$T/done.pt" || fail "the write through the open handle did not go on after the move"
wait "$wpid" || true
exec 8>&-
id=$(cat "$T/commit.out")
[ "$(image_of "$m3")" = "$id" ] || fail "the passthrough mount did not move"
[ "$(cat "$m3/held")" = "$(printf 'one\ntwo')" ] || fail "the file written through the open handle: $(cat "$m3/held")"
cairn export "$id" >"$T/export.tar" 2>"$T/export.err"
$FSTREE expect "$T/export.tar" >"$T/exported"
diff -u "$T/view.pt" "$T/exported" >"$T/diff" || fail "the image is not the view at the freeze: $(head -20 "$T/diff")"
ok "-o passthrough --rw: a write through a handle open before the freeze waits, then lands in the mount"

# 8. a commit that fails after the freeze thaws the mount at once.
rc=0
# (its first write of a blob it stages fails: after the freeze)
CAIRN_INJECT_DIR="$STORE" CAIRN_INJECT_PROG=cairn CAIRN_INJECT_PATH="$STORE/tmp/" CAIRN_INJECT_AT=1 \
  CAIRN_INJECT_MODE=fail \
  CAIRN_INJECT_COUNT="$T/inject.count" LD_PRELOAD="$PRELOAD" \
  "$FULL" --store "$STORE" commit "$m" c:fail >/dev/null 2>"$T/commit.err" || rc=$?
[ "$rc" != 0 ] || fail "the commit whose first write failed succeeded"
start=$SECONDS
echo "after fail" >"$m/after.fail"
[ $((SECONDS - start)) -le 5 ] || fail "a write after the failed commit waited $((SECONDS - start)) s"
[ "$(cat "$m/after.fail")" = "after fail" ] || fail "the write after the failed commit"
ok "a commit that fails thaws the mount: a write goes on at once (exit $rc)"

# 9. 100 writes of 1 MiB, from 100 threads on files open before the
# freeze, all held by it (the FUSE connection's count of requests waiting
# says so): the server's VmRSS grows by less than 20 MiB (it kept a copy
# of each: +100 MiB), and after the move each file holds its MiB.
conns=/sys/fs/fuse/connections
if [ ! -d "$conns/$(stat -c %d "$m")" ]; then
  mount -t fusectl none "$conns" 2>/dev/null && on_exit "umount '$conns'"
fi
waiting=$conns/$(stat -c %d "$m")/waiting
[ -r "$waiting" ] || fail "no FUSE connection's waiting count at $waiting"
s=$(server_of "$(mount_pid "$m")")
vmrss() { awk '/^VmRSS:/ { print $2 }' "/proc/$s/status"; }
python3 - "$m" 100 "$T/held.ready" "$T/held.go" >"$T/held.out" 2>&1 <<'PY' &
import os, sys, threading, time
d, n, ready, go = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
fds = [os.open(f"{d}/held.{i}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644) for i in range(n)]
open(ready, "w").close()
for _ in range(1200):  # 60 s at most
    if os.path.exists(go):
        break
    time.sleep(0.05)
def write(i):
    data = bytes([i]) * (1 << 20)
    assert os.write(fds[i], data) == len(data)
    os.close(fds[i])
ts = [threading.Thread(target=write, args=(i,)) for i in range(n)]
for t in ts:
    t.start()
for t in ts:
    t.join()
print("done")
PY
hpid=$!
BG_PIDS+=("$hpid")
wait_for 20 test -e "$T/held.ready" || fail "the writer did not open its files: $(cat "$T/held.out")"
commit_stopped "$m" c:held
before=$(vmrss)
touch "$T/held.go"
all_held() { [ "$(cat "$waiting")" -ge 100 ]; }
wait_for 30 all_held || fail "$(cat "$waiting") requests waiting, not the 100 writes"
sleep 0.5
grew=$(($(vmrss) - before))
kill -CONT "$cpid"
wait "$cpid" || fail "commit with 100 held writes exited $?: $(cat "$T/commit.err")"
wait_for 60 pid_gone "$hpid" || fail "the held writes did not finish after the move"
wait "$hpid" || fail "the writer of 100 MiB failed: $(cat "$T/held.out")"
check "100 held writes of 1 MiB grew the server's VmRSS by $grew KiB, less than 20 MiB" \
  [ "$grew" -lt 20480 ]
check "each file holds its MiB after the move" python3 -c '
import sys
for i in range(100):
    assert open(f"{sys.argv[1]}/held.{i}", "rb").read() == bytes([i]) * (1 << 20), i' "$m"
rm -f "$m"/held.*
finish
