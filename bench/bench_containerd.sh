#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench_containerd.sh — containerd's snapshotters side by side: Debian's
# containerd 1.6 (a private config, root, state and socket under the run's
# directory, its own namespace) with
#   (o) its overlayfs snapshotter: `ctr image pull` (a full pull), `ctr run`
#   (s) stargz-snapshotter 0.12 (/work/shared/peers/stargz, built once into
#       the cache): `ctr-remote image rpull`, `ctr run --snapshotter stargz`
#   (c) cairn-snapshotter, in the mode it offers when the script runs: a
#       probe rpulls the image through it and counts the bytes through the
#       proxy; under half the layer is "lazy" (`ctr-remote image rpull
#       --snapshotter cairn` measured), else "full" (`ctr image pull
#       --snapshotter cairn`: containerd fetches and unpacks every layer
#       into cairn's snapshots); CAIRN_MODE=full|lazy skips the probe
#   (S) (s) of the image `ctr-remote image optimize` wrote (the start
#       command run and its reads recorded, the layer rewritten with them
#       first and its prefetch landmark), pushed back
#   (C) (c) of the image pushed after cairn's recorded run of the same
#       command (`cairn bundle --record-access`, crun, then `cairn push
#       --format estargz`, which puts the recorded files first)
# each from an empty containerd, through the shaping proxy
# (tests/helpers/shaping_proxy.py: about 100 Mbit/s, 10 ms a request) in
# front of Debian's docker-registry on 127.0.0.1. The image is bench_lazy_start.sh's:
# a Debian bookworm minbase tree plus files of random bytes (BIG_MIB each)
# up to SIZE_MIB of tar (default 1024; 128 for a quick run), one layer
# pushed by `cairn push --format estargz`; its /bench/start.sh cats
# READ_PCT% of the bytes (default 5) and prints one line. Parts, each
# skipped by its variable set to 0:
#   START    seconds from the start of the pull to the first line of `ctr
#            run IMAGE /bench/start.sh`; bytes and requests through the
#            proxy by then; medians of RUNS (default 1), the contenders'
#            order shuffled each round
#   READS    in a running container of o, s and c, right after START:
#            a walk of / (find -xdev), one big file never read before
#            (cat), every file (find | cat); first (as the pull left
#            them), cold (caches dropped: sync, drop_caches 3) and warm
#   MEMORY   RSS and PSS of each snapshotter's processes (o: none, in
#            containerd and the kernel; s: stargz-grpc, which serves its
#            FUSE mounts itself; c: cairn-snapshotter, any cairnfs of
#            the run, and its background fill, cairn fill, and its
#            mount's fetcher, cairn fill --serve, while they run), idle
#            after START, then with NCONT containers (default 20) that
#            each ran /bench/start.sh and sleep; containerd's and the
#            shims' beside them; and each process's below the table.
#            Each reading MEM_PAUSE seconds (default 8) after the calls
#            before it, for every contender alike: an idle
#            cairn-snapshotter is dormant then (its --idle, default 5).
#            Then idle again, settled: the containers removed, once no
#            byte came through the proxy for 5 s (a background fetch or
#            fill over; SETTLE_MAX s at most, default 600)
#   RESTART  a reader in a running container (perl: every file under /usr
#            in turn, RESTART_SECS seconds, default 12) while the
#            snapshotter is killed with SIGKILL 3 s in, caches dropped,
#            and restarted RESTART_GAP s later (default 1; o's snapshotter
#            is containerd itself): read errors, the longest stall between
#            two reads, whether it still failed in its last second
# Usage: bench/bench_containerd.sh [BUILD_DIR]  (default build); SIZE_MIB,
# BIG_MIB (32), READ_PCT, RUNS, CONTENDERS (default "o s c S C"), START,
# READS, MEMORY, MEM_PAUSE, SETTLE_MAX, NCONT, RESTART, RESTART_SECS, RESTART_GAP, CAIRN_MODE,
# CAIRN_SN_ARGS (cairn-snapshotter's options, e.g. --no-fill),
# PULL_TIMEOUT (seconds, 120 + SIZE_MIB / 2), MEASURE_NICE (0). The output is also written to
# bench/results/containerd.txt. Needs root, containerd and ctr,
# ctr-remote (Debian's stargz-snapshotter), runc, crun, golang-go and
# golang-github-containerd-stargz-snapshotter-dev (to build the peer once),
# docker-registry, a build with cairn-snapshotter, the cached minbase tree.
# Everything it starts is stopped and everything it mounts unmounted at
# exit. Other work on the machine shows: run it under `flock
# /work/bench.lock`; the load average is printed with the results.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
BIN=${1:-${CAIRN_BIN:-$SRC/build}}
BIN=$(cd "$BIN" && pwd)
SIZE_MIB=${SIZE_MIB:-1024}
BIG_MIB=${BIG_MIB:-32}
READ_PCT=${READ_PCT:-5}
RUNS=${RUNS:-1}
CONTENDERS=${CONTENDERS:-o s c S C}
START=${START:-1} READS=${READS:-1} MEMORY=${MEMORY:-1} RESTART=${RESTART:-1}
NCONT=${NCONT:-20}
MEM_PAUSE=${MEM_PAUSE:-8}
SETTLE_MAX=${SETTLE_MAX:-600}
RESTART_SECS=${RESTART_SECS:-12}
RESTART_GAP=${RESTART_GAP:-1}
CAIRN_MODE=${CAIRN_MODE:-}
# a pull stalled (a transfer through the proxy once stopped for good at 93%)
PULL_TIMEOUT=${PULL_TIMEOUT:-$((120 + SIZE_MIB / 2))}
MNICE=${MEASURE_NICE:-0}
source "$SRC/tests/lib/registry.sh"
source "$SRC/tests/lib/containerd-toml.sh"
source "$SRC/bench/rootfs.sh"
source "$SRC/bench/benchlib.sh"
SN=$BIN/cairn-snapshotter
[[ -x $SN ]] || { echo "bench_containerd: $SN: not built (no gRPC or protobuf-c)" >&2; exit 1; }
for c in containerd ctr ctr-remote runc crun docker-registry jq; do
  command -v "$c" >/dev/null || { echo "bench_containerd: $c: not installed" >&2; exit 1; }
