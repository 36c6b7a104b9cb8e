#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_mount_rw.sh — `cairn mount --rw`: a writable mount whose changes go
# to a private upper layer in the store. Untouched, it shows exactly the
# image's tree; copy-up keeps content, mode, owner, times, xattrs, inode
# numbers and hardlinks; deletes leave whiteouts (character devices 0/0 in
# the upper) and a directory made where a lower one was is empty (opaque);
# renames (plain, RENAME_NOREPLACE, RENAME_EXCHANGE) across lower and
# upper, links to lower files, symlinks, fifos, chmod/chown/utimens,
# xattrs (the daemon's trusted.cairn.* never shown; a symlink's whatever
# names it has left), fsync and statfs work; and the image itself is unchanged, byte for byte, afterwards.
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib mount
set -e

$FSTREE make-layers "$T/layers"
cairn import test:1 "$T"/layers/layer{1,2,3}.tar >/dev/null
cairn export test:1 >"$T/before.tar"
$FSTREE expect "$T"/layers/layer{1,2,3}.tar >"$T/want"
m=$T/mnt
mkdir "$m"

cairn mount --rw test:1 "$m" >/dev/null
is_mounted "$m" || fail "cairn mount --rw returned but $m is not mounted"
[ "$(cairn mounts --json | jq -r '.[0].rw')" = true ] || fail "mounts: rw is not true"
upper=$(find "$STORE/uppers" -mindepth 1 -maxdepth 1 -type d ! -name '.*')
[ "$(echo "$upper" | wc -l)" = 1 ] && [ -d "$upper/root" ] || fail "no upper in $STORE/uppers"
[ "$(stat -c %a "$STORE/uppers")" = 700 ] && [ "$(stat -c %a "$upper")" = 700 ] ||
  fail "uppers are not 0700"
flock -n "$upper" true && fail "the upper is not locked by its daemon"
grep -q " rw," <(awk -v d="$m" '$5 == d' /proc/self/mountinfo) || fail "not mounted rw"
ok "mount --rw: recorded rw, upper in the store, 0700, locked"

$FSTREE scan "$m" >"$T/got"
diff -u "$T/want" "$T/got" || fail "untouched rw mount differs from the image"
ok "untouched, it shows the image's tree ($(wc -l <"$T/got") entries)"

# Copy-up by an open for writing that writes nothing: every attribute kept.
row() { grep -P "^$1\t" "$T/got"; }
ino_before=$(stat -c %i "$m/data/x")
for f in data/x bin/suid hard/orig; do : >>"$m/$f"; done
[ -f "$upper/root/data/x" ] || fail "data/x was not copied up"
$FSTREE scan "$m" >"$T/got2"
diff -u "$T/got" "$T/got2" || fail "copy-up changed what the mount shows"
[ "$(stat -c %i "$m/data/x")" = "$ino_before" ] || fail "copy-up changed the inode number"
ok "copy-up keeps content, mode, owner, times, xattrs, security.capability, inode, hardlinks"

echo more >>"$m/hard/orig"
[ "$(tail -1 "$m/hard/a_link")" = more ] || fail "a write to a copied-up hardlink is not seen by its other name"
[ "$(stat -c %i "$m/hard/orig")" = "$(stat -c %i "$m/hard/a_link")" ] || fail "hardlink identity lost"
ok "hardlinks stay one file after copy-up"

# Whiteouts and opaque directories.
rm "$m/etc/config"
[ ! -e "$m/etc/config" ] && ! ls "$m/etc" | grep -qx config || fail "deleted file still visible"
[ "$(stat -c '%F %t:%T' "$upper/root/etc/config")" = "character special file 0:0" ] ||
  fail "no whiteout in the upper: $(stat -c '%F %t:%T' "$upper/root/etc/config")"
rm -r "$m/usr"
[ ! -e "$m/usr" ] || fail "deleted tree still visible"
mkdir "$m/usr"
[ -z "$(ls -A "$m/usr")" ] || fail "a directory made over a deleted one is not opaque: $(ls -A "$m/usr")"
ok "whiteouts and opaque directories"

