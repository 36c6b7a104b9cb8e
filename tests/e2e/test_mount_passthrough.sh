#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_mount_passthrough.sh — FUSE passthrough (kernel 6.9+): once a file
# is open, the kernel reads it from its blob without asking the daemon.
#  - a file opened before its server is stopped (SIGSTOP) is read whole,
#    with the right bytes, while the server is stopped;
#  - after a kill -9 of the server, with files still open, new opens of the
#    same files work (the kernel keeps one backing file per open inode and
#    fails an open naming another: the restarted server must reuse the ids
#    the dead one registered), and their bytes are right;
#  - without -o passthrough (the default) reads go through the daemon: the
#    same read of an open file waits for the stopped server.
# Fails without passthrough: the first read waits for the stopped server
# (timeout); fails with a table of open inodes that dies with its server:
# the open after the kill gets EIO.
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib mount
set -e

grep -q 'CONFIG_FUSE_PASSTHROUGH=y' <(zcat /proc/config.gz 2>/dev/null || cat "/boot/config-$(uname -r)" 2>/dev/null) ||
  { echo "ok - skipped: this kernel has no FUSE passthrough"; exit 0; }

mkdir "$T/src"
head -c $((32 << 20)) /dev/urandom >"$T/src/big"
echo small >"$T/src/small"
tar -C "$T/src" -cf "$T/data.tar" .
cairn import data:1 "$T/data.tar" >/dev/null 2>&1
want=$(md5sum <"$T/src/big" | cut -d' ' -f1)

mnt=$T/mnt
mkdir "$mnt"
cairn mount -q -o passthrough data:1 "$mnt"
sup=$(mount_pid "$mnt")
server=$(server_of "$sup")
[ -n "$server" ] || fail "the supervisor $sup has no server"

# ---- an open file reads with its server stopped
exec 7<"$mnt/big"
kill -STOP "$server"
got=$(timeout 20 md5sum <&7 | cut -d' ' -f1) || true
kill -CONT "$server"
exec 7<&-
[ "$got" = "$want" ] || fail "a read of an open file with the server stopped: '${got:-timed out}'"
ok "an open file is read with its server stopped (passthrough), right bytes"

# ---- kill -9 of the server with files open: new opens of them still work
exec 7<"$mnt/big" 8<"$mnt/small"
kill -9 "$server"
# (looked up at each try: the new server may start after the first)
new_server() { local s; s=$(server_of "$sup") && [ -n "$s" ] && [ "$s" != "$server" ]; }
wait_for 10 new_server || fail "no new server after the kill"
wait_for 10 mount_is_live "$mnt" || fail "not live again: $(mount_state "$mnt")"
got=$(md5sum <"$mnt/big" 2>"$T/open.err" | cut -d' ' -f1) || true
[ "$got" = "$want" ] || fail "an open after the kill, the file open since before: $(cat "$T/open.err")"
[ "$(cat "$mnt/small")" = small ] || fail "small after the kill"
exec 7<&- 8<&-
for i in 1 2 3; do
  got=$(md5sum <"$mnt/big" | cut -d' ' -f1)
  [ "$got" = "$want" ] || fail "open $i after the last release"
done
ok "after a kill -9 with files open, they open again with the right bytes"

# ---- the default (no passthrough): the read waits for the server
mnt2=$T/mnt2
mkdir "$mnt2"
cairn mount -q data:1 "$mnt2"
server2=$(server_of "$(mount_pid "$mnt2")")
exec 9<"$mnt2/big"
kill -STOP "$server2"
status=0
timeout 2 md5sum <&9 >/dev/null || status=$?
kill -CONT "$server2"
exec 9<&-
[ "$status" = 124 ] || fail "no passthrough: a read with the server stopped did not wait (status $status)"
[ "$(md5sum <"$mnt2/big" | cut -d' ' -f1)" = "$want" ] || fail "no passthrough: wrong bytes"
ok "without -o passthrough reads go through the daemon"

cairn umount "$mnt" "$mnt2" >/dev/null
echo "all passed"
