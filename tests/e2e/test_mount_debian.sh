#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_mount_debian.sh — a real Debian bookworm minbase rootfs (debootstrap,
# cached) split into three layer tars, plus a fourth layer that deletes and
# replaces real paths: the cairnfs mount equals, entry by entry, the tree
# fstree.py derives from the same tars by the OCI rules.
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib mount
set -e

minbase_layers "$T/layers"
python3 - "$T/layers/layer4.tar" <<'PY'
import io, sys, tarfile
with tarfile.open(sys.argv[1], "w", format=tarfile.PAX_FORMAT) as tf:
    def add(name, data=None, kind=tarfile.REGTYPE, mode=0o644):
        ti = tarfile.TarInfo(name)
        ti.type, ti.mode, ti.mtime = kind, mode, 1700000000
        if data is not None:
            ti.size = len(data)
        tf.addfile(ti, io.BytesIO(data) if data is not None else None)
    add("usr/share/.wh.doc", b"")                         # a big subtree goes
    add("usr/share/zoneinfo/", kind=tarfile.DIRTYPE, mode=0o755)
    add("usr/share/zoneinfo/.wh..wh..opq", b"")           # lower contents go
    add("usr/share/zoneinfo/UTC", b"TZif-not-really\n")
    add("etc/hostname", b"cairn\n")                       # a file replaced
    add("etc/.wh.motd", b"")
    add("usr/bin/.wh.perl", b"")                          # one of a hardlink pair
    add("var/log", b"a file where a directory was\n")
PY
cairn import debian:12 "$T"/layers/layer{1,2,3,4}.tar >/dev/null
mnt=$T/mnt
mkdir "$mnt"
start=$(date +%s%N)
cairn mount debian:12 "$mnt"
echo "# mount took $((($(date +%s%N) - start) / 1000000)) ms"

$FSTREE expect "$T"/layers/layer{1,2,3,4}.tar >"$T/want"
$FSTREE scan "$mnt" >"$T/got"
diff -u "$T/want" "$T/got" >"$T/diff" || fail "tree differs: $(head -40 "$T/diff")"
[ "$(wc -l <"$T/got")" -gt 4000 ] || fail "only $(wc -l <"$T/got") entries"
[ ! -e "$mnt/usr/share/doc" ] && [ "$(ls "$mnt/usr/share/zoneinfo")" = UTC ] ||
  fail "whiteouts not applied"
grep -q 'Debian GNU/Linux 12' "$mnt/etc/os-release" || fail "os-release"
ok "Debian minbase tree matches ($(wc -l <"$T/got") entries)"

# A real program runs from the mount.
chroot "$mnt" /bin/sh -c 'echo hello from $(cat /etc/hostname)' | grep -q "hello from cairn" ||
  fail "chroot into the mount"
ok "chroot runs /bin/sh from the mount"

cairn umount "$mnt"
not_mounted "$mnt" || fail "umount"