# Renames: files and directories, lower and upper, flags.
mv "$m/etc/os-release" "$m/os-release"
[ ! -e "$m/etc/os-release" ] && grep -q . "$m/os-release" || fail "rename of a lower file"
mv "$m/bin" "$m/bin2"
[ -f "$m/bin2/suid" ] && [ ! -e "$m/bin" ] || fail "rename of a lower directory"
echo a >"$m/ra"
echo b >"$m/rb"
python3 - "$m" <<'EOF' || fail "renameat2 flags"
import ctypes, os, sys
m = sys.argv[1]
libc = ctypes.CDLL(None, use_errno=True)
def r2(a, b, flags):
    if libc.renameat2(-100, os.path.join(m, a).encode(), -100, os.path.join(m, b).encode(), flags) != 0:
        return ctypes.get_errno()
    return 0
assert r2("ra", "rb", 1) == 17, "NOREPLACE onto an upper file"
assert r2("ra", "empty.txt", 1) == 17, "NOREPLACE onto a lower file"
assert r2("ra", "rb", 2) == 0, "EXCHANGE"
assert open(os.path.join(m, "ra")).read() == "b\n" and open(os.path.join(m, "rb")).read() == "a\n"
assert r2("ra", "data/x", 2) == 0, "EXCHANGE with a lower file"
assert open(os.path.join(m, "ra")).read() == "xattrs\n" and open(os.path.join(m, "data/x")).read() == "b\n"
assert r2("ra", "nothere", 2) == 2, "EXCHANGE with nothing"
EOF
ok "renames (lower and upper, files and directories, NOREPLACE, EXCHANGE)"

# Links, symlinks, fifos, devices.
ln "$m/empty.txt" "$m/hl"
[ "$(stat -c %i "$m/empty.txt")" = "$(stat -c %i "$m/hl")" ] && [ "$(stat -c %h "$m/hl")" = 2 ] ||
  fail "link to a lower file"
ln -s target "$m/sl"
[ "$(readlink "$m/sl")" = target ] || fail "symlink"
mkfifo "$m/ff"
[ -p "$m/ff" ] || fail "mkfifo"
mknod "$m/nulldev" c 1 3
[ "$(stat -c '%t:%T' "$m/nulldev")" = 1:3 ] || fail "mknod"
ok "link (to a lower file), symlink, mkfifo, mknod"

# chmod, chown, utimens, xattrs, fsync, statfs.
chmod 0600 "$m/big.bin"
chown 12:34 "$m/big.bin"
touch -m -d @1234567890 "$m/big.bin"
[ "$(stat -c '%a %u:%g %Y %s' "$m/big.bin")" = "600 12:34 1234567890 $(stat -c %s "$upper/root/big.bin")" ] ||
  fail "chmod/chown/utimens: $(stat -c '%a %u:%g %Y %s' "$m/big.bin")"
python3 - "$m" <<'EOF' || fail "xattrs"
import os, sys
m = sys.argv[1]
f = os.path.join(m, "owner")
os.setxattr(f, "user.k", b"v")
assert os.getxattr(f, "user.k") == b"v"
os.removexattr(f, "user.k")
assert "user.k" not in os.listxattr(f)
for p in ("data/x", "hl", "bin2", "owner"):
    assert not [x for x in os.listxattr(os.path.join(m, p)) if x.startswith("trusted.cairn")], p
try:
    os.setxattr(f, "trusted.cairn.origin", b"1")
    raise SystemExit("trusted.cairn.* settable")
except PermissionError:
    pass
fd = os.open(os.path.join(m, "synced"), os.O_CREAT | os.O_WRONLY, 0o644)
os.write(fd, b"durable\n")
os.fsync(fd)
os.close(fd)
dfd = os.open(m, os.O_RDONLY)
os.fsync(dfd)
os.close(dfd)
EOF
[ "$(cat "$upper/root/synced")" = durable ] || fail "fsynced data is not in the upper"
[ "$(stat -f -c %a "$m")" -gt 0 ] || fail "statfs: no free blocks"
ok "chmod, chown, utimens, xattrs (trusted.cairn.* hidden), fsync, statfs"

