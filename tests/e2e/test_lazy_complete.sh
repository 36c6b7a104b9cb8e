#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_lazy_complete.sh — a lazily pulled zstd:chunked layer, once all its
# files are here, becomes what a full pull records (doc/lazy-pulls.md, "Finishing a lazily pulled layer"), against Debian's
# docker-registry on 127.0.0.1 behind the shaping proxy, with a layer
# podman 4.3 pushed (--compression-format zstd:chunked):
#   cairn fill ends by recording the layer's exact tar, fetching only the
#   tar headers between the files (counted by the proxy); the layer's rows
#   (layers, entries, layer_tars) are then the full pull's, no source row
#   or TOC is left, and export is the full pull's byte for byte;
#   a layer whose files all came by first reads is complete, its source
#   kept until a fill records its tar (fsck says so); a fill killed while
#   it records the tar leaves a store fsck passes, the next finishes it;
#   push of a filled image, and of a lazily pulled image not filled (it
#   fills first, saying so), pulled back elsewhere gives the same image
#   id; export of one not filled fills it first, saying so; cairnfs --als
#   does not offer a lazily pulled layer, unless fill --keep-blobs fetched
#   and kept its blob (then its rows are all the full pull's).
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib registry
pull_test_init
command -v podman >/dev/null || skip "no podman"
command -v sqlite3 >/dev/null || skip "no sqlite3"

setup python3 "$HELPERS/lazy_tree.py" "$T/a" 35
setup registry_start "$T/reg"
setup podman_push_chunked "$T/a" lazy/a:1
setup proxy_start "$T/proxy" --rate 12500000 --latency 0.005
manifest() { registry_manifest lazy/a 1; }
q() { sqlite3 "file:$1/meta.db?mode=ro" "$2"; }
# a layer's rows as a full pull records them (not its creation time)
rows() {
  q "$1" "SELECT id, size, entries, state FROM layers ORDER BY id"
  q "$1" "SELECT layer_id, path, type, mode, uid, gid, size, mtime, mtime_nsec, rdev, target,
          blob, hex(xattrs) FROM entries ORDER BY layer_id, path"
  q "$1" "SELECT layer_id, size, hex(data) FROM layer_tars ORDER BY layer_id"
}
same_rows() { # (the difference, if any, on stderr)
  diff <(rows "$1") <(rows "$2") | cut -c1-200 | head -20 | sed "s/^/# /" >&2
  cmp -s <(rows "$1") <(rows "$2")
}
bsize=$(manifest | jq '.layers[0].size')
bdigest=$(manifest | jq -r '.layers[0].digest')
echo "# layer: $bsize bytes" >&2

# The reference: a full pull.
setup cairn --store "$T/full" pull -q --insecure "docker://$PROXY/lazy/a:1" >"$T/full.id"
setup cairn --store "$T/full" export -q -o "$T/full.tar" lazy/a:1

# A lazy pull, then a fill: the layer's exact tar is recorded at its end.
setup cairn pull -q --insecure --lazy --no-fill "docker://$PROXY/lazy/a:1" >/dev/null
proxy_reset
expect_exit 0 "fill of a lazily pulled image" cairn fill lazy/a:1
sed "s/^/# /" "$T/stderr" >&2
check "fill says it recorded the layer's exact tar" \
  grep -q "layer ${bdigest:0:19}: its exact tar recorded (the tar headers fetched" "$T/stderr"
fetched=$(proxy_counts | jq .bytes)
files=$(cd "$T/a" && find . -type f -links 1 -printf '%s\n' | awk '{ s += $1 } END { print s }')
hdr=$(grep -o 'the tar headers fetched: [0-9]* of' "$T/stderr" | grep -o '[0-9]*')
echo "# the fill moved $fetched bytes (files $files); the tar headers $hdr" >&2
check "the headers are a small part of the layer ($hdr of $bsize bytes)" \
  test -n "$hdr" -a "${hdr:-0}" -gt 0 -a "${hdr:-0}" -lt $((bsize / 20))
