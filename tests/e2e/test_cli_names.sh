#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_cli_names.sh — names normalised one way everywhere, as podman does:
# a name with no registry host is localhost/NAME:TAG whether imported,
# tagged or pulled; oci:DIR[:REF] is named localhost/DIR:latest as podman
# 4.3 names it; the short forms a podman user types find the image (app:1,
# localhost/app:1, tool:2 for quay.io/x/tool:2, alpine for
# docker.io/library/alpine:latest); an id prefix of 3 hex digits works; a
# store written before localhost/ (its names app:1) is still read, and a
# new name moves the old one; a wrong name or command says the nearest.
source "$(dirname "$0")/../lib/test-lib.sh"
two_layers
cd "$T" || exit 1

names() { cairn images --json | jq -r '[.[].names[]] | sort | join(",")'; }

id=$(cairn import -q app:1 1.tar)
check "import app:1 is named localhost/app:1" [ "$(names)" = localhost/app:1 ]
for ref in app:1 localhost/app:1 "${id:0:3}" "sha256:${id:0:5}"; do
  check "inspect $ref finds it" [ "$(cairn inspect "$ref" | jq -r .id)" = "$id" ]
done
cairn tag app:1 quay.io/x/tool:2 docker.io/alpine team/app
check "tag: names normalised" [ "$(names)" = \
  "docker.io/library/alpine:latest,localhost/app:1,localhost/team/app:latest,quay.io/x/tool:2" ]
for ref in tool:2 x/tool:2 alpine alpine:latest library/alpine docker.io/alpine team/app; do
  check "inspect $ref finds it (short name)" [ "$(cairn inspect "$ref" | jq -r .id)" = "$id" ]
done
expect_exit 3 "inspect localhost/tool:2 is not quay.io's" cairn inspect localhost/tool:2

# a short name of two images is refused, naming both
id2=$(cairn import -q other:1 2.tar)
cairn tag other:1 quay.io/y/tool:2
expect_exit 2 "tool:2 names two images: refused" cairn inspect tool:2
check "says both" grep -q "quay.io/x/tool:2, quay.io/y/tool:2" "$T/stderr"
check "a 3-digit id prefix" [ "$(cairn inspect "${id2:0:3}" | jq -r .id)" = "$id2" ]

# did you mean
expect_exit 3 "inspect app:2" cairn inspect app:2
check "says the nearest name" grep -qx "cairn: app:2: no such image (did you mean localhost/app:1?)" "$T/stderr"
expect_exit 3 "inspect nothing-like-it" cairn inspect zzzz:9
check "no suggestion when nothing is near" grep -qx "cairn: zzzz:9: no such image" "$T/stderr"
expect_exit 2 "cairn imags" cairn imags
check "says the nearest command" grep -q "^cairn: imags: unknown command (did you mean images?)$" "$T/stderr"

# oci:DIR pulls are named as podman 4.3 names them
cairn push -q app:1 "oci:lay:v2" >/dev/null
mkdir -p srv && cairn push -q app:1 "oci:$T/srv/lay:v3" >/dev/null
expect_exit 0 "pull oci:lay:v2" cairn --store st2 pull -q oci:lay:v2
expect_exit 0 "pull oci:/.../srv/lay:v3" cairn --store st3 pull -q "oci:$T/srv/lay:v3"
check "oci:lay:v2 is localhost/lay:latest" \
  [ "$(cairn --store st2 images --json | jq -r '.[0].names | join(",")')" = localhost/lay:latest ]
want=$(echo "localhost/${T#/}/srv/lay:latest")
if [ "$want" = "$(echo "$want" | tr A-Z a-z)" ]; then
  check "oci:/abs/lay is localhost/abs/lay:latest" \
    [ "$(cairn --store st3 images --json | jq -r '.[0].names | join(",")')" = "$want" ]
else
  check "oci:/Abs/lay (capitals: no valid name) falls back to the annotation" \
    [ "$(cairn --store st3 images --json | jq -r '.[0].names | join(",")')" = localhost/v3:latest ]
fi

# a store from before localhost/: its names still resolve, and move whole
sqlite3 "$STORE/meta.db" "UPDATE names SET name = 'app:1' WHERE name = 'localhost/app:1'"
rm -f "$STORE/refs"
check "an old store's app:1 resolves" [ "$(cairn inspect app:1 | jq -r .id)" = "$id" ]
check "as localhost/app:1 too" [ "$(cairn inspect localhost/app:1 | jq -r .id)" = "$id" ]
cairn tag other:1 app:1
check "tagging app:1 moves the old name" [ "$(cairn inspect app:1 | jq -r .id)" = "$id2" ]
check "no app:1 left behind" [ -z "$(cairn images --json | jq -r '.[].names[] | select(. == "app:1")')" ]

finish
