#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_mount_tree.sh — a cairnfs mount of a three-layer image shows exactly
# the tree the OCI rules define (computed independently by fstree.py from
# the same tars): every entry's type, mode, owner, mtime, size, content,
# link target, device numbers, xattrs and hardlink sharing. Also: statfs,
# stable inode numbers, read-only, reads at offsets, pins and the mount
# record while mounted, rm refused (exit 4), umount idempotent.
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib mount
set -e

$FSTREE make-layers "$T/layers"
cairn import test:1 "$T"/layers/layer{1,2,3}.tar >/dev/null
mnt=$T/mnt
mkdir "$mnt"

cairn mount test:1 "$mnt"
is_mounted "$mnt" || fail "cairn mount returned but $mnt is not mounted"
ok "cairn mount"

$FSTREE expect "$T"/layers/layer{1,2,3}.tar >"$T/want"
$FSTREE scan "$mnt" >"$T/got"
diff -u "$T/want" "$T/got" || fail "merged tree differs from the OCI rules"
[ "$(wc -l <"$T/got")" -ge 40 ] || fail "suspiciously small tree"
ok "full tree matches ($(wc -l <"$T/got") entries)"

# Nothing named .wh.* is ever visible, nor anything it hid.
! find "$mnt" -name '.wh.*' | grep -q . || fail "a whiteout is visible"
for gone in removeme/sub usr/lib/gone.so opq/old1 opq/olddir hard/link1 samelayer/lower; do
  [ ! -e "$mnt/$gone" ] && [ ! -L "$mnt/$gone" ] || fail "$gone should be hidden"
done
ok "whiteouts hide and are hidden"

# statfs answers; the file system is read-only.
[ "$(stat -f -c %T "$mnt")" = fuseblk ] || [ "$(stat -f -c %t "$mnt")" = 65735546 ] ||
  fail "statfs: $(stat -f "$mnt")"
[ "$(stat -f -c %c "$mnt")" -ge 40 ] || fail "statfs files: $(stat -f -c %c "$mnt")"
expect_exit 1 "touch $mnt/newfile" touch "$mnt/newfile"
grep -q "Read-only file system" "$T/stderr" || fail "touch: $(cat "$T/stderr")"
ok "statfs and read-only"

# Inode numbers stay the same after the kernel forgets its inodes.
before=$(stat -c %i "$mnt/hard/orig" "$mnt/etc/config" "$mnt/usr/lib")
sync
echo 2 >/proc/sys/vm/drop_caches
after=$(stat -c %i "$mnt/hard/orig" "$mnt/etc/config" "$mnt/usr/lib")
[ "$before" = "$after" ] || fail "inode numbers changed: $before / $after"
[ "$(stat -c %i "$mnt/hard/orig")" = "$(stat -c %i "$mnt/hard/zz/link2")" ] ||
  fail "hardlinks do not share an inode"
ok "stable inode numbers"

# Reads at offsets, across a page boundary and past the end.
want=$(python3 -c 'import sys; d=bytes((i*7919)&0xFF for i in range(3<<20)); sys.stdout.write(d[1048570:1048570+20000].hex())')
got=$(dd if="$mnt/big.bin" bs=1 skip=1048570 count=20000 status=none | od -An -v -tx1 | tr -d " \n")
[ "$want" = "$got" ] || fail "read at offset differs"
[ "$(dd if="$mnt/big.bin" bs=4096 skip=1000 status=none | wc -c)" = 0 ] || fail "read past end"
[ "$(wc -c <"$mnt/empty.txt")" = 0 ] || fail "empty file not empty"
ok "reads at offsets"

# security.capability comes through (the kernel validates it on the way).
python3 - "$mnt" <<'PY' || fail "xattrs"
import errno, os, struct, sys
m = sys.argv[1]
cap = os.getxattr(m + "/bin/suid", "security.capability")
assert cap == struct.pack("<IIIII", 0x02000001, 1 << 10, 0, 0, 0), cap
assert os.getxattr(m + "/data/x", "user.bin") == b"\x00\x01\xff"
try:
    os.getxattr(m + "/data/x", "user.nope")
    sys.exit("user.nope exists")
except OSError as e:
    assert e.errno == errno.ENODATA, e
PY
ok "xattrs"

# The mount is recorded, pinned with purpose "mount DIR", and keeps rm away.
pid=$(mount_pid "$mnt")
[ -n "$pid" ] && [ "$(mount_state "$mnt")" = live ] || fail "mounts: $(cairn mounts --json)"
grep -q cairnfs "/proc/$pid/comm" || fail "recorded pid $pid is not cairnfs"
cairn mounts | grep -q "$mnt" || fail "cairn mounts table lacks $mnt"
cairn_pin ls --json | jq -e --arg p "mount $mnt" --argjson pid "$pid" \
  'map(select(.purpose == $p and .pid == $pid)) | length >= 2' >/dev/null ||
  fail "cairn-pin ls lacks the mount's pins: $(cairn_pin ls --json)"
expect_exit 4 "cairn rm test:1" cairn rm test:1
grep -q "$mnt" "$T/stderr" && grep -q "$pid" "$T/stderr" || fail "rm message: $(cat "$T/stderr")"
ok "recorded, pinned, rm refused (exit 4) naming mount and pid"

# umount: complete, then idempotent; never-mounted directories are fine too.
cairn umount "$mnt"
not_mounted "$mnt" || fail "still mounted after umount"
wait_for 10 pid_gone "$pid" || fail "daemon $pid still running after umount"
[ "$(cairn mounts --json | jq length)" = 0 ] || fail "record left: $(cairn mounts --json)"
cairn umount "$mnt"
mkdir "$T/never"
cairn umount "$T/never"
cairn rm test:1 >/dev/null
ok "umount complete and idempotent; rm after umount"
