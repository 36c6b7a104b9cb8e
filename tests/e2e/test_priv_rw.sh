#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_priv_rw.sh — what a local user (nobody) can do to root's files
# through root's writable (--rw) mount, beyond what the kernel's permission
# checks allow on the view:
# - no entry may be named .wh.NAME or .wh..wh..opq (create, mknod, mkdir,
#   symlink, link, rename: EPERM), since cairn commit would turn it into
#   a whiteout: a user who may not delete root's file in a sticky directory
#   would have it missing from the committed image although the rw view
#   showed it. The committed image equals the rw view.
# - a name a symlink no longer has is never acted on: nobody's
#   `ln -s x s; ln s x; rm x`, then root's new x (0600), then nobody's
#   utimensat of s (through an fd held on it) or read of its xattrs reach
#   s, never root's x.
# Each fails without its fix (nobody's .wh.secret made, secret missing from
# the commit; root's x given 2001-01-01 and its security.* xattr read).
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib mount
set -e

mkdir -p "$T/src/tmp"
chmod 1777 "$T/src/tmp"
echo root >"$T/src/tmp/secret"
tar -C "$T/src" --numeric-owner --owner=0 --group=0 -cf "$T/base.tar" .
cairn import priv:1 "$T/base.tar" >/dev/null
mnt=$T/mnt
mkdir "$mnt"
chmod 0755 "$T" # nobody may reach the mount (the store keeps its own 0700)
cairn mount -q --rw priv:1 "$mnt"
t=$mnt/tmp

# ---- reserved names: refused with EPERM, whoever asks
as_nobody rm -f "$t/secret" 2>/dev/null && fail "nobody removed root's file from a sticky directory"
as_nobody sh -c "echo mine >'$t/mine'"
as_nobody mkdir "$t/mydir"
try() { # WHAT COMMAND...: COMMAND must fail with EPERM
  local what=$1
  shift
  if "$@" 2>"$T/stderr"; then fail "$what succeeded"; fi
  grep -q "Operation not permitted" "$T/stderr" || fail "$what: $(cat "$T/stderr")"
}
try "create .wh.secret" as_nobody touch "$t/.wh.secret"
try "create .wh..wh..opq" as_nobody touch "$t/.wh..wh..opq"
try "mkdir .wh..wh..opq" as_nobody mkdir "$t/mydir/.wh..wh..opq"
try "mkfifo .wh.secret" as_nobody mkfifo "$t/.wh.secret"
try "symlink .wh.secret" as_nobody ln -s mine "$t/.wh.secret"
try "link .wh.secret" as_nobody ln "$t/mine" "$t/.wh.secret"
try "rename to .wh.secret" as_nobody mv -T "$t/mine" "$t/.wh.secret"
try "rename a directory to .wh.secret" as_nobody mv -T "$t/mydir" "$t/.wh.secret"
try "root's create of .wh." touch "$t/.wh."
try "root's mkdir of .wh.x" mkdir "$mnt/.wh.x"
[ "$(ls -A "$t" | sort | tr '\n' ' ')" = "mine mydir secret " ] || fail "the view: $(ls -A "$t")"
id=$(cairn commit "$mnt" priv:2)
cairn export priv:2 | tar -tf - | sed 's|^\./||' | sort >"$T/committed"
grep -qx "tmp/secret" "$T/committed" || fail "root's secret is not in the commit"
! grep -q "\.wh\." "$T/committed" || fail "the commit has whiteouts: $(grep wh "$T/committed")"
grep -qx "tmp/mine" "$T/committed" || fail "nobody's file is not in the commit"
ok "names .wh.* refused (EPERM) on every way to make a name; the commit ($id) equals the view"

# (Unmounted at exit: a busy answer, when another test's mount namespace
# copied this mount meanwhile, is no failure of this one.)

# ---- a symlink's stale place: nobody links symlink s as x and removes x
# (the place the server recorded for s), root makes a new x; nobody then
# sets s's times and reads its xattrs through an fd held on s (no lookup
# that would record s's place again).
mnt=$T/mnt2
t=$mnt/tmp
mkdir "$mnt"
cairn mount -q --rw priv:1 "$mnt"
sync_dir=$T/sync
mkdir "$sync_dir"
chmod 0777 "$sync_dir"
as_nobody /usr/bin/python3 - "$t" "$sync_dir" >"$T/nobody.out" 2>&1 <<'PY' &
import ctypes, errno, os, sys, time
d, sync = sys.argv[1:3]
def wait(name):
    for _ in range(400):
        if os.path.exists(os.path.join(sync, name)):
            return
        time.sleep(0.05)
    sys.exit("no " + name)
os.chdir(d)
os.symlink("x", "s")
fd = os.open("s", os.O_PATH | os.O_NOFOLLOW)
os.link("s", "x", follow_symlinks=False)
os.unlink("x")
open(os.path.join(sync, "ready"), "w").close()
wait("go")
libc = ctypes.CDLL(None, use_errno=True)
class timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]
ts = (timespec * 2)(timespec(978307200, 0), timespec(978307200, 0))  # 2001-01-01
AT_EMPTY_PATH, AT_SYMLINK_NOFOLLOW = 0x1000, 0x100
if libc.utimensat(fd, b"", ts, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) != 0:
    print("utimensat:", os.strerror(ctypes.get_errno()))
try:
    print("xattr:", os.getxattr("/proc/self/fd/%d" % fd, "security.t"))
except OSError as e:
    print("xattr:", errno.errorcode[e.errno])
print("names:", sorted(os.listxattr("/proc/self/fd/%d" % fd)))
PY
nobody_pid=$!
BG_PIDS+=("$nobody_pid")
wait_for 20 test -e "$sync_dir/ready" || fail "nobody's links: $(cat "$T/nobody.out")"
echo secret >"$t/x"
chmod 0600 "$t/x"
touch -d @1577836800 "$t/x" # 2020-01-01
python3 -c 'import os, sys; os.setxattr(sys.argv[1], "security.t", b"secret")' "$t/x"
touch "$sync_dir/go"
wait "$nobody_pid" || fail "nobody: $(cat "$T/nobody.out")"
upper_x=$(ls -d "$STORE"/uppers/*/root/tmp/x)
[ "$(stat -c %Y "$upper_x")" = 1577836800 ] ||
  fail "nobody's utimensat of s changed root's x: $(stat -c %y "$upper_x")"
grep -qx "xattr: ENODATA" "$T/nobody.out" || fail "nobody read root's x's xattr: $(cat "$T/nobody.out")"
grep -qx "names: \[\]" "$T/nobody.out" || fail "nobody listed x's xattrs: $(cat "$T/nobody.out")"
! grep -q utimensat "$T/nobody.out" || fail "$(cat "$T/nobody.out")"
[ "$(stat -c %Y "$t/s")" = 978307200 ] || fail "s's mtime: $(stat -c %y "$t/s")"
[ "$(cat "$t/x")" = secret ] || fail "root's x: $(cat "$t/x")"
ok "a symlink's times and xattrs are its own, never those of a later entry at a name it lost"