done
W=$(mktemp -d /tmp/cairn-bench-containerd.XXXXXX)
chmod 755 "$W"
NS=cairnbench$$
CAIRN=("$BIN/cairn")
C=$W/ctd
CTD_PID='' SN_PID=''

# The peer, built once for this source of it and this stargz library.
PEER=/work/shared/peers/stargz
key=$({ cat "$PEER/main.go" "$PEER/build.sh"; dpkg-query -W -f '${Version}' \
  golang-github-containerd-stargz-snapshotter-dev; } | sha256sum | cut -c1-16)
SZ=$CACHE/stargz-grpc-$key
if [[ ! -x $SZ ]] && [[ " $CONTENDERS " == *" "[sS]" "* ]]; then
  mkdir -p "$CACHE"
  echo "building stargz-grpc (once, about 1 min of CPU)..." >&2
  nice -n 10 bash "$PEER/build.sh" "$SZ.tmp" >"$W/stargz-build.log" 2>&1 ||
    { echo "bench_containerd: building stargz-grpc: $(tail -3 "$W/stargz-build.log")" >&2; exit 1; }
  mv "$SZ.tmp" "$SZ"
fi

# run_pids DIR: processes whose command line names DIR (the daemons, the
# shims) or whose root is under it (a container's), by pid.
run_pids() {
  local p
  for p in /proc/[0-9]*; do
    p=${p#/proc/}
    [[ $p == "$$" || $p == "$BASHPID" ]] && continue
    if tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline" | grep -qF "$1/" ||
      [[ $(readlink "/proc/$p/root" 2>/dev/null) == "$1/"* ]]; then
      echo "$p"
    fi
  done
}
stop_pid() { # PID: TERM, 5 s, KILL
  local i
  kill "$1" 2>/dev/null || return 0
  for ((i = 0; i < 50; i++)); do [[ -d /proc/$1 ]] || return 0; sleep 0.1; done
  kill -9 "$1" 2>/dev/null || true
}
# fuse_abort DIR: the FUSE connections of the mounts under DIR aborted (a
# killed server's readers wait on them, unkillable by a lazy unmount).
fuse_abort() {
  local d
  for d in $(findmnt -rn -o TARGET,MAJ:MIN,FSTYPE |
    awk -v d="$1/" 'index($1, d) == 1 && $3 ~ /^fuse/ { sub(/.*:/, "", $2); print $2 }'); do
    [[ -e /sys/fs/fuse/connections/$d/abort ]] && echo 1 >"/sys/fs/fuse/connections/$d/abort"
  done
  return 0
}
unmount_under() {
  fuse_abort "$1"
  { findmnt -rn -o TARGET | grep -F "$1/" || true; } | sort -r | while read -r m; do
    umount -l "$m" 2>/dev/null || fusermount3 -u -z "$m" 2>/dev/null || true
  done
}
CTR() { ctr -a "$C/containerd.sock" -n "$NS" "$@"; }
RCTR() { ctr-remote -a "$C/containerd.sock" -n "$NS" "$@"; }

# snapshotter_start KIND: the proxy snapshotter's daemon (none for overlay).
snapshotter_start() {
  local i
  rm -f "$C/$1.sock" # a killed daemon's
  case $1 in
  cairn)
    # shellcheck disable=SC2086 # its options
    "$SN" --store "$C/cairn" --address "$C/cairn.sock" ${CAIRN_SN_ARGS:-} \
      2>>"$W/snapshotter.log" &
    ;;
  stargz) "$SZ" -root "$C/sz" -address "$C/stargz.sock" >>"$W/snapshotter.log" 2>&1 & ;;
  *) return 0 ;;
  esac
  SN_PID=$!
  for ((i = 0; i < 200; i++)); do [[ -S $C/$1.sock ]] && return 0; sleep 0.1; done
  echo "bench_containerd: $1: no socket after 20 s" >&2
  return 1
}
containerd_start() {
  local i
  rm -f "$C/containerd.sock"
  containerd --config "$C/containerd.toml" >>"$W/containerd.log" 2>&1 &
  CTD_PID=$!
  for ((i = 0; i < 200; i++)); do
    [[ -S $C/containerd.sock ]] && CTR version >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "bench_containerd: containerd: no socket after 20 s" >&2
  return 1
}
# env_up KIND: a new containerd (overlay | stargz | cairn) with nothing in it.
env_up() {
  mkdir -p "$C"
  { echo 'disabled_plugins = ["io.containerd.grpc.v1.cri"]' && ctd_toml "$C" cairn stargz; } \
    >"$C/containerd.toml"
  snapshotter_start "$1" && containerd_start
}
# env_down: every task killed and deleted, containerd and the snapshotter
# stopped, whatever is left of the run killed, everything unmounted.
env_down() {
  local t i p
  if [[ -n $CTD_PID && -d /proc/$CTD_PID ]]; then
    for t in $(CTR task ls -q 2>/dev/null); do
      CTR task kill -s KILL "$t" >/dev/null 2>&1 || true
    done
    for t in $(CTR task ls -q 2>/dev/null); do
      for ((i = 0; i < 50; i++)); do
        CTR task ls 2>/dev/null | grep -q "^$t .*RUNNING" || break
        sleep 0.1
      done
      CTR task delete -f "$t" >/dev/null 2>&1 || true
    done
    for t in $(CTR c ls -q 2>/dev/null); do CTR c rm "$t" >/dev/null 2>&1 || true; done
  fi
  [[ -n $CTD_PID ]] && stop_pid "$CTD_PID"
  [[ -n $SN_PID ]] && stop_pid "$SN_PID"
  CTD_PID='' SN_PID=''
  fuse_abort "$C"
  for p in $(run_pids "$C"); do
    echo "bench_containerd: still running, stopped:" \
      "$(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null)" >>"$W/strays.log"
    kill -9 "$p" 2>/dev/null || true
  done
  unmount_under "$C"
  rm -rf "$C"
}
cleanup() {
  local rc=$?
  set +e
  ((rc == 0)) || for f in "$W"/*.log; do tail -5 "$f" | sed "s|^|${f##*/}: |" >&2; done
  env_down
  for b in "$W"/bundle-*; do
    [[ -d $b ]] && "${CAIRN[@]}" --store "$W/pusher" bundle --rm -q "$b"
  done
  registry_cleanup
  for p in $(run_pids "$W"); do kill -9 "$p" 2>/dev/null; done
  unmount_under "$W"
  rm -rf "$W"
}
trap cleanup EXIT
mkdir -p "$SRC/bench/results"
exec > >(tee "$SRC/bench/results/containerd.txt")

