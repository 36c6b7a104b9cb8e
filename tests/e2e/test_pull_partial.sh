#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_pull_partial.sh — the partial pull of zstd:chunked layers
# (doc/lazy-pulls.md "What is fetched when", item 4), against Debian's
# docker-registry on 127.0.0.1 behind the shaping proxy, with layers podman
# 4.3 pushed (--compression-format zstd:chunked):
#   image B shares 38 of its 40 files with image A, which the store holds: pulling
#   B fetches its TOC and the missing files' ranges only (a small fraction
#   of the layer's bytes, counted by the proxy, in multi-range requests),
#   says so (bytes fetched against the layer's size, in its progress line
#   too, which -q leaves out), and stores the image a full pull stores
#   (same image id, diff_id, files; fsck clean);
#   a store holding none of B's files pulls it in full (one GET);
#   D's 450 ranges (C stored) go in several requests, some at once;
#   a registry that answers no range request: said once, pulled in full;
#   the files the store holds are taken as they are (not decompressed nor
#   hashed again; the rebuilt tar's diff_id proves them: a stored copy
#   changed on disk fails it, and the layer is pulled in full);
#   a corrupt file in the blob is caught against the TOC before the ingest
#   (in B's only request, and in D's second of three in flight).
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib registry
pull_test_init
command -v podman >/dev/null || skip "no podman"

# Two trees: B is A with two files changed. (podman 4.3's zstd:chunked
# writer fails with "short write" on B with a file added too.)
setup python3 - "$T" <<'PY'
import os, random, sys
t = sys.argv[1]
rnd = random.Random(33)
for name in ("a", "b"):
    os.makedirs(f"{t}/{name}/usr/lib/data", exist_ok=True)
for i in range(40):
    data = rnd.randbytes(rnd.choice((3000, 20000, 70000, 150000)))
    for name in ("a", "b"):
        d = data
        if name == "b" and i in (7, 21):
            d = rnd.randbytes(len(data))
        open(f"{t}/{name}/usr/lib/data/f{i:02d}", "wb").write(d)
for name in ("a", "b"):
    os.symlink("data/f01", f"{t}/{name}/usr/lib/link")
    os.link(f"{t}/{name}/usr/lib/data/f02", f"{t}/{name}/usr/lib/hard")
    open(f"{t}/{name}/empty", "wb").close()
PY
# C and D: 450 files of 600 to 1500 random bytes, 5 of D's changed: D's
# partial pull has about 450 ranges to fetch, more than one request takes.
setup python3 - "$T" <<'PY'
import os, random, sys
t = sys.argv[1]
rnd = random.Random(34)
for name in ("c", "d"):
    os.makedirs(f"{t}/{name}/srv", exist_ok=True)
for i in range(450):
    data = rnd.randbytes(rnd.randint(600, 1500))
    for name in ("c", "d"):
        d = rnd.randbytes(len(data)) if name == "d" and i % 90 == 3 else data
        open(f"{t}/{name}/srv/f{i:03d}", "wb").write(d)
PY
setup registry_start "$T/reg"
for n in a b c d; do setup podman_push_chunked "$T/$n" "part/$n:1"; done
setup proxy_start "$T/proxy" --rate 12500000 --latency 0.005
lacks() { ! grep -q "$1" "$2"; }
manifest() { registry_manifest "part/$1" 1; }
check_json "B's layer is zstd:chunked (podman wrote the TOC annotations)" \
  '.layers[0].annotations | keys | map(test("zstd-chunked.manifest-position")) | any' manifest b
bsize=$(manifest b | jq '.layers[0].size')

# A full pull of B into an empty store: the reference, and its cost.
proxy_reset
expect_exit 0 "full pull of B" cairn --store "$T/full" pull --insecure "docker://$PROXY/part/b:1"
cp "$T/stdout" "$T/full.out"
cp "$T/stderr" "$T/full.err"
full_bytes=$(proxy_counts | jq .bytes)
check "full pull: no partial pull (the store held none of B's files)" \
  lacks 'partial pull' "$T/full.err"
check "full pull: the whole layer went through ($full_bytes >= $bsize bytes)" \
  test "$full_bytes" -ge "$bsize"

# A then B into one store: B is pulled partially.
setup cairn pull -q --insecure "docker://$PROXY/part/a:1" >/dev/null
proxy_reset
expect_exit 0 "pull of B with A stored" \
  cairn pull --insecure "docker://$PROXY/part/b:1"
