#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_mount_restart_orphan.sh — a file of a writable mount whose last name
# goes while it is open (unlinked, or renamed over) is still read and
# written through its open fds after the server is killed and restarted,
# as it would be with no restart (it answered ESTALE: its data lived only
# as long as the dead server's fds). Three files: one made on the mount,
# one of the image (copied up when opened for writing), one replaced by a
# rename. The kept copy (work/orphan.ID in the upper) is never shown nor
# committed, and goes once the last fd is closed.
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib mount
set -e

rw_mount_file data:1 img lower
work=$(echo "$STORE"/uppers/*/work)

echo made >"$mnt/made"
echo other >"$mnt/new"
echo old >"$mnt/old"
exec 5>>"$mnt/made" 6<"$mnt/made" 7>>"$mnt/img" 8<"$mnt/img" 9>>"$mnt/old"
rm "$mnt/made" "$mnt/img"
mv "$mnt/new" "$mnt/old"
for k in 1 2; do
  s=$(server_of "$sup")
  kill -9 "$s"
  wait_for 5 pid_gone "$s" || fail "server survived kill -9"
  echo "after $k" >&5 || fail "a write to the unlinked file made here failed after kill $k"
  echo "after $k" >&7 || fail "a write to the unlinked image file failed after kill $k"
  echo "after $k" >&9 || fail "a write to the renamed-over file failed after kill $k"
done
[ "$(cat <&6)" = "$(printf 'made\nafter 1\nafter 2')" ] || fail "made: $(cat /proc/$$/fd/6)"
[ "$(cat <&8)" = "$(printf 'lower\nafter 1\nafter 2')" ] || fail "img: $(cat /proc/$$/fd/8)"
[ "$(cat "$mnt/old")" = other ] || fail "old: $(cat "$mnt/old")"
[ "$(ls "$mnt" | tr '\n' ' ')" = "old " ] || fail "the listing: $(ls "$mnt")"
[ "$(stat -L -c %h /proc/$$/fd/5)" = 0 ] || fail "an unlinked file's link count: $(stat -L -c %h /proc/$$/fd/5)"
ok "files unlinked or renamed over while open: read and written through their fds after 2 restarts"

ls "$work" | grep -q "^orphan\." || fail "no orphan in the upper's work/: $(ls "$work")"
exec 5>&- 6<&- 7>&- 8<&- 9>&-
no_orphans() { ! ls "$work" | grep -q "^orphan\."; }
wait_for 5 no_orphans || fail "orphans left after the fds were closed: $(ls "$work")"
ok "the kept copies go with the last fd"

echo gone >"$mnt/gone"
exec 5<"$mnt/gone"
rm "$mnt/gone"
cairn commit "$mnt" data:2 >/dev/null
[ "$(cairn export data:2 | tar -tf - | sed 's|^\./||' | grep . | sort | tr '\n' ' ')" = "old " ] ||
  fail "the commit: $(cairn export data:2 | tar -tf -)"
exec 5<&-
ok "an open unlinked file is not committed"
