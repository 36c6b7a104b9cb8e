#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_push_access_list.sh — the files a container reads first arrive first
# (doc/lazy-pulls.md "The access list"), against Debian's
# docker-registry on 127.0.0.1 behind the shaping proxy:
#   cairn mount --record-access records the order of a mount's first reads
#   (cairn inspect: AccessList), a later recording replaces it;
#   cairn push --format zstd:chunked|estargz ranks those files in the TOC
#   (the zstd:chunked layer's diff_id, so the image id, unchanged; eStargz
#   also moves them to the front, then .prefetch.landmark);
#   after pull --lazy --no-fill into a fresh store, cairn fill fetches the
#   recorded files first, in requests of their own (the proxy's request
#   log against the TOC's offsets), and the image reads byte for byte.
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib registry mount
pull_test_init

# 300 files of 1 to 40 kB in 10 directories; the run reads 12 of them,
# late in the tar's order first.
setup python3 - "$T" <<'PY'
import os, random, sys
t = sys.argv[1]
rnd = random.Random(27)
for d in range(10):
    os.makedirs(f"{t}/a/d{d}", exist_ok=True)
    for i in range(30):
        open(f"{t}/a/d{d}/f{i:02d}", "wb").write(rnd.randbytes(rnd.randint(1000, 40000)))
read = [f"d{d}/f{i:02d}" for d, i in ((9, 29), (8, 3), (7, 17), (6, 25), (5, 1), (4, 12),
                                       (3, 7), (2, 28), (1, 14), (0, 21), (9, 2), (5, 20))]
open(f"{t}/read.list", "w").write("\n".join(read) + "\n")
PY
setup tar -C "$T/a" --sort=name -cf "$T/a.tar" .
setup cairn --store "$T/src" import -q al/a:1 "$T/a.tar" >"$T/src.id"
src_id=$(cat "$T/src.id")
setup registry_start "$T/reg"
setup proxy_start "$T/proxy" --rate 12500000 --latency 0.005
setup mkdir "$T/m"

# Records: a first run (replaced), then the run that counts.
expect_exit 0 "mount --record-access" cairn --store "$T/src" mount -q --record-access al/a:1 "$T/m"
on_exit "$CAIRN_BIN/cairn --store '$T/src' umount -q '$T/m' 2>/dev/null || true"
setup cat "$T/m/d0/f00" >/dev/null
expect_exit 0 "umount" cairn --store "$T/src" umount -q "$T/m"
access() { cairn --store "$T/src" inspect -f '{{json .AccessList}}' al/a:1; }
check "inspect: the access list of the first run (1 file)" \
  wait_for 10 eval '[ "$(access)" = "{\"Files\":1}" ]'
expect_exit 0 "mount --record-access again" cairn --store "$T/src" mount -q --record-access al/a:1 "$T/m"
while read -r f; do cat "$T/m/$f" >/dev/null; done <"$T/read.list"
setup cat "$T/m/d9/f29" >/dev/null # (read again: recorded once)
expect_exit 0 "umount" cairn --store "$T/src" umount -q "$T/m"
check "inspect: the later recording replaced it (12 files)" \
  wait_for 10 eval '[ "$(access)" = "{\"Files\":12}" ]'
check "... in the order of the first reads" \
  cmp <(tr '\0' '\n' <"$T/src/access/$src_id") "$T/read.list"
expect_exit 0 "a mount without the option" cairn --store "$T/src" mount -q al/a:1 "$T/m"
setup cat "$T/m/d1/f01" >/dev/null
expect_exit 0 "umount" cairn --store "$T/src" umount -q "$T/m"
sleep 0.5
check "... leaves the list as it was" test "$(access)" = '{"Files":12}'

# cairn bundle --record-access: the container's first reads, at --rm.
expect_exit 0 "bundle --record-access" cairn --store "$T/src" bundle -q --record-access \
  al/a:1 "$T/bun" -- /bin/true
on_exit "$CAIRN_BIN/cairn --store '$T/src' bundle --rm -q '$T/bun' 2>/dev/null || true"
setup cat "$T/bun/rootfs/d3/f03" "$T/bun/rootfs/d2/f02" >/dev/null
expect_exit 0 "bundle --rm" cairn --store "$T/src" bundle --rm -q "$T/bun"
check "... replaced the list with the bundle's 2 files" \
  wait_for 10 eval '[ "$(access)" = "{\"Files\":2}" ]'
expect_exit 2 "bundle --rm --record-access is a usage error" cairn --store "$T/src" bundle \
  --rm --record-access "$T/bun"
# the run that counts, recorded again
expect_exit 0 "mount --record-access (the run that counts)" cairn --store "$T/src" mount -q \
  --record-access al/a:1 "$T/m"
while read -r f; do cat "$T/m/$f" >/dev/null; done <"$T/read.list"
expect_exit 0 "umount" cairn --store "$T/src" umount -q "$T/m"
check "inspect: 12 files again" wait_for 10 eval '[ "$(access)" = "{\"Files\":12}" ]'

# first_requests FORMAT BLOB_DIGEST: from the proxy log of a fill, which
# requests carried which files (by the TOC's offsets); prints
# "FIRST LAST MIXED": the index of the first and last request with a
# recorded file, and how many requests mixed recorded and other files.
toc_json() { # FORMAT BLOB_PATH ANNOTATION_POSITION: the TOC's JSON
  python3 - "$@" <<'PY'
import gzip, io, subprocess, sys, tarfile
fmt, path, pos = sys.argv[1:4]
b = open(path, "rb").read()
if fmt == "zstd":
    off, ln = map(int, pos.split(":")[:2])
    sys.stdout.write(subprocess.run(["zstd", "-dcq"], input=b[off:off + ln],
                                    capture_output=True, check=True).stdout.decode())
else:
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(b))) as t:
        sys.stdout.write(t.extractfile("stargz.index.json").read().decode())