# The image: minbase + big files + /bench/start.sh, its list, the reader.
root=$(ensure_minbase_dir)
mkdir -p "$W/extra/bench" "$W/extra/data"
nice -n 10 python3 "$SRC/bench/start_image.py" "$root" "$W/extra" "$SIZE_MIB" "$BIG_MIB" \
  "$READ_PCT" --big
# The restart's reader: every file of LIST in turn for SECONDS, each read
# whole; a line a second and one at the end ("done"): when the last read
# ended (/proc/uptime, 10 ms, the host's clock too), reads, errors, the
# longest gap between two reads ended (the stall), errors in the last second.
cat >"$W/extra/bench/reader.pl" <<'PERL'
#!/usr/bin/perl
my ($secs, $list) = @ARGV;
sub now { open(my $u, '<', '/proc/uptime') or return 0; my $l = <$u>; return (split ' ', $l)[0]; }
open(my $l, '<', $list) or die "$list: $!\n";
my @f = <$l>;
chomp @f;
$| = 1;
my ($n, $err, $late, $stall, $i) = (0, 0, 0, 0, 0);
my $t0 = now();
my ($last, $shown) = ($t0, $t0);
sub line {
  printf "%s last %.2f reads %d errors %d stall %.2f late %d\n", $_[0], $last, $n, $err, $stall,
    $late;
}
while ((my $t = now()) < $t0 + $secs) {
  my $p = $f[$i++ % @f];
  my $ok = 0;
  if (open(my $h, '<', $p)) {
    my ($buf, $r);
    1 while ($r = sysread($h, $buf, 1 << 16));
    $ok = defined $r;
    close $h;
  }
  my $e = now();
  $stall = $e - $last if $e - $last > $stall;
  $last = $e;
  $n++;
  $err++ unless $ok;
  $late++ if !$ok && $e > $t0 + $secs - 1;
  if ($e - $shown >= 1) { line("at"); $shown = $e; }
}
line("done");
PERL
chmod 755 "$W/extra/bench/reader.pl"
(cd "$root" && find usr -type f ! -name '* *' | sort | sed 's|^|/|') >"$W/extra/bench/usr.list"
read -r nread readbytes nbig bigsize <"$W/read.info"
bigfile=$(cat "$W/extra/bench/big")
nice -n 10 tar --sort=name --numeric-owner -b 1 -cf "$W/img.tar" -C "$root" . \
  -C "$W/extra" ./bench ./data
