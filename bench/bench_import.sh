#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench_import.sh — `cairn import` of a large real layer (a Debian minbase
# rootfs as one tar) against `tar -x` of the same tar into a directory, in
# one run, reported as ratios. Also: a second import of the same layer into
# the same store (stored once: only hashing), and peak memory.
# `time` (GNU time) measures peak RSS.
#   bash bench/bench_import.sh [BUILD_DIR]
# The output is also written to bench/results/import.txt.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=$(cd "${1:-$ROOT/build}" && pwd)
source "$ROOT/bench/rootfs.sh"
TAR=$(ensure_minbase_tar)
W=$(mktemp -d /tmp/cairn-bench.XXXXXX)
trap 'rm -rf "$W"' EXIT
mkdir -p "$ROOT/bench/results"
exec > >(tee "$ROOT/bench/results/import.txt")
RUNS=${RUNS:-5}
entries=$(tar -tf "$TAR" | wc -l)
echo "layer: $TAR ($(du -h "$TAR" | cut -f1), $entries entries); $(nproc) cores; $RUNS runs each"

"$BIN/cairn" --store "$W/s1" import big:1 "$TAR" >/dev/null
hyperfine --style basic --runs "$RUNS" --export-json "$W/h.json" \
  --prepare "rm -rf $W/x $W/s && mkdir $W/x" \
  --prepare "rm -rf $W/x $W/s && mkdir $W/x" \
  --prepare "$BIN/cairn --store $W/s1 rm big:2 >/dev/null 2>&1 || true" \
  -n "tar -x" "tar -C $W/x --numeric-owner -xf $TAR" \
  -n "cairn import (new store)" "$BIN/cairn --store $W/s import big:1 $TAR" \
  -n "cairn import (layer already stored)" "$BIN/cairn --store $W/s1 import big:2 $TAR" >/dev/null

rm -rf "$W/x" "$W/s" && mkdir "$W/x"
mem_tar=$( { /usr/bin/time -f %M tar -C "$W/x" --numeric-owner -xf "$TAR"; } 2>&1 | tail -1)
mem_cairn=$( { /usr/bin/time -f %M "$BIN/cairn" --store "$W/s" import big:1 "$TAR" >/dev/null; } 2>&1 | tail -1)

echo
printf '%-38s %10s %10s %12s\n' "command" "mean (s)" "stddev" "vs tar -x"
jq -r '.results as $r | $r[0].mean as $base | $r[] |
  [.command, (.mean * 1000 | round / 1000), (.stddev * 1000 | round / 1000), (.mean / $base * 100 | round / 100)] |
  @tsv' "$W/h.json" | while IFS=$'\t' read -r c m s x; do printf '%-38s %10s %10s %11sx\n' "$c" "$m" "$s" "$x"; done
echo
printf 'peak RSS: tar -x %s KiB, cairn import %s KiB\n' "$mem_tar" "$mem_cairn"
echo "note: cairn also hashes every byte twice (sha256 for the diff_id and dedup, XXH3-128 for names)"
echo "and makes the blobs durable with one syncfs before it commits; tar -x does neither."
