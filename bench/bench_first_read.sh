#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench_first_read.sh — the first read of a file a lazy pull has not
# fetched yet (doc/lazy-pulls.md), through the shaping proxy
# (tests/helpers/shaping_proxy.py: about 100 Mbit/s, 10 ms a request) in
# front of Debian's docker-registry on 127.0.0.1. Measured, never asserted:
#   first read, lazy mount   each of FILES small files (1 to 16 KiB), read
#                            whole once, in a random order, from a mount of
#                            an image `cairn pull --lazy` stored: the
#                            latency per file (median, p90, max) and the
#                            requests and bytes the proxy counted per file
#   cairn fill               the time and requests to fetch the rest
#   after the fill           the same files read through a new mount of
#                            the filled image, through a new mount of the
#                            image pulled in full, and from the directory
#                            the image was made of (native): ROUNDS rounds,
#                            the three in a new order each round, every
#                            mount new each round, caches not dropped
# The image is one layer pushed by podman 4.3 with --compression-format
# zstd:chunked: the FILES files (default 200; half random bytes, half
# text) and OTHER files (default 200, 1 to 256 KiB) that only the fill
# fetches.
# The preparation (the data, the push: compression) runs at nice 10; the
# commands measured at nice MEASURE_NICE (default 0: a niced daemon on a
# loaded machine waits for the CPU, and the shaping proxy is not niced).
# Usage: bench/bench_first_read.sh [BUILD_DIR]  (default build); FILES,
# OTHER, ROUNDS (default 5), MEASURE_NICE. The output is also written to
# bench/results/first_read.txt. Needs root, podman, docker-registry.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
BIN=${1:-${CAIRN_BIN:-$SRC/build}}
BIN=$(cd "$BIN" && pwd)
FILES=${FILES:-200}
OTHER=${OTHER:-200}
ROUNDS=${ROUNDS:-5}
MNICE=${MEASURE_NICE:-0}
source "$SRC/tests/lib/registry.sh"
W=$(mktemp -d /tmp/cairn-bench-first-read.XXXXXX)
CAIRN=("$BIN/cairn")
cleanup() {
  set +e
  for m in "$W"/m-*; do
    [[ -d $m ]] && mountpoint -q "$m" && "${CAIRN[@]}" --store "$W/${m##*/m-}" umount "$m"
  done
  registry_cleanup
  findmnt -rn -o TARGET | grep -F "$W/" | sort -r | while read -r m; do fusermount3 -u -z "$m"; done
  rm -rf "$W"
}
trap cleanup EXIT
mkdir -p "$SRC/bench/results"
exec > >(tee "$SRC/bench/results/first_read.txt")

PYTHONPATH=$SRC/bench nice -n 10 python3 - "$W" "$FILES" "$OTHER" <<'PY'
import os, random, sys
from mixed_content import Mixed
w, files, other = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rnd = random.Random(35)
content = Mixed(rnd)
names = []
for kind, count, lo, hi in (("r", files, 1024, 16384), ("o", other, 1024, 262144)):
    for i in range(count):
        d = f"{w}/src/usr/share/bench/{kind}{i % 10}"
        os.makedirs(d, exist_ok=True)
        open(f"{d}/f{i:04d}", "wb").write(content(int(lo * (hi / lo) ** rnd.random())))
        if kind == "r":
            names.append(f"usr/share/bench/{kind}{i % 10}/f{i:04d}")
open(f"{w}/files", "w").write("\n".join(names) + "\n")
PY
PUSHER=(podman --root "$W/pusher" --runroot "$W/pusher.run" --storage-driver vfs)
registry_start "$W/reg"
# -b 1: no record padding (podman 4.3's zstd:chunked writer drops it)
nice -n 10 tar -C "$W/src" --sort=name -b 1 -cf "$W/img.tar" .
nice -n 10 "${PUSHER[@]}" import -q "$W/img.tar" localhost/bench/fr:1 >/dev/null
nice -n 10 "${PUSHER[@]}" push -q --tls-verify=false --compression-format zstd:chunked \
  localhost/bench/fr:1 "docker://$REGISTRY/bench/fr:1"
"${PUSHER[@]}" rmi -a -f >/dev/null 2>&1 || true
rm -rf "$W/pusher" "$W/pusher.run" "$W/img.tar"
proxy_start "$W"
bsize=$(curl -sf -H 'Accept: application/vnd.oci.image.manifest.v1+json' \
  -H 'Accept: application/vnd.docker.distribution.manifest.v2+json' \
  "http://$REGISTRY/v2/bench/fr/manifests/1" | jq '.layers[0].size')
REF=docker://$PROXY/bench/fr:1
counts() { curl -sf "http://$PROXY/_proxy/counts" | jq -c "[.bytes, .requests]"; }

