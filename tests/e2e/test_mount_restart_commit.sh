#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_mount_restart_commit.sh — a --rw mount that cairn commit moved onto
# its new image is restarted in place when its server is killed, like any
# other: the same mount (no remount) serves the committed image and the
# writes made after the commit (in the fresh upper), a process with its cwd
# and fds inside keeps working, the mount's record and pins are the new
# image's (when commit returns, also when the server died in it), and a
# later commit, umount --keep and --resume see everything. A commit whose
# server never answers exits 1 after 10 s, making nothing.
# Fails without it: the supervisor let the mount end (stale).
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib mount
set -e

has_server() { [ -n "$(server_of "$sup")" ]; }
on_image() { [ "$(image_of "$1")" = "$2" ]; }

rw_mount_file base:1 base base
m=$mnt
mkdir "$m/dir"
echo committed >"$m/committed"
echo before >"$m/dir/held"
exec 5>>"$m/dir/held" 6<"$m/base"
# A process whose cwd is in the mount: it writes there on cue, after the
# restart, through its cwd only.
(
  cd "$m/dir"
  touch "$T/cwd-ready"
  for ((k = 0; k < 300; k++)); do [ -e "$T/cwd-go" ] && break; sleep 0.1; done
  echo "from cwd" >cwdfile && cat held >"$T/cwd-read"
) &
cwd_pid=$!
BG_PIDS+=("$cwd_pid")
wait_for 10 test -e "$T/cwd-ready" || fail "the cwd helper did not start"
id=$(cairn commit "$m" base:2)
[ "$(image_of "$m")" = "$id" ] || fail "the commit did not move the mount"
echo later >"$m/later"
echo "after commit" >&5
mkdir "$m/newdir"
echo new >"$m/newdir/f"

dev=$(stat -c %d "$m")
sup=$(mount_pid "$m")
for k in 1 2; do
  s=$(server_of "$sup")
  [ -n "$s" ] || fail "no server under the supervisor $sup"
  kill -9 "$s"
  wait_for 5 pid_gone "$s" || fail "server survived kill -9"
  wait_for 5 has_server || fail "no server restarted after kill $k"
  kill -0 "$sup" 2>/dev/null || fail "the supervisor of a moved mount ended after kill $k"
  [ "$(cat "$m/later" 2>&1)" = later ] || fail "the write after the commit, after kill $k: $(cat "$m/later" 2>&1)"
  [ "$(cat "$m/committed" 2>&1)" = committed ] || fail "the committed file after kill $k: $(cat "$m/committed" 2>&1)"
  [ "$(cat "$m/newdir/f" 2>&1)" = new ] || fail "a file made after the commit, after kill $k"
  echo "after kill $k" >&5 || fail "a write through an fd open since before the commit failed after kill $k"
done
[ "$(stat -c %d "$m")" = "$dev" ] || fail "the mount was replaced"
[ "$(mount_state "$m")" = live ] || fail "the mount is $(mount_state "$m"), not live"
[ "$(image_of "$m")" = "$id" ] || fail "the record is not on the commit $id: $(cairn mounts --json)"
[ "$(cat <&6)" = base ] || fail "a read through an fd open since before the commit"
[ "$(cat "$m/dir/held")" = "$(printf 'before\nafter commit\nafter kill 1\nafter kill 2')" ] ||
  fail "the held file: $(cat "$m/dir/held")"
touch "$T/cwd-go"
wait "$cwd_pid" || fail "a process whose cwd is in the mount failed after the restarts"
[ "$(cat "$m/dir/cwdfile")" = "from cwd" ] || fail "the file made through the old cwd"
[ "$(cat "$T/cwd-read")" = "$(printf 'before\nafter commit\nafter kill 1\nafter kill 2')" ] ||
  fail "the held file read through the old cwd: $(cat "$T/cwd-read")"
echo "after restart" >"$m/restart"
ok "a mount moved by commit is restarted in place: its views, cwd and fds work after 2 kill -9"

# The pins are the new image's: it cannot be removed, and nothing in the
# store pins the old one for the mount any more.
rc=0
cairn rm base:2 >/dev/null 2>&1 || rc=$?
[ "$rc" = 4 ] || fail "rm of the moved mount's image: exit $rc, not 4 (pinned)"
pinned=$(cairn_pin ls --json | jq -r --arg p "$sup" \
  'map(select(.pid == ($p | tonumber) and .kind == "image" and (.stale | not))) | map(.target) | join(" ")')
[ "$pinned" = "$id" ] || fail "the supervisor pins image(s) '$pinned', not the new one $id: $(cairn_pin ls)"
ok "the restarted mount pins the new image"

# A later commit sees the writes made before and after the restarts.
id3=$(cairn commit "$m" base:3)
[ "$(image_of "$m")" = "$id3" ] || fail "the second commit did not move the mount"
exec 5>&- 6<&-
cairn export base:3 >"$T/3.tar"
tar -tf "$T/3.tar" | sed 's|^\./||; s|/$||' | sort >"$T/3.list"
for f in committed later dir/held dir/cwdfile newdir/f restart; do
  grep -qx "$f" "$T/3.list" || fail "$f is not in the next commit: $(tr '\n' ' ' <"$T/3.list")"
done
[ "$(tar -xOf "$T/3.tar" ./dir/held 2>/dev/null || tar -xOf "$T/3.tar" dir/held)" = \
  "$(printf 'before\nafter commit\nafter kill 1\nafter kill 2')" ] || fail "the held file in the next commit"
