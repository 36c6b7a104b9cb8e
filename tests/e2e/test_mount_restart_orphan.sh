#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_mount_restart_orphan.sh — a file of a writable mount whose last name
# goes while it is open (unlinked, or renamed over) is still read and
# written through its open fds after the server is killed and restarted,
# as it would be with no restart (it answered ESTALE: its data lived only
# as long as the dead server's fds). Three files: one made on the mount,
# one of the image (copied up when opened for writing), one replaced by a
# rename. The kept copy (work/orphan.ID in the upper) is never shown nor
# committed, and goes once the last fd is closed (also an image file's
# closed after a restart with nothing asked of the new server). The same
# for files open and unlinked when cairn commit moved the mount onto its
# new image, after later restarts (they answered ESTALE: the move dropped the old upper,
# where their kept copy was), a file of the image read through the tree too.
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
wait_for 20 no_orphans || fail "orphans left after the fds were closed: $(ls "$work")"
ok "the kept copies go with the last fd"

echo gone >"$mnt/gone"
exec 5<"$mnt/gone"
rm "$mnt/gone"
cairn commit "$mnt" data:2 >/dev/null
[ "$(cairn export data:2 | tar -tf - | sed 's|^\./||' | grep . | sort | tr '\n' ' ')" = "old " ] ||
  fail "the commit: $(cairn export data:2 | tar -tf -)"
exec 5<&-
ok "an open unlinked file is not committed"

# Open and unlinked at the instant of a move (cairn commit): the moved
# mount's later servers keep them too (they answered ESTALE: the kept copy
# was in the old upper, which the move drops). One made on the mount, one
# of the image copied up, one unlinked again after the move.
echo made2 >"$mnt/made2"
echo twice >"$mnt/twice"
exec 5>>"$mnt/made2" 6<"$mnt/made2" 7>>"$mnt/old" 8<"$mnt/old"
rm "$mnt/made2" "$mnt/old"
echo "before commit" >&5
cairn commit "$mnt" data:3 >/dev/null
echo "after commit" >&5 || fail "a write to a file unlinked before the move, after it"
echo "after commit" >&7 || fail "a write to a renamed-over file unlinked before the move, after it"
for k in 1 2; do
  s=$(server_of "$sup")
  kill -9 "$s"
  wait_for 5 pid_gone "$s" || fail "server survived kill -9"
  echo "moved $k" >&5 || fail "a write to a file unlinked at the move failed after kill $k"
  echo "moved $k" >&7 || fail "a write to a renamed-over file unlinked at the move failed after kill $k"
done
[ "$(cat <&6 2>&1)" = "$(printf 'made2\nbefore commit\nafter commit\nmoved 1\nmoved 2')" ] ||
  fail "made2 after the move and 2 kills: $(cat /proc/$$/fd/6 2>&1)"
[ "$(cat <&8 2>&1)" = "$(printf 'other\nafter commit\nmoved 1\nmoved 2')" ] ||
  fail "old after the move and 2 kills: $(cat /proc/$$/fd/8 2>&1)"
[ "$(ls "$mnt" | tr '\n' ' ')" = "twice " ] || fail "the listing after the move: $(ls "$mnt")"
[ "$(stat -L -c %h /proc/$$/fd/5)" = 0 ] || fail "the link count after the move: $(stat -L -c %h /proc/$$/fd/5)"
ok "files unlinked while open at a commit's move: read and written through their fds after 2 restarts"

work=$(echo "$STORE"/uppers/*/work)
[ -d "$work" ] || fail "not one upper after the move: $(ls "$STORE/uppers")"
exec 5>&- 6<&- 7>&- 8<&-
wait_for 20 no_orphans || fail "orphans left after the fds were closed, after the move: $(ls "$work")"
cairn commit "$mnt" data:4 >/dev/null
[ "$(cairn export data:4 | tar -tf - | sed 's|^\./||' | grep . | sort | tr '\n' ' ')" = "twice " ] ||
  fail "the commit after the move: $(cairn export data:4 | tar -tf -)"
ok "their kept copies are not committed, and go with the last fd after the move"

# A file of the image (lower only: twice is data:4's) open for reading and
# unlinked at a move: read through its fd after the move and a restart (it
# read nothing after the move: the reads went to the image's tree).
exec 9<"$mnt/twice"
rm "$mnt/twice"
cairn commit "$mnt" data:5 >/dev/null
[ "$(cat /proc/$$/fd/9 2>&1)" = twice ] || fail "an image file unlinked while open, after the move: $(cat /proc/$$/fd/9 2>&1)"
s=$(server_of "$sup")
kill -9 "$s"
wait_for 5 pid_gone "$s" || fail "server survived kill -9"
[ "$(cat <&9 2>&1)" = twice ] || fail "an image file unlinked while open, after the move and a kill: $(cat /proc/$$/fd/9 2>&1)"
[ -z "$(ls "$mnt")" ] || fail "the listing: $(ls "$mnt")"
work=$(echo "$STORE"/uppers/*/work)
exec 9<&-
wait_for 20 no_orphans || fail "orphans left after the fd was closed: $(ls "$work")"
ok "an image file unlinked while open at a move: read through its fd after the move and a restart"

