#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_pull_lazy_estargz.sh — lazy pulls of eStargz layers
# (doc/lazy-pulls.md), against Debian's docker-registry on 127.0.0.1 behind
# the shaping proxy, with two images of one tree: one pushed by `cairn push
# --format estargz`, one written by the reference (containerd's estargz
# package, tests/helpers/estargz_ref: chunks of 64 KiB and a prefetch
# landmark; skipped without Go or the package). For each:
#   cairn pull --lazy fetches the manifest, the config, the footer and the
#   TOC only (counted by the proxy: two range requests), with the full
#   pull's image id; a mount works at once and ls -lR shows the full pull's
#   tree (stargz.index.json and the landmark included) without a byte
#   fetched, stargz.index.json reads without a request; a cat of one file
#   fetches about that file's bytes (150 kB; 3 chunks in the reference's
#   blob) in one request and gives its bytes; a
#   corrupt byte in one file's gzip member in the registry's blob fails that
#   file's read (EIO) and no other; cairn fill then gives the full pull's
#   image: same id, same export (listing and contents), fsck clean, no
#   pending row, source row or kept TOC left, having moved about the
#   layer's bytes once (at most 1.2 times them): the layer's finish
#   assembles its blob from the fill's requests, the kept TOC and the
#   bytes they lack (the file the mount read), not fetched whole again.
#   A fill whose copy of the blob comes out wrong (a range reply with a
#   wrong byte where no file's check sees it) is finished from the whole
#   blob instead: said, the full pull's image, fsck clean. A fill killed
#   (kill -9) mid-way or in its finish: the next one completes the image.
#   The reference's blob without the toc.digest annotation is pulled in
#   full, said once.
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib registry mount
pull_test_init
command -v sqlite3 >/dev/null || skip "no sqlite3"

setup python3 - "$T" <<'PY'
import os, random, sys
t = sys.argv[1]
rnd = random.Random(35)
os.makedirs(f"{t}/a/usr/lib/data", exist_ok=True)
os.makedirs(f"{t}/a/etc", exist_ok=True)
for i in range(40):
    data = rnd.randbytes(rnd.choice((3000, 20000, 70000, 150000)))
    if i == 6:  # the file read: in 3 chunks in the reference's blob
        data = rnd.randbytes(150000)
    open(f"{t}/a/usr/lib/data/f{i:02d}", "wb").write(data)
open(f"{t}/a/etc/hostname", "w").write("estargz\n")
os.symlink("data/f01", f"{t}/a/usr/lib/link")
os.link(f"{t}/a/usr/lib/data/f02", f"{t}/a/usr/lib/hard")
open(f"{t}/a/empty", "wb").close()
os.chmod(f"{t}/a/usr/lib/data/f03", 0o4755)
PY
# GNU format: whole-second times, as the TOC has them
setup tar -C "$T/a" --sort=name --numeric-owner --format=gnu -cf "$T/a.tar" .
setup registry_start "$T/reg"
manifest() { registry_manifest "$1" 1; }

# ---- the images: cairn's push, and the reference's blob uploaded as is
setup cairn --store "$T/src" import -q sg/a:1 "$T/a.tar" >/dev/null
setup cairn --store "$T/src" push -q --insecure --no-progress --format estargz sg/a:1 \
  "docker://$REGISTRY/lazy/cairn:1"
