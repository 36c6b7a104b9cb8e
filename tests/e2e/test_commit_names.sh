#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_commit_names.sh — a file the kernel holds whose last-seen name was
# removed while it kept another (ln A C; rm A, for a file, a symlink, and a
# file in a subdirectory, a file of the image with several names whose
# other names are the image's) is, after `cairn commit` moved the mount onto
# its new image, the file at its other name: its link count is its names'
# (not 0) and a symlink's xattr calls answer (not ENOENT), through the
# nodeid the kernel holds, with no new lookup. The same for a symlink and
# a file of the image with three names whose other two are in a directory
# renamed before the commit, and what changes through them
# after the move is in the next commit.
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib mount
set -e

$FSTREE make-layers "$T/layers"
cairn import test:1 "$T"/layers/layer{1,2,3}.tar >/dev/null
m=$T/mnt
mkdir "$m"
cairn mount --rw test:1 "$m" >/dev/null

python3 - "$m" "$CAIRN_BIN/cairn" "$STORE" >"$T/stdout" 2>&1 <<'PY' || { cat "$T/stdout"; fail "the names after the move"; }
import os, subprocess, sys, time
m, cairn, store = sys.argv[1:4]
os.chdir(m)
os.symlink("n1", "S"); os.link("S", "B")
os.unlink("B")  # S's last-seen name
with open("A", "w") as f: f.write("a")
os.link("A", "C"); os.unlink("A")
os.mkdir("sub")
with open("sub/E", "w") as f: f.write("e")
os.link("sub/E", "sub/G"); os.link("sub/E", "H"); os.unlink("sub/E")
lower = os.open("hard/a_link", os.O_PATH)  # hard/orig's, three names in the image
os.unlink("hard/a_link")
# held by the kernel through these, never looked up again below
fds = {n: os.open(n, os.O_PATH | os.O_NOFOLLOW) for n in ("S", "C", "H")}
subprocess.run([cairn, "--store", store, "commit", "-q", m, "moved:1"], check=True,
               stdout=subprocess.DEVNULL)
time.sleep(1.5)  # past the attribute cache
bad = []
fds["hard/a_link"] = lower
for n, want in (("S", 1), ("C", 1), ("H", 2), ("hard/a_link", 2)):
    got = os.fstat(fds[n]).st_nlink
    if got != want:
        bad.append("%s has %d links after the move, not %d" % (n, got, want))
try:
    os.listxattr("/proc/self/fd/%d" % fds["S"])
except OSError as e:
    bad.append("listxattr of the symlink after the move: %s" % e)
try:
    os.getxattr("/proc/self/fd/%d" % fds["S"], "user.x")
    bad.append("getxattr user.x of the symlink answered")
except OSError as e:
    if e.errno != 61:
        bad.append("getxattr of the symlink after the move: %s" % e)
with open("C") as f:
    if f.read() != "a":
        bad.append("C's bytes changed")
print("\n".join(bad) or "all good")
sys.exit(1 if bad else 0)
PY
ok "after the move, files held at a removed name are at their other names (links, xattrs)"

# A symlink of the image with three names, one in another directory (the
# differential test's case): every name looked up, opt/app/s3 removed, the
# directory of the other two moved, then cairn commit. The one inode the
# kernel holds is, after the move, the file at etc/n2/s and etc/n2/s2 (two
# links, not an orphan of the old upper), and what is changed through it
# afterwards is in the next commit. A regular file with the same names is
# the control.

python3 - "$T/l.tar" "$HELPERS" <<'PY'
import sys
sys.path.insert(0, sys.argv[2])
import fstree
L = fstree.Layer(sys.argv[1])
L.add("./", "dir", mtime=1500000000)
for d in ("etc/", "opt/", "opt/app/", "opt/l2dir/"):
    L.add(d, "dir")
L.add("opt/app/g", data=b"g\n")
L.add("opt/l2dir/s", "lnk", target="../app/g", mode=0o777)
L.add("opt/l2dir/s2", "hard", target="opt/l2dir/s")
L.add("opt/app/s3", "hard", target="opt/l2dir/s")
L.add("opt/l2dir/f", data=b"f\n")
L.add("opt/l2dir/f2", "hard", target="opt/l2dir/f")
L.add("opt/app/f3", "hard", target="opt/l2dir/f")
L.close()
PY
cairn import sym:1 "$T/l.tar" >/dev/null
m2=$T/mnt2
mkdir "$m2"
cairn mount --rw sym:1 "$m2" >/dev/null

python3 - "$m2" "$CAIRN_BIN/cairn" "$STORE" >"$T/stdout" 2>&1 <<'PY' || { cat "$T/stdout"; fail "a hardlinked symlink in a moved directory"; }
import os, subprocess, sys
m, cairn, store = sys.argv[1:4]
os.chdir(m)
# held by the kernel through these; opt/app/s3 and f3 looked up last
fds = {n: os.open("opt/l2dir/" + n, os.O_PATH | os.O_NOFOLLOW) for n in ("s", "s2", "f", "f2")}
os.lstat("opt/app/s3"); os.lstat("opt/app/f3")
os.unlink("opt/app/s3"); os.unlink("opt/app/f3")
os.rename("opt/l2dir", "etc/n2")
subprocess.run([cairn, "--store", store, "commit", "-q", m, "sym:2"], check=True,
               stdout=subprocess.DEVNULL)
bad = []
for n, fd in fds.items():
    got = os.fstat(fd).st_nlink
    if got != 2:
        bad.append("etc/n2/%s has %d links after the move, not 2" % (n, got))
for n in ("s", "f"):
    p = "/proc/self/fd/%d" % fds[n]
    os.utime(p, ns=(1234567890 * 10**9, 1234567890 * 10**9))
    os.setxattr(p, "trusted.t", b"v")