rm -rf "$W/extra"
traw=$(stat -c %s "$W/img.tar")
registry_start "$W/reg"
nice -n 10 "${CAIRN[@]}" --store "$W/pusher" import -q bench/start:1 "$W/img.tar" >/dev/null
rm -f "$W/img.tar"
nice -n 10 "${CAIRN[@]}" --store "$W/pusher" push -q --insecure --format estargz \
  bench/start:1 "docker://$REGISTRY/bench/start:1" >/dev/null
# (C)'s image: cairn's recorded run of the command, then the push.
if [[ " $CONTENDERS " == *" C "* ]]; then
  recorded=$(recorded_run "${CAIRN[@]}" "$W/pusher" bench/start:1 "$W" /bin/sh /bench/start.sh)
  nice -n 10 "${CAIRN[@]}" --store "$W/pusher" push -q --insecure --format estargz \
    bench/start:1 "docker://$REGISTRY/bench/start:opt" >/dev/null
fi
rm -rf "$W/pusher"
# (S)'s image: ctr-remote image optimize of it (containerd's overlayfs, the
# registry itself), pushed back.
if [[ " $CONTENDERS " == *" S "* ]]; then
  env_up overlay
  CTR image pull --plain-http "$REGISTRY/bench/start:1" >/dev/null
  nice -n 10 timeout 1200 ctr-remote -a "$C/containerd.sock" -n "$NS" image optimize --oci \
    --entrypoint '["/bin/sh"]' --args '["/bench/start.sh"]' \
    "$REGISTRY/bench/start:1" "$REGISTRY/bench/start:szopt" >"$W/optimize.log" 2>&1
  RCTR image push --plain-http "$REGISTRY/bench/start:szopt" >/dev/null
  env_down
fi
proxy_start "$W/proxy"
layer_size() {
  curl -sf -H 'Accept: application/vnd.oci.image.manifest.v1+json' \
    -H 'Accept: application/vnd.docker.distribution.manifest.v2+json' \
    "http://$REGISTRY/v2/bench/start/manifests/$1" | jq '[.layers[].size] | add'
}
bsize=$(layer_size 1)
REF=$PROXY/bench/start

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
since() {
  python3 -c "import sys; print(float(sys.argv[1]) - float(sys.argv[2]))" "$EPOCHREALTIME" "$1"
}

# The probe of cairn's mode: an rpull through cairn-snapshotter, stopped
# once it moved half the layer (a full pull), else lazy.
cairn_probe() {
  local i b pid
  env_up cairn
  proxy_reset
  ctr-remote -a "$C/containerd.sock" -n "$NS" image rpull --plain-http --snapshotter cairn \
    "$REF:1" >/dev/null 2>>"$W/probe.log" &
  pid=$!
  for ((i = 0; i < 9000; i++)); do
    [[ -d /proc/$pid ]] || break
    b=$(proxy_counts | jq .bytes)
    ((b * 2 < bsize)) || break
    sleep 0.2
  done
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  b=$(proxy_counts | jq .bytes)
  env_down
  if ((b * 2 < bsize)) && ! grep -qi 'error\|fail' "$W/probe.log"; then
    echo lazy
  else
    echo full
  fi
}

