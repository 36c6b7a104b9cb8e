#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_mount_restart_move.sh — a --rw mount's server killed inside cairn
# commit's move, after the fresh upper is made and before the move's one
# write to the node table (tests/crash/inject.c kills it at that step):
# the next server serves the old upper and image (every write kept), the
# kernel resends the commit's request to it and it makes the move, and the
# fresh upper the dead server made is dropped: `cairn mounts` lists the
# mount once and no other row, the store holds the mount's one upper.
# Fails without it: the dead server's empty fresh upper stayed, listed as a
# kept upper nobody owns.
# First, a move made by a restarted server: files of the image open since
# before the restart (not used since) and a working directory in one of
# its directories keep naming what they named (they named the new image's
# entries of the same inode numbers: another file's bytes, EIO), a cwd
# below an image directory renamed before the restart too (ESTALE: its
# path in the old tree was taken for its path in the view).
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib mount
set -e

mkdir -p "$T/tree/d/sub"
for i in 1 2 3 4 5; do echo "file$i" >"$T/tree/d/f$i"; done
echo deep >"$T/tree/d/sub/deep"
tar -C "$T/tree" -cf "$T/tree.tar" .
cairn import tree:1 "$T/tree.tar" >/dev/null 2>&1
h=$T/held
mkdir "$h"
cairn mount -q --rw tree:1 "$h"
hsup=$(mount_pid "$h")
exec 6<"$h/d/f3" 7<"$h/d/sub/deep"
(
  cd "$h/d/sub"
  touch "$T/cwd-ready"
  for ((k = 0; k < 300; k++)); do [ -e "$T/cwd-go" ] && break; sleep 0.1; done
  { cat deep; ls; } >"$T/cwd-out" 2>&1
) &
BG_PIDS+=($!)
cwd_pid=$!
wait_for 10 test -e "$T/cwd-ready" || fail "the cwd helper did not start"
s=$(server_of "$hsup")
kill -9 "$s"
wait_for 5 pid_gone "$s" || fail "server survived kill -9"
for i in 0 1 2 3 4 5 6 7 8 9; do echo "$i" >"$h/a$i"; done # the new image's numbers shift
cairn commit "$h" tree:2 >/dev/null
[ "$(cat <&6 2>&1)" = file3 ] || fail "a file open since before the restart, after the move: $(cat /proc/$$/fd/6 2>&1)"
touch "$T/cwd-go"
wait "$cwd_pid" || true
[ "$(cat "$T/cwd-out")" = "$(printf 'deep\ndeep')" ] || fail "the cwd after the move: $(cat "$T/cwd-out")"
s=$(server_of "$hsup")
kill -9 "$s"
wait_for 5 pid_gone "$s" || fail "server survived kill -9"
[ "$(cat <&7 2>&1)" = deep ] || fail "a file open since before the restart, after the move and a kill: $(cat /proc/$$/fd/7 2>&1)"
[ "$(cat "$h/d/f3" "$h/a9")" = "$(printf 'file3\n9')" ] || fail "the view after the move and a kill"
exec 6<&- 7<&-
cairn umount "$h" >/dev/null
ok "a move made by a restarted server: files open and a cwd since before the restart keep naming theirs"

# An image directory renamed before the restart and untouched since: its
# image subdirectory, a working directory since before the restart, keeps
# naming its own after a move by the restarted server (the view's path,
# d2/sub, not the old tree's, d/sub, says what it is in the new image).
r=$T/ren
mkdir "$r"
cairn mount -q --rw tree:1 "$r"
rsup=$(mount_pid "$r")
mv "$r/d" "$r/d2"
exec 9<"$r/d2/f2"
rm -f "$T/cwd-ready" "$T/cwd-go"
(
  cd "$r/d2/sub"
  touch "$T/cwd-ready"
  for ((k = 0; k < 300; k++)); do [ -e "$T/cwd-go" ] && break; sleep 0.1; done
  { cat deep; ls; } >"$T/cwd-out" 2>&1
) &
BG_PIDS+=($!)
cwd_pid=$!
wait_for 10 test -e "$T/cwd-ready" || fail "the cwd helper did not start"
s=$(server_of "$rsup")
kill -9 "$s"
wait_for 5 pid_gone "$s" || fail "server survived kill -9"
for i in 0 1 2 3 4 5 6 7 8 9; do echo "$i" >"$r/a$i"; done
cairn commit "$r" tree:3 >/dev/null
touch "$T/cwd-go"
wait "$cwd_pid" || true
[ "$(cat "$T/cwd-out")" = "$(printf 'deep\ndeep')" ] ||
  fail "a cwd below a directory renamed before the restart, after the move: $(cat "$T/cwd-out")"
[ "$(cat <&9 2>&1)" = file2 ] ||
  fail "an image file of a directory renamed before the restart, open since: $(cat /proc/$$/fd/9 2>&1)"
exec 9<&-
cairn umount "$r" >/dev/null
ok "a move made by a restarted server: a cwd and an open file below a directory renamed before the restart keep naming theirs"

if sanitizer_build; then
  echo "skip: $CAIRN_BIN is a sanitizer build (LD_PRELOAD of the injector conflicts)"
  finish
  exit
fi
rw_mount_file data:1 img lower
cairn umount "$mnt" >/dev/null
mkdir -p "$STORE/uppers"

