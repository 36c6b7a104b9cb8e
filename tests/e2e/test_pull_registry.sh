#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_pull_registry.sh — cairn pull from a real docker-registry on
# 127.0.0.1 (filled by skopeo): by tag and by digest, gzip, zstd and plain
# layers, an index with several platforms (default linux/amd64 and
# --platform), the same image by docker://, oci: and docker-archive: giving
# one image id, layer reuse, the default names, and a short name through
# registries.conf.
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib registry
pull_test_init
setup $OCI_IMAGE layer base.tar base 20 4000
setup $OCI_IMAGE layer mid.tar mid 5 100000
setup $OCI_IMAGE layer top.tar top 3 500
setup $OCI_IMAGE add oci app linux/amd64 base.tar:gzip mid.tar:zstd top.tar:raw >/dev/null
app_id=$($OCI_IMAGE config-digest oci app)
amd=$($OCI_IMAGE add oci m-amd linux/amd64 base.tar:gzip top.tar:gzip)
arm=$($OCI_IMAGE add oci m-arm linux/arm64/v8 base.tar:gzip mid.tar:gzip)
setup $OCI_IMAGE index oci multi "$amd" "$arm" >/dev/null
amd_id=$($OCI_IMAGE config-digest oci m-amd)
arm_id=$($OCI_IMAGE config-digest oci m-arm)
# another platform first: amd64, then 386 (this machine's under setarch i686)
i386=$($OCI_IMAGE add oci m-386 linux/386 base.tar:gzip mid.tar:raw)
i386_id=$($OCI_IMAGE config-digest oci m-386)
setup $OCI_IMAGE index oci multi2 "$arm" "$amd" "$i386" >/dev/null

setup registry_start "$T/reg"
setup registry_push "$T/oci" app team/app:1
setup registry_push "$T/oci" multi team/multi:1 --all
setup registry_push "$T/oci" multi2 team/multi2:1 --all
digest=$(skopeo inspect --tls-verify=false "docker://$REGISTRY/team/app:1" | jq -r .Digest)

# By tag: the id is the config digest; the default name is HOST:PORT/REPO:TAG.
expect_exit 0 "test_pull_registry:28" cairn pull --insecure "docker://$REGISTRY/team/app:1"
[[ $(cat stdout) == "$app_id" ]] || fail "tag pull gave $(cat stdout), expected $app_id"
cairn images --json | jq -e --arg n "$REGISTRY/team/app:1" \
  '.[0].names | index($n)' >/dev/null || fail "default name missing"
grep -q downloaded stderr || fail "no per-layer progress line: $(cat stderr)"
[[ $(grep -c "^cairn: created store at $ST\$" stderr) == 1 ]] || fail "the first pull did not say it made the store: $(cat stderr)"
[[ $(grep -vc '^cairn: created store' stderr) == 3 ]] || fail "expected one line per layer, got: $(cat stderr)"

# A short name (no host) is pulled from the first registry of
# unqualified-search-registries in registries.conf, as podman does, and
# named after it.
printf 'unqualified-search-registries = ["%s", "docker.io"]\n' "$REGISTRY" >"$T/registries.conf"
expect_exit 0 "short name pull" env CONTAINERS_REGISTRIES_CONF="$T/registries.conf" \
  cairn --store "$T/st-short" pull --insecure docker://team/app:1
[[ $(cat stdout) == "$app_id" ]] || fail "short name pull gave $(cat stdout), expected $app_id"
cairn --store "$T/st-short" images --json | jq -e --arg n "$REGISTRY/team/app:1" \
  '.[0].names | index($n)' >/dev/null || fail "short name pull not named $REGISTRY/team/app:1"

# Everything stored: a second pull reuses every layer.
expect_exit 0 "test_pull_registry:36" cairn pull --insecure "docker://$REGISTRY/team/app:1" again:1
[[ $(grep -c reused stderr) == 3 ]] || fail "second pull did not reuse: $(cat stderr)"

# By digest, into a fresh store, with --jobs 1 and a name.
expect_exit 0 "test_pull_registry:40" cairn --store "$T/st-digest" pull --insecure --jobs 1 \
  "docker://$REGISTRY/team/app@$digest" bydigest:1
[[ $(cat stdout) == "$app_id" ]] || fail "digest pull gave $(cat stdout)"
# Without a name, as podman: REPO@DIGEST, listed as REPO <none>.
expect_exit 0 "pull by digest, no name" cairn --store "$T/st-dig2" pull -q --insecure \
  "docker://$REGISTRY/team/app@$digest"
cairn --store "$T/st-dig2" images --json | jq -e --arg n "$REGISTRY/team/app@$digest" \
  '.[0].names == [$n]' >/dev/null || fail "names: $(cairn --store "$T/st-dig2" images --json)"