images=(cairn)
if command -v go >/dev/null && [ -d /usr/share/gocode/src/github.com/containerd/stargz-snapshotter ]; then
  ref=$T/estargz_ref
  if (cd "$CAIRN_SRC/tests/helpers/estargz_ref" && GO111MODULE=off GOPATH=/usr/share/gocode \
    GOCACHE=$T/gocache go build -o "$ref" main.go) >"$T/go.log" 2>&1; then
    read -r tocd diffid < <("$ref" write "$T/a.tar" "$T/ref.gz" 65536 "usr/lib/data/f05")
    upload() { # REPO ANNOTATE
      python3 - "$REGISTRY" "$1" "$T/ref.gz" "$tocd" "$diffid" "$2" <<'PY'
import hashlib, json, sys, urllib.request
reg, repo, path, tocd, diffid, annotate = sys.argv[1:7]
def put_blob(data):
    d = "sha256:" + hashlib.sha256(data).hexdigest()
    loc = urllib.request.urlopen(urllib.request.Request(
        f"http://{reg}/v2/{repo}/blobs/uploads/", data=b"", method="POST")).headers["Location"]
    if loc.startswith("/"):
        loc = f"http://{reg}{loc}"
    urllib.request.urlopen(urllib.request.Request(
        f"{loc}{'&' if '?' in loc else '?'}digest={d}", data=data, method="PUT",
        headers={"Content-Type": "application/octet-stream"}))
    return d, len(data)
blob = open(path, "rb").read()
config = json.dumps({"architecture": "amd64", "os": "linux", "config": {},
                     "rootfs": {"type": "layers", "diff_ids": [diffid]}}).encode()
cd, cl = put_blob(config)
bd, bl = put_blob(blob)
layer = {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": bd, "size": bl}
if annotate == "1":
    layer["annotations"] = {"containerd.io/snapshot/stargz/toc.digest": tocd}
m = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                           "digest": cd, "size": cl}, "layers": [layer]}).encode()
urllib.request.urlopen(urllib.request.Request(
    f"http://{reg}/v2/{repo}/manifests/1", data=m, method="PUT",
    headers={"Content-Type": "application/vnd.oci.image.manifest.v1+json"}))
PY
    }
    setup upload lazy/ref 1
    setup upload lazy/noann 0
    images+=(ref)
  else
    fail "building the reference helper: $(tail -5 "$T/go.log")"
  fi
else
  echo "# skip: the reference image (no golang-go or golang-github-containerd-stargz-snapshotter-dev)" >&2
fi

setup proxy_start "$T/proxy" --rate 12500000 --latency 0.005

# The TOC entries of a blob (python: footer, then the TOC member's tar).
toc_json() {
  python3 - "$1" <<'PY'
import gzip, io, sys, tarfile
b = open(sys.argv[1], "rb").read()
off = int(b[-51 + 16:-51 + 32], 16)
t = tarfile.open(fileobj=io.BytesIO(gzip.decompress(b[off:-51])))
sys.stdout.write(t.extractfile("stargz.index.json").read().decode())
PY
}

