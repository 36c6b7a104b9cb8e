#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_mount_restart_compact.sh — a --rw mount's node table (fs/nodetab.c,
# the memfd its supervisor keeps across server restarts) stays bounded
# under a churn of files created and unlinked (compacted: the records of
# the nodeids bound written again, the old ones' pages given back), and a
# server killed after compactions serves every file open since before
# them right: a file made here and held open, an image file copied up and
# held for appending, an image file held for reading, a file unlinked
# while open, a working directory made here.
# Fails without the compaction: the table held 128 bytes per cycle
# (CYCLES cycles: CYCLES * 128 bytes of the supervisor's memory).
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib mount
set -e

CYCLES=${CYCLES:-20000}
rw_mount_file data:1 img lower
# The memory the supervisor's node table holds (allocated bytes).
table_bytes() {
  local f
  for f in /proc/"$sup"/fd/*; do
    case "$(readlink "$f")" in
    /memfd:cairnfs-upper-nodes*) echo $(($(stat -L -c '%b * %B' "$f"))) && return ;;
    esac
  done
  echo none
}
[ "$(table_bytes)" != none ] || fail "no node table in the supervisor's fds: $(ls -l /proc/"$sup"/fd)"

echo made >"$mnt/made"
echo gone >"$mnt/gone"
mkdir "$mnt/wd"
echo inwd >"$mnt/wd/f"
exec 5<>"$mnt/made" 6>>"$mnt/img" 7<"$mnt/img" 8<>"$mnt/gone"
rm "$mnt/gone"
(
  cd "$mnt/wd"
  touch "$T/cwd-ready"
  for ((k = 0; k < 600; k++)); do [ -e "$T/cwd-go" ] && break; sleep 0.1; done
  { cat f; ls; } >"$T/cwd-out" 2>&1
) &
BG_PIDS+=($!)
cwd_pid=$!
wait_for 10 test -e "$T/cwd-ready" || fail "the cwd helper did not start"
before=$(table_bytes)
mkdir "$mnt/churn"
python3 "$HELPERS/churn.py" "$mnt/churn" "$CYCLES" || fail "churn"
sync
echo 2 >/proc/sys/vm/drop_caches # the kernel forgets the unlinked files it still caches
wait_for 5 sh -c "[ \$(ls $mnt/churn | wc -l) = 0 ]" || true
after=$(table_bytes)
echo "# node table: $before bytes before, $after after $CYCLES create+unlink cycles"
[ "$after" -lt $((256 * 1024)) ] ||
  fail "the node table holds $after bytes after $CYCLES cycles ($before before)"
ok "the node table stays bounded under a churn of files created and unlinked"

server_kill "after compactions"
[ "$(cat <&5)" = made ] || fail "a file made here, open since before: $(cat /proc/$$/fd/5 2>&1)"
echo more >&5 || fail "a write to a file made here, open since before"
echo appended >&6 || fail "an append to an image file, open since before"
[ "$(cat <&7)" = "$(printf 'lower\nappended')" ] || fail "an image file open for reading since before: $(cat /proc/$$/fd/7 2>&1)"
[ "$(cat <&8)" = gone ] || fail "a file unlinked while open, open since before"
echo again >&8 || fail "a write to a file unlinked while open"
touch "$T/cwd-go"
wait "$cwd_pid" || true
[ "$(cat "$T/cwd-out")" = "$(printf 'inwd\nf')" ] || fail "the cwd: $(cat "$T/cwd-out")"
[ "$(cat "$mnt/made")" = "$(printf 'made\nmore')" ] || fail "made: $(cat "$mnt/made")"
[ "$(cat "$mnt/img")" = "$(printf 'lower\nappended')" ] || fail "img: $(cat "$mnt/img")"
exec 5<&- 6>&- 7<&- 8<&-
ok "a server killed after compactions serves every file open since before them"
cairn umount "$mnt" >/dev/null
finish