# The same, the move made by a restarted server (killed after the unlink,
# or by the move itself: the kernel resends the commit's request), which
# knew the files only by what the node table records, then a restart
# more; on a mount never moved before (a moved one records its nodeids).
# Fails without it: the table did not record the unlinked image files, the
# move mapped their nodeids to nothing and they answered ESTALE.
echo low >"$mnt/low"
echo low2 >"$mnt/low2"
cairn commit "$mnt" data:6 >/dev/null
m2=$T/m2
mkdir "$m2"
cairn mount -q --rw data:6 "$m2"
sup2=$(mount_pid "$m2")
exec 9<"$m2/low" 8<"$m2/low2"
rm "$m2/low"
echo over >"$m2/over"
mv "$m2/over" "$m2/low2"
s=$(server_of "$sup2")
kill -9 "$s"
wait_for 5 pid_gone "$s" || fail "server survived kill -9"
cairn commit "$m2" data:7 >/dev/null
[ "$(cat /proc/$$/fd/9 2>&1)" = low ] ||
  fail "an image file unlinked while open, after a move by a restarted server: $(cat /proc/$$/fd/9 2>&1)"
[ "$(cat /proc/$$/fd/8 2>&1)" = low2 ] ||
  fail "an image file renamed over while open, after a move by a restarted server: $(cat /proc/$$/fd/8 2>&1)"
s=$(server_of "$sup2")
kill -9 "$s"
wait_for 5 pid_gone "$s" || fail "server survived kill -9"
[ "$(cat <&9 2>&1)" = low ] || fail "an image file unlinked while open, after one more kill: $(cat /proc/$$/fd/9 2>&1)"
[ "$(cat <&8 2>&1)" = low2 ] || fail "an image file renamed over while open, after one more kill: $(cat /proc/$$/fd/8 2>&1)"
[ "$(ls "$m2" | tr '\n' ' ')" = "low2 " ] || fail "the listing: $(ls "$m2")"
[ "$(cat "$m2/low2")" = over ] || fail "low2: $(cat "$m2/low2")"
exec 9<&- 8<&-
for work in "$STORE"/uppers/*/work; do
  wait_for 5 no_orphans || fail "orphans left after the fds were closed: $(ls "$work")"
done
cairn umount --discard "$m2" >/dev/null
ok "image files unlinked or renamed over while open, a move by a restarted server: read through their fds after it and a restart"

# A file of the image copied up, unlinked while open, then its server
# restarted and the fd closed with nothing asked of the new server
# between: its FORGET names a nodeid the new server never restored (it
# restores at start only what was made on the mount), which it ignored,
# so the kept copy stayed until the umount.
m3=$T/m3
mkdir "$m3"
cairn mount -q --rw data:6 "$m3"
sup3=$(mount_pid "$m3")
exec 9>>"$m3/low"
rm "$m3/low"
up=$(python3 -c 'import os, sys; print(os.getxattr(sys.argv[1], "trusted.cairn.upper").decode())' \
  "$m3")
work=$STORE/uppers/$up/work
ls "$work" | grep -q "^orphan\." || fail "no orphan of the unlinked image file: $(ls "$work")"
s=$(server_of "$sup3")
kill -9 "$s"
wait_for 5 pid_gone "$s" || fail "server survived kill -9"
exec 9>&-
wait_for 20 no_orphans ||
  fail "orphans left after the fd was closed, after a restart: $(ls "$work")"
cairn umount --discard "$m3" >/dev/null
ok "an image file unlinked while open and closed after a restart: its kept copy goes"

# A restarted server restores what the node table records, the kernel's
# count of its references unknown; a FORGET leaves the record (it may not
# be for all of them). A file the kernel forgot that way (its caches
# dropped), then unlinked with nothing open: the move restores its record
# and must not keep it as an orphan, which no FORGET would ever drop.
m4=$T/m4
mkdir "$m4"
cairn mount -q --rw data:6 "$m4"
sup4=$(mount_pid "$m4")
echo gone >"$m4/forgot"
cairn commit "$m4" data:8 >/dev/null
s=$(server_of "$sup4")
kill -9 "$s"
wait_for 5 pid_gone "$s" || fail "server survived kill -9"
[ "$(cat "$m4/forgot")" = gone ] || fail "forgot after the restart: $(cat "$m4/forgot")"
echo 2 >/proc/sys/vm/drop_caches # the kernel forgets forgot (its dentry unused)
rm "$m4/forgot"
cairn commit "$m4" data:9 >/dev/null
up=$(python3 -c 'import os, sys; print(os.getxattr(sys.argv[1], "trusted.cairn.upper").decode())' \
  "$m4")
work=$STORE/uppers/$up/work
no_orphans || fail "an orphan of a file the kernel forgot, after the move: $(ls "$work")"
cairn umount --discard "$m4" >/dev/null
ok "a move keeps no orphan of a file the kernel forgot after a restart"
