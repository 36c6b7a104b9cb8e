#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench_listing.sh — the listings at scale: `cairn images`, `cairn-pin ls`
# (table and --json, all pins and one image's; and once every holder is
# killed, its command inheriting its locks) and `cairn rm` of an unpinned
# image, in stores of 100 images / 1,000 pins and 1,000 images / 10,000
# pins, so that the growth shows. Each image is one small
# layer of its own; the pins are taken by HOLDERS `cairn-pin hold` processes,
# each holding every image (an image pin and a layer pin per image).
# CAIRN_BIN_BEFORE=DIR adds the same commands run by another build (the
# holders and the store stay this build's), "(before)" rows.
# The commands' runs are interleaved, a new order each round
# (benchlib.sh's interleaved), and each row is their median, so that a
# spell of the machine's noise does not fall on one command's runs.
#   bash bench/bench_listing.sh [BUILD_DIR]      (RUNS=10 rounds)
# The output is also written to bench/results/listing.txt.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=$(cd "${1:-$ROOT/build}" && pwd)
W=$(mktemp -d /tmp/cairn-bench.XXXXXX)
T=$W # benchlib.sh's scratch directory
mkdir -p "$ROOT/bench/results"
exec > >(tee "$ROOT/bench/results/listing.txt")
source "$ROOT/bench/benchlib.sh"
holders=()
heirs=()
cleanup() {
  for h in "${holders[@]}"; do pkill -9 -P "$h" 2>/dev/null || true; kill -9 "$h" 2>/dev/null || true; done
  for h in "${heirs[@]}"; do kill -9 "$h" 2>/dev/null || true; done
  rm -rf "$W"
}
trap cleanup EXIT
RUNS=${RUNS:-10}
HOLDERS=${HOLDERS:-5}

# store IMAGES: a store of IMAGES one-layer images, held by HOLDERS holders.
populate() {
  local n=$1 s=$W/s$1
  mkdir -p "$W/l"
  for ((i = 1; i <= n; i++)); do
    echo "$i" >"$W/l/f"
    tar -C "$W/l" -cf "$W/t.tar" .
    "$BIN/cairn" --store "$s" import -q "img$i:1" "$W/t.tar" >/dev/null
  done
  local names=()
  for ((i = 1; i <= n; i++)); do names+=("img$i:1"); done
  for ((h = 0; h < HOLDERS; h++)); do
    "$BIN/cairn-pin" --store "$s" hold "${names[@]}" -- sleep 3600 &
    holders+=($!)
    disown "$!"
  done
  local want=$((HOLDERS * n * 2)) got=0
  for ((t = 0; t < 600 && got < want; t++)); do
    got=$("$BIN/cairn-pin" --store "$s" ls -q | wc -l)
    ((got < want)) && sleep 0.5
  done
  ((got == want)) || { echo "only $got of $want pins" >&2; exit 1; }
}

# medians_read N JSON: each command's median (ms) into median["N/COMMAND"].
medians_read() {
  local c m
  while IFS=$'\t' read -r c m; do median["$1/$c"]=$m; done < <(jq -r '.results[] | [.command, .median * 1000] | @tsv' "$2")
}

printf '%-44s %12s %12s %8s\n' "command" "100 img/1k" "1000 img/10k" "growth"
declare -A median
for n in 100 1000; do
  populate "$n"
  s=$W/s$n
  # rm: a fresh image each run, removed while the others stay pinned.
  echo rm >"$W/l/f" && tar -C "$W/l" -cf "$W/rm.tar" .
  cmds=()
  for b in "$BIN" ${CAIRN_BIN_BEFORE:+"$(cd "$CAIRN_BIN_BEFORE" && pwd)"}; do
    tag=$([ "$b" = "$BIN" ] || echo " (before)")
    cmds+=("cairn images$tag" "" "$b/cairn --store $s images"
      "cairn images --json$tag" "" "$b/cairn --store $s images --json"
      "cairn-pin ls$tag" "" "$b/cairn-pin --store $s ls"
      "cairn-pin ls --json$tag" "" "$b/cairn-pin --store $s ls --json"
      "cairn-pin ls IMAGE$tag" "" "$b/cairn-pin --store $s ls img1:1")
  done
  interleaved "$W/h$n.json" "$RUNS" 1 "${cmds[@]}" \
    "cairn rm (unpinned image)" "$BIN/cairn --store $s import -q rm:1 $W/rm.tar" "$BIN/cairn --store $s rm -q rm:1"
  medians_read "$n" "$W/h$n.json"
  # The same pins inherited: each holder killed, its command (sleep) alive
  # and holding the locks, so that the listing names the heirs.
  for h in "${holders[@]}"; do heirs+=($(pgrep -P "$h" || true)); done
  for h in "${holders[@]}"; do kill -9 "$h" 2>/dev/null || true; done
  holders=()
  interleaved "$W/i$n.json" "$RUNS" 1 "cairn-pin ls (inherited)" "" "$BIN/cairn-pin --store $s ls"
  medians_read "$n" "$W/i$n.json"
  for h in "${heirs[@]}"; do kill -9 "$h" 2>/dev/null || true; done
  heirs=()
  "$BIN/cairn" --store "$s" gc -q >/dev/null # the killed holders' annotations
done
for c in "cairn images" "cairn images --json" "cairn-pin ls" "cairn-pin ls --json" "cairn-pin ls IMAGE" \
  ${CAIRN_BIN_BEFORE:+"cairn images (before)" "cairn images --json (before)" "cairn-pin ls (before)"} \
  ${CAIRN_BIN_BEFORE:+"cairn-pin ls --json (before)" "cairn-pin ls IMAGE (before)"} "cairn rm (unpinned image)" \
  "cairn-pin ls (inherited)"; do
  a=${median["100/$c"]} b=${median["1000/$c"]}
  printf '%-44s %9.1f ms %9.1f ms %7.1fx\n' "$c" "$a" "$b" "$(echo "$b / $a" | bc -l)"
done
echo "($(nproc) cores, kernel $(uname -r); median of $RUNS interleaved runs; $HOLDERS holders, each pinning every image and its layer)"
