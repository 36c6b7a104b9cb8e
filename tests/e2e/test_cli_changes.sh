#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_cli_changes.sh — a command that changes the store says what it
# changed, podman style, and -q/--quiet silences it: rm prints "Untagged:
# NAME" per name and "Deleted: ID" (full id) for an image, then the layers
# it freed; mount prints the mount point, umount each directory it
# unmounted (stdout), and mount warns when it mounts over files; rm --wait
# says once on stderr that it waits, and for whom. --json outputs are not
# touched.
source "$(dirname "$0")/../lib/test-lib.sh"

mkdir -p "$T/m"
two_layers
id=$(cairn import app:1 "$T/1.tar" "$T/2.tar") || exit 1
cairn import app:2 "$T/1.tar" "$T/2.tar" >/dev/null || exit 1
other=$(cairn import other:1 "$T/1.tar") || exit 1
top=$(cairn layers --json | jq -r '.[] | select(.images == 1) | .id')

expect_exit 0 "rm of a name that is not the last" cairn rm app:2
check "says Untagged: localhost/app:2, only" [ "$(cat "$T/stdout")" = "Untagged: localhost/app:2" ]
check "nothing on stderr" [ ! -s "$T/stderr" ]
expect_exit 0 "rm of the last name" cairn rm app:1
check "says Untagged, Deleted (full id) and the layer it freed" \
  [ "$(head -2 "$T/stdout")" = "Untagged: localhost/app:1
Deleted: $id" ]
check "the freed layer is named (and only it)" \
  sh -c "tail -n +3 '$T/stdout' | grep -c . | grep -qx 1 && tail -n +3 '$T/stdout' | grep -q 'sha256:$top'"

# By id: every name goes, in order, then the image.
cairn import app:1 "$T/1.tar" "$T/2.tar" >/dev/null && cairn import app:2 "$T/1.tar" "$T/2.tar" >/dev/null
expect_exit 0 "rm by id" cairn rm "$id"
check "says each name, then Deleted" [ "$(head -3 "$T/stdout")" = "Untagged: localhost/app:1
Untagged: localhost/app:2
Deleted: $id" ]

# -q and --quiet: nothing at all.
cairn import app:1 "$T/1.tar" "$T/2.tar" >/dev/null && cairn import app:2 "$T/1.tar" "$T/2.tar" >/dev/null
expect_exit 0 "rm -q" cairn rm -q app:2
check "rm -q prints nothing" [ ! -s "$T/stdout" -a ! -s "$T/stderr" ]
expect_exit 0 "rm --quiet" cairn rm --quiet app:1
check "rm --quiet prints nothing" [ ! -s "$T/stdout" -a ! -s "$T/stderr" ]
check "and removed it" [ "$(cairn images --json | jq length)" = 1 ]
check "rm --json is refused, not silently taken" sh -c "! cairn rm --json other:1 2>/dev/null"

# mount and umount: the directory on stdout, as podman mount/umount.
on_exit "umount -l '$T/m'"
expect_exit 0 "mount" cairn mount other:1 "$T/m"
check "prints the mount point" [ "$(cat "$T/stdout")" = "$T/m" ]
expect_exit 0 "umount" cairn umount "$T/m"
check "prints the directory it unmounted" [ "$(cat "$T/stdout")" = "$T/m" ]
expect_exit 0 "mount -q" cairn mount -q other:1 "$T/m"
check "mount -q prints nothing" [ ! -s "$T/stdout" -a ! -s "$T/stderr" ]
expect_exit 0 "umount --quiet" cairn umount --quiet "$T/m"
check "umount --quiet prints nothing" [ ! -s "$T/stdout" -a ! -s "$T/stderr" ]
check "and unmounted it" sh -c "! grep -q ' $T/m ' /proc/self/mountinfo"

# A directory that holds files is mounted over, with a warning that they
# are hidden meanwhile (as mount(8), it is not refused).
mkdir -p "$T/full" && echo "mine" >"$T/full/own-file"
on_exit "umount -l '$T/full'"
expect_exit 0 "mount over a directory that holds a file" cairn mount other:1 "$T/full"
check "warns that it is not empty" \
  grep -qx "cairn: mount: $T/full: warning: not empty; what it holds is hidden while mounted" "$T/stderr"
check "its file is hidden while mounted" [ ! -e "$T/full/own-file" ]
expect_exit 0 "umount it" cairn umount "$T/full"
check "and the file is back" [ "$(cat "$T/full/own-file")" = mine ]

# rm --wait: says once, on stderr, that it waits and for whom.
hold_image other:1
cairn rm --wait=30 other:1 >"$T/wout" 2>"$T/werr" &
rmpid=$!
on_exit "kill -9 $rmpid"
check "rm --wait says it waits" wait_for 5 grep -q "^cairn: rm: other:1: waiting: .*pinned by pid $holder (cairn-pin)" "$T/werr"
kill -9 "$sleeper" "$holder"
wait "$holder" 2>/dev/null
wait "$rmpid"
check "rm --wait then succeeds" [ $? = 0 ]
check "it said so once" [ "$(wc -l <"$T/werr")" = 1 ]
check "then what it removed" [ "$(head -2 "$T/wout")" = "Untagged: localhost/other:1
Deleted: $other" ]

# The help says it.
expect_exit 0 "rm --help" cairn rm --help
check "rm --help lists -q" grep -q -- "-q, --quiet" "$T/stdout"
expect_exit 0 "umount --help" cairn umount --help
check "umount --help lists -q" grep -q -- "-q, --quiet" "$T/stdout"
finish