# pull_cmd KIND TAG: sets PULL, the contender's pull into the containerd up now.
pull_cmd() {
  case $1 in
  overlay) PULL=(ctr image pull --plain-http "$REF:$2") ;;
  stargz) PULL=(ctr-remote image rpull --plain-http --snapshotter stargz "$REF:$2") ;;
  cairn)
    if [[ $CAIRN_MODE == lazy ]]; then
      PULL=(ctr-remote image rpull --plain-http --snapshotter cairn "$REF:$2")
    else
      PULL=(ctr image pull --plain-http --snapshotter cairn "$REF:$2")
    fi
    ;;
  esac
  PULL=("${PULL[0]}" -a "$C/containerd.sock" -n "$NS" "${PULL[@]:1}")
}
snapshotter_of() { [[ $1 == overlay ]] && echo overlayfs || echo "$1"; }

# start KIND TAG OUT: pull, then ctr run /bench/start.sh to its first line.
start() {
  local t0
  pull_cmd "$1" "$2"
  t0=$EPOCHREALTIME
  timeout "$PULL_TIMEOUT" nice -n "$MNICE" "${PULL[@]}" >/dev/null 2>>"$W/pull.log"
  echo "pull $(since "$t0")" >>"$3"
  timeout 900 nice -n "$MNICE" ctr -a "$C/containerd.sock" -n "$NS" run --rm \
    --snapshotter "$(snapshotter_of "$1")" "$REF:$2" "start-$RANDOM" /bin/sh /bench/start.sh \
    </dev/null 2>>"$W/run.log" | first_line "$t0" "$3"
  echo "bytes $(proxy_counts | jq -c '[.bytes, .requests]')" >>"$3"
}

# in_container ID SH: runs SH in the container; prints its output.
in_container() {
  timeout 900 ctr -a "$C/containerd.sock" -n "$NS" task exec --exec-id "x$RANDOM" "$1" \
    /bin/sh -c "$2" </dev/null
}
timed() { # ID WHAT SH: seconds SH took inside the container
  in_container "$1" \
    "s=\$(date +%s%N); $3 >/dev/null 2>&1; e=\$(date +%s%N); echo \$(((e - s) / 1000000))" |
    awk -v w="$2" '{ printf "%s %.3f\n", w, $1 / 1000 }'
}
dropcaches() { sync && echo 3 >/proc/sys/vm/drop_caches; }

# reads KIND TAG OUT: walk, big file, all files in a running container.
reads() {
  local id=rd$RANDOM pass
  CTR run -d --snapshotter "$(snapshotter_of "$1")" "$REF:$2" "$id" sleep 1000000 >/dev/null
  for pass in first cold warm; do
    [[ $pass == cold ]] && dropcaches
    timed "$id" "$pass-walk" "find / -xdev" >>"$3"
    [[ $pass == cold ]] && dropcaches
    timed "$id" "$pass-big" "cat $bigfile" >>"$3"
    [[ $pass == cold ]] && dropcaches
    timed "$id" "$pass-all" "find / -xdev -type f -exec cat {} +" >>"$3"
  done
  CTR task kill -s KILL "$id" >/dev/null 2>&1 || true
  sleep 0.5
  CTR task delete -f "$id" >/dev/null 2>&1 || true
  CTR c rm "$id" >/dev/null 2>&1 || true
}

