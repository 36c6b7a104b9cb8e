#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_push_kept.sh — a push sends the layers a pull kept as they are:
# pull docker://R/team/src:1 → push to team/dst:1 → pull back keeps every
# layer's digest, media type and size and the image id (skopeo inspect
# --raw of both manifests), the registry mounts the blobs from team/src
# and receives no second copy of any (its blob files: at most the new
# manifest is new), and nothing is compressed again; --compress with
# another compression and --force-compression compress anew, --compress
# with the kept one does not; an oci: layout gets the same blobs; a kept
# blob damaged since its pull is not sent: the layer is compressed anew.
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib registry
pull_test_init
setup $OCI_IMAGE layer base.tar base 20 4000
setup $OCI_IMAGE layer mid.tar mid 5 100000
setup $OCI_IMAGE layer top.tar top 3 500
setup $OCI_IMAGE add oci src linux/amd64 base.tar:gzip mid.tar:zstd top.tar:raw >/dev/null
id=$($OCI_IMAGE config-digest oci src)
setup registry_start "$T/reg"
setup registry_push "$T/oci" src team/src:1
R=$REGISTRY

raw() { skopeo inspect -n --raw --tls-verify=false "docker://$R/$1"; }
# layers REF: each layer's "mediaType digest size", one a line.
layers() { raw "$1" | jq -r '.layers[] | "\(.mediaType) \(.digest) \(.size)"'; }
blobs() { find "$REGISTRY_DIR/data/docker/registry/v2/blobs" -name data | sort; }

expect_exit 0 "pull" cairn pull -q --insecure "docker://$R/team/src:1"
[[ $(cat "$T/stdout") == "$id" ]] || fail "pull gave $(cat "$T/stdout"), not $id"
blobs >"$T/blobs.before"
expect_exit 0 "push to another repository" cairn push --insecure \
  "$R/team/src:1" "docker://$R/team/dst:1"
digest=$(cat "$T/stdout")
[[ $(layers team/dst:1) == "$(layers team/src:1)" && -n $(layers team/src:1) ]] &&
  ok "same layers: media types, digests, sizes" ||
  fail "layers differ: $(layers team/dst:1) / $(layers team/src:1)"
[[ $(raw team/dst:1 | jq -r .config.digest) == "sha256:$id" ]] && ok "same config (image id)" ||
  fail "config: $(raw team/dst:1 | jq -c .config)"
[[ $(grep -c skipped "$T/stderr") == 3 ]] && ok "every layer mounted" ||
  fail "layers sent again: $(cat "$T/stderr")"
blobs >"$T/blobs.after"
new=$(comm -13 "$T/blobs.before" "$T/blobs.after")
[[ -z $new || $new == "$(registry_blob_path "$digest")" ]] && ok "the registry got no second copy of a blob" ||
  fail "new blobs in the registry: $new (manifest $digest)"
expect_exit 0 "pull back into a fresh store" cairn --store "$T/st2" pull -q --insecure \
  "docker://$R/team/dst:1"
[[ $(cat "$T/stdout") == "$id" ]] && ok "round trip: same image id" ||
  fail "round trip gave $(cat "$T/stdout")"

# --compress with the kept compression keeps the blob; with another one,
# or --force-compression, the layer is compressed anew.
expect_exit 0 "push --compress zstd" cairn push --insecure --compress zstd \
  "$id" "docker://$R/team/zstd:1"
layers team/zstd:1 >"$T/zstd"
[[ $(grep -c 'tar+zstd' "$T/zstd") == 3 ]] || fail "--compress zstd: $(cat "$T/zstd")"
[[ $(sed -n 2p "$T/zstd") == "$(layers team/src:1 | sed -n 2p)" ]] &&
  ok "--compress zstd keeps the zstd layer as pulled" || fail "zstd layer changed: $(cat "$T/zstd")"
[[ $(grep -c skipped "$T/stderr") == 1 ]] && ok "--compress zstd compresses and sends the two others" ||
  fail "--compress zstd: $(cat "$T/stderr")"
expect_exit 0 "push --compress gzip --force-compression" cairn push --insecure \
  --compress gzip --force-compression "$id" "docker://$R/team/forced:1"
layers team/forced:1 >"$T/forced"
[[ $(grep -c 'tar+gzip' "$T/forced") == 3 && -z $(comm -12 <(cut -d' ' -f2 "$T/forced" | sort) \
  <(layers team/src:1 | cut -d' ' -f2 | sort)) ]] && ok "--force-compression compresses every layer" ||
  fail "--force-compression: $(cat "$T/forced")"
expect_exit 0 "pull the forced push back" cairn --store "$T/st3" pull -q --insecure \
  "docker://$R/team/forced:1"
[[ $(cat "$T/stdout") == "$id" ]] || fail "forced push pulled back as $(cat "$T/stdout")"

# An OCI layout gets the kept blobs too.
expect_exit 0 "push to oci:" cairn push -q "$id" "oci:$T/layout:v1"
m=$(jq -r '.manifests[0].digest' "$T/layout/index.json")
[[ $(jq -r '.layers[] | "\(.mediaType) \(.digest) \(.size)"' "$T/layout/blobs/sha256/${m#sha256:}") == \
  "$(layers team/src:1)" ]] && ok "oci: the same layers" || fail "oci: layers differ"
check "oci: skopeo copies it" skopeo copy -q "oci:$T/layout:v1" "dir:$T/copied"

# A kept blob whose bytes changed since the pull is not sent.
gz=$(layers team/src:1 | sed -n 1p | cut -d' ' -f2)
kept=$ST/compressed/${gz#sha256:}
chmod u+w "$kept" && printf 'X' | dd of="$kept" bs=1 seek=100 conv=notrunc status=none
expect_exit 0 "push with a damaged kept blob" cairn push -q "$id" "oci:$T/layout2:v1"
m=$(jq -r '.manifests[0].digest' "$T/layout2/index.json")
[[ $(jq -r '.layers[0].digest' "$T/layout2/blobs/sha256/${m#sha256:}") != "$gz" ]] &&
  ok "a damaged kept blob is compressed anew" || fail "the damaged blob was sent"
expect_exit 0 "pull the layout back" cairn --store "$T/st4" pull -q "oci:$T/layout2:v1"
[[ $(cat "$T/stdout") == "$id" ]] || fail "layout pulled back as $(cat "$T/stdout")"
finish
