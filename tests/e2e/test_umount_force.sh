#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_umount_force.sh — any user can keep a root mount with `unshare -Urm
# sleep inf` (its copy of the mount namespace holds the mount): `cairn
# umount` then exits 4 naming the holder and rm stays refused; `cairn
# umount --force DIR` ends the FUSE connection for every namespace (the
# kernel's abort), says whom it cut off, and the pins go: rm works. Fails
# without --force (a usage error).
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib mount
set -e

$FSTREE make-layers "$T/layers"
cairn import app:1 "$T"/layers/layer1.tar >/dev/null 2>&1
chmod 0755 "$T"
m=$T/mnt
mkdir "$m"
cairn mount -q app:1 "$m"
setpriv --reuid=nobody --regid=nogroup --clear-groups unshare -Urm sleep 120 &
holder=$!
BG_PIDS+=("$holder")
wait_for 5 grep -q "$m" "/proc/$holder/mountinfo" || fail "the holder has no copy of the mount"
sleeper=$(pgrep -P "$holder" sleep || echo "$holder")
expect_exit 4 "cairn umount $m" cairn umount "$m"
grep -q "still in use by pid [0-9]* (sleep)" "$T/stderr" || fail "umount said: $(cat "$T/stderr")"
expect_exit 4 "cairn rm app:1" cairn rm app:1
ok "a user's namespace keeps the mount: umount exits 4 naming it, rm refused"

expect_exit 0 "cairn umount --force $m" cairn umount --force "$m"
grep -q "force: ended the FUSE connection; cut off pid [0-9]* (sleep)" "$T/stderr" ||
  fail "umount --force said: $(cat "$T/stderr")"
expect_exit 0 "cairn rm app:1" cairn rm app:1
kill -0 "$sleeper" 2>/dev/null || fail "the holder was killed, not cut off"
[ "$(cairn mounts --json | jq length)" = 0 ] || fail "records left: $(cairn mounts --json)"
ok "umount --force ends the connection for every namespace, names whom it cut off; rm works"
echo "all passed"