cp "$T/stdout" "$T/part.out"
cp "$T/stderr" "$T/part.err"
sed "s/^/# /" "$T/part.err" >&2
part_bytes=$(proxy_counts | jq .bytes)
check "partial pull: said, with bytes fetched against the layer's size ($bsize)" \
  grep -Eq "partial pull: fetched [0-9]+ of $bsize bytes in [0-9]+ requests \(38 of 40 files were stored," \
  "$T/part.err"
taken=$(grep -Eo '[0-9]+ taken as stored, not hashed again' "$T/part.err" | grep -Eo '^[0-9]+')
# (a file whose first chunk is small is fetched with its neighbours: stored as any)
check "partial pull: the files stored taken as they are, in the rebuilt tar ($taken of 38)" \
  test "${taken:-0}" -ge 30 -a "${taken:-0}" -le 38
check "partial pull: no fallback to the full download" lacks 'pulling it in full' "$T/part.err"
check "partial pull: the layer's final line gives bytes fetched of its size" \
  grep -Eq "^[0-9a-f]{12}  downloaded [0-9.]+ KiB of 2\.2 MiB \(partial pull\) in [0-9.]+s\$" \
  "$T/part.err"
check "full pull: the layer's final line gives its size, no partial pull" \
  grep -Eq "^[0-9a-f]{12}  downloaded 2\.2 MiB in [0-9.]+s\$" "$T/full.err"
echo "# B's layer: $bsize bytes; full pull $full_bytes bytes; partial pull $part_bytes bytes" >&2
check "partial pull: under a quarter of the full pull's bytes ($part_bytes of $full_bytes)" \
  test $((part_bytes * 4)) -lt "$full_bytes"
check_json "partial pull: range requests, several ranges in one" \
  '.multi_ranges >= 1' proxy_counts
check "partial pull: the image id of the full pull" \
  test "$(tail -1 "$T/part.out")" = "$(tail -1 "$T/full.out")"
id=$(tail -1 "$T/part.out")
for s in "$ST" "$T/full"; do
  cairn --store "$s" inspect "$id" | jq -S '.rootfs // .layers // .' >"$s.inspect" 2>/dev/null
  cairn --store "$s" export -q "$id" 2>/dev/null | tar -tvf - 2>/dev/null | sort >"$s.files"
  cairn --store "$s" export -q "$id" 2>/dev/null | sha256sum >"$s.sum"
done
check "partial pull: inspect agrees with the full pull's" cmp -s "$ST.inspect" "$T/full.inspect"
check "partial pull: the same files (listing)" cmp -s "$ST.files" "$T/full.files"
check "partial pull: the same export" cmp -s "$ST.sum" "$T/full.sum"
expect_exit 0 "fsck after the partial pull" cairn fsck

# A stored copy whose bytes changed on disk (not its size): the rebuilt tar,
# which takes them as they are, fails the diff_id; nothing of it is stored
# and the layer is pulled in full.
setup cairn --store "$T/rot" pull -q --insecure "docker://$PROXY/part/a:1" >/dev/null
rot=$(sqlite3 "file:$T/rot/meta.db?mode=ro" "SELECT blob FROM entries WHERE path = 'usr/lib/data/f03'")
setup python3 -c 'import sys; p = sys.argv[1]; b = bytearray(open(p, "rb").read()); b[100] ^= 1
open(p, "wb").write(b)' "$T/rot/blobs/${rot:0:2}/$rot"
expect_exit 0 "pull of B, a stored copy changed on disk" \
  cairn --store "$T/rot" pull --insecure "docker://$PROXY/part/b:1"
sed "s/^/# /" "$T/stderr" >&2
check "... the rebuilt tar fails its diff_id: the layer pulled in full" \
  grep -Eq 'partial pull failed \(.*diff_id mismatch.*\); pulling it in full' "$T/stderr"
check "... the image id of the full pull" test "$(tail -1 "$T/stdout")" = "$(tail -1 "$T/full.out")"

# -q: no progress line for a partially pulled layer either.
setup cairn --store "$T/quiet" pull -q --insecure "docker://$PROXY/part/a:1" >/dev/null
expect_exit 0 "quiet partial pull of B" \
  cairn --store "$T/quiet" pull -q --insecure "docker://$PROXY/part/b:1"
check "quiet partial pull: no progress line" lacks downloaded "$T/stderr"
check "quiet partial pull: the image id alone on stdout" \
  test "$(cat "$T/stdout")" = "$(tail -1 "$T/full.out")"

