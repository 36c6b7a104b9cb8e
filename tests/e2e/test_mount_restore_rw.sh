#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_mount_restore_rw.sh — a --rw mount survives a simulated reboot: its
# daemon and server killed (kill -9), the mount gone, the store kept, then
# `cairn mount --restore` mounts it again, writable, over the upper layer
# the dead daemon left: what was written and synced before is there (a new
# file, a deleted lower file still deleted), the record says rw, and new
# writes work. Fails without the rw case of --restore: the mount comes back
# read-only, without the written file.
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib mount
set -e

$FSTREE make-layers "$T/small"
cairn import app:1 "$T"/small/layer{1,2,3}.tar >/dev/null 2>&1
rw=$T/rw
mkdir "$rw"
cairn mount -q --rw app:1 "$rw"
victim=$(cd "$rw" && find . -type f | sort | head -1)
[ -n "$victim" ] || fail "the image has no file"
echo kept >"$rw/new-file"
rm "$rw/$victim"
sync "$rw/new-file" "$rw"

# ---- the reboot: every cairn process gone, the mount gone, the store kept
sup=$(mount_pid "$rw")
kids=$(cat "/proc/$sup/task/$sup/children" 2>/dev/null || true)
kill -9 "$sup" $kids
wait_for 5 pid_gone "$sup" || fail "the supervisor survived kill -9"
umount -l "$rw"
sqlite3 "$STORE/meta.db" "UPDATE mounts SET since = 0" # written before this boot

expect_exit 0 "cairn mount --restore" cairn mount --restore
grep -qxF "$rw" "$T/stdout" || fail "restore did not print $rw: $(cat "$T/stdout")"
[ "$(cat "$rw/new-file" 2>/dev/null)" = kept ] || fail "the written file is not back"
[ ! -e "$rw/$victim" ] || fail "the deleted file is back"
[ "$(cairn mounts --json | jq -r --arg d "$rw" '.[] | select(.dir == $d and .pid > 0) | .rw')" = true ] ||
  fail "the restored mount is not rw: $(cairn mounts --json)"
echo again >"$rw/second" || fail "a write after the restore failed"
ok "a --rw mount comes back writable over its upper layer after a reboot"

cairn umount --discard "$rw" >/dev/null
[ "$(cairn mounts --json | jq length)" = 0 ] || fail "records left: $(cairn mounts --json)"
echo "all passed"
