#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_pull_integrity.sh — a pull commits nothing of an image whose blobs
# fail their descriptors: a corrupted layer (same size, other bytes) and a
# config with other bytes are exit 5 naming the blob; a blob the registry
# serves longer than its descriptor is cut off (exit 5); a blob the registry
# lost is an error naming it. The store stays clean (fsck), and once the
# registry is repaired the same pull succeeds. An expansion bomb, a layer
# of some 33 KB of zstd holding a file of 1 GiB of zeros, costs no disk:
# its blob keeps the zeros as holes, its bytes and digest the same.
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib registry
pull_test_init
setup $OCI_IMAGE layer base.tar base 10 4000
setup $OCI_IMAGE layer top.tar top 5 20000
setup $OCI_IMAGE add oci app linux/amd64 base.tar:gzip top.tar:zstd >/dev/null
manifest=$(jq -r '.manifests[0].digest' oci/index.json)
read -r config base_blob top_blob < <(jq -r '[.config.digest, .layers[0].digest, .layers[1].digest] | join(" ")' \
  "oci/blobs/sha256/${manifest#sha256:}")
setup registry_start "$T/reg"
setup registry_push "$T/oci" app team/app:1
src="docker://$REGISTRY/team/app:1"

no_image_committed() {
  [[ $(image_count) == 0 ]] || fail "an image was committed after: $1"
  cairn fsck >/dev/null 2>&1 || fail "fsck not clean after: $1"
  # Layers a failed pull stored completely stay for a re-run to reuse;
  # gc clears them so that the next case fetches every blob again.
  cairn gc >/dev/null 2>&1 || fail "gc after: $1"
  [[ $(cairn layers --json | jq length) == 0 ]] || fail "layers left after gc: $1"
}

# 1. A layer blob with other bytes of the same size.
top_file=$(registry_blob_path "$top_blob")
cp "$top_file" "$T/top.good"
python3 - "$top_file" <<'PY'
import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
for i in range(len(b) // 2, len(b) // 2 + 16):
    b[i] ^= 0xFF
open(p, "wb").write(b)
PY
expect_exit 5 "test_pull_integrity:38" cairn pull --insecure "$src"
grep -q "$top_blob" stderr || fail "integrity error does not name the blob: $(cat stderr)"
grep -q "digest mismatch" stderr || fail "no digest mismatch reported: $(cat stderr)"
no_image_committed "a corrupted layer"

# 2. The same blob served with extra bytes: cut off at the descriptor's size.
cp "$T/top.good" "$top_file"
head -c 100000 /dev/zero >>"$top_file"
expect_exit 5 "test_pull_integrity:46" cairn pull --insecure "$src"
grep -q "$top_blob" stderr || fail "oversized blob not named: $(cat stderr)"
no_image_committed "an oversized layer"

# 3. The config with other bytes (its digest is the image id).
cp "$T/top.good" "$top_file"
config_file=$(registry_blob_path "$config")
cp "$config_file" "$T/config.good"
sed -i 's/amd64/AMD64/' "$config_file"
expect_exit 5 "test_pull_integrity:55" cairn pull --insecure "$src"
grep -q "$config" stderr || fail "corrupt config not named: $(cat stderr)"
no_image_committed "a corrupted config"
cp "$T/config.good" "$config_file"

# 4. A blob the registry lost.
mv "$(registry_blob_path "$base_blob")" "$T/base.good"
code=0
cairn pull --insecure --retries 2 "$src" >stdout 2>stderr || code=$?
[[ $code != 0 ]] || fail "pull of an image with a missing blob succeeded"
grep -q "$base_blob" stderr || fail "missing blob not named: $(cat stderr)"
[[ $(grep -c "^cairn: pull" stderr) == 1 ]] || fail "not one error line: $(cat stderr)"
no_image_committed "a missing blob"
mv "$T/base.good" "$(registry_blob_path "$base_blob")"

# 5. An OCI layout whose blob was tampered with.
cp -r "$T/oci" "$T/oci-bad"
printf 'X' | dd of="$T/oci-bad/blobs/sha256/${base_blob#sha256:}" bs=1 seek=100 conv=notrunc 2>/dev/null
expect_exit 5 "test_pull_integrity:73" cairn pull "oci:$T/oci-bad:app"
grep -q "$base_blob" stderr || fail "oci: integrity error does not name the blob: $(cat stderr)"
no_image_committed "a tampered OCI layout"

# Repaired: the same pull now succeeds.
expect_exit 0 "test_pull_integrity:78" cairn pull --insecure "$src"
[[ $(cat stdout) == "${config#sha256:}" ]] || fail "id $(cat stdout) is not the config digest"
expect_exit 0 "test_pull_integrity:80" cairn fsck

# 6. An expansion bomb: 1 GiB of zeros, then a few bytes, in a zstd layer.
mkdir -p "$T/bomb"
truncate -s 1G "$T/bomb/zeros"
printf 'the end' >>"$T/bomb/zeros"
want=$(printf 'the end' | cat <(head -c 1G /dev/zero) - | sha256sum | cut -d' ' -f1)
setup sh -c "tar -C '$T/bomb' --numeric-owner -cf - zeros | zstd -q -c >'$T/bomb.tar.zst'"
rm -rf "$T/bomb"
setup $OCI_IMAGE add oci bomb linux/amd64 "$T/bomb.tar.zst:zstd-file" >/dev/null
setup registry_push "$T/oci" bomb team/bomb:1
before=$(du -sk "$ST" | cut -f1)
expect_exit 0 "a pull of a $(stat -c %s "$T/bomb.tar.zst") byte zstd layer holding 1 GiB of zeros" \
  cairn pull -q --insecure "docker://$REGISTRY/team/bomb:1"
grew=$(($(du -sk "$ST" | cut -f1) - before))
check "the store grew by $grew KiB, not 1 GiB" [ "$grew" -lt 4096 ]
blob=$(find "$ST/blobs" -type f -size +1000M)
check "its blob is one file of 1 GiB + 7 bytes" [ "$(stat -c %s "$blob")" = $((1024 * 1024 * 1024 + 7)) ]
check "that takes $(stat -c %b "$blob") blocks of disk" [ "$(stat -c %b "$blob")" -lt 64 ]
check "its bytes are the layer's (sha256)" [ "$(sha256sum <"$blob" | cut -d' ' -f1)" = "$want" ]
expect_exit 0 "fsck is clean after it" cairn fsck
finish