# D with C stored: its ranges in several requests, some in flight at
# once (CN_PARTIAL_INFLIGHT), giving the image a full pull gives.
expect_exit 0 "full pull of D" cairn --store "$T/fulld" pull -q --insecure "docker://$PROXY/part/d:1"
cp "$T/stdout" "$T/fulld.out"
setup cairn --store "$T/many" pull -q --insecure "docker://$PROXY/part/c:1" >/dev/null
proxy_reset
expect_exit 0 "pull of D with C stored" \
  cairn --store "$T/many" pull --insecure "docker://$PROXY/part/d:1"
sed "s/^/# /" "$T/stderr" >&2
proxy_counts | jq -c 'del(.paths)' | sed "s/^/# /" >&2
check "many ranges: a partial pull, no fallback" \
  grep -Eq "partial pull: fetched [0-9]+ of [0-9]+ bytes in ([4-9]|[0-9]{2,}) requests \(445 of 450" \
  "$T/stderr"
check_json "many ranges: several range requests in flight at once" \
  '.multi_ranges >= 3 and .max_in_flight >= 2' proxy_counts
check "many ranges: the image id of the full pull" \
  test "$(tail -1 "$T/stdout")" = "$(tail -1 "$T/fulld.out")"
cairn --store "$T/many" export -q "$(tail -1 "$T/stdout")" 2>/dev/null | sha256sum >"$T/many.sum"
cairn --store "$T/fulld" export -q "$(tail -1 "$T/stdout")" 2>/dev/null | sha256sum >"$T/fulld.sum"
check "many ranges: the same export" cmp -s "$T/many.sum" "$T/fulld.sum"
expect_exit 0 "many ranges: fsck" cairn --store "$T/many" fsck

# A registry that answers no range request (200, the whole blob): the
# partial pull says it failed, once, and the layer is pulled in full.
setup cairn --store "$T/norange" pull -q --insecure "docker://$PROXY/part/a:1" >/dev/null
curl -sf "http://$PROXY/_proxy/set?ranges=0" >/dev/null
expect_exit 0 "no ranges: the pull of B succeeds" \
  cairn --store "$T/norange" pull --insecure "docker://$PROXY/part/b:1"
sed "s/^/# /" "$T/stderr" >&2
check "no ranges: said once, then pulled in full" \
  test "$(grep -c 'partial pull failed (.*); pulling it in full' "$T/stderr")" = 1
check "no ranges: the final line gives the layer's size, no partial pull" \
  grep -Eq "^[0-9a-f]{12}  downloaded 2\.2 MiB in [0-9.]+s\$" "$T/stderr"
check "no ranges: the image id of the full pull" \
  test "$(tail -1 "$T/stdout")" = "$(tail -1 "$T/full.out")"
curl -sf "http://$PROXY/_proxy/set?ranges=1" >/dev/null

