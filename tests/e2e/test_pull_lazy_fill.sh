#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_pull_lazy_fill.sh — the fill of a lazily pulled image
# (doc/lazy-pulls.md "The fill as built"), against Debian's docker-registry
# on 127.0.0.1 behind the shaping proxy, with a zstd:chunked layer podman
# 4.3 pushed (200 files of 0.5 to 3 kB, 20 of 20 to 150 kB):
#   pull --lazy --no-fill starts nothing: the files stay pending;
#   a mount reads a pending file the fill stored since from the store,
#   starting no fetcher;
#   a fill yields to a mount's first reads: while a large one is in
#   flight no batch starts until it ends, then it fills; while small ones
#   are, it goes on, one request at a time;
#   cairn fill fetches them in far fewer requests than files (merged
#   ranges, multi-range requests, several in flight), no more than the
#   layer's bytes, each file verified (a wrong byte in the registry fails
#   that file alone, exit 5), and the image is then the full pull's (id,
#   export);
#   pull --lazy starts the fill in the background, says so once, returns
#   with the fill holding its pins (rm refused, exit 4); a mount serves
#   the right bytes while it runs, and reads of every file from the mount
#   and a second fill at the same time fetch each file once (the proxy's
#   bytes about the layer's size); the image completes with no user action;
#   the fill's memory does not follow its requests' sizes or its TOC's
#   JSON: 4016 files, 32 MiB of them in 16, peak under 32 MiB RSS.
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib registry mount
pull_test_init
command -v podman >/dev/null || skip "no podman"
command -v sqlite3 >/dev/null || skip "no sqlite3"

setup python3 - "$T" <<'PY'
import os, random, sys
t = sys.argv[1]
rnd = random.Random(35)
os.makedirs(f"{t}/a/small", exist_ok=True)
os.makedirs(f"{t}/a/big", exist_ok=True)
for i in range(200):
    open(f"{t}/a/small/s{i:03d}", "wb").write(rnd.randbytes(rnd.randint(500, 3000)))
for i in range(20):
    open(f"{t}/a/big/b{i:02d}", "wb").write(rnd.randbytes(rnd.choice((20000, 70000, 150000))))
PY
setup registry_start "$T/reg"
setup podman_push_chunked "$T/a" fill/a:1
setup proxy_start "$T/proxy" --rate 12500000 --latency 0.005
pending() { sqlite3 "file:$1/meta.db?mode=ro" "SELECT count(*) FROM pending"; }
bsize=$(curl -sf -H 'Accept: application/vnd.oci.image.manifest.v1+json' \
  -H 'Accept: application/vnd.docker.distribution.manifest.v2+json' \
  "http://$REGISTRY/v2/fill/a/manifests/1" | jq '.layers[0].size')
echo "# layer: $bsize bytes" >&2

exported() { # STORE OUT: the image's export, listed and summed
  cairn --store "$1" export -q fill/a:1 | tar -tvf - | sort >"$2.files"
  rm -rf "$2.x" && mkdir "$2.x" && cairn --store "$1" export -q fill/a:1 | tar -C "$2.x" -xf -
  (cd "$2.x" && find . -type f -print0 | sort -z | xargs -0 sha256sum) >"$2.sums"
}
setup cairn --store "$T/full" pull -q --insecure "docker://$PROXY/fill/a:1" >"$T/full.id"
setup exported "$T/full" "$T/full"

# --no-fill: nothing is started.
expect_exit 0 "pull --lazy --no-fill" cairn --store "$T/s1" pull --insecure --lazy --no-fill \
  "docker://$PROXY/fill/a:1"
check "... 220 files pending" test "$(pending "$T/s1")" = 220
check "... says nothing of a fill" test "$(grep -c background "$T/stderr")" = 0
sleep 2
check "... and after a while still 220 pending: no fill ran" test "$(pending "$T/s1")" = 220
check "... no fill log" test -z "$(ls "$T/s1/tmp" | grep fill-)"

