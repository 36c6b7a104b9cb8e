#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_mount_large.sh — a file over 4 GiB comes through a cairnfs mount
# whole: its size, bytes at offsets past 4 GiB, and its sha256.
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib mount
set -e

# It needs the tar and the blob at once: about 9 GiB.
free_kib=$(df -Pk "$T" | awk 'NR == 2 { print $4 }')
if [ "$free_kib" -lt $((10 << 20)) ]; then
  echo "# skipped: $((free_kib >> 20)) GiB free under $T, 10 GiB needed"
  exit 0
fi

size=$(((4 << 30) + 12345))
want_sha=$(python3 - "$T/layer.tar" "$size" <<'PY'
import hashlib, struct, sys, tarfile
path, size = sys.argv[1], int(sys.argv[2])
BLOCK = 1 << 20

class Pattern:
    """Block i is its index as 8 little-endian bytes, repeated."""
    def __init__(self):
        self.pos, self.sha = 0, hashlib.sha256()
    def read(self, n):
        n = min(n, size - self.pos)
        out = bytearray()
        while len(out) < n:
            i, off = divmod(self.pos + len(out), BLOCK)
            blk = struct.pack("<Q", i) * (BLOCK // 8)
            out += blk[off:off + n - len(out)]
        self.pos += n
        self.sha.update(out)
        return bytes(out)

src = Pattern()
with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tf:
    ti = tarfile.TarInfo("huge.bin")
    ti.size, ti.mode, ti.mtime = size, 0o640, 1700000000
    tf.addfile(ti, src)
print(src.sha.hexdigest())
PY
)
cairn import large:1 "$T/layer.tar" >/dev/null
rm -f "$T/layer.tar"
mnt=$T/mnt
mkdir "$mnt"
cairn mount large:1 "$mnt"

[ "$(stat -c %s "$mnt/huge.bin")" = "$size" ] || fail "size $(stat -c %s "$mnt/huge.bin")"
# The last 8-byte word of block 4096 (offset 4 GiB + 1 MiB - 8) is 4096.
got=$(dd if="$mnt/huge.bin" bs=1 skip=$(((4 << 30) + 4096)) count=8 status=none | od -An -v -tx1 | tr -d " \n")
[ "$got" = 0010000000000000 ] || fail "bytes past 4 GiB: $got"
[ "$(tail -c 6 "$mnt/huge.bin" | od -An -v -tx1 | tr -d " \n")" = 000000000000 ] || fail "tail"
got_sha=$(sha256sum <"$mnt/huge.bin" | cut -d' ' -f1)
[ "$got_sha" = "$want_sha" ] || fail "sha256 $got_sha, wanted $want_sha"
ok "a $size-byte file reads back whole"

cairn umount "$mnt"
