#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench_partial.sh — the partial pull of a zstd:chunked layer
# (doc/lazy-pulls.md) against podman 4.3's, in one run, through the shaping
# proxy (tests/helpers/shaping_proxy.py: about 100 Mbit/s, 10 ms a request)
# in front of Debian's docker-registry on 127.0.0.1. Measured, never asserted:
#   cairn pull, empty store        the full pull of image B (the reference)
#   cairn pull, A stored           B is pulled partially (the files A has are not fetched)
#   podman pull, empty store       podman's pull of B (enable_partial_images)
#   podman pull, A stored          podman's partial pull of B into its own store
# Image A and image B are one layer each, pushed by podman 4.3 with
# --compression-format zstd:chunked; B is A with SHARE_PCT% of its files the
# same (default 90) and the others of new content of the same size. Files
# are of 1 kB to 256 kB, half compressible text, half random bytes.
# Reported per contender (medians): bytes through the proxy (response
# bodies), their ratio to B's compressed layer, requests, the time from the
# first request to the end of the last reply (network s), wall time.
# Usage: bench/bench_partial.sh [BUILD_DIR]  (default build); FILES (default
# 200; the documented larger run: FILES=2000), RUNS (default 3),
# SHARE_PCT (default 90); CAIRN_BIN_BEFORE=DIR adds that build's partial
# pull (to measure a change). The output is also written to
# bench/results/partial.txt. Needs root, podman (overlay driver), skopeo,
# docker-registry.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
BIN=${1:-${CAIRN_BIN:-$SRC/build}}
FILES=${FILES:-200}
RUNS=${RUNS:-3}
SHARE_PCT=${SHARE_PCT:-90}
source "$SRC/tests/lib/registry.sh"
source "$SRC/bench/benchlib.sh"
W=$(mktemp -d /tmp/cairn-bench-partial.XXXXXX)
cleanup() {
  registry_cleanup
  [[ -s $W/podman.log ]] && sed "s/^/podman: /" "$W/podman.log" >&2
  rm -rf "$W"
}
trap cleanup EXIT
mkdir -p "$SRC/bench/results"
exec > >(tee "$SRC/bench/results/partial.txt")