# A mount's pending file that the fill stored meanwhile is read from the
# store: no fetcher (`cairn fill --serve`) is started to learn it is there.
setup cp -a "$T/s1" "$T/s8"
setup mkdir "$T/m8"
expect_exit 0 "mount with every file pending" cairn --store "$T/s8" mount fill/a:1 "$T/m8"
on_exit "$CAIRN_BIN/cairn --store '$T/s8' umount '$T/m8' 2>/dev/null || true"
expect_exit 0 "... a fill stores them all" cairn --store "$T/s8" fill -q fill/a:1
check "... nothing pending" test "$(pending "$T/s8")" = 0
serves() { pgrep -fc -- "$T/s8 fill --serve" || true; }
check "... no fetcher runs" test "$(serves)" = 0
check "a file the mount saw pending reads its bytes" cmp "$T/m8/big/b03" "$T/a/big/b03"
check "... and so does a small one" cmp "$T/m8/small/s007" "$T/a/small/s007"
check "... with no fetcher started ($(serves))" test "$(serves)" = 0
expect_exit 0 "umount" cairn --store "$T/s8" umount "$T/m8"

# A mount's large first read in flight (its fetcher holds
# STORE/tmp/first-reads-large shared while one is, and first-reads while
# any is; flock(1)s stand in for it here): the fill yields the link,
# starting no batch until it ends, then fills.
setup cp -a "$T/s1" "$T/s5"
setup cp -a "$T/s1" "$T/s6"
flock -s "$T/s5/tmp/first-reads" flock -s "$T/s5/tmp/first-reads-large" sleep 4 &
holder=$!
BG_PIDS+=($holder)
setup wait_for 5 test -e "$T/s5/tmp/first-reads-large"
sleep 0.2
cairn --store "$T/s5" fill -q fill/a:1 >/dev/null 2>"$T/fill5.err" &
filler=$!
BG_PIDS+=($filler)
sleep 2
check "while a large first read is in flight, the fill starts no batch ($(pending "$T/s5") pending)" \
  test "$(pending "$T/s5")" = 220
wait "$holder"
wait_for 30 pid_gone "$filler" || fail "the fill did not end once the read had"
wait "$filler"
check "... and fills once it ends" test $? = 0 -a "$(pending "$T/s5")" = 0
# Small first reads in flight (first-reads alone held, by this shell):
# the fill goes on, one request at a time, the reads finding the link
# nearly idle. (The proxy's counts are taken while files are pending:
# once they are all in, the fill fetches the tar headers between them,
# two requests at once.)
exec {reads}>"$T/s6/tmp/first-reads"
setup flock -s "$reads"
setup curl -sf "http://$PROXY/_proxy/set?latency=0.1" -o /dev/null
setup proxy_reset
cairn --store "$T/s6" fill -q fill/a:1 >/dev/null 2>"$T/fill6.err" {reads}>&- &
filler=$!
BG_PIDS+=($filler)
stored() { test "$(pending "$T/s6")" -lt 220; }
wait_for 3 stored
check "while small first reads are in flight, the fill goes on ($(pending "$T/s6") pending)" stored
c='{}'
for ((i = 0; i < 200; i++)); do
  now=$(proxy_counts)
  [[ $(pending "$T/s6") == 0 ]] && break
  c=$now
  sleep 0.05
done
wait_for 10 pid_gone "$filler"
check "... and ends" pid_gone "$filler"
wait "$filler"
check "... filled" test $? = 0 -a "$(pending "$T/s6")" = 0
exec {reads}>&-
setup curl -sf "http://$PROXY/_proxy/set?latency=0.005" -o /dev/null
echo "# fill beside small first reads, before its last file: $(jq -c '{requests, max_in_flight}' <<<"$c")" >&2
check "... one request at a time" test "$(jq .max_in_flight <<<"$c")" = 1 -a "$(jq .requests <<<"$c")" -ge 2

# cairn fill: merged ranges, multi-range requests, each file verified.
# Every tenth small file is fetched first (as a mount's read would), so
# that the files left are runs with holes between; one file's bytes in the
# registry are made wrong.
for i in $(seq 0 10 190); do
  sha=$(sqlite3 "file:$T/s1/meta.db?mode=ro" "SELECT sha256 FROM pending WHERE path = 'small/s$(printf %03d "$i")'")
  setup cairn --store "$T/s1" fill --file "$sha" >/dev/null
done
check "20 files fetched one by one, 200 left" test "$(pending "$T/s1")" = 200
bdigest=$(curl -sf -H 'Accept: application/vnd.oci.image.manifest.v1+json' \
  "http://$REGISTRY/v2/fill/a/manifests/1" | jq -r '.layers[0].digest')
