#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_mount_restart_commit.sh — the writes made to a --rw mount after
# cairn commit moved it onto its new image (they are in a fresh upper its
# server made) survive a kill -9 of that server: the mount is not restarted
# (it ends, stale, as test_commit.sh checks), but the fresh upper is kept
# (gc leaves it) and `cairn umount --keep` then `cairn mount --rw --resume`
# serve them again on the new image. Fails without it: gc removed them.
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib mount
set -e

rw_mount_file base:1 base base
m=$mnt
echo committed >"$m/committed"
id=$(cairn commit "$m" base:2)
echo later >"$m/later"
sup=$(mount_pid "$m")
kill -9 "$(server_of "$sup")"
wait_for 5 pid_gone "$sup" || fail "the supervisor of a moved mount did not end"
cairn gc >"$T/gc" 2>&1 || fail "gc: $(cat "$T/gc")"
! grep -q upper "$T/gc" || fail "gc removed the moved mount's upper: $(cat "$T/gc")"
cairn umount --keep "$m" >/dev/null 2>"$T/stderr" || fail "umount --keep: $(cat "$T/stderr")"
cairn mount -q --rw --resume "$m" 2>"$T/stderr" || fail "resume: $(cat "$T/stderr")"
[ "$(cat "$m/later")" = later ] || fail "the write after the commit is lost"
[ "$(cat "$m/committed")" = committed ] || fail "the committed file: $(cat "$m/committed")"
[ "$(cairn mounts --json | jq -r --arg d "$m" '.[] | select(.dir == $d) | .image')" = "$id" ] ||
  fail "the resumed mount is not on the commit $id: $(cairn mounts --json)"
ok "writes after a commit survive a kill of the moved mount's server: kept from gc, resumed"
