#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench_lazy_start.sh — start time of a container whose image is pulled
# lazily (doc/lazy-pulls.md): from the start of the pull to the
# container's first line of output, through the shaping proxy
# (tests/helpers/shaping_proxy.py: about 100 Mbit/s, 10 ms a request) in
# front of Debian's docker-registry on 127.0.0.1. Measured, never asserted:
#   (a) cairn pull --lazy + cairn bundle + crun run   (empty store)
#   (a') the same of the image pushed after a recorded run of the same
#       command (cairn bundle --record-access, then cairn push --format
#       zstd:chunked: its TOC ranks the files read first, which the fill
#       fetches first: the "optimize" step of stargz's ctr-remote)
#   (b) cairn pull        + cairn bundle + crun run   (empty store)
#   (c) podman pull + podman run, podman's own store (overlay driver;
#       enable_partial_images = "true" unless PODMAN_PARTIAL=0), emptied
# The image is one layer: a Debian bookworm minbase root filesystem (real
# data, bench/rootfs.sh) plus files of random bytes (BIG_MIB each) up to
# SIZE_MIB of tar (default 1024), pushed by `cairn push --format
# zstd:chunked` (podman 4.3's push of it took minutes of CPU here). The container runs /bench/start.sh,
# which cats the files of /bench/read.list (READ_PCT% of the image's bytes,
# default 5: a large file for half, Debian files of 16 KiB or more under
# /usr, drawn at random with a fixed seed, for the rest) and prints one line.
# Reported per contender (medians of RUNS, default 1, the contenders'
# order shuffled each round): seconds to the first line, and to the end of
# the pull and of the bundle; bytes and requests through the proxy; the
# ratios (a)/(b) and against (c).
# The preparation (the data, the push: compression) runs at nice 10; the
# commands measured at nice MEASURE_NICE (default 0: a niced daemon on a
# loaded machine waits for the CPU, and the shaping proxy is not niced).
# Usage: bench/bench_lazy_start.sh [BUILD_DIR]  (default build); SIZE_MIB,
# BIG_MIB (32), READ_PCT, RUNS, PODMAN_PARTIAL, MEASURE_NICE, CONTENDERS
# (default "a o b c"; o is (a'); x is (a) run by the build
# CAIRN_BIN_BEFORE, which adds it to the default: a change measured in the
# same run). The output is also written
# to bench/results/lazy_start.txt. Needs root, podman (overlay driver),
# crun, docker-registry, the cached minbase tree (debootstrap once).
# If `cairn pull --lazy` leaves a fill running in the background, the
# measure is still pull to first line; such a process (any left with this
# run's store on its command line) is stopped after each run, by pid.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
BIN=${1:-${CAIRN_BIN:-$SRC/build}}
BIN=$(cd "$BIN" && pwd)
SIZE_MIB=${SIZE_MIB:-1024}
BIG_MIB=${BIG_MIB:-32}
READ_PCT=${READ_PCT:-5}
RUNS=${RUNS:-1}
PODMAN_PARTIAL=${PODMAN_PARTIAL:-1}
BEFORE=${CAIRN_BIN_BEFORE:+$(cd "$CAIRN_BIN_BEFORE" && pwd)}
CONTENDERS=${CONTENDERS:-a o b c${BEFORE:+ x}}
MNICE=${MEASURE_NICE:-0}
source "$SRC/tests/lib/registry.sh"
source "$SRC/bench/rootfs.sh"
source "$SRC/bench/benchlib.sh"
W=$(mktemp -d /tmp/cairn-bench-lazy-start.XXXXXX)
CAIRN=("$BIN/cairn")

# Processes of this run still alive: any whose command line names its
# store, a bundle or crun's state (a background fill, a stray crun), by pid.
stop_strays() {
  local p i
  for p in /proc/[0-9]*; do
    p=${p#/proc/}
    [[ $p == "$$" || $p == "$BASHPID" ]] && continue
    tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline" | grep -qE "$W/(store|bundle-|crun)" || continue
    echo "bench_lazy_start: still running, stopped: $(tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline")" >&2
    kill "$p" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do [[ -d /proc/$p ]] || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null || true
  done
}
cleanup() {
  local rc=$?
  set +e
  ((rc == 0)) || for f in "$W"/*.log; do tail -5 "$f" | sed "s|^|${f##*/}: |" >&2; done
  for b in "$W"/bundle-*; do [[ -d $b ]] && "${CAIRN[@]}" --store "$W/store" bundle --rm -q "$b"; done
  [[ -d $W/pm ]] && podman_reset
  stop_strays
  registry_cleanup
  findmnt -rn -o TARGET | grep -F "$W/" | sort -r | while read -r m; do fusermount3 -u -z "$m"; done
  rm -rf "$W"
}
trap cleanup EXIT
mkdir -p "$SRC/bench/results"
exec > >(tee "$SRC/bench/results/lazy_start.txt")

