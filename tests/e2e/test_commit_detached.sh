#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_commit_detached.sh — `cairn commit DIR` and `cairn umount DIR` act on
# the --rw mount at DIR, not on another one made for DIR earlier whose
# daemon still serves it in another mount namespace (a container took a
# copy; umount detached it here and exited 4): commit writes DIR's changes
# into the image and moves DIR's mount (nothing said on stderr), umount
# --discard drops DIR's upper layer. Both with DIR mounted again at once (mostly in
# the same second: cairn picked the newest live upper made for DIR, by
# the second), and with the mount at DIR on an older upper (kept by
# umount, served again by --resume) than the detached one.
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib mount
set -e

two_layers
cairn import -q app:1 "$T/1.tar" "$T/2.tar" >/dev/null
m=$T/mnt
ro=$T/ro
mkdir "$m" "$ro"

# holds_mount PID: whether PID has a mount namespace of its own (unshare
# made it) with a mount at $m.
holds_mount() {
  [ "$(readlink "/proc/$1/ns/mnt")" != "$(readlink /proc/self/ns/mnt)" ] &&
    awk -v d="$m" '$5 == d { f = 1 } END { exit !f }' "/proc/$1/mountinfo"
}

# detach_mount: the mount at $m copied into another mount namespace (a
# sleeper's, killed at exit), then `cairn umount --discard` detaches it
# here: exit 4; its upper goes when the sleeper lets go.
detach_mount() {
  bg_start "${PRIVATE_NS[@]}" sleep 120
  holder=${BG_PIDS[-1]}
  wait_for 5 holds_mount "$holder" || fail "setup: the other namespace has no copy of the mount"
  expect_exit 4 "cairn umount --discard $m" cairn umount --discard "$m"
  not_mounted "$m" || fail "setup: the mount is still at $m"
}

# commit_is NAME WANT NOT: commit $m as NAME, silently; the image has the
# file WANT and not NOT, and so has the mount moved onto it.
commit_is() {
  cairn commit -q "$m" "$1" >/dev/null 2>"$T/commit.err" || fail "commit: $(cat "$T/commit.err")"
  [ ! -s "$T/commit.err" ] || fail "commit said: $(cat "$T/commit.err")"
  cairn mount "$1" "$ro" >/dev/null
  local got
  got=$(ls "$ro" | tr '\n' ' ')
  cairn umount "$ro" >/dev/null
  [ -e "$ro/$2" ] && fail "setup: $ro still mounted"
  case " $got" in
  *" $2 "*) ;;
  *) fail "the commit of $m lacks its file $2: it holds $got" ;;
  esac
  case " $got" in
  *" $3 "*) fail "the commit of $m holds $3, the detached mount's file: $got" ;;
  esac
  [ -e "$m/$2" ] && [ ! -e "$m/$3" ] && [ "$(mount_image "$m")" = "$(image_id "$1")" ] ||
    fail "the mount at $m did not move onto $1: $(ls "$m" | tr '\n' ' ')"
}

# none_left: cairn mounts lists nothing (no mount, no upper left).
none_left() { [ "$(cairn mounts --json | jq length)" = 0 ]; }
mount_image() { cairn mounts --json | jq -r --arg d "$1" '.[] | select(.dir == $d) | .image'; }
image_id() { cairn images --json | jq -r --arg n "localhost/$1" '.[] | select(any(.names[]; . == $n)) | .id'; }

# ---- DIR mounted again at once
for round in 1 2 3 4; do
  cairn mount --rw app:1 "$m" >/dev/null
  echo old >"$m/detached$round"
  detach_mount
  cairn mount --rw app:1 "$m" >/dev/null
  echo new >"$m/mine$round"
  commit_is "same$round:1" "mine$round" "detached$round"
  cairn umount --discard "$m" >"$T/umount.out" 2>&1 || fail "umount: $(cat "$T/umount.out")"
  grep -q "^Dropped: upper" "$T/umount.out" || fail "umount dropped no upper: $(cat "$T/umount.out")"
  kill -9 "$holder"
  wait "$holder" 2>/dev/null || true
  wait_for 10 none_left || fail "mounts or uppers left: $(cairn mounts)"
done
ok "commit and umount of DIR act on its mount, not one of DIR detached just before"

# ---- the mount at DIR an upper older than the detached one's
cairn mount --rw app:1 "$m" >/dev/null
echo kept >"$m/kept"
cairn umount "$m" >/dev/null
sleep 1.1 # the detached mount's upper is made a second later at least
cairn mount --rw app:1 "$m" >/dev/null
echo old >"$m/detached"
detach_mount
cairn mount --rw --resume "$m" >/dev/null
commit_is "resumed:1" kept detached
ok "commit of DIR served again by --resume commits its upper, not a newer detached one's"
cairn umount "$m" >"$T/umount.out" 2>&1 || fail "umount: $(cat "$T/umount.out")"
kill -9 "$holder"
wait "$holder" 2>/dev/null || true
wait_for 10 none_left || fail "mounts or uppers left: $(cairn mounts)"
ok "umount drops the mount's upper; the detached one's goes when its last user lets go"
