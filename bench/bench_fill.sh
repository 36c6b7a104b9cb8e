#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench_fill.sh — the fill of a lazily pulled image (doc/lazy-pulls.md,
# "The fill as built") against the full pull of the same image, in one run,
# through the shaping proxy (tests/helpers/shaping_proxy.py: about 100
# Mbit/s, 10 ms a request) in front of Debian's docker-registry on
# 127.0.0.1. Measured, never asserted, for an image of one layer pushed by
# `cairn push` as eStargz and as zstd:chunked:
#   cairn pull, empty store              the full pull (the reference)
#   cairn fill, after pull --lazy        `cairn pull --lazy --no-fill`
#                                        (not counted), then `cairn fill`
# The layer: FILES files (default 400) of 4 kB to 500 kB, half random
# bytes, half compressible text. Reported per contender (medians of RUNS,
# default 3): bytes through the proxy (response bodies), their ratio to
# the compressed layer, requests, wall time, the peak RSS of the pull or
# the fill. CAIRN_BIN_BEFORE=DIR adds that build's fill (to measure a
# change).
# Usage: bench/bench_fill.sh [BUILD_DIR]  (default build); FILES, RUNS,
# CAIRN_BIN_BEFORE. The output is also written to bench/results/fill.txt.
# Needs docker-registry.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
BIN=${1:-${CAIRN_BIN:-$SRC/build}}
FILES=${FILES:-400}
RUNS=${RUNS:-3}
source "$SRC/tests/lib/registry.sh"
W=$(mktemp -d /tmp/cairn-bench-fill.XXXXXX)
cleanup() {
  registry_cleanup
  rm -rf "$W"
}
trap cleanup EXIT
mkdir -p "$SRC/bench/results"
exec > >(tee "$SRC/bench/results/fill.txt")

PYTHONPATH=$SRC/bench python3 - "$W" "$FILES" <<'PY'
import os, random, sys
from mixed_content import Mixed
w, files = sys.argv[1], int(sys.argv[2])
rnd = random.Random(41)
content = Mixed(rnd)
for i in range(files):
    d = f"{w}/a/usr/lib/d{i % 16:02d}"
    os.makedirs(d, exist_ok=True)
    open(f"{d}/f{i:05d}", "wb").write(content(rnd.choice((4000, 60000, 200000, 500000))))
PY
tar -C "$W/a" --sort=name --numeric-owner -cf "$W/a.tar" .
registry_start "$W/reg"
"$BIN/cairn" --store "$W/src" import -q bench/a:1 "$W/a.tar" >/dev/null
for f in estargz zstd:chunked; do
  "$BIN/cairn" --store "$W/src" push -q --insecure --no-progress --format "$f" bench/a:1 \
    "docker://$REGISTRY/bench/${f%%:*}:1" >/dev/null 2>&1
done
proxy_start "$W"
layer_size() {
  curl -sf -H 'Accept: application/vnd.oci.image.manifest.v1+json' \
    "http://$REGISTRY/v2/bench/$1/manifests/1" | jq '.layers[0].size'
}

# peak CMD...: runs CMD, its output dropped; prints its peak RSS in KiB
# (the largest of its children's: the light cairn execs the full one).
peak() {
  python3 -c 'import resource, subprocess, sys
r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(r.returncode)' "$@"
}
full() { peak "$BIN/cairn" --store "$W/store" pull -q --insecure "docker://$PROXY/bench/$1:1"; }
lazy() {
  "$BIN/cairn" --store "$W/store" pull -q --insecure --lazy --no-fill \
    "docker://$PROXY/bench/$1:1" >/dev/null 2>&1
}
fill() { peak "$BIN/cairn" --store "$W/store" fill -q "$PROXY/bench/$1:1"; }
fill_before() { peak "$CAIRN_BIN_BEFORE/cairn" --store "$W/store" fill -q "$PROXY/bench/$1:1"; }

# run NAME FORMAT PREPARE CMD: RUNS times from an empty store: prepare
# (not counted), then CMD, its bytes and requests counted by the proxy.
: >"$W/runs"
run() {
  local name=$1 fmt=$2 prepare=$3 cmd=$4 r t0 t1 rss
  for ((r = 0; r < RUNS; r++)); do
    rm -rf "$W/store"
    [[ -z $prepare ]] || $prepare "$fmt"
    curl -sf "http://$PROXY/_proxy/reset" >/dev/null
    t0=$EPOCHREALTIME
    rss=$($cmd "$fmt") || { echo "$name: failed" >&2; continue; }
    t1=$EPOCHREALTIME
    echo "$name|$fmt|$(layer_size "$fmt")|$t0|$t1|$rss|$(curl -sf "http://$PROXY/_proxy/counts" |
      jq -c '[.bytes, .requests]')" >>"$W/runs"
  done
}
for f in estargz zstd; do
  run "cairn pull, empty store (full)" $f "" full
  run "cairn fill, after pull --lazy" $f lazy fill
  [[ -z ${CAIRN_BIN_BEFORE:-} ]] || run "cairn fill, CAIRN_BIN_BEFORE" $f lazy fill_before
done
rm -rf "$W/store"

echo "bench_fill: $FILES files, $(stat -c %s "$W/a.tar") bytes of tar; shaping proxy 100 Mbit/s," \
  "10 ms a request; $RUNS runs each, $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg)"
python3 - "$W/runs" <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, fmt, size, t0, t1, rss, c = line.rstrip("\n").split("|")
    b, reqs = json.loads(c)
    rows.setdefault((fmt, name, int(size)), []).append((float(t1) - float(t0), b, reqs, int(rss)))
print("| layer | contender | bytes through the proxy | of the layer | requests | s | peak RSS MiB"
      " | s vs the full pull |")
print("|---|---|---|---|---|---|---|---|")
full = {}
for (fmt, name, size), v in rows.items():
    s = statistics.median(x[0] for x in v)
    b = statistics.median(x[1] for x in v)
    if "(full)" in name:
        full[fmt] = s
    ratio = f"{s / full[fmt]:.2f}" if fmt in full else "-"
    print(f"| {fmt} ({size:,} bytes) | {name} | {int(b):,} | {b / size:.2f} |"
          f" {int(statistics.median(x[2] for x in v))} | {s:.2f} |"
          f" {statistics.median(x[3] for x in v) / 1024:.1f} | {ratio} |")
PY