subprocess.run([cairn, "--store", store, "commit", "-q", m, "sym:3"], check=True,
               stdout=subprocess.DEVNULL)
print("\n".join(bad) or "all good")
sys.exit(1 if bad else 0)
PY
ok "after the move, a hardlinked symlink of the image in a moved directory keeps its names"

m3=$T/mnt3
mkdir "$m3"
cairn mount sym:3 "$m3" >/dev/null
python3 - "$m3" >"$T/stdout" 2>&1 <<'PY' || { cat "$T/stdout"; fail "the next commit"; }
import os, sys
os.chdir(sys.argv[1])
bad = []
for n in ("etc/n2/s", "etc/n2/s2", "etc/n2/f", "etc/n2/f2"):
    st = os.lstat(n)
    if st.st_mtime_ns != 1234567890 * 10**9:
        bad.append("%s: mtime %d not committed" % (n, st.st_mtime_ns))
    if st.st_nlink != 2:
        bad.append("%s: %d links in the image, not 2" % (n, st.st_nlink))
for n in ("etc/n2/s", "etc/n2/s2", "etc/n2/f", "etc/n2/f2"):
    try:
        if os.getxattr(n, "trusted.t", follow_symlinks=False) != b"v":
            bad.append("%s: trusted.t changed" % n)
    except OSError as e:
        bad.append("%s: trusted.t not committed: %s" % (n, e))
for n in ("opt/app/s3", "opt/app/f3", "opt/l2dir"):
    if os.path.lexists(n):
        bad.append("%s is in the image" % n)
print("\n".join(bad) or "all good")
sys.exit(1 if bad else 0)
PY
ok "what changed through it after the move is in the next commit"

# Inode numbers after the move, across the kernel's forgets: a file made in
# the mount that sorts first shifts the new image's numbers of the files
# after it, so that each file the kernel held at the move is, in the new
# image, the number another of them had. The caches dropped (the kernel
# forgets them), each is looked up again: it keeps the st_ino it had (as on
# a local file system), and no two files show the same one (tar's, rsync's
# hardlink detection and find -inum rely on it). Twice, so that a file
# first looked up after the move keeps its number too; then again after a
# kill -9 of the mount's server (the next one serves the same numbers);
# after a next commit they are that image's numbers.
python3 - "$T/n.tar" "$HELPERS" <<'PY'
import sys
sys.path.insert(0, sys.argv[2])
import fstree
L = fstree.Layer(sys.argv[1])
L.add("./", "dir", mtime=1500000000)
L.add("d/", "dir")
for k in range(12):
    L.add("d/f%02d" % k, data=b"f%02d\n" % k)
L.close()
PY
cairn import num:1 "$T/n.tar" >/dev/null
m4=$T/mnt4
mkdir "$m4"
cairn mount --rw num:1 "$m4" >/dev/null
sup=$(mount_pid "$m4")
python3 - "$m4" "$CAIRN_BIN/cairn" "$STORE" "$sup" >"$T/stdout" 2>&1 <<'PY' || { cat "$T/stdout"; fail "inode numbers across forgets"; }
import os, signal, subprocess, sys, time
m, cairn, store, sup = sys.argv[1:5]
names = ["d/a00"] + ["d/f%02d" % k for k in range(12)]
later = ["d/f%02d" % k for k in range(6, 12)]  # first looked up after the move
with open(os.path.join(m, "d/a00"), "w") as f:
    f.write("a00\n")
def scan(which):
    got = {}
    for n in which:
        with open(os.path.join(m, n)) as f:
            got[n] = (os.fstat(f.fileno()).st_ino, f.read())
    return got
def drop():
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("2")
    time.sleep(0.3)  # the FORGETs reach the server
scan(n for n in names if n not in later)
subprocess.run([cairn, "--store", store, "commit", "-q", m, "num:2"], check=True,
               stdout=subprocess.DEVNULL)
scans = [scan(names)]
for _ in range(2):
    drop()
    scans.append(scan(names))
drop()  # forgotten by this server, looked up by the next
with open("/proc/%s/task/%s/children" % (sup, sup)) as f:
    server = int(f.read().split()[0])
os.kill(server, signal.SIGKILL)
for _ in range(50):  # 5 s at most
    if not os.path.exists("/proc/%d" % server):
        break
    time.sleep(0.1)
scans.append(scan(names))
# A next commit, none of them held: each gets its number in that image
# (the numbers given before are no longer kept for anyone).
drop()
subprocess.run([cairn, "--store", store, "commit", "-q", m, "num:3"], check=True,
               stdout=subprocess.DEVNULL)
drop()
last = scan(names)
bad = []
for k, s in enumerate(scans[1:], 1):
    for n in names:
        if s[n][0] != scans[0][n][0]:
            bad.append("%s: st_ino %d after the forget %d (3: a restart), %d before"
                       % (n, s[n][0], k, scans[0][n][0]))
files = {}
for s in scans:
    for n, (ino, data) in s.items():
        files.setdefault(ino, set()).add(data)
big = [n for n, (ino, _) in last.items() if ino >= 1 << 62]
if big or len({ino for ino, _ in last.values()}) != len(names):
    bad.append("after the next commit: %s" % sorted((n, v[0]) for n, v in last.items()))
for ino, datas in sorted(files.items()):
    if len(datas) > 1:
        bad.append("st_ino %d is %d different files: %s" % (ino, len(datas), sorted(datas)))
print("\n".join(bad) or "all good")
sys.exit(1 if bad else 0)
PY
ok "after the move a file keeps its st_ino when the kernel forgets it, and none shares one"
