#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_commit_names.sh — a file the kernel holds whose last-seen name was
# removed while it kept another (ln A C; rm A, for a file, a symlink, and a
# file in a subdirectory, a file of the image with several names whose
# other names are the image's) is, after `cairn commit` moved the mount onto
# its new image, the file at its other name: its link count is its names'
# (not 0) and a symlink's xattr calls answer (not ENOENT), through the
# nodeid the kernel holds, with no new lookup.
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