# read_files DIR OUT [proxy]: reads each listed file whole, once, in a
# random order; per file "SECONDS BYTES-READ [PROXY-BYTES PROXY-REQUESTS]".
read_files() {
  timeout 1800 nice -n "$MNICE" python3 - "$W/files" "$1" "$2" "${3:+$PROXY}" "$W/src" <<'PY'
import json, random, sys, time, urllib.request
names = open(sys.argv[1]).read().split()
d, out, proxy, src = sys.argv[2:6]
random.shuffle(names)
ctl = lambda p: json.load(urllib.request.urlopen(f"http://{proxy}/_proxy/{p}", timeout=10))
with open(out, "a") as o:
    for n in names:
        if proxy:
            ctl("reset")
        t0 = time.perf_counter()
        with open(f"{d}/{n}", "rb") as f:
            data = f.read()
        t = time.perf_counter() - t0
        if data != open(f"{src}/{n}", "rb").read():
            sys.exit(f"bench_first_read: {d}/{n}: not the file's content")
        extra = ""
        if proxy:
            c = ctl("counts")
            extra = f" {c['bytes']} {c['requests']}"
        print(f"{t:.6f} {len(data)}{extra}", file=o)
PY
}
mnt() { mkdir -p "$W/m-$1" && nice -n "$MNICE" "${CAIRN[@]}" --store "$W/$1" mount bench/fr:1 "$W/m-$1" >/dev/null; }
umnt() { "${CAIRN[@]}" --store "$W/$1" umount "$W/m-$1" >/dev/null; }

# The reference: a full pull.
curl -sf "http://$PROXY/_proxy/reset" >/dev/null
t0=$EPOCHREALTIME
timeout 600 nice -n "$MNICE" "${CAIRN[@]}" --store "$W/full" pull -q --insecure "$REF" >/dev/null
full_pull=$(python3 -c "import sys; print(float(sys.argv[1]) - float(sys.argv[2]))" "$EPOCHREALTIME" "$t0")
full_counts=$(counts)
# The lazy pull, then the first reads.
curl -sf "http://$PROXY/_proxy/reset" >/dev/null
t0=$EPOCHREALTIME
timeout 600 nice -n "$MNICE" "${CAIRN[@]}" --store "$W/lazy" pull -q --insecure --lazy --no-fill "$REF" >/dev/null
lazy_pull=$(python3 -c "import sys; print(float(sys.argv[1]) - float(sys.argv[2]))" "$EPOCHREALTIME" "$t0")
lazy_counts=$(counts)
mnt lazy
read_files "$W/m-lazy" "$W/first" proxy
umnt lazy
# The fill, then the reads after it.
curl -sf "http://$PROXY/_proxy/reset" >/dev/null
t0=$EPOCHREALTIME
timeout 1800 nice -n "$MNICE" "${CAIRN[@]}" --store "$W/lazy" fill bench/fr:1 >/dev/null 2>"$W/fill.log"
fill_s=$(python3 -c "import sys; print(float(sys.argv[1]) - float(sys.argv[2]))" "$EPOCHREALTIME" "$t0")
fill_counts=$(counts)
pending=$("${CAIRN[@]}" --store "$W/lazy" inspect bench/fr:1 | jq -c '.Pending // {}')
for ((r = 0; r < ROUNDS; r++)); do
  for c in $(printf '%s\n' lazy full native | shuf); do
    if [[ $c == native ]]; then
      read_files "$W/src" "$W/after-native"
    else
      mnt "$c"
      read_files "$W/m-$c" "$W/after-$c"
      umnt "$c"
    fi
  done
done

echo "bench_first_read: $FILES files of 1 to 16 KiB read, $OTHER others of 1 to 256 KiB;" \
  "the layer $bsize bytes; full pull $(printf %.2f "$full_pull") s $full_counts, lazy pull $(printf %.2f "$lazy_pull") s" \
  "$lazy_counts ([bytes, requests] through the proxy); fill $(printf %.2f "$fill_s") s $fill_counts, pending" \
  "after it: $pending; shaping proxy 100 Mbit/s, 10 ms a request; $ROUNDS rounds after the" \
  "fill, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$W" <<'PY'
import statistics, sys
w = sys.argv[1]
def rows(name):
    return [list(map(float, l.split())) for l in open(f"{w}/{name}")]
def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))]
first = rows("first")
lat = [r[0] * 1000 for r in first]
reqs = [r[3] for r in first]
print("| first read of a file not fetched (lazy mount) | median ms | p90 ms | max ms | requests a"
      " file | proxy bytes / file bytes |")
print("|---|---|---|---|---|---|")
print(f"| {len(first)} files | {statistics.median(lat):.1f} | {pct(lat, 90):.1f} | {max(lat):.1f}"
      f" | {statistics.median(reqs):.0f} (min {min(reqs):.0f}, max {max(reqs):.0f}, total"
      f" {sum(reqs):.0f}) | {sum(r[2] for r in first) / sum(r[1] for r in first):.3f} |")
after = {c: [r[0] * 1000 for r in rows(f"after-{c}")] for c in ("lazy", "full", "native")}
print()
print("| after the fill, read of the same files | median ms | p90 ms | median vs full pull's mount"
      " | vs native |")
print("|---|---|---|---|---|")
fm, nm = statistics.median(after["full"]), statistics.median(after["native"])
label = {"lazy": "new mount of the filled lazy image", "full": "new mount of the full pull",
         "native": "native directory"}
for c, v in after.items():
    m = statistics.median(v)
    print(f"| {label[c]} | {m:.3f} | {pct(v, 90):.3f} | {m / fm:.2f} | {m / nm:.1f} |")
print(f"first read (lazy) median / full pull's mount median: {statistics.median(lat) / fm:.0f}x")
PY
