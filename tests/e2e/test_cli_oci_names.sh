#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_cli_oci_names.sh — an oci:DIR[:REF] pull is named as podman 4.3
# names it: localhost/DIR:latest, DIR as typed less its leading slashes,
# whatever REF is. Where DIR makes no valid name (capitals: podman refuses
# the pull) it is named after the picked index.json entry's own name
# annotation, as podman names an oci-archive: io.containerd.image.name if
# set, else org.opencontainers.image.ref.name; no registry host gives
# "localhost/", no tag ":latest"; no annotation, no name. A NAME on the
# command line still wins. (Before: DIRNAME:REF, such as "oci:v2".)
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib registry
pull_test_init
setup $OCI_IMAGE layer a.tar a 2 100
setup $OCI_IMAGE layer b.tar b 2 100
setup $OCI_IMAGE layer c.tar c 2 100
setup $OCI_IMAGE layer d.tar d 2 100
setup $OCI_IMAGE add Oci v2 linux/amd64 a.tar:gzip >/dev/null
setup $OCI_IMAGE add Oci quay.io/team/app:1.5 linux/amd64 b.tar:gzip >/dev/null
setup $OCI_IMAGE add Oci team/tool linux/amd64 a.tar:raw b.tar:raw >/dev/null
setup $OCI_IMAGE add Unnamed x linux/amd64 c.tar:raw >/dev/null
jq '.manifests[0].annotations = {}' Unnamed/index.json >idx && mv idx Unnamed/index.json
setup $OCI_IMAGE add Ctrd x linux/amd64 d.tar:zstd >/dev/null
jq '.manifests[0].annotations["io.containerd.image.name"] = "docker.io/library/busybox:1.36"' \
  Ctrd/index.json >idx && mv idx Ctrd/index.json

# names_of ID: the image's names, comma-separated.
names_of() { cairn images --json | jq -r --arg id "$1" '.[] | select(.id == $id) | .names | join(",")'; }

pulled() { # NAME EXPECTED SOURCE...
  local n=$1 want=$2
  shift 2
  expect_exit 0 "pull $n" cairn pull -q "$@"
  local got
  got=$(names_of "$(cat "$T/stdout")")
  [[ $got == "$want" ]] && ok "$n is named '$want'" || fail "$n is named '$got', want '$want'"
}
pulled "a bare tag annotation" localhost/v2:latest "oci:$T/Oci:v2"
pulled "a full name annotation" quay.io/team/app:1.5 "oci:$T/Oci:quay.io/team/app:1.5"
pulled "a name with no host" localhost/team/tool:latest "oci:$T/Oci:team/tool"
pulled "no annotation, no REF" "" "oci:$T/Unnamed"
pulled "io.containerd.image.name first" docker.io/library/busybox:1.36 "oci:$T/Ctrd"
cairn rm -q localhost/v2:latest >/dev/null
pulled "NAME given" localhost/mine:3 "oci:$T/Oci:v2" mine:3
cp -r Oci lay
cairn rm -q localhost/mine:3 >/dev/null
pulled "podman 4.3: oci:DIR:REF is localhost/DIR:latest" localhost/lay:latest "oci:lay:v2"
cairn images --json | jq -e 'all(.[].names[]; startswith("oci:") | not)' >/dev/null &&
  ok "no name is DIRNAME:REF" || fail "a name is DIRNAME:REF"
finish