PY
}
first_requests() { # TOC_JSON LOG_JSON READ_LIST
  python3 - "$@" <<'PY'
import json, sys
toc, log, read = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3]
want = {l.strip() for l in open(read) if l.strip()}
offs = [(e["offset"], e["name"].lstrip("./")) for e in toc["entries"]
        if e.get("type") in ("reg", "chunk") and e.get("offset")]
first = last = None
mixed = 0
reqs = [r for r in log if "/blobs/" in r[0] and r[1]]
for i, (_, rng) in enumerate(reqs):
    names = set()
    for part in rng.split("=", 1)[1].split(","):
        a, b = map(int, part.split("-"))
        names |= {n for o, n in offs if a <= o <= b}
    if names & want:
        first = i if first is None else first
        last = i
        mixed += bool(names - want)
print(first, last, mixed, len(reqs))
PY
}

for fmt in zstd estargz; do
  f=zstd:chunked
  [ "$fmt" = estargz ] && f=estargz
  expect_exit 0 "push --format $f" cairn --store "$T/src" push --insecure --no-progress \
    --format "$f" al/a:1 "docker://$REGISTRY/al/$fmt:1"
  check "... says the access list's files go first" \
    grep -q "the access list: 12 files of the layers' TOCs first (12 recorded)" "$T/stderr"
  manifest=$(registry_manifest "al/$fmt" 1)
  bdigest=$(jq -r '.layers[0].digest' <<<"$manifest")
  pos=$(jq -r '.layers[0].annotations | to_entries[] |
    select(.key | endswith("zstd-chunked.manifest-position")) | .value' <<<"$manifest")
  setup toc_json "$fmt" "$(registry_blob_path "$bdigest")" "$pos" >"$T/$fmt.toc"
  check "$f: the TOC ranks the 12 files" \
    test "$(jq '[.entries[] | select(."cairn.prefetch")] | length' "$T/$fmt.toc")" = 12
  check "$f: ranked in the order of the first reads" \
    cmp <(jq -r '[.entries[] | select(."cairn.prefetch")] | sort_by(."cairn.prefetch") | .[].name |
      ltrimstr("./")' "$T/$fmt.toc") "$T/read.list"
  if [ "$fmt" = estargz ]; then
    check "eStargz: the 12 files first, then .prefetch.landmark" cmp <(jq -r '.entries |
      (map(.name) | index(".prefetch.landmark")) as $k | .[:$k][] | select(.type == "reg") |
      .name | ltrimstr("./")' "$T/$fmt.toc" | sort) <(sort "$T/read.list")
  fi
  if [ "$fmt" = zstd ]; then
    check "zstd:chunked: the image id is unchanged" \
      test "$(jq -r .config.digest <<<"$manifest")" = "sha256:$src_id"
  fi
  # a fresh store, the TOCs only, then the fill through the proxy
  expect_exit 0 "$f: pull --lazy --no-fill" cairn --store "$T/$fmt" pull -q --insecure \
    --lazy --no-fill "docker://$PROXY/al/$fmt:1"
  proxy_reset
  expect_exit 0 "$f: cairn fill" cairn --store "$T/$fmt" fill "al/$fmt:1"
  proxy_log >"$T/$fmt.log"
  read -r first last mixed total < <(first_requests "$T/$fmt.toc" "$T/$fmt.log" "$T/read.list")
  echo "# $f: the recorded files in requests $first..$last of $total, $mixed mixed" >&2
  check "$f: the recorded files come in the fill's first requests ($first..$last of $total)" \
    test "$first" = 0 -a "$last" -lt 4
  check "$f: ... in requests of their own ($mixed mixed with other files)" test "$mixed" = 0
  check "$f: ... few of them ($((last + 1)) for 12 files)" test "$((last + 1))" -le 4
  setup mkdir "$T/m-$fmt"
  expect_exit 0 "$f: mount" cairn --store "$T/$fmt" mount -q "al/$fmt:1" "$T/m-$fmt"
  on_exit "$CAIRN_BIN/cairn --store '$T/$fmt' umount -q '$T/m-$fmt' 2>/dev/null || true"
  check "$f: the image reads byte for byte" diff -r --exclude stargz.index.json \
    --exclude .prefetch.landmark "$T/m-$fmt" "$T/a"
  expect_exit 0 "$f: umount" cairn --store "$T/$fmt" umount -q "$T/m-$fmt"
  expect_exit 0 "$f: fsck" cairn --store "$T/$fmt" fsck
done

# A push without a list: no rank (as before).
setup rm -f "$T/src/access/$src_id"
expect_exit 0 "push --format zstd:chunked without a list" cairn --store "$T/src" push \
  --insecure --no-progress --format zstd:chunked al/a:1 "docker://$REGISTRY/al/none:1"
check "... says nothing of one" test "$(grep -c "access list" "$T/stderr")" = 0
manifest=$(registry_manifest al/none 1)
setup toc_json zstd "$(registry_blob_path "$(jq -r '.layers[0].digest' <<<"$manifest")")" \
  "$(jq -r '.layers[0].annotations | to_entries[] |
    select(.key | endswith("zstd-chunked.manifest-position")) | .value' <<<"$manifest")" >"$T/none.toc"
check "... and its TOC ranks nothing" \
  test "$(jq '[.entries[] | select(."cairn.prefetch")] | length' "$T/none.toc")" = 0
finish
