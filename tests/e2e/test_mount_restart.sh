#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_mount_restart.sh — a kill -9 of the serving process is invisible:
# 8 readers stream the image's files through the mount with O_DIRECT (every
# read is a FUSE request) while the server (the supervisor's child) is
# killed 20 times at random instants and a loop of `cairn rm` / `cairn gc`
# runs. Passes with 0 read errors (no ENOTCONN, no EIO: the kernel resends
# what the dead server had read), checksums equal to the image's export,
# the image never removed, the supervisor (the recorded pid, holding the
# pins) the same throughout. In a restart window held open (supervisor
# stopped), `cairn mounts` says restarting and `cairn rm` exits 4 naming
# the supervisor.
# Fails without the supervisor: the recorded daemon has no server child to
# kill, and killing the daemon itself gives ENOTCONN (test_mount_lifecycle).
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib mount
set -e

KILLS=20
READERS=8
mkdir "$T/src"
for i in 1 2 3 4 5 6 7 8; do head -c $((2 << 20)) /dev/urandom >"$T/src/f$i"; done
tar -C "$T/src" -cf "$T/data.tar" .
cairn import data:1 "$T/data.tar" >/dev/null 2>&1
mkdir "$T/export"
cairn export -q data:1 | tar -x -C "$T/export"
(cd "$T/export" && md5sum f?) >"$T/want"
$FSTREE make-layers "$T/layers"
mnt=$T/mnt
mkdir "$mnt"
cairn mount -q data:1 "$mnt"
sup=$(mount_pid "$mnt")
server=$(server_of "$sup")
[ -n "$server" ] || fail "the recorded daemon $sup has no server child"
[ "$(mount_state "$mnt")" = live ] || fail "state: $(mount_state "$mnt")"

# ---- the restart window, held open: restarting, pinned, rm names the supervisor
kill -STOP "$sup"
kill -9 "$server"
wait_for 5 pid_gone "$server" || fail "server survived kill -9"
[ "$(mount_state "$mnt")" = restarting ] || fail "state in the window: $(mount_state "$mnt")"
expect_exit 4 "cairn rm data:1" cairn rm data:1
grep -q "pid $sup" "$T/stderr" || fail "rm does not name the supervisor $sup: $(cat "$T/stderr")"
(dd if="$mnt/f1" iflag=direct bs=64k 2>"$T/window.err" | md5sum >"$T/window.sum") &
window_reader=$!
BG_PIDS+=("$window_reader")
sleep 0.3
kill -CONT "$sup"
wait "$window_reader" || fail "a read during the window failed: $(cat "$T/window.err")"
[ "$(cut -d' ' -f1 "$T/window.sum")" = "$(grep ' f1$' "$T/want" | cut -d' ' -f1)" ] ||
  fail "a read during the window read wrong bytes"
wait_for 5 mount_is_live "$mnt" || fail "not live again: $(mount_state "$mnt")"
ok "restart window: restarting, rm exits 4 naming pid $sup, a waiting reader gets its bytes"

# ---- 8 readers, 20 kills, rm/gc churn
reader() { stream_reader "$1" "$mnt" f1 f2 f3 f4 f5 f6 f7 f8; }
churn() {
  local n
  for ((n = 0; n < 10000; n++)); do
    [ -e "$T/stop" ] && break
    if cairn rm data:1 >/dev/null 2>&1; then echo "rm removed data:1" >>"$T/bad"; fi
    cairn import other:1 "$T/layers/layer1.tar" >/dev/null 2>&1 || echo "import failed" >>"$T/bad"
    cairn rm other:1 >/dev/null 2>&1 || echo "rm other failed" >>"$T/bad"
    cairn gc >/dev/null 2>&1 || echo "gc failed" >>"$T/bad"
  done
}
: >"$T/bad"
for ((r = 1; r <= READERS; r++)); do
  set -o pipefail
  reader "$r" &
  BG_PIDS+=($!)
done
churn &
BG_PIDS+=($!)
sleep 0.5
for ((k = 1; k <= KILLS; k++)); do
  sleep "0.$((RANDOM % 8 + 2))"
  s=$(server_of "$sup")
  for ((i = 0; i < 50 && ${#s} == 0; i++)); do sleep 0.1; s=$(server_of "$sup"); done
  [ -n "$s" ] || fail "no server to kill (kill $k)"
  kill -9 "$s"
done
sleep 1
touch "$T/stop"
cat "$T"/rerr.* | grep -v "records\|copied" | sort | uniq -c >&2 || true
for ((i = 0; i < READERS + 1; i++)); do wait "${BG_PIDS[-1 - i]}" || true; done
[ ! -s "$T/bad" ] || fail "$(sort "$T/bad" | uniq -c | head)"
! grep -qi "not connected\|error" "$T"/rerr.* || fail "read errors: $(grep -hi "not connected\|error" "$T"/rerr.* | sort | uniq -c | head)"
reads=$(cat "$T"/reads.* | wc -l)
[ "$reads" -ge $((READERS * 8)) ] || fail "only $reads files read"
[ "$(mount_pid "$mnt")" = "$sup" ] || fail "the supervisor changed: $(cairn mounts --json)"
cairn images --json | jq -e '.[] | select(.names | index("localhost/data:1"))' >/dev/null ||
  fail "data:1 was removed"
"$CAIRN_BIN/cairn-pin" --store "$STORE" ls --json | jq -e --argjson p "$sup" \
  '[.[] | select(.pid == $p)] | length > 0' >/dev/null || fail "the supervisor holds no pin"
ok "$KILLS kills of the server under $READERS readers ($reads files read): 0 errors, same bytes, image kept"

cairn umount "$mnt" >/dev/null
wait_for 5 pid_gone "$sup" || fail "the supervisor did not exit after umount"
[ "$(cairn mounts --json | jq length)" = 0 ] || fail "record left"
ok "umount ends the supervisor and its server"
