#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench_pull.sh — `cairn pull` from a local docker-registry against skopeo
# on the same image, in one run, as ratios (measured, never asserted):
#   cairn pull docker://...            fetch, verify, unpack into the store
#   cairn pull oci:DIR                 the same from the layout (store cost alone)
#   skopeo copy docker:// oci:DIR      fetch only (no unpacking)
#   skopeo copy + tar -x of each layer fetch and unpack into a directory
# The image: real trees of this machine (/usr/share/perl, /usr/share/zoneinfo,
# /usr/lib/x86_64-linux-gnu/perl-base or what exists) as gzip and zstd layers.
# Usage: bench/bench_pull.sh [BUILD_DIR]  (default build); RUNS (default 5).
# The output is also written to bench/results/pull.txt.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
BIN=${1:-$SRC/build}
RUNS=${RUNS:-5}
source "$SRC/tests/lib/registry.sh"
W=$(mktemp -d /tmp/cairn-bench-pull.XXXXXX)
trap 'registry_cleanup; rm -rf "$W"' EXIT
mkdir -p "$SRC/bench/results"
exec > >(tee "$SRC/bench/results/pull.txt")
OCI_IMAGE="python3 $SRC/tests/helpers/oci_image.py"

layers=()
n=0
for d in /usr/share/perl /usr/share/zoneinfo /usr/lib/x86_64-linux-gnu/perl-base /usr/share/doc; do
  [[ -d $d ]] || continue
  tar -C / --sort=name -cf "$W/l$n.tar" "${d#/}"
  if ((n % 2)); then layers+=("$W/l$n.tar:zstd"); else layers+=("$W/l$n.tar:gzip"); fi
  n=$((n + 1))
done
$OCI_IMAGE add "$W/oci" bench linux/amd64 "${layers[@]}" >/dev/null
registry_start "$W/reg"
registry_push "$W/oci" bench bench/app:1
SRCREF="docker://$REGISTRY/bench/app:1"
raw=$(du -cb "$W"/l*.tar | tail -1 | cut -f1)
packed=$(du -sb "$W/oci/blobs" | cut -f1)

cat >"$W/skopeo-untar.sh" <<EOS
set -e
skopeo copy -q --src-tls-verify=false $SRCREF oci:$W/dst:x
m=\$(jq -r '.manifests[0].digest' $W/dst/index.json)
mkdir -p $W/rootfs
for l in \$(jq -r '.layers[].digest' $W/dst/blobs/sha256/\${m#sha256:}); do
  tar -C $W/rootfs -xf $W/dst/blobs/sha256/\${l#sha256:}
done
EOS

hyperfine --runs "$RUNS" --warmup 1 --export-json "$W/h.json" -N \
  --prepare "rm -rf $W/store" -n "cairn pull" \
  "$BIN/cairn --store $W/store pull -q --insecure $SRCREF" \
  --prepare "rm -rf $W/store" -n "cairn pull oci: (no network)" \
  "$BIN/cairn --store $W/store pull -q oci:$W/oci:bench" \
  --prepare "rm -rf $W/dst" -n "skopeo copy (oci dir)" \
  "skopeo copy -q --src-tls-verify=false $SRCREF oci:$W/dst:x" \
  --prepare "rm -rf $W/dst $W/rootfs" -n "skopeo copy + tar -x" \
  "bash $W/skopeo-untar.sh" >/dev/null

echo "bench_pull: $n layers, $((raw / 1048576)) MiB uncompressed, $((packed / 1048576)) MiB compressed," \
  "registry on 127.0.0.1, $RUNS runs each, $(nproc) cores"
python3 - "$W/h.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["results"]
base = r[0]["mean"]
print(f"{'command':<30} {'mean s':>8} {'stddev':>8} {'vs cairn pull':>14}")
for x in r:
    print(f"{x['command']:<30} {x['mean']:8.3f} {x['stddev'] or 0:8.3f} {x['mean'] / base:13.2f}x")
PY