echo third >"$m/third"
s=$(server_of "$sup")
kill -9 "$s"
wait_for 5 pid_gone "$s" || fail "server survived kill -9"
wait_for 5 has_server || fail "no server restarted after the second move"
[ "$(cat "$m/third" 2>&1)" = third ] || fail "a write after the second move, after a kill"
cairn mount --upgrade "$m" >/dev/null 2>"$T/stderr" || fail "upgrade of a moved mount: $(cat "$T/stderr")"
[ "$(cat "$m/third" 2>&1)" = third ] || fail "a write after the second move, after an upgrade"
ok "a second commit after the restarts holds everything; the mount restarts and upgrades after it too"

# A kill at any instant of a commit's move: the server is killed at a
# random instant while cairn commit runs (a file open for writing and a
# cwd inside, so the move copies it); the mount then serves every write,
# on the old image and upper or (once the move's write to the node table
# is made) on the new ones, and the commit's id is its record.
exec 7>>"$m/dir/held"
for k in 1 2 3 4 5 6 7 8; do
  echo "round $k" >"$m/round$k"
  echo "round $k" >&7
  cairn commit "$m" "base:r$k" >"$T/id" 2>"$T/commit.err" &
  cpid=$!
  sleep "0.0$((RANDOM % 10))$((RANDOM % 10))"
  s=$(server_of "$sup")
  [ -n "$s" ] && kill -9 "$s"
  wait "$cpid" || fail "commit $k with its server killed: $(cat "$T/commit.err")"
  [ ! -s "$T/commit.err" ] || fail "commit $k with its server killed: $(cat "$T/commit.err")"
  wait_for 5 has_server || fail "no server after the kill in commit $k"
  for ((j = 1; j <= k; j++)); do
    [ "$(cat "$m/round$j" 2>&1)" = "round $j" ] || fail "round$j after the kill in commit $k: $(cat "$m/round$j" 2>&1)"
  done
  echo "after $k" >&7 || fail "a write through a held fd after the kill in commit $k"
  # The record names the commit when it returns, also when the server died
  # in it (the next server made the move).
  on_image "$m" "$(cat "$T/id")" ||
    fail "commit $k: the mount is on $(image_of "$m"), not $(cat "$T/id") ($(cat "$T/commit.err"))"
done
exec 7>&-
[ "$(tail -n 2 "$m/dir/held")" = "$(printf 'round 8\nafter 8')" ] || fail "the held file: $(cat "$m/dir/held")"
ok "a kill of the server at a random instant of 8 commits: every write kept, the mount on the commit"

# umount --keep, then --resume: all of it again.
cairn umount --keep "$m" >/dev/null 2>"$T/stderr" || fail "umount --keep: $(cat "$T/stderr")"
cairn mount -q --rw --resume "$m" 2>"$T/stderr" || fail "resume: $(cat "$T/stderr")"
[ "$(cat "$m/third")" = third ] || fail "the write after the second move, resumed"
[ "$(cat "$m/restart")" = "after restart" ] || fail "the write after the restart, resumed"
[ "$(cat "$m/later")" = later ] || fail "the write after the first commit, resumed"
[ "$(cat "$m/round8")" = "round 8" ] || fail "the last round's write, resumed"
[ "$(image_of "$m")" = "$(cat "$T/id")" ] || fail "the resumed mount is not on the last commit: $(cairn mounts --json)"
ok "umount --keep and --resume after restarts of a moved mount keep every write"

# A server that does not come back (its supervisor stopped, the server
# killed): commit waits 10 s at most for it to pause the mount's writes
# (before it reads anything), then exits 1 with one line and makes
# nothing; the mount serves on, on its image and upper, once a server
# answers.
sup=$(mount_pid "$m")
before=$(image_of "$m")
echo pending >"$m/pending"
kill -STOP "$sup"
s=$(server_of "$sup")
kill -9 "$s"
start=$SECONDS
rc=0
cairn commit "$m" base:late >"$T/id" 2>"$T/commit.err" || rc=$?
took=$((SECONDS - start))
kill -CONT "$sup"
[ "$rc" = 1 ] || fail "commit with no server: exit $rc, not 1 ($(cat "$T/commit.err"))"
[ "$took" -le 14 ] || fail "commit with no server took $took s"
[ "$(wc -l <"$T/commit.err")" = 1 ] && grep -q "^cairn: commit: $m: its server did not answer in 10 s" "$T/commit.err" ||
  fail "commit with no server said: $(cat "$T/commit.err")"
[ ! -s "$T/id" ] || fail "commit with no server printed an id: $(cat "$T/id")"
! cairn inspect base:late >/dev/null 2>&1 || fail "commit with no server made an image"
wait_for 10 has_server || fail "no server once the supervisor went on"
[ "$(cat "$m/pending")" = pending ] || fail "the write before the commit: $(cat "$m/pending")"
[ "$(image_of "$m")" = "$before" ] || fail "the mount moved: on $(image_of "$m")"
echo "after late" >"$m/pending"
[ "$(cat "$m/pending")" = "after late" ] || fail "a write after the server came back"
cairn umount "$m" >/dev/null 2>"$T/stderr" || fail "umount: $(cat "$T/stderr")"
ok "a commit whose server does not come back exits 1 after 10 s, making nothing; the mount serves on"