blob=$(registry_blob_path "$bdigest")
setup cp "$blob" "$T/blob.good"
setup python3 - "$blob" "$T/s1/toc/${bdigest#sha256:}" <<'PY'
import json, subprocess, sys
path, toc_path = sys.argv[1], sys.argv[2]
toc = json.loads(subprocess.run(["zstd", "-dcq", toc_path], capture_output=True, check=True).stdout)
e = next(e for e in toc["entries"] if e.get("name", "").endswith("small/s055"))
b = bytearray(open(path, "rb").read())
b[e["offset"] + 10] ^= 0xFF
open(path, "wb").write(b)
PY
proxy_reset
start=$(date +%s%N)
expect_exit 5 "cairn fill with one file's bytes wrong in the registry exits 5" \
  cairn --store "$T/s1" fill fill/a:1
took=$((($(date +%s%N) - start) / 1000000))
c=$(proxy_counts)
sed "s/^/# /" "$T/stderr" >&2
echo "# fill of 200 files: $(jq -c '{requests, ranges, multi_ranges, max_in_flight, bytes}' <<<"$c") in $took ms" >&2
check "... naming that file" grep -q "^cairn: fill: sha256:[0-9a-f]*: \"small/s055\": " "$T/stderr"
check "... and storing every other" test "$(pending "$T/s1")" = 1
check "the fill took far fewer requests than files ($(jq .requests <<<"$c") for 200)" \
  test "$(jq .requests <<<"$c")" -le 20
check "... several ranges in one request" test "$(jq .multi_ranges <<<"$c")" -ge 1
check "... with several requests in flight" test "$(jq .max_in_flight <<<"$c")" -ge 2
check "... and no more than the layer's bytes ($(jq .bytes <<<"$c") of $bsize)" \
  test "$(jq .bytes <<<"$c")" -lt "$bsize"
setup cp "$T/blob.good" "$blob"
expect_exit 0 "a fill again fetches the last file" cairn --store "$T/s1" fill -q fill/a:1
check "... and, with -q, says nothing (not even the layer's finish)" test ! -s "$T/stderr"
check "nothing pending after it" test "$(pending "$T/s1")" = 0
check "the image id is the full pull's" \
  test "$(cairn --store "$T/s1" images --json | jq -r '.[0].id')" = "$(cat "$T/full.id")"
setup exported "$T/s1" "$T/s1"
check "export: the full pull's listing" cmp "$T/s1.files" "$T/full.files"
check "export: the full pull's files, byte for byte" cmp "$T/s1.sums" "$T/full.sums"
expect_exit 0 "fsck after the fill" cairn --store "$T/s1" fsck

# pull --lazy: the fill in the background, a mount and a second fill
# meanwhile, each file fetched once.
curl -sf "http://$PROXY/_proxy/set?rate=600000&latency=0.02" >/dev/null
proxy_reset
expect_exit 0 "pull --lazy" cairn --store "$T/s2" pull --insecure --lazy \
  "docker://$PROXY/fill/a:1"
sed "s/^/# /" "$T/stderr" >&2
cp "$T/stderr" "$T/pull.err"
after_pull=$(proxy_counts | jq .bytes)
check "pull --lazy says once that the fill runs in the background" \
  test "$(grep -c "fetching 220 files in the background" "$T/stderr")" = 1
check "... and where its log is" grep -q "log $T/s2/tmp/fill-" "$T/stderr"
check "pull --lazy returned with files still pending" test "$(pending "$T/s2")" -gt 0
expect_exit 4 "rm while the background fill pins the image is refused" \
  cairn --store "$T/s2" rm fill/a:1
setup mkdir "$T/m"
expect_exit 0 "mount while the fill runs" cairn --store "$T/s2" mount fill/a:1 "$T/m"
on_exit "$CAIRN_BIN/cairn --store '$T/s2' umount '$T/m' 2>/dev/null || true"
cairn --store "$T/s2" fill fill/a:1 >"$T/fill2.out" 2>"$T/fill2.err" &
fill2=$!
check "reads of every file from the mount meanwhile give their bytes" \
  diff -r "$T/m" "$T/a"
