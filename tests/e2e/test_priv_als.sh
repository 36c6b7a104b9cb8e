#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_priv_als.sh — any user's lookups cannot grow the ALS daemon
# (cairnfs --als, mounted by root, allow_other): `nobody` looks up 50,000
# made-up base64 reference names, names nested under them and made-up
# sha256: layer names; the daemon's resident memory (VmRSS) grows by less
# than 1 MiB (it grew by 4.6 MiB before, each of the 100,000 reference
# names kept forever and found by a linear scan: the lookups took 93 s,
# 24 s now; not measured under a sanitizer, whose quarantine keeps freed
# memory). The
# recorded layer is still served under a reference directory after it,
# and under many reference directories at once.
source "$(dirname "$0")/../lib/test-lib.sh"
OCI_IMAGE="python3 $HELPERS/oci_image.py"

# An image pulled from an OCI layout: its compressed layer is kept, the ALS serves it.
mkdir -p "$T/l" "$T/als"
echo hi >"$T/l/file"
mktar "$T/l" "$T/l.tar"
(cd "$T" && $OCI_IMAGE add oci app linux/amd64 l.tar:gzip >/dev/null) || exit 1
cairn pull -q "oci:$T/oci:app" app:1 >/dev/null || exit 1
digest=$(ls "$T/oci/blobs/sha256" | while read -r b; do
  [ "$(head -c 2 "$T/oci/blobs/sha256/$b" | od -An -tx1 | tr -d ' ')" = 1f8b ] && echo "sha256:$b"
done)
[ -n "$digest" ] || exit 1

chmod 0755 "$T"
cairnfs --als "$T/als" || exit 1
on_exit "umount -l '$T/als'"
pid=$(pgrep -f -n "cairnfs --als $T/als")
[ -n "$pid" ] || exit 1
rss() { awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status"; }

check "nobody reads the layer's diff under a reference directory" \
  as_nobody cat "$T/als/QUJD/$digest/diff/file"
before=$(rss)
start=$SECONDS
as_nobody timeout 300 python3 - "$T/als" "$digest" <<'EOF'
import base64, os, sys
root, digest = sys.argv[1], sys.argv[2]
for i in range(50000):
    ref = base64.b64encode(b"made-up/%d" % i).decode().replace("/", "+")
    for p in (f"{root}/{ref}", f"{root}/{ref}/QQ==", f"{root}/sha256:{i:064x}"):
        try:
            os.stat(p)
        except FileNotFoundError:
            pass
    if i % 100 == 0:  # the real layer under some of them: views come and go
        os.stat(f"{root}/{ref}/{digest}/diff/file")
EOF
check "the lookups ran (in $((SECONDS - start)) s)" [ $? = 0 ]
after=$(rss)
if sanitizer_build; then # ASan's quarantine keeps freed memory resident
  echo "# the daemon's RSS grew by $((after - before)) KiB: not checked under a sanitizer"
else
  check "the daemon's RSS grew by $((after - before)) KiB (of $before), less than 1 MiB" \
    [ $((after - before)) -lt 1024 ]
fi
check "the layer is still served" as_nobody cat "$T/als/QUJD/$digest/diff/file"
check "a made-up layer name is not found" as_nobody sh -c "! stat '$T/als/sha256:$(printf '%064d' 1)' 2>/dev/null"
check "the listing of a reference directory names the layer" \
  sh -c "setpriv --reuid=nobody --regid=nogroup --clear-groups ls '$T/als/QUJD' | grep -qx '$digest'"
finish
