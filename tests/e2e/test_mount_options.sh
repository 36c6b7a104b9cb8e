#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_mount_options.sh — an image's setuid binaries and device nodes do
# nothing for local users unless asked: every mount is nosuid,nodev (in
# /proc/self/mountinfo, and in effect: a setuid-root binary run by nobody
# stays nobody, a device node cannot be opened); `cairn mount --suid
# --dev` (cairnfs -o suid,dev, as mount -t fuse.cairnfs passes it) honours
# them, for a container root that needs them. Root's mounts stay
# allow_other (runtimes need it) with default_permissions.
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib mount
set -e

root=$T/root
mkdir -p "$root/bin" "$root/dev"
cp /usr/bin/id "$root/bin/id"
chmod 4755 "$root/bin/id"
mknod "$root/dev/zero" c 1 5
chmod 0666 "$root/dev/zero"
tar -C "$root" --numeric-owner --owner=0 --group=0 -cf "$T/layer.tar" .
cairn import app:1 "$T/layer.tar" >/dev/null
mnt=$T/mnt
mkdir "$mnt"
chmod 0711 "$T" # nobody may reach the mount (the store keeps its own 0700)

# mount_options DIR: the per-mount options of DIR in /proc/self/mountinfo.
mount_options() { awk -v d="$1" '$5 == d { o = $6 } END { print o }' /proc/self/mountinfo; }
# super_options DIR: its super block options (after the " - fstype source").
super_options() { awk -v d="$1" '$5 == d { o = $NF } END { print o }' /proc/self/mountinfo; }
has_opt() { tr , '\n' <<<"$1" | grep -qx "$2"; }

# ---- the default: nosuid,nodev
cairn mount app:1 "$mnt"
opts=$(mount_options "$mnt")
has_opt "$opts" nosuid && has_opt "$opts" nodev || fail "default options: $opts"
has_opt "$(super_options "$mnt")" allow_other || fail "allow_other: $(super_options "$mnt")"
has_opt "$(super_options "$mnt")" default_permissions || fail "default_permissions"
[ "$(stat -c %a "$mnt/bin/id")" = 4755 ] || fail "the setuid bit is not shown"
[ "$(as_nobody "$mnt/bin/id" -u)" = 65534 ] || fail "setuid-root ran as root on a nosuid mount"
as_nobody head -c 1 "$mnt/dev/zero" >/dev/null 2>&1 && fail "a device node opened on a nodev mount"
head -c 1 "$mnt/dev/zero" >/dev/null 2>&1 && fail "root opened a device node on a nodev mount"
cairn umount "$mnt"
ok "default mount: nosuid,nodev, allow_other,default_permissions; setuid and devices inert"

# ---- root's mount reads ahead 512 KiB (the FUSE default is 128 KiB)
# from the start: raised once INIT is answered, before the first open (a
# file opened earlier keeps the readahead it was opened with).
cairn mount app:1 "$mnt"
ra=$(cat "/sys/class/bdi/$(mountpoint -d "$mnt")/read_ahead_kb")
cairn umount "$mnt"
[ "$ra" = 512 ] || fail "a fresh mount reads ahead ${ra} KiB before any read, not 512"
ok "a fresh mount reads ahead 512 KiB before anything is read"

# ---- --suid --dev opt in
cairn mount --suid --dev app:1 "$mnt"
opts=$(mount_options "$mnt")
has_opt "$opts" nosuid || has_opt "$opts" nodev && fail "--suid --dev options: $opts"
[ "$(as_nobody "$mnt/bin/id" -u)" = 0 ] || fail "setuid-root did not run as root with --suid"
[ "$(as_nobody head -c 1 "$mnt/dev/zero" | od -An -tx1 | tr -d ' ')" = 00 ] ||
  fail "a device node did not open with --dev"
cairn umount "$mnt"
ok "cairn mount --suid --dev: setuid binaries and device nodes work"

# ---- one without the other
cairn mount --suid app:1 "$mnt"
opts=$(mount_options "$mnt")
! has_opt "$opts" nosuid && has_opt "$opts" nodev || fail "--suid options: $opts"
cairn umount "$mnt"
cairn mount app:1 "$mnt" --dev
opts=$(mount_options "$mnt")
has_opt "$opts" nosuid && ! has_opt "$opts" nodev || fail "--dev options: $opts"
cairn umount "$mnt"
ok "--suid and --dev each alone"

# ---- cairn mount -o OPTS passes them on as cairnfs -o (several -o join)
cairn mount -o suid app:1 "$mnt" -o dev
opts=$(mount_options "$mnt")
has_opt "$opts" nosuid || has_opt "$opts" nodev && fail "-o suid -o dev options: $opts"
cairn umount "$mnt"
cairn mount -o nodev,suid app:1 "$mnt"
opts=$(mount_options "$mnt")
! has_opt "$opts" nosuid && has_opt "$opts" nodev || fail "-o nodev,suid options: $opts"
cairn umount "$mnt"
ok "cairn mount -o OPTS: cairnfs's -o, several joined"

# ---- mount -t fuse.cairnfs: mount.fuse3 passes mount(8)'s own flags on
# (it adds "dev,suid" unless nodev / nosuid are given, as mount(8) mounts
# any file system), and cairnfs takes them as -o [no]suid / -o [no]dev.
mount -t fuse -o "store=$STORE,nosuid,nodev" "$CAIRN_BIN/cairnfs#app:1" "$mnt"
opts=$(mount_options "$mnt")
has_opt "$opts" nosuid && has_opt "$opts" nodev || fail "mount -t -o nosuid,nodev: $opts"
cairn umount "$mnt"
mount -t fuse -o "store=$STORE,suid,dev" "$CAIRN_BIN/cairnfs#app:1" "$mnt"
opts=$(mount_options "$mnt")
has_opt "$opts" nosuid || has_opt "$opts" nodev && fail "mount -t -o suid,dev options: $opts"
cairn umount "$mnt"
ok "mount -t fuse.cairnfs: -o nosuid,nodev and -o suid,dev reach cairnfs"

# ---- usage
cairn mount --help | grep -q -- "--suid" || fail "--help does not name --suid"
cairn mount --help | grep -q -- "--dev" || fail "--help does not name --dev"
expect_exit 2 "cairn mount --setuid app:1 $mnt" cairn mount --setuid app:1 "$mnt"
ok "cairn mount --help names --suid and --dev"
