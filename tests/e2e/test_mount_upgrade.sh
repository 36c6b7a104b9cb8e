#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_mount_upgrade.sh — `cairn mount --upgrade DIR` (and SIGUSR1 to the
# supervisor) replaces the serving binary of a live mount by the one
# installed now, with no unmount and no failed request: 8 readers stream
# the image's files with O_DIRECT through 6 upgrades; each new server runs
# the newly installed file (its inode), the supervisor and its pins stay,
# while a loop of `cairn rm` (refused: exit 4) and `cairn gc` runs.
# Fails without --upgrade (exit 2) or without a supervisor (no server
# child, no new inode).
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib mount
set -e

READERS=8
UPGRADES=5
mkdir "$T/src" "$T/bin"
for i in 1 2 3 4; do head -c $((2 << 20)) /dev/urandom >"$T/src/f$i"; done
tar -C "$T/src" -cf "$T/data.tar" .
cairn import data:1 "$T/data.tar" >/dev/null 2>&1
(cd "$T/src" && md5sum f?) >"$T/want"
install_bin() { cp "$CAIRN_BIN/cairnfs" "$T/bin/cairnfs.new" && mv "$T/bin/cairnfs.new" "$T/bin/cairnfs"; }
install_bin
mnt=$T/mnt
mkdir "$mnt"
"$T/bin/cairnfs" --store "$STORE" data:1 "$mnt"
sup=$(mount_pid "$mnt")
server_changed() {
  local s
  s=$(server_of "$sup")
  [ -n "$s" ] && [ "$s" != "$old" ]
}
exe_ino() { stat -L -c %i "/proc/$1/exe"; }

expect_exit 3 "cairn mount --upgrade $T" cairn mount --upgrade "$T"
expect_exit 2 "cairn mount --upgrade" cairn mount --upgrade
expect_exit 2 "cairn mount --upgrade --restore $mnt" cairn mount --upgrade --restore "$mnt"
ok "--upgrade: not a mount (3), usage (2)"

reader() { stream_reader "$1" "$mnt" f1 f2 f3 f4; }
churn() {
  local n
  for ((n = 0; n < 10000; n++)); do
    [ -e "$T/stop" ] && break
    if cairn rm data:1 >/dev/null 2>&1; then echo "rm removed data:1" >>"$T/bad"; fi
    cairn gc >/dev/null 2>&1 || echo "gc failed" >>"$T/bad"
  done
}
: >"$T/bad"
for ((r = 1; r <= READERS; r++)); do
  reader "$r" &
  BG_PIDS+=($!)
done
churn &
BG_PIDS+=($!)
sleep 0.5
for ((u = 1; u <= UPGRADES + 1; u++)); do
  old=$(server_of "$sup")
  install_bin
  ino=$(stat -c %i "$T/bin/cairnfs")
  [ "$(exe_ino "$old")" != "$ino" ] || fail "the test's install did not change the inode"
  if ((u <= UPGRADES)); then
    cairn mount --upgrade "$mnt" >"$T/stdout" || fail "upgrade $u failed"
    [ "$(cat "$T/stdout")" = "$mnt" ] || fail "upgrade printed: $(cat "$T/stdout")"
  else # the signal, as the man page says
    kill -USR1 "$sup"
    wait_for 10 server_changed || fail "SIGUSR1 started no new server"
  fi
  stat -f "$mnt" >/dev/null # answered: the new server has exec'd
  new=$(server_of "$sup")
  [ -n "$new" ] && [ "$new" != "$old" ] || fail "upgrade $u: server $old -> '$new'"
  [ "$(exe_ino "$new")" = "$ino" ] || fail "upgrade $u: the new server does not run the new binary"
  sleep "0.$((RANDOM % 5 + 3))"
done
touch "$T/stop"
for ((i = 0; i < READERS + 1; i++)); do wait "${BG_PIDS[-1 - i]}" || true; done
[ ! -s "$T/bad" ] || fail "$(sort "$T/bad" | uniq -c | head)"
! grep -qi "not connected\|error" "$T"/rerr.* ||
  fail "read errors: $(grep -hi "not connected\|error" "$T"/rerr.* | sort | uniq -c | head)"
reads=$(cat "$T"/reads.* | wc -l)
[ "$(mount_pid "$mnt")" = "$sup" ] || fail "the supervisor changed"
[ "$(mount_state "$mnt")" = live ] || fail "state: $(mount_state "$mnt")"
"$CAIRN_BIN/cairn-pin" --store "$STORE" ls --json | jq -e --argjson p "$sup" \
  '[.[] | select(.pid == $p)] | length > 0' >/dev/null || fail "the supervisor holds no pin"
ok "$((UPGRADES + 1)) upgrades under $READERS readers and rm/gc ($reads files read): 0 errors, new binary each time"

 # An upgrade to a binary that cannot serve: the supervisor's own serves on.
good_ino=$(exe_ino "$sup") # the fallback: the binary the supervisor runs
printf '#!/bin/sh\nexit 1\n' >"$T/bin/cairnfs.new"
chmod +x "$T/bin/cairnfs.new"
mv "$T/bin/cairnfs.new" "$T/bin/cairnfs"
expect_exit 1 "cairn mount --upgrade $mnt" cairn mount --upgrade "$mnt"
grep -q "cannot serve; the supervisor's own cairnfs serves on" "$T/stderr" || fail "bad upgrade: $(cat "$T/stderr")"
sums=$(cd "$mnt" && md5sum f?) || fail "reads after a bad upgrade failed"
[ "$sums" = "$(cat "$T/want")" ] || fail "content after a bad upgrade"
[ "$(exe_ino "$(server_of "$sup")")" = "$good_ino" ] || fail "not the supervisor's binary serving"
ok "an upgrade to a binary that cannot serve: exit 1, the supervisor's binary serves on"

cairn umount "$mnt" >/dev/null
wait_for 5 pid_gone "$sup" || fail "the supervisor did not exit after umount"
ok "umount after upgrades ends the supervisor"
