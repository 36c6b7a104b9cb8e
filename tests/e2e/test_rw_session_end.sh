#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_rw_session_end.sh — a --rw mount whose FUSE session ends without
# `cairn umount` (umount(8), fusermount3 -u) keeps its upper layer, as
# `cairn umount` does: `cairn mounts` lists it kept, `cairn rm` of its
# image exits 4, `cairn mount --rw --resume DIR` serves the changes again,
# and only a command that names it drops it, saying `Dropped:`
# (`cairn umount --discard`, of a live mount too, `cairn rm --force`).
# Fails without it: the daemon dropped the upper silently.
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib mount
set -e

$FSTREE make-layers "$T/layers"
cairn import app:1 "$T"/layers/layer1.tar >/dev/null 2>&1
m=$T/mnt
mkdir "$m"

for how in "umount" "fusermount3 -u"; do
  cairn mount -q --rw app:1 "$m"
  echo important >"$m/important.txt"
  up=$(basename "$(find "$STORE/uppers" -mindepth 1 -maxdepth 1 -name '[0-9a-f]*')")
  pid=$(mount_pid "$m")
  $how "$m" || fail "$how failed"
  wait_for 10 pid_gone "$pid" || fail "the daemon did not end after $how"
  [ "$(upper_count)" = 1 ] || fail "$how: the upper is gone"
  cairn mounts --json >"$T/mounts"
  [ "$(jq -r '.[0].upper' "$T/mounts")" = "$up" ] &&
    [ "$(jq -r '.[0].state' "$T/mounts")" = kept ] || fail "$how: mounts: $(cat "$T/mounts")"
  cairn mounts >"$T/list"
  grep -q "kept" "$T/list" || fail "$how: mounts said: $(cat "$T/list")"
  expect_exit 4 "cairn rm app:1" cairn rm app:1
  grep -q "upper ${up:0:12} of $m (kept, 1 entries, 10 B)" "$T/stderr" ||
    fail "$how: rm said: $(cat "$T/stderr")"
  ok "$how of a --rw mount keeps its upper: listed kept, rm exits 4"

  cairn mount -q --rw --resume "$m"
  [ "$(cat "$m/important.txt")" = important ] || fail "$how: --resume lost the file"
  expect_exit 0 "cairn umount --discard $m" cairn umount --discard "$m"
  grep -q "^Dropped: upper ${up:0:12} (1 entries, 10 B)$" "$T/stdout" ||
    fail "$how: umount said: $(cat "$T/stdout")"
  [ "$(upper_count)" = 0 ] && [ "$(cairn mounts --json | jq length)" = 0 ] ||
    fail "$how: umount left: $(cairn mounts --json)"
  ok "$how: --resume serves the changes; cairn umount --discard then drops them, saying so"
done

# A kept one goes by --discard, or rm --force of its image, saying so.
cairn mount -q --rw app:1 "$m"
echo important >"$m/important.txt"
pid=$(mount_pid "$m")
umount "$m"
wait_for 10 pid_gone "$pid" || fail "the daemon did not end"
expect_exit 0 "cairn umount --discard $m" cairn umount --discard "$m"
grep -q "^Dropped: upper" "$T/stdout" || fail "--discard said: $(cat "$T/stdout")"
[ "$(upper_count)" = 0 ] || fail "--discard left the upper"
cairn mount -q --rw app:1 "$m"
echo important >"$m/important.txt"
pid=$(mount_pid "$m")
fusermount3 -u "$m"
wait_for 10 pid_gone "$pid" || fail "the daemon did not end"
expect_exit 0 "cairn rm --force app:1" cairn rm --force app:1
grep -q "^Dropped: upper [0-9a-f]\{12\} of $m (1 entries, 10 B)$" "$T/stdout" ||
  fail "rm --force said: $(cat "$T/stdout")"
[ "$(upper_count)" = 0 ] || fail "rm --force left the upper"
ok "a kept upper goes by umount --discard or rm --force, saying Dropped:"
cairn import app:1 "$T"/layers/layer1.tar >/dev/null 2>&1

# Detached: a container's namespace holds the mount. cairn umount records
# its intent: the upper is kept when the holder lets go; --discard drops it.
for discard in --discard ""; do
  cairn mount -q --rw app:1 "$m"
  echo important >"$m/important.txt"
  up=$(basename "$(find "$STORE/uppers" -mindepth 1 -maxdepth 1 -name '[0-9a-f]*')")
  pid=$(mount_pid "$m")
  rm -f "$T/holder"
  bg_start timeout 60 "${PRIVATE_NS[@]}" sh -c 'echo up >"$1"; exec sleep 60' sh \
    "$T/holder"
  holder=${BG_PIDS[-1]}
  wait_for 10 grep -q up "$T/holder" || fail "the holder did not start"
  expect_exit 4 "cairn umount $m" cairn umount "$m"
  grep -q "detached here, still in use by .*; its upper layer ${up:0:12} is kept when they let go (cairn mount --rw --resume $m)$" \
    "$T/stderr" || fail "umount said: $(cat "$T/stderr")"
  if [ -n "$discard" ]; then
    expect_exit 4 "cairn umount --discard $m" cairn umount --discard "$m"
    grep -q "; its upper layer ${up:0:12} is dropped when they let go, as --discard asked$" \
      "$T/stderr" || fail "umount --discard said: $(cat "$T/stderr")"
  fi
  kill "$holder"
  wait "$holder" 2>/dev/null || true
  wait_for 10 pid_gone "$pid" || fail "the daemon outlived the holder"
  if [ -z "$discard" ]; then
    [ "$(upper_count)" = 1 ] && [ "$(cairn mounts --json | jq -r '.[0].state')" = kept ] ||
      fail "umount of a detached mount: $(cairn mounts --json)"
    expect_exit 0 "cairn umount --discard $m" cairn umount --discard "$m"
    grep -q "^Dropped: upper ${up:0:12}" "$T/stdout" || fail "--discard said: $(cat "$T/stdout")"
  fi
  [ "$(upper_count)" = 0 ] && [ "$(cairn mounts --json | jq length)" = 0 ] ||
    fail "detached umount $discard: left $(cairn mounts --json)"
  ok "umount $discard of a detached --rw mount says what the upper gets when the holder lets go, and does it"
done
echo "all passed"
