#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_rm_kept_upper.sh — an image under a --rw mount's upper layer that
# is kept (umount --keep) or left by a crash is in use: `cairn rm` refuses
# (exit 4) naming the upper, `--wait` does not wait for a pin that is not
# there, a plain umount of the directory leaves a kept upper alone, and the
# upper goes only by a command that names it and says so: `umount
# --discard DIR`, or `rm -f` / `rm --force` of its image ("Dropped: ...").
# Fails without it: rm succeeds and leaves the upper orphaned.
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib mount
set -e

$FSTREE make-layers "$T/layers"
cairn import app:1 "$T"/layers/layer1.tar >/dev/null 2>&1
m=$T/mnt
mkdir "$m"

cairn mount -q --rw app:1 "$m"
echo important >"$m/important.txt"
cairn umount -q --keep "$m"
up=$(cairn mounts --json | jq -r '.[0].upper')
expect_exit 4 "cairn rm app:1" cairn rm app:1
grep -q "upper ${up:0:12} of $m (kept, 1 entries, 10 B)" "$T/stderr" || fail "rm said: $(cat "$T/stderr")"
expect_exit 4 "timeout 10 $CAIRN_BIN/cairn --store $STORE rm --wait app:1" timeout 10 "$CAIRN_BIN/cairn" --store "$STORE" rm --wait app:1
cairn images -q | grep -q . || fail "the image is gone"
ok "rm of an image under a kept upper exits 4 naming it (--wait too, at once)"

expect_exit 0 "cairn umount $m" cairn umount "$m"
grep -q "kept upper layer stays" "$T/stderr" || fail "umount said: $(cat "$T/stderr")"
[ "$(upper_count)" = 1 ] || fail "a plain umount dropped the kept upper"
expect_exit 0 "cairn umount --discard $m" cairn umount --discard "$m"
grep -q "^Dropped: upper ${up:0:12} (1 entries, 10 B)$" "$T/stdout" || fail "--discard said: $(cat "$T/stdout")"
[ "$(upper_count)" = 0 ] && [ "$(cairn mounts --json | jq length)" = 0 ] || fail "--discard left the upper"
expect_exit 2 "cairn umount --keep --discard $m" cairn umount --keep --discard "$m"
expect_exit 0 "cairn rm app:1" cairn rm app:1
ok "umount keeps a kept upper, --discard drops it and says so, then rm works"

cairn import app:1 "$T"/layers/layer1.tar >/dev/null 2>&1
cairn mount -q --rw app:1 "$m"
echo important >"$m/important.txt"
cairn umount -q --keep "$m"
expect_exit 0 "cairn rm -f app:1" cairn rm -f app:1
grep -q "^Dropped: upper [0-9a-f]\{12\} of $m (1 entries, 10 B)$" "$T/stdout" &&
  grep -q "^Deleted: " "$T/stdout" || fail "rm -f said: $(cat "$T/stdout")"
[ "$(upper_count)" = 0 ] && [ "$(cairn mounts --json | jq length)" = 0 ] || fail "rm -f left the upper"
ok "rm -f drops the kept upper, says so, and removes the image"

# A crash leaves the upper: rm refuses as well, --force drops it.
cairn import app:1 "$T"/layers/layer1.tar >/dev/null 2>&1
cairn mount -q --rw app:1 "$m"
echo important >"$m/important.txt"
sync "$m/important.txt"
pid=$(mount_pid "$m")
kill -9 "$pid" $(cat "/proc/$pid/task/$pid/children" 2>/dev/null || true)
wait_for 5 pid_gone "$pid" || fail "daemon did not die"
expect_exit 4 "cairn rm app:1" cairn rm app:1
grep -q "(stale, 1 entries, 10 B)" "$T/stderr" || fail "rm said: $(cat "$T/stderr")"
expect_exit 0 "cairn rm --force app:1" cairn rm --force app:1
grep -q "^Dropped: upper" "$T/stdout" || fail "rm --force said: $(cat "$T/stdout")"
cairn umount -q "$m"
[ "$(upper_count)" = 0 ] && [ "$(cairn mounts --json | jq length)" = 0 ] || fail "left: $(cairn mounts --json)"
ok "rm of an image under a crashed mount's upper exits 4; --force drops it"
echo "all passed"
