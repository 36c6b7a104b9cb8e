#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_push_archive.sh — cairn push to oci-archive:FILE[:TAG] and
# docker-archive:FILE[:NAME:TAG]: skopeo inspects and copies both, the
# oci-archive holds the layers as they were pulled (same digests, media
# types), the docker-archive their uncompressed tars (digests = diff_ids)
# and the tag in manifest.json; pulling either back gives the same image
# id; an existing docker-archive is refused and kept, an existing
# oci-archive replaced; a symlink planted as FILE is never followed.
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib registry
pull_test_init
setup $OCI_IMAGE layer base.tar base 20 4000
setup $OCI_IMAGE layer top.tar top 3 500
setup $OCI_IMAGE add oci app linux/amd64 base.tar:gzip top.tar:zstd >/dev/null
id=$($OCI_IMAGE config-digest oci app)
setup cairn pull -q "oci:$T/oci:app"
src_layers=$(skopeo inspect --raw "oci:$T/oci:app" | jq -c '[.layers[] | [.mediaType, .digest, .size]]')

expect_exit 0 "push oci-archive:FILE:TAG" cairn push -q "$id" "oci-archive:$T/o.tar:v1"
digest=$(cat "$T/stdout")
[[ $(skopeo inspect "oci-archive:$T/o.tar:v1" | jq -r .Digest) == "$digest" ]] &&
  ok "skopeo inspect oci-archive: the digest push printed" || fail "oci-archive digest differs"
[[ $(skopeo inspect --raw "oci-archive:$T/o.tar:v1" | jq -c '[.layers[] | [.mediaType, .digest, .size]]') == \
  "$src_layers" ]] && ok "oci-archive: the layers as pulled" || fail "oci-archive: other layers"
check "skopeo copy oci-archive: to a dir" skopeo copy -q "oci-archive:$T/o.tar:v1" "dir:$T/o-dir"
expect_exit 0 "pull the oci-archive back" cairn --store "$T/st2" pull -q "oci-archive:$T/o.tar"
[[ $(cat "$T/stdout") == "$id" ]] && ok "oci-archive round trip: same id" ||
  fail "oci-archive gave $(cat "$T/stdout")"

expect_exit 0 "push docker-archive:FILE:NAME:TAG" cairn push -q "$id" \
  "docker-archive:$T/d.tar:app:1"
[[ $(cat "$T/stdout") == "sha256:$id" ]] || fail "docker-archive printed $(cat "$T/stdout")"
[[ $(tar -xOf "$T/d.tar" manifest.json | jq -c '.[0].RepoTags') == '["app:1"]' ]] &&
  ok "docker-archive: the tag in manifest.json" || fail "manifest.json: $(tar -xOf "$T/d.tar" manifest.json)"
[[ $(skopeo inspect "docker-archive:$T/d.tar" | jq -c .Layers) == \
  "$(skopeo inspect --config "oci:$T/oci:app" | jq -c .rootfs.diff_ids)" ]] &&
  ok "docker-archive: uncompressed layers (digests are the diff_ids)" || fail "docker-archive layers"
check "skopeo copy docker-archive: to a dir" skopeo copy -q "docker-archive:$T/d.tar" "dir:$T/d-dir"
expect_exit 0 "pull the docker-archive back" cairn --store "$T/st3" pull -q "docker-archive:$T/d.tar"
[[ $(cat "$T/stdout") == "$id" ]] && ok "docker-archive round trip: same id" ||
  fail "docker-archive gave $(cat "$T/stdout")"

# Without a tag or NAME an archive keeps IMAGE's name, as podman save does
# (by id: none, as before), and a pull of it gives that name back.
setup cairn tag "$id" app:7 >/dev/null
expect_exit 0 "push IMAGE oci-archive:FILE (no tag)" cairn push -q app:7 \
  "oci-archive:$T/n.tar"
ref_name='.manifests[0].annotations["org.opencontainers.image.ref.name"]'
[[ $(tar -xOf "$T/n.tar" index.json | jq -r "$ref_name") == localhost/app:7 ]] && ok "oci-archive: ref.name is the image's name" ||
  fail "index.json: $(tar -xOf "$T/n.tar" index.json)"
expect_exit 0 "push IMAGE docker-archive:FILE (no NAME)" cairn push -q app:7 \
  "docker-archive:$T/n-d.tar"
[[ $(tar -xOf "$T/n-d.tar" manifest.json | jq -c '.[0].RepoTags') == '["localhost/app:7"]' ]] &&
  ok "docker-archive: RepoTags the image's name" ||
  fail "manifest.json: $(tar -xOf "$T/n-d.tar" manifest.json)"
for f in n.tar n-d.tar; do
  kind=oci-archive
  [[ $f == n-d.tar ]] && kind=docker-archive
  setup cairn --store "$T/st-$f" pull -q "$kind:$T/$f" >/dev/null
  [[ $(cairn --store "$T/st-$f" images --format '{{.Repository}}:{{.Tag}}') == \
    localhost/app:7 ]] && ok "$kind pulled back: named localhost/app:7" ||
    fail "$kind pulled back: $(cairn --store "$T/st-$f" images)"
done
expect_exit 0 "push ID docker-archive:FILE" cairn push -q "$id" \
  "docker-archive:$T/i-d.tar"
[[ $(tar -xOf "$T/i-d.tar" manifest.json | jq -c '.[0].RepoTags') == '[]' ]] ||
  fail "by id: RepoTags $(tar -xOf "$T/i-d.tar" manifest.json)"

sum=$(sha256sum <"$T/d.tar")
expect_exit 1 "an existing docker-archive is refused" cairn push -q "$id" \
  "docker-archive:$T/d.tar"
grep -q "exists" "$T/stderr" || fail "refusal: $(cat "$T/stderr")"
[[ $(sha256sum <"$T/d.tar") == "$sum" ]] && ok "and kept as it was" || fail "d.tar changed"
expect_exit 0 "an existing oci-archive is replaced" cairn push -q "$id" \
  "oci-archive:$T/o.tar:v2"
[[ $(skopeo inspect "oci-archive:$T/o.tar:v2" | jq -r .Digest) == "$digest" ]] || fail "o.tar not replaced"

echo precious >"$T/victim"
ln -s "$T/victim" "$T/link-o.tar"
ln -s "$T/victim" "$T/link-d.tar"
expect_exit 0 "oci-archive over a planted symlink" cairn push -q "$id" \
  "oci-archive:$T/link-o.tar"
expect_exit 1 "docker-archive over a planted symlink" cairn push -q "$id" \
  "docker-archive:$T/link-d.tar"
[[ $(cat "$T/victim") == precious && ! -L $T/link-o.tar && -L $T/link-d.tar ]] &&
  ok "a planted symlink is never followed" || fail "the symlink's target was written"
expect_exit 2 "push to docker-archive: with no file" cairn push "$id" "docker-archive:"
finish