# A corrupt file in the registry's blob (one byte of f07, which the store
# lacks): the partial pull finds it in the chunk it fetched before
# anything is stored, falls back, and the full pull refuses the blob.
setup cairn --store "$T/bad" pull -q --insecure "docker://$PROXY/part/a:1" >/dev/null
bdigest=$(manifest b | jq -r '.layers[0].digest')
position=$(manifest b | jq -r '.layers[0].annotations | to_entries[] |
  select(.key | endswith("zstd-chunked.manifest-position")) | .value')
setup python3 - "$(registry_blob_path "$bdigest")" "$position" <<'PY'
import json, subprocess, sys
path, (off, length) = sys.argv[1], map(int, sys.argv[2].split(":")[:2])
b = bytearray(open(path, "rb").read())
toc = json.loads(subprocess.run(["zstd", "-dcq"], input=bytes(b[off:off + length]),
                                capture_output=True, check=True).stdout)
e = next(e for e in toc["entries"] if e.get("name", "").endswith("usr/lib/data/f07"))
b[e["offset"] + 100] ^= 0xFF
open(path, "wb").write(b)
PY
expect_exit 5 "corrupt file: the pull fails (integrity)" \
  cairn --store "$T/bad" pull --insecure "docker://$PROXY/part/b:1"
sed "s/^/# /" "$T/stderr" >&2
# (podman's frames carry a checksum of their own: the chunk's
# decompression fails before its digest is compared)
check "corrupt file: found in the chunk fetched, before the ingest" \
  grep -Eq 'partial pull failed \("?usr/lib/data/f07"?: .*\); pulling it in full' "$T/stderr"
check_json "corrupt file: no image B stored" 'length == 1' \
  cairn --store "$T/bad" images --json

# The same in D's last request, while others are in flight: the reason
# given is the file's, not the cancellation of the other requests.
setup cairn --store "$T/bad2" pull -q --insecure "docker://$PROXY/part/c:1" >/dev/null
ddigest=$(manifest d | jq -r '.layers[0].digest')
position=$(manifest d | jq -r '.layers[0].annotations | to_entries[] |
  select(.key | endswith("zstd-chunked.manifest-position")) | .value')
setup python3 - "$(registry_blob_path "$ddigest")" "$position" <<'PY'
import json, subprocess, sys
path, (off, length) = sys.argv[1], map(int, sys.argv[2].split(":")[:2])
b = bytearray(open(path, "rb").read())
toc = json.loads(subprocess.run(["zstd", "-dcq"], input=bytes(b[off:off + length]),
                                capture_output=True, check=True).stdout)
e = next(e for e in toc["entries"] if e.get("name", "").endswith("srv/f363"))
b[e["offset"] + 100] ^= 0xFF
open(path, "wb").write(b)
PY
expect_exit 5 "corrupt file in a later request: the pull fails (integrity)" \
  cairn --store "$T/bad2" pull --insecure "docker://$PROXY/part/d:1"
sed "s/^/# /" "$T/stderr" >&2
check "corrupt file in a later request: named, then pulled in full" \
  grep -Eq 'partial pull failed \("?srv/f363"?: .*\); pulling it in full' "$T/stderr"

# podman 4.3's zstd:chunked writer drops a GNU tar's record padding (tar
# -cf pads to 10,240 bytes) while the config's diff_id is of the padded
# tar: pulled in full, partially and lazily, proven with the zeros, said;
# the layer's exact tar keeps them (a push of it has the diff_id's bytes).
setup cp -a "$T/a" "$T/p"
setup tar -C "$T/p" --sort=name -cf "$T/p.tar" .
setup "${PODMAN[@]}" import -q "$T/p.tar" localhost/part/p:1 >/dev/null
setup "${PODMAN[@]}" push -q --tls-verify=false --compression-format zstd:chunked \
  localhost/part/p:1 "docker://$REGISTRY/part/p:1"
pdiff=$(sha256sum "$T/p.tar" | cut -c1-64)
pblob=$(registry_manifest part/p 1 | jq -r '.layers[0].digest')
unpadded=$(zstd -dcq "$(registry_blob_path "$pblob")" | wc -c)
echo "# tar $(stat -c %s "$T/p.tar") bytes, the blob decompresses to $unpadded" >&2
check "the blob podman wrote lacks the tar's padding" test "$unpadded" -lt "$(stat -c %s "$T/p.tar")"
check_json "... and its config names the padded tar" '.rootfs.diff_ids == ["sha256:'"$pdiff"'"]' \
  curl -sf "http://$REGISTRY/v2/part/p/blobs/$(registry_manifest part/p 1 | jq -r .config.digest)"
expect_exit 0 "pull of podman's image without the padding" \
  cairn --store "$T/pad" pull --insecure "docker://$REGISTRY/part/p:1"
check "... says the zero bytes it proved the diff_id with" \
  grep -q "lacks the tar's last $(($(stat -c %s "$T/p.tar") - unpadded)) zero bytes" "$T/stderr"
check "... once" test "$(grep -c "zero bytes" "$T/stderr")" = 1
setup cairn --store "$T/pad" push -q --compress none part/p:1 "oci:$T/pad-oci" >/dev/null
check "a push of it sends the padded tar, of the diff_id" test -s "$T/pad-oci/blobs/sha256/$pdiff"
expect_exit 0 "a partial pull of it (the store has A's files)" \
  cairn --store "$T/quiet" pull --insecure "docker://$REGISTRY/part/p:1"
check "... is partial" grep -q "partial pull: fetched" "$T/stderr"
check "... and says the padding" grep -q "zero bytes" "$T/stderr"
expect_exit 0 "pull --lazy of it" \
  cairn --store "$T/padl" pull --insecure --lazy --no-fill "docker://$REGISTRY/part/p:1"
expect_exit 0 "... then fill proves its diff_id" cairn --store "$T/padl" fill part/p:1
check "... said" grep -q "zero bytes" "$T/stderr"
check_json "... nothing unverified is left" 'all(.[]; has("unverified") | not)' \
  cairn --store "$T/padl" images --json
expect_exit 0 "fsck of it" cairn --store "$T/padl" fsck
finish