for img in "${images[@]}"; do
  S=$T/lazy-$img F=$T/full-$img
  pending() { sqlite3 "file:$S/meta.db?mode=ro" "SELECT count(*) FROM pending"; }
  bsize=$(manifest "lazy/$img" | jq '.layers[0].size')
  bdigest=$(manifest "lazy/$img" | jq -r '.layers[0].digest')
  blob=$(registry_blob_path "$bdigest")
  toc_off=$((16#$(tail -c 51 "$blob" | dd bs=1 skip=16 count=16 2>/dev/null)))
  tail_len=$((bsize - toc_off))
  toc_json "$blob" >"$T/$img.toc"
  nfiles=$(jq '[.entries[] | select(.type == "reg" and .size > 0)] | length' "$T/$img.toc")
  echo "# $img: layer $bsize bytes, its TOC and footer $tail_len bytes, $nfiles files" >&2

  # The reference: a full pull, mounted.
  setup cairn --store "$F" pull -q --insecure "docker://$PROXY/lazy/$img:1" >"$F.id"
  setup mkdir "$F.m" "$S.m"
  setup cairn --store "$F" mount "lazy/$img:1" "$F.m"
  on_exit "$CAIRN_BIN/cairn --store '$F' umount '$F.m' 2>/dev/null || true"

  # The lazy pull: footer and TOC only.
  proxy_reset
  expect_exit 0 "$img: pull --lazy" cairn --store "$S" pull --insecure --lazy --no-fill \
    "docker://$PROXY/lazy/$img:1"
  sed "s/^/# /" "$T/stderr" >&2
  lazy=$(proxy_counts)
  echo "# $img: lazy pull: $(jq -c '{requests, ranges, bytes}' <<<"$lazy")" >&2
  check "$img: pull --lazy says the TOC was fetched and how many files wait" \
    grep -Eq "lazy pull: fetched its TOC \($tail_len bytes\); $nfiles files to fetch" "$T/stderr"
  check "$img: pull --lazy: the image id of the full pull" \
    test "$(tail -1 "$T/stdout")" = "$(cat "$F.id")"
  check_json "$img: pull --lazy: two range requests (footer, TOC)" '.ranges == 2' echo "$lazy"
  check "$img: pull --lazy: no more than manifest, config, footer and TOC went through" \
    test "$(jq .bytes <<<"$lazy")" -lt $((tail_len + 8192))
  check "$img: $nfiles files pending (stargz.index.json is stored)" test "$(pending)" = "$nfiles"
  check "$img: the TOC is kept" test -s "$S/toc/${bdigest#sha256:}"
  expect_exit 0 "$img: fsck passes the partial layer" cairn --store "$S" fsck

  # A mount at once; its tree without a byte fetched.
  proxy_reset
  expect_exit 0 "$img: mount of the lazily pulled image" cairn --store "$S" mount \
    "lazy/$img:1" "$S.m"
  on_exit "$CAIRN_BIN/cairn --store '$S' umount '$S.m' 2>/dev/null || true"
  (cd "$S.m" && ls -lnR --time-style=+%s .) | grep -v '^total' >"$S.ls"
  (cd "$F.m" && ls -lnR --time-style=+%s .) | grep -v '^total' >"$F.ls"
  check "$img: ls -lR of the mount: the full pull's tree (stargz.index.json included)" \
    cmp "$S.ls" "$F.ls"
  check "$img: ... which has stargz.index.json" test -s "$S.m/stargz.index.json"
  check "$img: stargz.index.json reads as the full pull's" \
    cmp "$S.m/stargz.index.json" "$F.m/stargz.index.json"
  check_json "$img: ls -lR and stargz.index.json fetched nothing" '.requests == 0' proxy_counts

  # One file read: that file alone fetched, its bytes right.
  proxy_reset
  check "$img: cat of a pending file gives its bytes" \
    cmp "$S.m/usr/lib/data/f06" "$T/a/usr/lib/data/f06"
  f06=$(stat -c %s "$T/a/usr/lib/data/f06")
  one=$(proxy_counts | jq .bytes)
  echo "# $img: f06: $f06 bytes; the read fetched $one" >&2
  check_json "$img: the read: one range request" '.requests == 1 and .ranges == 1' proxy_counts
  check "$img: the read fetched about that file's bytes ($one for $f06)" \
    test "$one" -lt $((f06 + f06 / 50 + 4096)) -a "$one" -gt $((f06 / 2))
  check "$img: that file is no longer pending" test "$(pending)" = $((nfiles - 1))
  check "$img: a hardlink and a symlink to pending files read right" \
    cmp "$S.m/usr/lib/hard" "$T/a/usr/lib/data/f02"
  check "$img: the symlink's target" cmp "$S.m/usr/lib/link" "$T/a/usr/lib/data/f01"

  # A corrupt byte in one file's gzip member in the registry: that read
  # fails (EIO), the others do not.
  setup cp "$blob" "$T/blob.good"
  victim=usr/lib/data/f07
  off=$(jq --arg n "$victim" '[.entries[] | select(.name == $n or .name == "./" + $n) |
    .offset] | first' "$T/$img.toc")
  setup python3 -c 'import sys; p, o = sys.argv[1], int(sys.argv[2]); b = bytearray(open(p, "rb").read()); b[o] ^= 0xFF; open(p, "wb").write(b)' \
    "$blob" $((off + 200))
  if cat "$S.m/$victim" >"$T/victim.out" 2>"$T/cat.err"; then
    fail "$img: a corrupt file's read fails"
  else
    ok "$img: a corrupt file's read fails"
  fi
  check "$img: ... with EIO" grep -q "Input/output error" "$T/cat.err"
  check "$img: ... serving no byte of it" test ! -s "$T/victim.out"
  check "$img: ... and it stays pending" test "$(sqlite3 "file:$S/meta.db?mode=ro" \
    "SELECT count(*) FROM pending WHERE path = '$victim'")" = 1
  check "$img: another file still reads" cmp "$S.m/usr/lib/data/f09" "$T/a/usr/lib/data/f09"
  setup cp "$T/blob.good" "$blob"
  expect_exit 0 "$img: umount" cairn --store "$S" umount "$S.m"

  # The fill: the full pull's image, the layer's bytes moved about once.
  proxy_reset
  expect_exit 0 "$img: fill" cairn --store "$S" fill "lazy/$img:1"
  sed "s/^/# /" "$T/stderr" >&2
  moved=$(proxy_counts | jq .bytes)
  echo "# $img: the fill moved $moved bytes for a layer of $bsize" >&2
  check "$img: the fill moved at most 1.2 times the layer's bytes ($moved for $bsize)" \
    test "$moved" -le $((bsize + bsize / 5))
  check "$img: ... its finish assembled the blob from the fill's requests" \
    grep -q "its blob assembled from the fill's requests and kept" "$T/stderr"
  check "$img: no pending rows remain" test "$(pending)" = 0
  check "$img: no source rows remain" \
    test "$(sqlite3 "file:$S/meta.db?mode=ro" "SELECT count(*) FROM layer_sources")" = 0
  check "$img: the layer is complete" test "$(sqlite3 "file:$S/meta.db?mode=ro" \
    "SELECT count(*) FROM layers WHERE state != 'complete'")" = 0
  check "$img: its TOC is gone" test ! -e "$S/toc/${bdigest#sha256:}"
  expect_exit 0 "$img: fsck after the fill" cairn --store "$S" fsck
  check "$img: the image id is the full pull's" \
    test "$(cairn --store "$S" images --json | jq -r '.[0].id')" = "$(cat "$F.id")"
  for s in "$S" "$F"; do
    cairn --store "$s" export -q "lazy/$img:1" | tar -tvf - | sort >"$s.files"
    rm -rf "$s.x" && mkdir "$s.x" && cairn --store "$s" export -q "lazy/$img:1" |
      tar -C "$s.x" -xf -
    (cd "$s.x" && find . -type f -print0 | sort -z | xargs -0 sha256sum) >"$s.sums"
  done
  check "$img: export: the full pull's listing" cmp "$S.files" "$F.files"
  check "$img: export: the full pull's files, byte for byte" cmp "$S.sums" "$F.sums"
  check "$img: ... stargz.index.json among them" grep -q "stargz.index.json" "$S.sums"
  expect_exit 0 "$img: umount the full pull" cairn --store "$F" umount "$F.m"
done

# A fill's copy of the blob that is not the blob: the first bytes (the
# root's tar header, before the first file's data: no fill request brings
# them, no file's check covers them) come wrong in the range reply of the
# layer's finish. The finish fetches the blob whole instead.
S=$T/lazy-flip
bsize=$(manifest lazy/cairn | jq '.layers[0].size')
first=$(jq '[.entries[] | select(.type == "reg" and .size > 0) | .offset] | min' "$T/cairn.toc")
setup test "$first" -gt 1
expect_exit 0 "flip: pull --lazy" cairn --store "$S" pull --insecure --lazy --no-fill \
  "docker://$PROXY/lazy/cairn:1"
setup curl -sf "http://$PROXY/_proxy/set?flip=$((first / 2))" -o /dev/null
proxy_reset
expect_exit 0 "flip: fill, a byte its copy lacked wrong in the finish's range reply" \
  cairn --store "$S" fill lazy/cairn:1
moved=$(proxy_counts | jq .bytes)
log=$(proxy_log)
setup curl -sf "http://$PROXY/_proxy/set?flip=-1" -o /dev/null
sed "s/^/# /" "$T/stderr" >&2
check "flip: the finish says the copy is not the blob" \
  grep -q "the fill's copy of its blob is not usable (its digest is sha256:" "$T/stderr"
check "flip: ... and fetched it whole" grep -q "fetched whole ($bsize bytes) and kept" "$T/stderr"
bdigest=$(manifest lazy/cairn | jq -r '.layers[0].digest')
check "flip: ... in one request ($moved bytes moved for $bsize)" test "$(jq --arg d "$bdigest" \
  '[.[] | select((.[0] | endswith("/blobs/" + $d)) and .[1] == "")] | length' <<<"$log")" = 1
check "flip: the image id is the full pull's" \
  test "$(cairn --store "$S" images --json | jq -r '.[0].id')" = "$(cat "$T/full-cairn.id")"
check "flip: the layer is complete, nothing pending" test "$(sqlite3 "file:$S/meta.db?mode=ro" \
  "SELECT count(*) FROM layers WHERE state != 'complete'")$(sqlite3 "file:$S/meta.db?mode=ro" \
  "SELECT count(*) FROM pending")" = 00
expect_exit 0 "flip: fsck" cairn --store "$S" fsck
rm -rf "$S.x" && mkdir "$S.x" && cairn --store "$S" export -q lazy/cairn:1 | tar -C "$S.x" -xf -
(cd "$S.x" && find . -type f -print0 | sort -z | xargs -0 sha256sum) >"$S.sums"
check "flip: export: the full pull's files, byte for byte" cmp "$S.sums" "$T/full-cairn.sums"

# A fill killed (kill -9) after its first request's files are committed,
# and one killed in its finish: the copy was an anonymous file, nothing
# of it is left; the next fill completes the image, the first finishing
# from its own copy (the files the killed one stored its holes).
for point in "lazy: committed" "lazy: TOCs unlinked"; do
  S=$T/lazy-kill-${point//[^a-z]/}
  expect_exit 0 "kill at '$point': pull --lazy" cairn --store "$S" pull --insecure --lazy \
    --no-fill "docker://$PROXY/lazy/cairn:1"
  env CAIRN_INJECT_DIR="$S" CAIRN_INJECT_PROG=cairn CAIRN_INJECT_POINT="$point" \
    CAIRN_INJECT_MODE=kill LD_PRELOAD="$(injector_preload)" "$CAIRN_BIN/cairn" --store "$S" \
    fill -q lazy/cairn:1 >/dev/null 2>&1
  check "kill at '$point': the fill was killed" test $? = 137
  left=$(sqlite3 "file:$S/meta.db?mode=ro" "SELECT count(*) FROM pending")
  proxy_reset
  expect_exit 0 "kill at '$point': the next fill ($left files left)" cairn --store "$S" fill \
    lazy/cairn:1
  moved=$(proxy_counts | jq .bytes)
  if [ "$point" = "lazy: committed" ]; then
    check "kill at '$point': ... some files were left, some stored" test "$left" -gt 0 -a \
      "$left" -lt "$(jq '[.entries[] | select(.type == "reg" and .size > 0)] | length' \
      "$T/cairn.toc")"
    check "kill at '$point': ... it finished from its copy ($moved bytes moved for $bsize)" \
      grep -q "its blob assembled from the fill's requests and kept" "$T/stderr"
    check "kill at '$point': ... moving at most 1.2 times the layer's bytes" \
      test "$moved" -le $((bsize + bsize / 5))
  fi
  check "kill at '$point': the image id is the full pull's" \
    test "$(cairn --store "$S" images --json | jq -r '.[0].id')" = "$(cat "$T/full-cairn.id")"
  check "kill at '$point': nothing pending, no source row" test "$(sqlite3 \
    "file:$S/meta.db?mode=ro" "SELECT (SELECT count(*) FROM pending) + (SELECT count(*) FROM \
    layer_sources)")" = 0
  expect_exit 0 "kill at '$point': fsck" cairn --store "$S" fsck
  rm -rf "$S.x" && mkdir "$S.x" && cairn --store "$S" export -q lazy/cairn:1 | tar -C "$S.x" -xf -
  (cd "$S.x" && find . -type f -print0 | sort -z | xargs -0 sha256sum) >"$S.sums"
  check "kill at '$point': export: the full pull's files" cmp "$S.sums" "$T/full-cairn.sums"
done

# The reference's blob without the toc.digest annotation: pulled in full.
if [[ " ${images[*]} " == *" ref "* ]]; then
  expect_exit 0 "pull --lazy of an eStargz layer without its TOC digest" \
    cairn --store "$T/st3" pull --insecure --lazy "docker://$PROXY/lazy/noann:1"
  check "... says it pulls it in full, once" test "$(grep -c "no lazy pull (not a registry's \
zstd:chunked or eStargz layer whose TOC the manifest vouches for); pulling it in full" \
    "$T/stderr")" = 1
  check "... and leaves nothing pending" \
    test "$(sqlite3 "file:$T/st3/meta.db?mode=ro" "SELECT count(*) FROM pending")" = 0
fi
finish