PYTHONPATH=$SRC/bench python3 - "$W" "$FILES" "$SHARE_PCT" <<'PY'
import os, random, sys
from mixed_content import Mixed
w, files, share = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rnd = random.Random(33)
content = Mixed(rnd)
changed = set(rnd.sample(range(files), files - files * share // 100))
for i in range(files):
    data = content(int(1000 * 256 ** rnd.random()))
    for name in ("a", "b"):
        d = f"{w}/{name}/usr/lib/d{i % 16:02d}"
        os.makedirs(d, exist_ok=True)
        open(f"{d}/f{i:05d}", "wb").write(content(len(data)) if name == "b" and i in changed
                                          else data)
PY
PUSHER=(podman --root "$W/pusher" --runroot "$W/pusher.run" --storage-driver vfs)
registry_start "$W/reg"
for n in a b; do
  # -b 1: no record padding after the end of the archive, as Go's archive/tar
  # writes (podman 4.3's zstd:chunked writer drops it: test_pull_partial.sh)
  tar -C "$W/$n" --sort=name -b 1 -cf "$W/$n.tar" .
  "${PUSHER[@]}" import -q "$W/$n.tar" "localhost/bench/$n:1" >/dev/null
  "${PUSHER[@]}" push -q --tls-verify=false --compression-format zstd:chunked \
    "localhost/bench/$n:1" "docker://$REGISTRY/bench/$n:1"
done
proxy_start "$W"
bsize=$(curl -sf -H 'Accept: application/vnd.oci.image.manifest.v1+json' \
  -H 'Accept: application/vnd.docker.distribution.manifest.v2+json' \
  "http://$REGISTRY/v2/bench/b/manifests/1" | jq '.layers[0].size')
traw=$(stat -c %s "$W/b.tar")

# podman's own store: the overlay driver (vfs does no partial pull) with
# partial images on, in a mount namespace of its own (BENCH_NS)
podman_storage_conf "$W" true
podman_pull() {
  CONTAINERS_STORAGE_CONF=$W/storage.conf "${BENCH_NS[@]}" \
    podman --cgroup-manager=cgroupfs pull -q --tls-verify=false "docker://$PROXY/bench/$1:1" \
    >/dev/null 2>>"$W/podman.log"
}
podman_reset() {
  CONTAINERS_STORAGE_CONF=$W/storage.conf "${BENCH_NS[@]}" \
    podman --cgroup-manager=cgroupfs system reset -f >/dev/null 2>&1 || true
  rm -rf "$W/pm" "$W/pm.run"
}
cairn_pull() { "$BIN/cairn" --store "$W/store" pull -q --insecure "docker://$PROXY/bench/$1:1" >/dev/null 2>&1; }
cairn_pull_before() {
  "$CAIRN_BIN_BEFORE/cairn" --store "$W/store" pull -q --insecure "docker://$PROXY/bench/$1:1" \
    >/dev/null 2>&1
}
cairn_reset() { rm -rf "$W/store"; }

# run NAME RESET PREPARE PULL: RUNS times: reset, prepare (not counted),
# then the pull of B, its bytes and requests counted by the proxy.
: >"$W/runs"
run() {
  local name=$1 reset=$2 prepare=$3 pull=$4 r t0 t1
  for ((r = 0; r < RUNS; r++)); do
    $reset
    [[ -z $prepare ]] || $prepare
    curl -sf "http://$PROXY/_proxy/reset" >/dev/null
    t0=$EPOCHREALTIME
    $pull b
    t1=$EPOCHREALTIME
    echo "$name|$t0|$t1|$(curl -sf "http://$PROXY/_proxy/counts" | jq -c '[.bytes, .requests, .span]')" \
      >>"$W/runs"
  done
  $reset
}
run "cairn pull, empty store (full)" cairn_reset "" cairn_pull
run "cairn pull, A stored (partial)" cairn_reset "cairn_pull a" cairn_pull
[[ -z ${CAIRN_BIN_BEFORE:-} ]] ||
  run "cairn pull, A stored (partial), CAIRN_BIN_BEFORE" cairn_reset "cairn_pull a" cairn_pull_before
run "podman pull, empty store" podman_reset "" podman_pull
run "podman pull, A stored (partial)" podman_reset "podman_pull a" podman_pull

echo "bench_partial: $FILES files, $SHARE_PCT% shared; B's layer $bsize bytes compressed" \
  "($traw bytes of tar); shaping proxy $(python3 -c 'print(12500000*8/1e6)') Mbit/s, 10 ms a" \
  "request; $RUNS runs each, $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg)"
python3 - "$W/runs" "$bsize" <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, t0, t1, c = line.rstrip("\n").split("|")
    bytes_, reqs, span = json.loads(c)
    rows.setdefault(name, []).append((float(t1) - float(t0), bytes_, reqs, span))
size = int(sys.argv[2])
full = statistics.median(x[0] for x in next(iter(rows.values())))
print("| pull of B | bytes through the proxy | of B's layer | requests | network s | median s"
      " | vs cairn full |")
print("|---|---|---|---|---|---|---|")
for name, v in rows.items():
    b = statistics.median(x[1] for x in v)
    q = statistics.median(x[2] for x in v)
    t = statistics.median(x[0] for x in v)
    n = statistics.median(x[3] for x in v)
    print(f"| {name} | {int(b):,} | {100 * b / size:.1f}% | {int(q)} | {n:.2f} | {t:.2f}"
          f" | {t / full:.2f}x |")
    if "A stored" in name and b > size / 2:
        print(f"bench_partial: {name}: {100 * b / size:.0f}% of the layer: not a partial pull")
PY
