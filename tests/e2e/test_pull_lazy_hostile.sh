#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_pull_lazy_hostile.sh — what a hostile registry cannot do to a lazy
# pull (doc/security.md), against Debian's docker-registry on 127.0.0.1
# serving images whose configs claim diff_ids their zstd:chunked layers
# (cairn push --format zstd:chunked) do not have
# (tests/helpers/forge_config.py):
#   a lazily pulled layer claiming a trusted layer's diff_id is not reused
#   by a full pull of the trusted image, which stores its own files, said;
#   the claimed layer is listed and inspected as unverified until proven;
#   a second lazy pull of the same blob reuses it, of another blob does not;
#   a fill that finds its tar hashing to something else exits 5 naming
#   its image, takes it out of service (mount refused, exit 5; fsck exit 5
#   naming it), and rm takes it away.
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib registry
pull_test_init
command -v jq >/dev/null || skip "no jq"

mkdir -p "$T/good/etc" "$T/bad/etc" "$T/bad2/etc"
echo trusted >"$T/good/etc/motd"
echo planted >"$T/bad/etc/motd"
echo 'planted too' >"$T/bad2/etc/motd"
echo 'root::0:0::/:/bin/sh' >"$T/bad/etc/passwd"
for d in good bad bad2; do mktar "$T/$d" "$T/$d.tar"; done
good_id=$(sha256sum "$T/good.tar" | cut -c1-64)
bogus=$(printf 'nothing hashes to this' | sha256sum | cut -c1-64)

setup registry_start "$T/reg"
# the trusted image, gzip, and two zstd:chunked images of other trees
# whose configs are forged: "evil" claims the trusted diff_id, "liar"
# one that nothing hashes to
setup cairn --store "$T/src" import -q good:1 "$T/good.tar" >/dev/null
setup cairn --store "$T/src" import -q bad:1 "$T/bad.tar" >/dev/null
setup cairn --store "$T/src" import -q bad2:1 "$T/bad2.tar" >/dev/null
setup cairn --store "$T/src" push -q --insecure good:1 "docker://$REGISTRY/trusted/good:1" >/dev/null
setup cairn --store "$T/src" push -q --insecure --format zstd:chunked bad:1 \
  "docker://$REGISTRY/evil/app:src" >/dev/null
setup cairn --store "$T/src" push -q --insecure --format zstd:chunked bad2:1 \
  "docker://$REGISTRY/evil/app:src2" >/dev/null
setup python3 "$HELPERS/forge_config.py" "$REGISTRY" evil/app src 1 "sha256:$good_id" >/dev/null
setup python3 "$HELPERS/forge_config.py" "$REGISTRY" evil/app src2 2 "sha256:$good_id" >/dev/null
setup python3 "$HELPERS/forge_config.py" "$REGISTRY" evil/app src 3 "sha256:$bogus" >/dev/null

expect_exit 0 "pull --lazy of an image claiming the trusted layer's diff_id" \
  cairn pull --insecure --lazy --no-fill "docker://$REGISTRY/evil/app:1"
check_json "images shows its layer unverified" \
  '.[] | select(.names | index("'"$REGISTRY"'/evil/app:1")) | .unverified == 1' \
  cairn images --json
check_json "inspect lists the unverified diff_id" \
  '.Unverified == ["sha256:'"$good_id"'"]' cairn inspect "$REGISTRY/evil/app:1"
check "images says so in a column" sh -c \
  "cairn images | grep -qE '^$REGISTRY/evil/app +1 .* 1 *$' && cairn images | grep -q UNVERIFIED"

expect_exit 0 "a full pull of the trusted image" \
  cairn pull --insecure "docker://$REGISTRY/trusted/good:1"
check "... does not reuse the unproven layer" sh -c "! grep -q reused '$T/stderr'"
check "... and says it pulls it in full to prove it" grep -q "not proven; pulling this one in full" "$T/stderr"
setup cairn export -q -o "$T/good-out.tar" "$REGISTRY/trusted/good:1"
check "the trusted image has its own files" \
  test "$(tar -xOf "$T/good-out.tar" etc/motd)" = trusted
check "... and nothing planted" sh -c "! tar -tf '$T/good-out.tar' | grep -q passwd"
check_json "the layer is proven now: nothing unverified" \
  'all(.[]; has("unverified") | not)' cairn images --json
expect_exit 0 "fsck is clean" cairn fsck

# Same blob, same TOC: reused; another blob claiming a diff_id stored
# unproven: pulled in full (and refused, its tar hashing to another).
expect_exit 0 "pull --lazy of the liar image" \
  cairn --store "$T/s2" pull --insecure --lazy --no-fill "docker://$REGISTRY/evil/app:3"
expect_exit 0 "pull --lazy of it again under another name reuses its layer" \
  cairn --store "$T/s2" pull --insecure --lazy --no-fill "docker://$REGISTRY/evil/app:3" again:1
check "... said" grep -q reused "$T/stderr"
expect_exit 0 "pull --lazy of an image claiming the trusted diff_id" \
  cairn --store "$T/s2" pull --insecure --lazy --no-fill "docker://$REGISTRY/evil/app:1"
expect_exit 5 "pull --lazy of another blob claiming the same diff_id is not a reuse" \
  cairn --store "$T/s2" pull --insecure --lazy --no-fill "docker://$REGISTRY/evil/app:2"
check "... it was pulled in full and refused" grep -q "diff_id mismatch" "$T/stderr"

# The liar's fill: its tar hashes to something else.
expect_exit 5 "fill of an image whose layer is not its diff_id exits 5" \
  cairn --store "$T/s2" fill "$REGISTRY/evil/app:3"
check "... says the layer is out of service and names its images" \
  grep -q "diff_id mismatch.*taken out of service (images: $REGISTRY/evil/app:3, localhost/again:1)" "$T/stderr"
mkdir "$T/m"
expect_exit 5 "a mount of it is refused" cairn --store "$T/s2" mount again:1 "$T/m"
check "... saying why" grep -q "out of service" "$T/stderr"
expect_exit 5 "fsck is not clean" cairn --store "$T/s2" fsck
check "... and names the layer and its images" \
  grep -q "layer $bogus: out of service.*images: $REGISTRY/evil/app:3, localhost/again:1" "$T/stdout" "$T/stderr"
expect_exit 0 "rm of both names" cairn --store "$T/s2" rm "$REGISTRY/evil/app:3" again:1
expect_exit 0 "then fsck is clean" cairn --store "$T/s2" fsck
finish