# The image: minbase + big files + /bench/start.sh and its list.
root=$(ensure_minbase_dir)
mkdir -p "$W/extra/bench" "$W/extra/data"
nice -n 10 python3 "$SRC/bench/start_image.py" "$root" "$W/extra" "$SIZE_MIB" "$BIG_MIB" "$READ_PCT"
read -r nread readbytes <"$W/read.info"
nice -n 10 tar --sort=name --numeric-owner -b 1 -cf "$W/img.tar" -C "$root" . -C "$W/extra" ./bench ./data
rm -rf "$W/extra"
traw=$(stat -c %s "$W/img.tar")
registry_start "$W/reg"
nice -n 10 "${CAIRN[@]}" --store "$W/pusher" import -q bench/start:1 "$W/img.tar" >/dev/null
rm -f "$W/img.tar"
nice -n 10 "${CAIRN[@]}" --store "$W/pusher" push -q --insecure --format zstd:chunked \
  bench/start:1 "docker://$REGISTRY/bench/start:1" >/dev/null
# (a')'s image: a recorded run of the command, then the push (same image id)
if [[ " $CONTENDERS " == *" o "* ]]; then
  recorded=$(recorded_run "${CAIRN[@]}" "$W/pusher" bench/start:1 "$W" /bin/sh /bench/start.sh)
  nice -n 10 "${CAIRN[@]}" --store "$W/pusher" push -q --insecure --format zstd:chunked \
    bench/start:1 "docker://$REGISTRY/bench/start:opt" >/dev/null
fi
rm -rf "$W/pusher"
proxy_start "$W"
manifest=$(curl -sf -H 'Accept: application/vnd.oci.image.manifest.v1+json' \
  -H 'Accept: application/vnd.docker.distribution.manifest.v2+json' \
  "http://$REGISTRY/v2/bench/start/manifests/1")