cairn --store "$T/st-dig2" images >images.out
grep -q "^$REGISTRY/team/app  *<none>  *${app_id:0:12} " images.out ||
  fail "a pull by digest lists as: $(cat images.out)"
ok "a pull by digest keeps REPO@DIGEST, listed as REPO <none>, as podman"
expect_exit 0 "rm REPO@DIGEST" cairn --store "$T/st-dig2" rm "$REGISTRY/team/app@$digest"
[[ -z $(cairn --store "$T/st-dig2" images -q) ]] || fail "rm by digest left an image"
expect_exit 2 "test_pull_registry:43" cairn --store "$T/st-digest" pull --insecure "docker://$REGISTRY/team/app@sha256:12"

# docker://, oci: and docker-archive: of the same image: one id.
expect_exit 0 "test_pull_registry:46" cairn --store "$T/st-oci" pull oci:"$T/oci:app"
[[ $(cat stdout) == "$app_id" ]] || fail "oci: pull gave $(cat stdout), docker:// gave $app_id"
setup $OCI_IMAGE docker-archive "$T/app.docker.tar" saved/app:7 base.tar mid.tar top.tar
arch_id=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[0]["Config"][:64])' \
  <(tar -xOf "$T/app.docker.tar" manifest.json))
expect_exit 0 "test_pull_registry:51" cairn --store "$T/st-oci" pull "docker-archive:$T/app.docker.tar"
[[ $(cat stdout) == "$arch_id" ]] || fail "docker-archive pull gave $(cat stdout), expected $arch_id"
cairn --store "$T/st-oci" images --json | jq -e '[.[].names[]] | index("docker.io/saved/app:7")' \
  >/dev/null || fail "docker-archive RepoTag not used as the name"
# The archive's layers are the same bytes as the oci layers: all reused.
[[ $(grep -c reused stderr) == 3 ]] || fail "docker-archive did not reuse the layers: $(cat stderr)"

# An index: linux/amd64 by default, another platform on request.
expect_exit 0 "test_pull_registry:59" cairn pull --insecure "docker://$REGISTRY/team/multi:1"
[[ $(cat stdout) == "$amd_id" ]] || fail "index pull picked $(cat stdout), not linux/amd64 $amd_id"
expect_exit 0 "test_pull_registry:61" cairn pull --insecure --platform linux/arm64 \
  "docker://$REGISTRY/team/multi:1" multi-arm:1
[[ $(cat stdout) == "$arm_id" ]] || fail "--platform linux/arm64 picked $(cat stdout)"
expect_exit 3 "test_pull_registry:64" cairn pull --insecure --platform linux/s390x \
  "docker://$REGISTRY/team/multi:1" none:1
grep -q "no manifest for platform linux/s390x" stderr || fail "platform error: $(cat stderr)"
# The default is this machine's platform, as uname(2) names it, wherever
# the index lists it: linux/amd64 here, linux/386 under `setarch i686`.
expect_exit 0 "an index listing arm64 first: this machine's platform" cairn pull --insecure \
  "docker://$REGISTRY/team/multi2:1" multi2:1
[[ $(cat stdout) == "$amd_id" ]] || fail "index pull picked $(cat stdout), not linux/amd64 $amd_id"
if setarch i686 true 2>/dev/null; then
  expect_exit 0 "under setarch i686 (uname -m i686): linux/386" setarch i686 "$CAIRN_BIN/cairn" \
    --store "$ST" pull --insecure "docker://$REGISTRY/team/multi2:1" multi2-386:1
  [[ $(cat stdout) == "$i386_id" ]] ||
    fail "setarch i686: picked $(cat stdout), not linux/386 $i386_id"
fi

# Not found: tag, repository, layout ref.
expect_exit 3 "test_pull_registry:69" cairn pull --insecure "docker://$REGISTRY/team/app:nope"
[[ $(grep -c . stderr) == 1 ]] || fail "not-found error is not one line: $(cat stderr)"
expect_exit 3 "test_pull_registry:71" cairn pull --insecure "docker://$REGISTRY/team/nothing:1"
expect_exit 3 "test_pull_registry:72" cairn pull "oci:$T/oci:nope"
expect_exit 2 "test_pull_registry:73" cairn pull "ftp://x/y"
expect_exit 2 "test_pull_registry:74" cairn pull

# The stored layers are the same whichever way the image came.
cairn inspect "$app_id" | jq -c '[.layers[].id]' >"$T/layers1"
cairn --store "$T/st-oci" inspect "$app_id" | jq -c '[.layers[].id]' >"$T/layers2"
cmp -s "$T/layers1" "$T/layers2" || fail "docker:// and oci: layers differ"
cairn layers --json | jq -e 'length == 3' >/dev/null ||
  fail "expected 3 distinct layers: $(cairn layers)"
expect_exit 0 "test_pull_registry:82" cairn fsck
finish