# move_run N AT: a --rw mount at $T/mN whose servers run under the
# injector (kill at step AT of a server started by --upgrade, 0: count
# only, steps traced in $T/trace.N), written to (40 appends to one file:
# the steps before the commit), a file held open for writing on fd 5 (the
# move copies it into the fresh upper: steps after that upper is made),
# then cairn commit (its id in $T/id.N).
move_run() {
  local m=$T/m$1
  mkdir "$m"
  CAIRN_INJECT_DIR=$STORE/uppers CAIRN_INJECT_PROG=cairnfs CAIRN_INJECT_TRACE=$T/trace.$1 \
    CAIRN_INJECT_MODE=kill CAIRN_INJECT_AT=$2 CAIRN_INJECT_COUNT=$T/count \
    LD_PRELOAD=$CAIRN_BIN/cairn-inject.so cairn mount -q --rw data:1 "$m"
  cairn mount --upgrade "$m" >/dev/null # a server exec'ed: its steps counted from 1
  for ((k = 0; k < 40; k++)); do echo "$k" >>"$m/pad"; done
  exec 5>>"$m/img"
  echo held >&5
  cairn commit "$m" "data:c$1" >"$T/id.$1" 2>"$T/commit.err.$1" ||
    fail "commit $1: $(cat "$T/commit.err.$1")"
}

move_run 1 0
# The step after the server's rename of the fresh upper to its name.
made=$(grep -E " renameat $STORE/uppers/[0-9a-f]{64}\$" "$T/trace.1" | tail -n 1 | cut -d' ' -f1)
[ -n "$made" ] || fail "no fresh upper made in the trace: $(cat "$T/trace.1")"
at=$((made + 1))
grep -q "^$at ftruncate64 $STORE/uppers/.*/work/tmp\." "$T/trace.1" ||
  fail "step $at is not the move's copy into the fresh upper: $(grep "^$at " "$T/trace.1")"
exec 5>&-
cairn umount --discard "$T/m1" >/dev/null
[ -z "$(upper_ids)" ] || fail "uppers left after the first run: $(upper_ids)"

m=$T/m2
move_run 2 "$at"
sup=$(mount_pid "$m")
[ "$(image_of "$m")" = "$(cat "$T/id.2")" ] || fail "the mount is on $(image_of "$m"), not the commit"
[ ! -s "$T/commit.err.2" ] || fail "commit said: $(cat "$T/commit.err.2")"
[ "$(grep -c "renameat $STORE/uppers/[0-9a-f]\{64\}\$" "$T/trace.2")" = 3 ] ||
  fail "not 3 uppers made (the mount's, the killed move's, the resent move's): $(grep renameat "$T/trace.2")"
echo after >&5 || fail "a write through the held fd after the kill"
[ "$(cat "$m/img")" = "$(printf 'lower\nheld\nafter')" ] || fail "img: $(cat "$m/img")"
[ "$(tail -n 1 "$m/pad")" = 39 ] || fail "pad: $(tail -n 1 "$m/pad")"
ok "a server killed in a move after the fresh upper is made: the move is made by the next server, every write kept"

[ "$(upper_count)" = 1 ] || fail "not one upper in the store: $(upper_ids)"
[ "$(cairn mounts --json | jq length)" = 1 ] || fail "cairn mounts lists a row nobody owns: $(cairn mounts)"
[ "$(cairn mounts --json | jq -r '.[0].dir')" = "$m" ] || fail "cairn mounts: $(cairn mounts)"
cairn gc --dry-run >"$T/gc" 2>&1 || fail "gc --dry-run: $(cat "$T/gc")"
! grep -q upper "$T/gc" || fail "gc sees an upper: $(cat "$T/gc")"
exec 5>&-
cairn umount --discard "$m" >/dev/null
[ -z "$(upper_ids)" ] || fail "uppers left after umount: $(upper_ids)"
ok "the killed move's fresh upper is dropped: cairn mounts lists the mount once, the store holds its one upper"

# Killed the instant the fresh upper is listed (renamed to its name), the
# injector's named point: the server said which upper it makes before.
# Fails without it: it said so only after, and the upper stayed, listed.
m=$T/m3
mkdir "$m"
CAIRN_INJECT_DIR=$STORE/uppers CAIRN_INJECT_PROG=cairnfs CAIRN_INJECT_MODE=kill \
  CAIRN_INJECT_POINT="upper: moved made" CAIRN_INJECT_ONCE=$T/once.3 CAIRN_INJECT_COUNT=$T/count \
  LD_PRELOAD=$CAIRN_BIN/cairn-inject.so cairn mount -q --rw data:1 "$m"
echo three >"$m/new"
cairn commit "$m" data:c3 >"$T/id.3" 2>"$T/commit.err.3" || fail "commit 3: $(cat "$T/commit.err.3")"
[ -e "$T/once.3" ] || fail "the injector did not act at the fresh upper's making"
[ "$(cairn mounts --json | jq length)" = 1 ] || fail "cairn mounts lists a row nobody owns: $(cairn mounts)"
[ "$(upper_count)" = 1 ] || fail "not one upper in the store: $(upper_ids)"
[ "$(image_of "$m")" = "$(cat "$T/id.3")" ] || fail "the mount is on $(image_of "$m"), not the commit"
[ "$(cat "$m/new")" = three ] || fail "new: $(cat "$m/new")"
cairn umount --discard "$m" >/dev/null
[ -z "$(upper_ids)" ] || fail "uppers left after umount: $(upper_ids)"
ok "a server killed as its move's fresh upper is made: that upper is dropped, the mount listed once"
finish