bsize=$(jq '.layers[0].size' <<<"$manifest")
toclen=$(jq -r '.layers[0].annotations | to_entries[] |
  select(.key | endswith("zstd-chunked.manifest-position")) | .value' <<<"$manifest" | cut -d: -f2)
REF=docker://$PROXY/bench/start:1
REF_OPT=docker://$PROXY/bench/start:opt
CMD=(/bin/sh /bench/start.sh)

# first_line T0 FILE: reads the container's output; at its first line
# appends "first SECONDS-SINCE-T0" to FILE, then drains the rest.
first_line() {
  local line
  if IFS= read -r line; then
    echo "first $(python3 -c "import sys; print(float(sys.argv[1]) - float(sys.argv[2]))" \
      "$EPOCHREALTIME" "$1") $line" >>"$2"
  fi
  cat >/dev/null
}
since() { python3 -c "import sys; print(float(sys.argv[1]) - float(sys.argv[2]))" "$EPOCHREALTIME" "$1"; }

# cairn_start LAZY REF: pull (--lazy or not), bundle, crun run, from an empty store.
cairn_start() {
  local lazy=$1 ref=$2 out=$3 t0 b=$W/bundle-$RANDOM CAIRN=("${CAIRN[@]}")
  [[ $lazy == x ]] && CAIRN=("$BEFORE/cairn")
  rm -rf "$W/store"
  t0=$EPOCHREALTIME
  timeout 900 nice -n "$MNICE" "${CAIRN[@]}" --store "$W/store" pull -q --insecure ${lazy:+--lazy} "$ref" >/dev/null \
    2>>"$W/cairn.log"
  echo "pull $(since "$t0")" >>"$out"
  timeout 300 nice -n "$MNICE" "${CAIRN[@]}" --store "$W/store" bundle -q "bench/${ref##*/}" "$b" -- "${CMD[@]}" >/dev/null
  echo "bundle $(since "$t0")" >>"$out"
  crun_run "$W/crun" "$b" "bench-start-$$" timeout 600 nice -n "$MNICE" </dev/null \
    2>>"$W/crun.log" | first_line "$t0" "$out"
  echo "bytes $(curl -sf "http://$PROXY/_proxy/counts" | jq -c '[.bytes, .requests]')" >>"$out"
  "${CAIRN[@]}" --store "$W/store" bundle --rm -q "$b"
  stop_strays
  rm -rf "$W/store" "$W/crun"
}

podman_storage_conf "$W" "$([[ $PODMAN_PARTIAL == 1 ]] && echo true || echo false)"
# podman in a mount namespace of its own (BENCH_NS) without the cgroup2
# mount (crun 1.8 refuses hybrid cgroups: /work/shared/TESTING.md), its
# own store, tmpdir and no events log.
PODMAN=("${BENCH_NS[@]}" sh -c 'umount /sys/fs/cgroup/unified 2>/dev/null
  W=$1; shift; CONTAINERS_STORAGE_CONF=$W/storage.conf exec podman --cgroup-manager=cgroupfs \
    --tmpdir "$W/pm.tmp" --events-backend=none "$@"' sh "$W")
podman_reset() {
  "${PODMAN[@]}" system reset -f >/dev/null 2>&1 || true
  rm -rf "$W/pm" "$W/pm.run" "$W/pm.tmp"
}
podman_start() {
  local out=$2 t0
  podman_reset
  t0=$EPOCHREALTIME
  timeout 900 nice -n "$MNICE" "${PODMAN[@]}" pull -q --tls-verify=false "$REF" >/dev/null 2>>"$W/podman.log"
  echo "pull $(since "$t0")" >>"$out"
  timeout 600 nice -n "$MNICE" "${PODMAN[@]}" run --rm --cgroups=disabled --network=none \
    --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 "${REF#docker://}" "${CMD[@]}" \
    </dev/null 2>>"$W/podman.log" | first_line "$t0" "$out"
  echo "bytes $(curl -sf "http://$PROXY/_proxy/counts" | jq -c '[.bytes, .requests]')" >>"$out"
  podman_reset
}

names=("(a) cairn pull --lazy + bundle + crun" "(b) cairn pull + bundle + crun"
  "(c) podman pull + run" "(a') pull --lazy of the push after a recorded run + bundle + crun"
  "(x) (a), the build before")
cmds=("cairn_start 1 \$REF" "cairn_start '' \$REF" "podman_start -" "cairn_start 1 \$REF_OPT"
  "cairn_start x \$REF")
for ((r = 0; r < RUNS; r++)); do
  for i in $(printf '%s\n' $CONTENDERS | tr abcox 01234 | shuf); do
    curl -sf "http://$PROXY/_proxy/reset" >/dev/null
    echo "run $i" >>"$W/runs"
    # (each contender's steps run on past a failure, which is then said)
    eval "${cmds[i]} \"\$W/runs\"" || true
    if ! tail -3 "$W/runs" | grep -q '^first .* started$'; then
      echo "bench_lazy_start: ${names[i]}: no first line; its logs end:" >&2
      for f in "$W"/*.log; do tail -5 "$f" | sed "s|^|  ${f##*/}: |" >&2; : >"$f"; done
      echo "failed" >>"$W/runs"
    fi
  done
done

echo "bench_lazy_start: image of $traw bytes of tar (Debian minbase + ${BIG_MIB} MiB files of" \
  "random bytes), its zstd:chunked layer $bsize bytes (TOC $toclen); the command reads" \
  "$nread files, $readbytes bytes ($READ_PCT%); (a')'s recorded run: ${recorded:-no} files;" \
  "podman partial images" \
  "$([[ $PODMAN_PARTIAL == 1 ]] && echo on || echo off); shaping proxy 100 Mbit/s, 10 ms a" \
  "request; $RUNS runs, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$W/runs" "$bsize" "${names[@]}" <<'PY'
import json, statistics, sys
runs, size, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
rows, cur, fails = {n: [] for n in names}, None, {}
for line in open(runs):
    k, _, v = line.rstrip("\n").partition(" ")
    if k == "run":
        cur, last = {}, v
        rows[names[int(v)]].append(cur)
    elif k == "failed":
        rows[names[int(last)]].pop()
        fails[names[int(last)]] = fails.get(names[int(last)], 0) + 1
    elif k == "bytes":
        cur["bytes"], cur["requests"] = json.loads(v)
    else:
        cur[k] = float(v.split()[0])
med = {n: {k: statistics.median(r[k] for r in v) for k in v[0]} for n, v in rows.items() if v}
a, b, c, o, x = (med[n]["first"] if n in med else float("nan") for n in names)
print("| from the start of the pull | to its end s | to the bundle s | to the first line s"
      " | bytes through the proxy | of the layer | requests |")
print("|---|---|---|---|---|---|---|")
for n in [names[0], names[4], names[3], names[1], names[2]]:
    if n not in med:
        continue
    m = med[n]
    bundle = f"{m['bundle']:.2f}" if "bundle" in m else "-"
    print(f"| {n} | {m['pull']:.2f} | {bundle} | {m['first']:.2f}"
          f" | {int(m['bytes']):,} | {100 * m['bytes'] / size:.1f}% | {int(m['requests'])} |")
print(f"(a)/(b) = {a / b:.3f}, (a')/(b) = {o / b:.3f} (goal <= 0.10); (a)/(c) = {a / c:.3f},"
      f" (a')/(c) = {o / c:.3f}; (b)/(c) = {b / c:.3f}"
      + (f"; (x)/(b) = {x / b:.3f}, the build before" if x == x else ""))
for n, k in fails.items():
    print(f"{n}: failed {k} times (no first line)")
for n, v in rows.items():
    if v:
        print(f"{n}: first line at " + ", ".join(f"{r['first']:.2f}" for r in v) + " s")
PY