check "the layer's rows are the full pull's (layers, entries, exact tar)" \
  same_rows "$ST" "$T/full"
check "no layer source row is left" test "$(q "$ST" "SELECT count(*) FROM layer_sources")" = 0
check "no TOC is left" test ! -e "$ST/toc/${bdigest#sha256:}"
expect_exit 0 "fsck after the fill" cairn fsck
expect_exit 0 "export of the filled image" cairn export -q -o "$T/lazy.tar" lazy/a:1
check "export: the full pull's tar, byte for byte" cmp "$T/lazy.tar" "$T/full.tar"

# Every file fetched as a mount's first reads fetch them (cairn fill
# --file): the layer is complete, its exact tar not recorded yet; a fill
# killed while it records it (a slow link: it waits for the headers)
# leaves a store fsck passes; the next fill finishes the layer.
setup cairn --store "$T/k" pull -q --insecure --lazy --no-fill "docker://$PROXY/lazy/a:1" >/dev/null
pending() { q "$T/k" "SELECT count(*) FROM pending"; }
for sha in $(q "$T/k" "SELECT DISTINCT sha256 FROM pending"); do
  setup cairn --store "$T/k" fill --file "sha256:$sha" >/dev/null
done
check "every file read: the layer complete, its source kept for its tar" \
  test "$(pending) $(q "$T/k" "SELECT state FROM layers") $(q "$T/k" \
    "SELECT count(*) FROM layer_sources")" = "0 complete 1"
expect_exit 0 "fsck of a complete layer not finished" cairn --store "$T/k" fsck
check "... says it waits for its exact tar" grep -q "not their exact tar record yet" "$T/stdout"
proxy_reset
curl -sf "http://$PROXY/_proxy/set?rate=4000&latency=0.2" >/dev/null
cairn --store "$T/k" fill lazy/a:1 >"$T/fill1.out" 2>"$T/fill1.err" &
fill_pid=$!
for _ in $(seq 200); do
  [ "$(proxy_counts | jq .requests)" -gt 0 ] && break
  sleep 0.05
done
sleep 0.3
kill -9 "$fill_pid" 2>/dev/null
wait "$fill_pid" 2>/dev/null
curl -sf "http://$PROXY/_proxy/set?rate=12500000&latency=0.005" >/dev/null
check "the fill was killed before it recorded the tar" \
  test "$(q "$T/k" "SELECT count(*) FROM layer_tars")" = 0 \
  -a "$(q "$T/k" "SELECT count(*) FROM layer_sources")" = 1
expect_exit 0 "fsck after the killed fill" cairn --store "$T/k" fsck
expect_exit 0 "the next fill finishes the layer" cairn --store "$T/k" fill lazy/a:1
check "... its rows the full pull's" same_rows "$T/k" "$T/full"
check "... no source row left" test "$(q "$T/k" "SELECT count(*) FROM layer_sources")" = 0
expect_exit 0 "fsck after it" cairn --store "$T/k" fsck

# Push of the filled image, pulled back elsewhere: the same image id.
expect_exit 0 "push of the filled image" cairn push --insecure lazy/a:1 \
  "docker://$PROXY/back/filled:1"
expect_exit 0 "... pulled back" cairn --store "$T/b1" pull -q --insecure \
  "docker://$PROXY/back/filled:1"
check "... gives the same image id" test "$(tail -1 "$T/stdout")" = "$(cat "$T/full.id")"

# Push of a lazily pulled image not filled: it fills first, saying so.
setup cairn --store "$T/p" pull -q --insecure --lazy --no-fill "docker://$PROXY/lazy/a:1" >/dev/null
expect_exit 0 "push of a lazily pulled image not filled" cairn --store "$T/p" push --insecure \
  lazy/a:1 "docker://$PROXY/back/lazy:1"