wait "$fill2"
check "a second fill at the same time succeeds" test $? = 0
for _ in $(seq 600); do
  [ "$(pending "$T/s2")" = 0 ] && break
  sleep 0.1
done
check "the background fill completed the image with no user action" test "$(pending "$T/s2")" = 0
fill_pid=$(sed -n 's/.*in the background (pid \([0-9]*\);.*/\1/p' "$T/pull.err")
check "the background fill ends once the image is complete (pid $fill_pid)" \
  wait_for 30 pid_gone "$fill_pid"
# less the tar headers each fill fetched at its end for the layer's exact
# tar (both may: the finish is idempotent)
headers=$(cat "$T"/s2/tmp/fill-*.log "$T/fill2.err" 2>/dev/null |
  sed -n 's/.*the tar headers fetched: \([0-9]*\) of.*/\1/p' | awk '{ s += $1 } END { print s + 0 }')
bytes=$(($(proxy_counts | jq .bytes) - after_pull - headers))
echo "# fill, mount reads and a second fill together: $bytes bytes for a layer of $bsize" \
  "(and $headers of tar headers)" >&2
check "... each file fetched once ($bytes bytes for a layer of $bsize)" \
  test "$bytes" -lt $((bsize + bsize / 20))
expect_exit 0 "umount" cairn --store "$T/s2" umount "$T/m"
check "the image id is the full pull's" \
  test "$(cairn --store "$T/s2" images --json | jq -r '.[0].id')" = "$(cat "$T/full.id")"
setup exported "$T/s2" "$T/s2"
check "export: the full pull's listing" cmp "$T/s2.files" "$T/full.files"
check "export: the full pull's files, byte for byte" cmp "$T/s2.sums" "$T/full.sums"
expect_exit 0 "fsck" cairn --store "$T/s2" fsck
check "the fill's log says it completed the image" grep -q "the image is complete" "$T"/s2/tmp/fill-*.log

# The fill's memory: a layer of 4000 small files (a TOC of that many
# entries, parsed) and 16 of 2 MiB (requests of 4 MiB, 4 in flight),
# pushed as eStargz by cairn. Each request's reply streams into a file,
# the TOC's JSON tree goes back to the system once parsed: the fill's
# peak RSS stays under 32 MiB (before: 38 to 40 MiB, the replies in
# memory).
setup python3 - "$T/mem" <<'PY'
import os, random, sys
t = sys.argv[1]
rnd = random.Random(7)
for d in range(40):
    os.makedirs(f"{t}/s/d{d:02d}", exist_ok=True)
    for i in range(100):
        open(f"{t}/s/d{d:02d}/f{i:03d}", "wb").write(rnd.randbytes(rnd.randint(200, 4000)))
os.makedirs(f"{t}/b", exist_ok=True)
for i in range(16):
    open(f"{t}/b/b{i:02d}", "wb").write(rnd.randbytes(2 << 20))
PY
setup tar -C "$T/mem" -cf "$T/mem.tar" .
rm -rf "$T/mem"
setup cairn --store "$T/pusher" import -q fill/mem:1 "$T/mem.tar"
rm -f "$T/mem.tar"
setup cairn --store "$T/pusher" push -q --insecure --format estargz fill/mem:1 \
  "docker://$REGISTRY/fill/mem:1"
setup curl -sf "http://$PROXY/_proxy/set?rate=12500000&latency=0.005" -o /dev/null
setup cairn --store "$T/s7" pull -q --lazy --no-fill --insecure "docker://$PROXY/fill/mem:1"
# the peak RSS of the fill (the full cairn, as the pull's and the
# snapshotter's run it), KiB
peak=$(python3 -c 'import resource, subprocess, sys
r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss if r.returncode == 0 else -1)' \
  "$CAIRN_BIN/libexec/cairn/cairn" --store "$T/s7" fill -q fill/mem:1)
echo "# the fill of 4016 files (32 MiB in 16): peak RSS $peak KiB" >&2
check "the fill of 4016 files completes" test "$peak" -gt 0 -a "$(pending "$T/s7")" = 0
if sanitizer_build; then # shadow memory and ASan's quarantine: the release run measures it
  echo "# the fill's peak memory, $peak KiB, is not bounded under the sanitizers"
else
  check "... its peak memory: $peak KiB, under 32 MiB" test "$peak" -lt 32768
fi
finish