# mem_of PID...: "RSS PSS" in KiB summed over them.
mem_of() {
  local p rss=0 pss=0 r s
  for p in "$@"; do
    [[ -r /proc/$p/smaps_rollup ]] || continue
    r=$(awk '/^Rss:/ { print $2 }' "/proc/$p/smaps_rollup")
    s=$(awk '/^Pss:/ { print $2 }' "/proc/$p/smaps_rollup")
    rss=$((rss + ${r:-0})) pss=$((pss + ${s:-0}))
  done
  echo "$rss $pss"
}
# The snapshotter's processes: its daemon, any cairnfs of the run and
# cairn's background fill (libexec/cairn/cairn fill) while it runs.
sn_pids() {
  local p
  [[ -n $SN_PID ]] && echo "$SN_PID"
  for p in $(run_pids "$C"); do
    [[ $(readlink "/proc/$p/exe" 2>/dev/null) == */cairnfs ||
      $(readlink "/proc/$p/exe" 2>/dev/null) == */cairn/cairn ]] && echo "$p"
  done
  return 0
}
# mem_each PID...: "NAME:RSS/PSS" (KiB) of each, NAME its program's
# (cairn's fill and its fetcher, fill --serve, told apart).
mem_each() {
  local p n
  for p in "$@"; do
    [[ -r /proc/$p/smaps_rollup ]] || continue
    n=$(readlink "/proc/$p/exe" 2>/dev/null) || continue # ended meanwhile
    n=${n##*/}
    if [[ $n == cairn ]]; then
      n=cairn-fill
      tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -q -- ' --serve' && n=cairn-fill-serve
    fi
    printf '%s:%s ' "$n" "$(mem_of "$p" | tr ' ' /)"
  done
}
shim_pids() {
  local p
  for p in $(run_pids "$C"); do
    [[ $(readlink "/proc/$p/exe" 2>/dev/null) == *containerd-shim* ]] && echo "$p"
  done
  return 0
}
# memory KIND TAG OUT: idle, then with NCONT containers that ran start.sh.
memory() {
  local i j pid n=0
  sleep "$MEM_PAUSE"
  # shellcheck disable=SC2046 # pids
  echo "mem-idle $(mem_of $(sn_pids)) $(mem_of "$CTD_PID")" >>"$3"
  # shellcheck disable=SC2046 # pids
  echo "procs-idle $(mem_each $(sn_pids))" >>"$3"
  for ((i = 0; i < NCONT; i++)); do
    CTR run -d --snapshotter "$(snapshotter_of "$1")" "$REF:$2" "m$i" \
      /bin/sh -c '/bin/sh /bench/start.sh >/started; exec sleep 1000000' \
      >/dev/null 2>>"$W/run.log" || continue
  done
  for ((i = 0; i < NCONT; i++)); do
    pid=$(CTR task ls 2>/dev/null | awk -v t="m$i" '$1 == t { print $2 }')
    [[ -n $pid ]] || continue # it did not start (run.log says why)
    for ((j = 0; j < 600; j++)); do
      [[ -s /proc/$pid/root/started ]] && { n=$((n + 1)); break; }
      [[ -d /proc/$pid ]] || break
      sleep 0.1
    done
  done
  sleep "$MEM_PAUSE"
  # shellcheck disable=SC2046 # pids
  echo "mem-$n $(mem_of $(sn_pids)) $(mem_of "$CTD_PID") $(mem_of $(shim_pids))" >>"$3"
  # shellcheck disable=SC2046 # pids
  echo "procs-busy $(mem_each $(sn_pids))" >>"$3"
  for ((i = 0; i < NCONT; i++)); do CTR task kill -s KILL "m$i" >/dev/null 2>&1 || true; done
  sleep 1
  for ((i = 0; i < NCONT; i++)); do
    CTR task delete -f "m$i" >/dev/null 2>&1 || true
    CTR c rm "m$i" >/dev/null 2>&1 || true
  done
  # Idle again, settled: once no byte came through the proxy for 5 s (a
  # background fetch or fill ended; SETTLE_MAX s at most), MEM_PAUSE later.
  local b last=-1 still=0 t0=$SECONDS
  while ((still < 5 && SECONDS - t0 < SETTLE_MAX)); do
    b=$(proxy_counts | jq .bytes)
    if [[ $b == "$last" ]]; then still=$((still + 1)); else still=0 last=$b; fi
    sleep 1
  done
  sleep "$MEM_PAUSE"
  # shellcheck disable=SC2046 # pids
  echo "mem-settled $(mem_of $(sn_pids)) $(mem_of "$CTD_PID")" >>"$3"
  # shellcheck disable=SC2046 # pids
  echo "procs-settled $(mem_each $(sn_pids))" >>"$3"
  echo "settled-after $((SECONDS - t0))" >>"$3"
}

# restart KIND TAG OUT: the reader while the snapshotter is killed; it
# writes its line in the container (containerd's own kill ends the exec's
# client, not the exec).
restart() {
  local id=rs$RANDOM i pid
  CTR run -d --snapshotter "$(snapshotter_of "$1")" "$REF:$2" "$id" sleep 1000000 >/dev/null
  pid=$(CTR task ls | awk -v t="$id" '$1 == t { print $2 }')
  in_container "$id" "/bench/reader.pl $RESTART_SECS /bench/usr.list >/reader.out 2>&1" \
    >/dev/null 2>&1 &
  for ((i = 0; i < 600; i++)); do # the exec started: its shell made the file
    [[ -e /proc/$pid/root/reader.out ]] && break
    sleep 0.1
  done
  sleep 3
  if [[ $1 == overlay ]]; then
    kill -9 "$CTD_PID"
  else
    kill -9 "$SN_PID"
  fi
  dropcaches
  sleep "$RESTART_GAP"
  if [[ $1 == overlay ]]; then
    containerd_start
  else
    snapshotter_start "$1"
  fi
  # its end, or RESTART_SECS + 30 s: a reader stuck in a read is "hung",
  # its stall counted to now
  for ((i = 0; i < (RESTART_SECS + 30) * 10; i++)); do
    grep -q '^done' "/proc/$pid/root/reader.out" 2>/dev/null && break
    sleep 0.1
  done
  tail -1 "/proc/$pid/root/reader.out" 2>/dev/null | awk -v now="$(cut -d' ' -f1 /proc/uptime)" '
    { hung = $1 != "done"; s = $9; if (hung && now - $3 > s) s = now - $3
      printf "restart reads %d errors %d stall %.2f late %s hung %d\n", $5, $7, s,
        hung ? "-" : $11, hung }' >>"$3"
}

# contender CODE OUT: one contender's parts, from an empty containerd.
contender() {
  local kind tag=1 full=1
  case $1 in
  o) kind=overlay ;; s) kind=stargz ;; c) kind=cairn ;;
  S) kind=stargz tag=szopt full= ;; C) kind=cairn tag=opt full= ;;
  esac
  env_up "$kind"
  proxy_reset
  if ((START)); then
    start "$kind" "$tag" "$2"
  else
    pull_cmd "$kind" "$tag"
    timeout "$PULL_TIMEOUT" "${PULL[@]}" >/dev/null 2>>"$W/pull.log"
  fi
  if [[ -n $full && $3 == 0 ]]; then
    ((READS)) && reads "$kind" "$tag" "$2"
    ((MEMORY)) && memory "$kind" "$tag" "$2"
    ((RESTART)) && restart "$kind" "$tag" "$2"
  fi
  env_down
}