sed "s/^/# /" "$T/stderr" >&2
check "... says it fetches the files first" \
  grep -q "was pulled lazily: fetching its 40 files not fetched yet .* first, as cairn fill does" \
  "$T/stderr"
check "... leaves nothing pending, no source row" \
  test "$(q "$T/p" "SELECT count(*) FROM pending") $(q "$T/p" "SELECT count(*) FROM layer_sources")" = "0 0"
expect_exit 0 "... pulled back" cairn --store "$T/b2" pull -q --insecure \
  "docker://$PROXY/back/lazy:1"
check "... gives the same image id" test "$(tail -1 "$T/stdout")" = "$(cat "$T/full.id")"
expect_exit 0 "fsck of the store pushed from" cairn --store "$T/p" fsck

# Export of a lazily pulled image not filled: it fills first, saying so.
setup cairn --store "$T/e" pull -q --insecure --lazy --no-fill "docker://$PROXY/lazy/a:1" >/dev/null
expect_exit 0 "export of a lazily pulled image not filled" cairn --store "$T/e" export \
  -o "$T/e.tar" lazy/a:1
check "... says it fetches the files first" \
  grep -q "was pulled lazily: fetching its 40 files not fetched yet .* first, as cairn fill does" \
  "$T/stderr"
check "... the full pull's tar, byte for byte" cmp "$T/e.tar" "$T/full.tar"
check "... the layer's rows the full pull's" same_rows "$T/e" "$T/full"
expect_exit 0 "fsck after it" cairn --store "$T/e" fsck
# The Additional Layer Store (cairnfs --als): a lazily pulled layer has no
# kept blob, so it is not offered, before the fill or after a plain one;
# fill --keep-blobs fetches the blob whole and keeps it, as a full pull
# does: the layer's rows are then all the full pull's, layer_blobs too,
# and cairnfs --als serves it.
setup cairn --store "$T/als" pull -q --insecure --lazy --no-fill "docker://$PROXY/lazy/a:1" >/dev/null
ALS=$T/alsdir
setup mkdir "$ALS"
setup "$CAIRN_BIN/cairnfs" --als --store "$T/als" "$ALS"
on_exit "umount '$ALS' 2>/dev/null || umount -l '$ALS' 2>/dev/null || true"
check "cairnfs --als does not offer a lazily pulled layer" test ! -e "$ALS/$bdigest"
proxy_reset
expect_exit 0 "fill --keep-blobs" cairn --store "$T/als" fill --keep-blobs lazy/a:1
sed "s/^/# /" "$T/stderr" >&2
check "... says it fetched the layer whole and kept it" \
  grep -q "layer ${bdigest:0:19}: fetched whole ($bsize bytes) and kept" "$T/stderr"
check "... the layer's rows are the full pull's" same_rows "$T/als" "$T/full"
check "... its kept blob's row too" test "$(q "$T/als" "SELECT * FROM layer_blobs")" = \
  "$(q "$T/full" "SELECT * FROM layer_blobs")"
check "... no layer source row is left" test "$(q "$T/als" "SELECT count(*) FROM layer_sources")" = 0
check "cairnfs --als serves it: the registry's blob" cmp "$ALS/$bdigest/blob" "$(registry_blob_path "$bdigest")"
diff_id=$(q "$T/full" "SELECT id FROM layers")
check_json "... its info: the blob's digest and size, the diff_id" \
  ".[\"compressed-diff-digest\"] == \"$bdigest\" and .[\"compressed-size\"] == $bsize and
   .[\"diff-digest\"] == \"sha256:$diff_id\"" cat "$ALS/$bdigest/info"
check "... and its files" cmp "$ALS/$bdigest/diff/usr/lib/data/f05" "$T/a/usr/lib/data/f05"
expect_exit 0 "umount of the ALS" umount "$ALS"
expect_exit 0 "fsck" cairn --store "$T/als" fsck
finish