# Truncate and fallocate.
truncate -s 5 "$m/os-release"
[ "$(stat -c %s "$m/os-release")" = 5 ] || fail "truncate"
fallocate -l 1M "$m/falloc"
[ "$(stat -c %s "$m/falloc")" = 1048576 ] || fail "fallocate"
ok "truncate, fallocate"

cairn umount "$m" >/dev/null
not_mounted "$m" || fail "still mounted"
cairn export test:1 >"$T/after.tar"
cmp "$T/before.tar" "$T/after.tar" || fail "the image's export changed"
# xattrs of a symlink or fifo act on the object whatever names it has
# left, as on ext4: with several names in the image, through one after the
# name the server knew it by is removed; one made here, through an
# O_PATH fd after its last name is removed; one whose names went while
# copied up (an image's hardlinked symlink, its directory renamed, its
# other names removed), after cairn commit moved the mount (before: ENOENT
# in the last two cases).
mkdir -p "$T/ls/d" "$T/ls/e"
ln -s t "$T/ls/d/s"
ln "$T/ls/d/s" "$T/ls/d/s2"
ln "$T/ls/d/s" "$T/ls/e/s3"
mkfifo "$T/ls/d/p"
ln "$T/ls/d/p" "$T/ls/d/p2"
tar -C "$T/ls" --numeric-owner -cf "$T/ls.tar" .
cairn import lnk:1 "$T/ls.tar" >/dev/null
cairn mount --rw lnk:1 "$m" >/dev/null
python3 - "$m" "$STORE" <<'EOF' || fail "xattrs of symlinks and fifos with several names"
import os, subprocess, sys
m, store = sys.argv[1:3]
def xattrs(p, what, f=False):  # f: follow (a /proc/self/fd link: to the symlink)
    os.setxattr(p, "trusted.k", b"v", follow_symlinks=f)
    assert os.getxattr(p, "trusted.k", follow_symlinks=f) == b"v", what
    assert "trusted.k" in os.listxattr(p, follow_symlinks=f), what
    os.removexattr(p, "trusted.k", follow_symlinks=f)
    assert "trusted.k" not in os.listxattr(p, follow_symlinks=f), what
    os.setxattr(p, "security.t", b"w", follow_symlinks=f)
    assert os.getxattr(p, "security.t", follow_symlinks=f) == b"w", what
os.chdir(m)
for a, b in (("d/s", "d/s2"), ("d/p", "d/p2")):
    os.lstat(a)
    os.lstat(b)
    os.unlink(a)
    xattrs(b, b)
os.symlink("x", "n")
os.link("n", "n2", follow_symlinks=False)
fd = os.open("n", os.O_PATH | os.O_NOFOLLOW)
os.unlink("n")
xattrs("n2", "n2")
os.unlink("n2")
try:
    xattrs("/proc/self/fd/%d" % fd, "a symlink without a name, by its O_PATH fd", True)
except OSError as e:
    sys.exit("a symlink without a name, by its O_PATH fd: %s" % e)
os.close(fd)
os.utime("e/s3", ns=(10**18, 10**18), follow_symlinks=False)  # its copy-up
os.rename("e", "f")
os.unlink("d/s2")
subprocess.run(["cairn", "--store", store, "commit", "-q", m, "lnk:2"], check=True,
               stdout=subprocess.DEVNULL)
try:
    assert os.getxattr("f/s3", "security.t", follow_symlinks=False) == b"w"
    xattrs("f/s3", "f/s3 after the commit")
except OSError as e:
    sys.exit("a symlink whose names went while copied up, after the commit: %s" % e)
EOF
cairn umount "$m" >/dev/null
ok "xattrs of a symlink or fifo act on it whatever names it has left"

cairn mount test:1 "$m" >/dev/null
$FSTREE scan "$m" >"$T/ro"
diff -u "$T/want" "$T/ro" || fail "the image's tree changed"
cairn umount "$m" >/dev/null
ok "the image is unchanged, byte for byte"