if [[ " $CONTENDERS " == *" "[cC]" "* ]]; then
  [[ -n $CAIRN_MODE ]] || CAIRN_MODE=$(cairn_probe)
fi
names=("(o) containerd overlayfs: ctr image pull + ctr run"
  "(s) stargz-snapshotter: ctr-remote image rpull + ctr run"
  "(c) cairn-snapshotter ($CAIRN_MODE): $([[ $CAIRN_MODE == lazy ]] &&
    echo ctr-remote image rpull || echo ctr image pull) + ctr run"
  "(S) (s) of the image ctr-remote image optimize wrote"
  "(C) (c) of the image cairn pushed after a recorded run")
for ((r = 0; r < RUNS; r++)); do
  for i in $(printf '%s\n' $CONTENDERS | tr oscSC 01234 | shuf); do
    echo "run $i" >>"$W/runs"
    contender "$(echo oscSC | cut -c$((i + 1)))" "$W/runs" "$r" || true
    if ((START)) && ! grep -A2 "^run $i\$" "$W/runs" | tail -2 | grep -q '^first .* started$'; then
      echo "bench_containerd: ${names[i]}: no first line; its logs end:" >&2
      for f in "$W"/*.log; do tail -5 "$f" | sed "s|^|  ${f##*/}: |" >&2; : >"$f"; done
      echo "failed" >>"$W/runs"
    fi
  done
done

echo "bench_containerd: image of $traw bytes of tar (Debian minbase + $nbig files of" \
  "${BIG_MIB} MiB of random bytes), its estargz layer $bsize bytes; the command reads $nread" \
  "files, $readbytes bytes ($READ_PCT%), READS' big file $bigfile ($bigsize bytes); (C)'s" \
  "recorded run: ${recorded:-no} files; cairn-snapshotter measured in $CAIRN_MODE mode" \
  "${CAIRN_SN_ARGS:+(${CAIRN_SN_ARGS})};" \
  "shaping proxy 100 Mbit/s, 10 ms a request; $RUNS runs, NCONT $NCONT," \
  "$(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$W/runs" "$bsize" "${names[@]}" <<'PY'
import json, statistics, sys
runs, size, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
rows, cur, fails, extra = {n: [] for n in names}, None, {}, {n: {} for n in names}
for line in open(runs):
    k, _, v = line.rstrip("\n").partition(" ")
    if k == "run":
        cur, last = {}, names[int(v)]
        rows[last].append(cur)
    elif k == "failed":
        fails[last] = fails.get(last, 0) + 1
        if "first" not in cur:
            rows[last].pop()
    elif k == "bytes":
        cur["bytes"], cur["requests"] = json.loads(v)
    elif k in ("pull", "first"):
        cur[k] = float(v.split()[0])
    else:
        extra[last].setdefault(k, v)
