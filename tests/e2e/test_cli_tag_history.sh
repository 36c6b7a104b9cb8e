#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_cli_tag_history.sh — `cairn tag` gives an image more names (moving
# a name from another image, as podman tag) and `cairn history` shows the
# config's history as podman history does: newest first, each entry that
# made a layer matched with it (id and size), the empty ones <missing>,
# times in RFC 3339 in --json; a config without history gives one entry
# per layer. Bad input exits with the contract's codes.
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib registry
pull_test_init
setup $OCI_IMAGE layer a.tar a 2 1000
setup $OCI_IMAGE layer b.tar b 3 5000
export OCI_IMAGE_CONFIG='{"history": [
  {"created": "2024-01-02T03:04:05.123456789Z", "created_by": "/bin/sh -c #(nop) ADD file:a in /", "comment": "base"},
  {"created": "2024-01-02T03:05:00+01:00", "created_by": "/bin/sh -c #(nop) ENV X=1", "empty_layer": true},
  {"created": "2024-01-03T00:00:00Z", "created_by": "/bin/sh -c make install && rm -rf /tmp/build /var/cache/apt/archives/*.deb", "author": "me"}]}'
setup $OCI_IMAGE add oci app linux/amd64 a.tar:gzip b.tar:raw >/dev/null
unset OCI_IMAGE_CONFIG
setup $OCI_IMAGE add oci bare linux/amd64 a.tar:raw >/dev/null
setup cairn pull -q "oci:$T/oci:app" app:1
setup cairn pull -q "oci:$T/oci:bare" bare:1
la=$(sha256sum a.tar | cut -c1-64)
lb=$(sha256sum b.tar | cut -c1-64)
size_b=$(cairn layers --json | jq --arg l "$lb" '.[] | select(.id == $l) | .size')

# ---- history ---------------------------------------------------------------
expect_exit 0 "history --json" cairn history --json app:1
jq -e --arg la "$la" --arg lb "$lb" --argjson sb "$size_b" '
  length == 3
  and .[0].id == $lb and .[0].size == $sb and .[0].created == "2024-01-03T00:00:00Z"
  and (.[0].created_by | startswith("/bin/sh -c make install"))
  and .[1].id == null and .[1].empty_layer and .[1].size == 0
  and .[1].created == "2024-01-02T02:05:00Z"
  and .[2].id == $la and .[2].comment == "base" and .[2].created == "2024-01-02T03:04:05Z"' \
  "$T/stdout" >/dev/null || fail "history --json: $(cat "$T/stdout")"
expect_exit 0 "history (table)" cairn history app:1
head -1 "$T/stdout" | grep -q '^ID  *CREATED  *CREATED BY  *SIZE  *COMMENT$' ||
  fail "history header: $(head -1 "$T/stdout")"
grep -q "^${lb:0:12} .*  /bin/sh -c make install && rm -rf /tmp/bui\.\.\.  " "$T/stdout" ||
  fail "history row (cut to 45): $(cat "$T/stdout")"
grep -q '^<missing> .*ENV X=1' "$T/stdout" || fail "empty layer not <missing>: $(cat "$T/stdout")"
expect_exit 0 "history --no-trunc" cairn history --no-trunc app:1
grep -q "^$lb .*/var/cache/apt/archives/\*\.deb" "$T/stdout" || fail "--no-trunc: $(cat "$T/stdout")"
expect_exit 0 "history -q" cairn history -q app:1
[[ $(head -1 "$T/stdout") == "${lb:0:12}" ]] || fail "history -q: $(cat "$T/stdout")"
expect_exit 0 "history of a config without history" cairn history --json bare:1
jq -e --arg la "$la" 'length == 1 and .[0].id == $la and .[0].created == null' "$T/stdout" \
  >/dev/null || fail "bare history: $(cat "$T/stdout")"
# An import records an entry per layer, as podman import does, without a
# time (the same tars give the same id): history shows the image's.
setup cairn import -q imp:1 a.tar b.tar >/dev/null
expect_exit 0 "history of an import" cairn history --json imp:1
jq -e --arg la "$la" --arg lb "$lb" 'length == 2 and .[0].id == $lb and .[1].id == $la
  and all(.[]; .comment == "imported from tarball" and .created_by == "cairn import"
    and (.created | type == "string" and test("^[0-9]{4}-")))' "$T/stdout" >/dev/null ||
  fail "import history: $(cat "$T/stdout")"
expect_exit 0 "history of an import (table)" cairn history imp:1
grep -q "^${lb:0:12}  *[^ ].* ago  *cairn import  .*imported from tarball$" "$T/stdout" ||
  fail "import history table: $(cat "$T/stdout")"
expect_exit 3 "history of no image" cairn history nothing:1
expect_exit 2 "history needs one image" cairn history

# ---- tag -------------------------------------------------------------------
app=$(cairn images --json | jq -r '.[] | select(.names | index("localhost/app:1")) | .id')
expect_exit 0 "tag" cairn tag app:1 registry.example/team/app:2 also
[[ ! -s $T/stdout ]] || fail "tag is not quiet: $(cat "$T/stdout")"
cairn images --json | jq -e --arg id "$app" '.[] | select(.id == $id)
  | .names == ["localhost/also:latest", "localhost/app:1", "registry.example/team/app:2"]' >/dev/null ||
  fail "names after tag: $(cairn images --json)"
bare=$(cairn images --json | jq -r '.[] | select(.names | index("localhost/bare:1")) | .id')
expect_exit 0 "tag by id prefix moves a name" cairn tag "${bare:0:12}" also
cairn images --json | jq -e --arg id "$app" '.[] | select(.id == $id)
  | (.names | index("localhost/also:latest")) == null' >/dev/null || fail "also did not move"
expect_exit 0 "rm of one name keeps the image" cairn rm app:1
expect_exit 0 "the image under its new name" cairn history -q registry.example/team/app:2
expect_exit 3 "tag of no image" cairn tag nothing:1 x
expect_exit 2 "tag to a bad name" cairn tag also 'Bad Name'
expect_exit 2 "tag needs a name" cairn tag also
finish
