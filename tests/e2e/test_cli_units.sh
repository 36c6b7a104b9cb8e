#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_cli_units.sh — units and times, the same everywhere: human sizes
# (KiB, MiB) in tables and in gc's and rm's report lines, exact numbers in
# JSON; times relative in tables ("3 days ago", a CREATED column in
# images) and RFC 3339 (UTC) in every JSON (images, inspect, pins).
source "$(dirname "$0")/../lib/test-lib.sh"

rfc3339='^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$'
mkdir -p "$T/l1" "$T/l2"
head -c 4000 /dev/urandom >"$T/l1/a"
head -c 3000 /dev/urandom >"$T/l2/b"
mktar "$T/l1" "$T/1.tar"
mktar "$T/l2" "$T/2.tar"
id=$(cairn import app:1 "$T/1.tar") || exit 1
old=$(cairn import old:1 "$T/2.tar") || exit 1

# JSON: RFC 3339, the same in images and inspect, about now.
created=$(cairn images --json | jq -r ".[] | select(.id == \"$id\") | .created")
check "images --json: created is RFC 3339 ($created)" grep -qE "$rfc3339" <<<"$created"
check "inspect --json: the same" [ "$(cairn inspect app:1 | jq -r .created)" = "$created" ]
check "and it is now (within a minute)" \
  [ $(($(date +%s) - $(date -d "$created" +%s 2>/dev/null || echo 0))) -lt 60 ]
check_json "images --json: size stays an exact number" '.[0].size | type == "number"' cairn images --json

# Tables: a CREATED column, relative; sizes human.
three_days=$(($(date +%s) - 3 * 86400 - 60))
sqlite3 "$STORE/meta.db" "UPDATE images SET created = $three_days WHERE id = '$old'"
cairn images >"$T/table"
check "images has a CREATED column" grep -q "^REPOSITORY .* IMAGE ID  *CREATED  *SIZE .*PINNED$" "$T/table"
check "a new image: seconds ago" grep -qE "^localhost/app +1 +${id:0:12} .*(seconds?|Less than a second) ago" "$T/table"
check "an image of 3 days ago says so" grep -qE " ${old:0:12} .* 3 days ago " "$T/table"
check "images --json gives that day in RFC 3339" \
  [ "$(cairn inspect old:1 | jq -r .created)" = "$(date -u -d "@$three_days" +%Y-%m-%dT%H:%M:%SZ)" ]
check "images: sizes in KiB" grep -qE " ${id:0:12} .* 10\.0 KiB " "$T/table"
check "layers: sizes in KiB" grep -qE " 10\.0 KiB " <(cairn layers)

# Pins: since is RFC 3339 in JSON, relative in the table.
hold_image app:1
check "cairn-pin ls --json: since is RFC 3339" \
  grep -qE "$rfc3339" <<<"$(cairn-pin ls --json | jq -r '[.[] | select(.since)][0].since')"
check "cairn-pin ls: since is relative" grep -qE "(seconds?|Less than a second) ago" <(cairn-pin ls)
kill -9 "$sleeper" "$holder"
wait "$holder" 2>/dev/null

# gc's and rm's lines: human sizes, not byte counts.
sqlite3 "$STORE/meta.db" "PRAGMA foreign_keys=ON; DELETE FROM images WHERE id = '$old'"
rm -f "$STORE/refs" # a hand edit of images drops STORE/refs, as cairn's writers do
cairn gc --dry-run >"$T/gc"
check "gc --dry-run: the layer in KiB" grep -qE "^would remove layer sha256:[0-9a-f]{64} \(10\.0 KiB\)$" "$T/gc"
check "gc --dry-run: the total human (3000 B of blob)" grep -qx "would free 1 layers, 1 blobs, 2.9 KiB" "$T/gc"
check "no line counts bytes" sh -c "! grep -q bytes '$T/gc'"
cairn gc >"$T/gc"
check "gc: the total human" grep -qx "freed 1 layers, 1 blobs, 2.9 KiB" "$T/gc"
cairn rm app:1 >"$T/rm"
check "rm: the layer it freed in KiB" grep -qE "^Removed layer sha256:[0-9a-f]{64} \(10\.0 KiB\)$" "$T/rm"
finish