med = {n: {k: statistics.median(r[k] for r in v) for k in v[0]} for n, v in rows.items()
       if v and "first" in v[0]}
first = lambda n: med[n]["first"] if n in med else float("nan")
o, s, c, S, C = (first(n) for n in names)
if med:
    print("\nStart: from the start of the pull")
    print("| contender | pull done s | first line s | bytes through the proxy | of the layer"
          " | requests | vs (o) |")
    print("|---|---|---|---|---|---|---|")
    for n in names:
        if n in med:
            m = med[n]
            print(f"| {n} | {m['pull']:.2f} | {m['first']:.2f} | {int(m['bytes']):,}"
                  f" | {100 * m['bytes'] / size:.1f}% | {int(m['requests'])}"
                  f" | {m['first'] / o:.3f} |")
    print(f"(c)/(s) = {c / s:.3f}, (C)/(S) = {C / S:.3f} (goal <= 0.8); (c)/(o) = {c / o:.3f},"
          f" (C)/(o) = {C / o:.3f} (goal <= 0.1); (s)/(o) = {s / o:.3f}, (S)/(o) = {S / o:.3f}")
    for n, v in rows.items():
        if v:
            print(f"{n}: first line at " + ", ".join(f"{r['first']:.2f}" for r in v) + " s")
for n, k in fails.items():
    print(f"{n}: failed {k} times (no first line)")
short = {n: n.split(")")[0] + ")" for n in names}
if any("first-walk" in e for e in extra.values()):
    print("\nReads in a running container, seconds (first: as the pull left the files;"
          " cold: caches dropped; warm)")
    cols = [f"{p}-{w}" for p in ("first", "cold", "warm") for w in ("walk", "big", "all")]
    print("| | " + " | ".join(c.replace("-", " ") for c in cols) + " |")
    print("|---" * (len(cols) + 1) + "|")
    for n, e in extra.items():
        if "first-walk" in e:
            print(f"| {short[n]} | " + " | ".join(e.get(c, "-") for c in cols) + " |")
mem = {n: (k, v) for n, e in extra.items() for k, v in e.items() if k.startswith("mem-")}
if any(k.startswith("mem-") for e in extra.values() for k in e):
    print("\nMemory, MiB: the snapshotter's processes RSS / PSS (containerd's RSS)")
    print("| | idle: snapshotter | containerd | with N containers: N | snapshotter | containerd"
          " | the shims | idle again, settled: snapshotter | after s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n, e in extra.items():
        idle = [k for k in e if k == "mem-idle"]
        busy = [k for k in e if k.startswith("mem-") and k not in ("mem-idle", "mem-settled")]
        if not idle:
            continue
        mi = [int(x) / 1024 for x in e["mem-idle"].split()]
        row = f"| {short[n]} | {mi[0]:.1f} / {mi[1]:.1f} | {mi[2]:.1f} |"
        if busy:
            mb = [int(x) / 1024 for x in e[busy[0]].split()]
            row += f" {busy[0][4:]} | {mb[0]:.1f} / {mb[1]:.1f} | {mb[2]:.1f} | {mb[4]:.1f} |"
        else:
            row += " - | - | - | - |"
        if "mem-settled" in e:
            ms = [int(x) / 1024 for x in e["mem-settled"].split()]
            row += f" {ms[0]:.1f} / {ms[1]:.1f} | {e.get('settled-after', '-')} |"
        else:
            row += " - | - |"
        print(row)
    what = {"procs-idle": "idle", "procs-busy": "with N containers",
            "procs-settled": "idle again, settled"}
    for n, e in extra.items():
        for k in ("procs-idle", "procs-busy", "procs-settled"):
            if e.get(k):
                print(f"{short[n]} {what[k]}, each process RSS/PSS KiB: {e[k]}")
if any("restart" in e for e in extra.values()):
    print("\nRestart: a reader of every file under /usr in a running container; the snapshotter"
          " killed (SIGKILL) 3 s in, caches dropped, restarted after the gap")
    print("| | reads | errors | longest stall s | errors in its last second"
          " | hung (a read not ended at the end) |")
    print("|---|---|---|---|---|---|")
    for n, e in extra.items():
        if "restart" in e:
            f = e["restart"].split()
            d = dict(zip(f[0::2], f[1::2])) if len(f) % 2 == 0 else {}
            print(f"| {short[n]} | {d.get('reads', '-')} | {d.get('errors', '-')}"
                  f" | {d.get('stall', '-')} | {d.get('late', '-')}"
                  f" | {'yes' if d.get('hung') == '1' else 'no'} |")
PY
