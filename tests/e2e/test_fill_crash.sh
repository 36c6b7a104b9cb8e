#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_fill_crash.sh — the lazy pull's promise (doc/lazy-pulls.md
# "The lazy pull as built"), proven by kill -9 at every step of a file's
# fetch and store, under the crash-point injector (tests/crash/inject.c,
# CAIRN_INJECT_POINTS=1: its durable steps and the store's named points
# "lazy: range fetched", "lazy: verified, not stored", "lazy: blob
# written", "lazy: in the transaction", "lazy: committed", "lazy: indexes
# rewritten", "lazy: TOCs unlinked"):
#   fill:   `cairn fill IMAGE` killed at step N;
#   file:   the `cairn fill --serve` a mount's first reads ask,
#           killed at step N (the read fails with EIO, or gives the bytes);
#   daemon: the mount's server (cairnfs, the supervisor's child) killed
#           while that filler is at step N (the supervisor restarts it;
#           the read gives the file's bytes or EIO, never a wrong one).
# After each point: `cairn fsck` is clean; a mount of the image serves
# every file as the full pull's export has it; and (on a copy of the store
# taken before that mount) a new `cairn fill` completes the image: the
# full pull's image id and export, no pending row, source row or TOC left.
# A fill's files fetched in one request: one transaction, one sync step.
# A first read is answered before its file is durable and recorded: the
# filler stopped at "lazy: blob written", the read gives the bytes, the
# file is still pending; let go, it is recorded.
# Then the registry stopped while the partial image is mounted: a pending
# file's read fails with EIO in bounded time, a fetched one reads, ls -lR
# lists; the registry back, the read works.
#
# CI runs every CAIRN_FILL_CRASH_STRIDE-th point (default 8) of each op, and
# every named point;
# CAIRN_CRASH_FULL=1 (the long run of the crash points, doc/testing.md)
# runs them all.
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib registry mount
pull_test_init
command -v podman >/dev/null || skip "no podman"
command -v sqlite3 >/dev/null || skip "no sqlite3"
INJECT=$(injector_preload)
STRIDE=${CAIRN_FILL_CRASH_STRIDE:-8}
[ "${CAIRN_CRASH_FULL:-0}" = 1 ] && STRIDE=1

# An image of one zstd:chunked layer: files of one to several chunks, two
# of one content, a hardlink, a symlink, an empty file.
setup python3 - "$T" <<'PY'
import os, random, sys
t = sys.argv[1]
rnd = random.Random(20)
os.makedirs(f"{t}/a/data", exist_ok=True)
for i, n in enumerate((3000, 20000, 70000, 150000, 9000)):
    open(f"{t}/a/data/f{i}", "wb").write(rnd.randbytes(n))
open(f"{t}/a/data/same", "wb").write(open(f"{t}/a/data/f1", "rb").read())
os.link(f"{t}/a/data/f2", f"{t}/a/data/hard")
os.symlink("f0", f"{t}/a/data/link")
open(f"{t}/a/empty", "wb").close()
PY
setup registry_start "$T/reg"
setup podman_push_chunked "$T/a" lazy/a:1
on_exit "rm -rf '$T/pm' 2>/dev/null || ${PODMAN[*]} unshare rm -rf '$T/pm'"
SRC=docker://$REGISTRY/lazy/a:1

# The reference: a full pull, its export's listing and file sums.
setup cairn --store "$T/full" pull -q --insecure "$SRC" >"$T/full.id"
FULL_ID=$(cat "$T/full.id")
sums() { (cd "$1" && find . -type f -print0 | sort -z | xargs -0 sha256sum); }
export_of() { # STORE OUT: the image's listing (OUT.list) and sums (OUT.sums)
  rm -rf "$2.x" && mkdir "$2.x" || return 1
  cairn --store "$1" export -q "$(cairn --store "$1" images -q | head -1)" >"$2.tar" 2>"$2.err" || return 1
  tar -tvf "$2.tar" | sort >"$2.list" && tar -C "$2.x" -xf "$2.tar" && sums "$2.x" >"$2.sums"
}
setup export_of "$T/full" "$T/ref"
# The template: the lazy pull, every file pending.
setup cairn --store "$T/tpl" pull -q --insecure --lazy --no-fill "$SRC" >/dev/null
db() { sqlite3 "file:$1/meta.db?mode=ro" "$2"; }
PENDING0=$(db "$T/tpl" "SELECT count(*) FROM pending")
check "the template has every file pending ($PENDING0)" test "$PENDING0" -ge 6
# the file a mount's read fetches: the largest (several chunks)
FILE=data/f3
SHA=$(db "$T/tpl" "SELECT sha256 FROM pending WHERE path = '$FILE'")

W=$T/w
mkdir -p "$W"
STORE=$W/store

# The mount's cairnfs processes (supervisor, server) serving $STORE, and
# the fillers of $STORE (their argv names it).
store_daemons() {
  local p
  for p in $(pgrep -x cairnfs); do
    grep -qzxF "CAIRN_STORE=$STORE" 2>/dev/null <"/proc/$p/environ" && echo "$p"
  done
}
store_fillers() {
  local p
  for p in $(pgrep -x cairn); do
    tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -qF -- "--store $STORE fill" && echo "$p"
  done
}
on_exit 'for p in $(store_daemons); do kill -9 $p; done; fusermount3 -u -z "$W/mnt" 2>/dev/null'
cleanup_mount() {
  timeout 30 "$CAIRN_BIN/cairn" --store "$STORE" umount -q -f "$W/mnt" >/dev/null 2>&1
  local pids
  pids=$(store_daemons)
  [ -z "$pids" ] || kill -9 $pids 2>/dev/null
  fusermount3 -u -z "$W/mnt" 2>/dev/null
  wait_for 100 sh -c "[ -z \"\$(pgrep -x cairn | while read p; do tr '\\0' ' ' </proc/\$p/cmdline 2>/dev/null | grep -F -- '--store $STORE fill'; done)\" ]"
  true
}

# check_point WHAT: the store after a crash. Prints nothing and returns 0
# when every invariant holds, else one line saying which did not.
check_point() {
  local what=$1 problems=""
  timeout 60 "$CAIRN_BIN/cairn" --store "$STORE" fsck >"$W/fsck" 2>&1 ||
    problems+=" fsck: $(grep -m3 problem "$W/fsck" | tr '\n' ' ')$(tail -1 "$W/fsck");"
  rm -rf "$W/store.fill"
  cp -a "$STORE" "$W/store.fill"
  mkdir -p "$W/mnt"
  if timeout 30 "$CAIRN_BIN/cairn" --store "$STORE" mount -q lazy/a:1 "$W/mnt" 2>"$W/err"; then
    timeout 60 bash -c "$(declare -f sums); sums '$W/mnt'" >"$W/mnt.sums" 2>"$W/err"
    cmp -s "$W/mnt.sums" "$T/ref.sums" ||
      problems+=" the mount does not serve the full pull's bytes: $(diff "$W/mnt.sums" "$T/ref.sums" | head -2 | tr '\n' ' ') $(head -c 200 "$W/err");"
    cleanup_mount
  else
    problems+=" the image does not mount: $(cat "$W/err");"
  fi
  if timeout 120 "$CAIRN_BIN/cairn" --store "$W/store.fill" fill -q lazy/a:1 >/dev/null 2>"$W/err"; then
    [ "$(db "$W/store.fill" "SELECT count(*) FROM pending") $(db "$W/store.fill" "SELECT count(*) FROM layer_sources")" = "0 0" ] ||
      problems+=" the fill left pending or source rows;"
    [ -z "$(ls -A "$W/store.fill/toc" 2>/dev/null)" ] || problems+=" the fill left a TOC;"
    [ "$(cairn --store "$W/store.fill" images --json | jq -r '.[0].id')" = "$FULL_ID" ] ||
      problems+=" the filled image's id is not the full pull's;"
    if export_of "$W/store.fill" "$W/fill"; then
      cmp -s "$W/fill.list" "$T/ref.list" && cmp -s "$W/fill.sums" "$T/ref.sums" ||
        problems+=" the filled image's export is not the full pull's;"
    else
      problems+=" the filled image does not export: $(cat "$W/fill.err");"
    fi
    timeout 60 "$CAIRN_BIN/cairn" --store "$W/store.fill" fsck >/dev/null 2>&1 || problems+=" fsck after the fill;"
  else
    problems+=" the fill fails: $(cat "$W/err");"
  fi
  [ -z "$problems" ] && return 0
  echo "$what:$problems"
  return 1
}

# run OP N [MODE]: from the template, OP under the injector, acting at its
# step N (MODE kill, or parent for the daemon); N 0 only counts.
run() {
  local op=$1 n=$2 mode=${3:-kill} rc
  rm -rf "$STORE" "$W/count" "$W/once"
  cp -a "$T/tpl" "$STORE"
  local inj=(env CAIRN_INJECT_DIR="$STORE" CAIRN_INJECT_PROG=cairn CAIRN_INJECT_ARG=fill
    CAIRN_INJECT_ONCE="$W/once"
    CAIRN_INJECT_POINTS=1 CAIRN_INJECT_AT="$n" CAIRN_INJECT_MODE="$mode"
    CAIRN_INJECT_COUNT="$W/count" CAIRN_INJECT_TRACE="$W/trace" LD_PRELOAD="$INJECT")
  rm -f "$W/trace"
  case $op in
  fill)
    ("${inj[@]}" timeout 120 "$CAIRN_BIN/cairn" --store "$STORE" fill -q lazy/a:1 >/dev/null 2>"$W/stderr"
      exit $?) 2>/dev/null
    rc=$?
    [ "$n" = 0 ] && [ $rc != 0 ] && { echo "fill under the injector: exit $rc: $(cat "$W/stderr")"; return 1; }
    [ "$n" = 0 ] || [ $rc = 137 ] || { echo "fill kill at $n: exit $rc, not killed"; return 1; }
    ;;
  file | daemon)
    # the mount (and so its daemon and the fillers it runs) under the
    # injector; only a cairn with "fill" among its arguments acts
    mkdir -p "$W/mnt"
    "${inj[@]}" timeout 30 "$CAIRN_BIN/cairn" --store "$STORE" mount -q lazy/a:1 "$W/mnt" 2>"$W/stderr" ||
      { echo "$op at $n: mount: $(cat "$W/stderr")"; cleanup_mount; return 1; }
    local sup
    sup=$(store_daemons | head -1)
    timeout 60 cat "$W/mnt/$FILE" >"$W/got" 2>"$W/cat.err"
    rc=$?
    if [ $rc = 0 ]; then
      cmp -s "$W/got" "$T/a/$FILE" || { echo "$op at $n: the read gave wrong bytes"; cleanup_mount; return 1; }
    elif ! grep -q "Input/output error" "$W/cat.err"; then
      echo "$op at $n: the read failed (exit $rc), not with EIO: $(cat "$W/cat.err")"
      cleanup_mount
      return 1
    fi
    [ "$n" = 0 ] && [ $rc != 0 ] && { echo "$op: the read fails: $(cat "$W/cat.err")"; cleanup_mount; return 1; }
    # the restarted server (or the one left) serves every file right
    if [ "$op" = daemon ] && [ "$n" != 0 ]; then
      timeout 60 bash -c "$(declare -f sums); sums '$W/mnt'" >"$W/mnt.sums" 2>"$W/err"
      cmp -s "$W/mnt.sums" "$T/ref.sums" ||
        { echo "daemon at $n: after the kill the mount serves other bytes: $(diff "$W/mnt.sums" "$T/ref.sums" | head -3 | tr '\n' ' ') $(head -c 200 "$W/err")"; cleanup_mount; return 1; }
    fi
    cleanup_mount
    ;;
  esac
  [ "$n" = 0 ] && return 0
  check_point "$op $mode at $n ($(grep "^$n " "$W/trace" 2>/dev/null | cut -d' ' -f2-))"
}

# ---- how much of a partial image is here: images, df -------------------
STORE=$T/listing
setup cp -a "$T/tpl" "$STORE"
setup cairn fill -q --file "$(db "$STORE" "SELECT sha256 FROM pending WHERE path = 'data/f0'")" >/dev/null
want_files=$(db "$STORE" "SELECT count(*) FROM pending")
want_bytes=$(db "$STORE" "SELECT sum(size) FROM pending")
check_json "inspect: Pending ($want_files files, $want_bytes bytes)" \
  ".Pending.Files == $want_files and .Pending.Bytes == $want_bytes" "$CAIRN_BIN/cairn" --store "$STORE" inspect lazy/a:1
check_json "images --json: pending_files and pending_bytes of the partial image" \
  ".[0].pending_files == $want_files and .[0].pending_bytes == $want_bytes" \
  cairn images --json
expect_exit 0 "images" cairn images
check "images: a PENDING column (and UNVERIFIED: not filled, not proven)" \
  grep -Eq "LAYERS +PINNED +PENDING +UNVERIFIED$" "$T/stdout"
human=$(awk 'NR == 2 { print $(NF - 2), $(NF - 1) }' "$T/stdout")
check "... giving the bytes not fetched yet ($human)" \
  test "$human" = "$(python3 -c "n=$want_bytes; print(f'{n/1024:.1f} KiB' if n < 1048576 else f'{n/1048576:.1f} MiB')")"
check "images --format {{.Pending_bytes}}" \
  test "$(cairn images --format '{{.Pending_files}} {{.Pending_bytes}}')" = "$want_files $human"
check_json "df --json: the images' pending_count, pending_files, pending_bytes" \
  ".[0].type == \"images\" and .[0].pending_count == 1 and .[0].pending_files == $want_files and .[0].pending_bytes == $want_bytes" \
  cairn df --json
expect_exit 0 "df" cairn df
check "df: a Pending row, the files and bytes not fetched yet" \
  grep -Eq "^Pending +$want_files +$human( |$)" "$T/stdout"
# the fill's files, fetched in one request, are recorded in one commit
setup env CAIRN_INJECT_DIR="$STORE" CAIRN_INJECT_POINTS=1 CAIRN_INJECT_COUNT="$T/fill.count" \
  CAIRN_INJECT_TRACE="$T/fill.trace" LD_PRELOAD="$INJECT" "$CAIRN_BIN/cairn" --store "$STORE" fill -q lazy/a:1
check "fill: $want_files files fetched together, recorded in one transaction" \
  test "$(grep -c 'point lazy: in the transaction' "$T/fill.trace")" = 1
check "... their blobs made durable before it, in one step" \
  test "$(grep -c 'point lazy: blob written' "$T/fill.trace")" = 1
expect_exit 0 "images of the filled image" cairn images
check "... has no PENDING column" grep -Eq "LAYERS +PINNED$" "$T/stdout"
check_json "images --json: no pending fields once filled" '.[0] | has("pending_files") or has("pending_bytes") | not' \
  cairn images --json
expect_exit 0 "df of the filled store" cairn df
check "... has no Pending row" eval "! grep -q '^Pending' '$T/stdout'"
check_json "df --json: nothing pending" '.[0].pending_files == 0 and .[0].pending_bytes == 0 and .[0].pending_count == 0' \
  cairn df --json

# ---- a first read is answered before its file is durable ---------------
# The filler a mount's first read runs, stopped where the fetched file's
# blob has been made durable and the transaction that records it is yet to
# come ("lazy: blob written"): the read is answered already, from the
# verified blob; the file is still pending; let go, the filler records it.
STORE=$T/early
setup cp -a "$T/tpl" "$STORE"
setup mkdir -p "$T/em"
expect_exit 0 "mount, its filler to stop once the blob is durable" \
  env CAIRN_INJECT_DIR="$STORE" CAIRN_INJECT_PROG=cairn CAIRN_INJECT_ARG=fill \
  CAIRN_INJECT_ONCE="$T/early.once" CAIRN_INJECT_POINT="lazy: blob written" \
  CAIRN_INJECT_MODE=stop LD_PRELOAD="$INJECT" "$CAIRN_BIN/cairn" --store "$STORE" mount lazy/a:1 "$T/em"
on_exit "for p in \$(pgrep -x cairn); do kill -CONT \$p 2>/dev/null; done; '$CAIRN_BIN/cairn' --store '$STORE' umount -f '$T/em' 2>/dev/null"
check "first read: answered while the filler waits to record the file" \
  timeout 20 cmp "$T/em/$FILE" "$T/a/$FILE"
check "... the filler stopped there" wait_for 10 test -e "$T/early.once"
check "... the file is not recorded yet" \
  test "$(db "$STORE" "SELECT count(*) FROM pending WHERE sha256 = '$SHA'")" -ge 1
for p in $(store_fillers); do kill -CONT "$p"; done
check "let go, the filler records it" \
  wait_for 20 sh -c "[ \"\$(sqlite3 'file:$STORE/meta.db?mode=ro' \"SELECT count(*) FROM pending WHERE sha256 = '$SHA'\")\" = 0 ]"
check "... and the file reads again" cmp "$T/em/$FILE" "$T/a/$FILE"
expect_exit 0 "umount" cairn umount "$T/em"
check "fsck" cairn fsck

# ---- the registry stopped while the partial image is mounted ------------
STORE=$T/unreach
setup cp -a "$T/tpl" "$STORE"
setup cairn fill -q --file "$(db "$STORE" "SELECT sha256 FROM pending WHERE path = 'data/f0'")" >/dev/null
setup mkdir -p "$T/um"
expect_exit 0 "mount of the partial image" cairn mount lazy/a:1 "$T/um"
on_exit "$CAIRN_BIN/cairn --store '$STORE' umount -f '$T/um' 2>/dev/null"
setup registry_stop
start=$(date +%s%N)
if timeout 60 cat "$T/um/data/f4" >/dev/null 2>"$T/cat.err"; then
  fail "registry stopped: a pending file's read fails"
else
  ok "registry stopped: a pending file's read fails"
fi
took=$((($(date +%s%N) - start) / 1000000))
echo "# the failed read took $took ms" >&2
check "... with EIO" grep -q "Input/output error" "$T/cat.err"
# (3 attempts, backoff 100 ms to 1 s, of a refused connection: well under 10 s)
check "... in bounded time ($took ms)" test "$took" -lt 10000
check "a fetched file still reads" cmp "$T/um/data/f0" "$T/a/data/f0"
check "ls -lR lists the whole tree" test "$(ls -lR "$T/um" | grep -c '^-')" = "$(ls -lR "$T/a" | grep -c '^-')"
setup registry_start "$T/reg" "$REGISTRY_PORT"
sleep 2.1 # the daemon answers EIO for 2 s after a failed fetch (fs/ops.c FETCH_RETRY_MS)
check "the registry back, the read works" cmp "$T/um/data/f4" "$T/a/data/f4"
expect_exit 0 "umount" cairn umount "$T/um"
# ---- a fill that outlives its bearer token ----------------------------
# The token service's tokens last TOKEN_TTL s (docker-registry accepts a
# token 60 s past its "exp": TOKEN_LEEWAY takes that off); the fill,
# through a proxy slowed to ~25 kB/s, takes several times that. Each
# expired token is answered by the registry's 401 and a new one fetched.
# The tokens are short only after podman's push (which does not renew a
# token that expires during an upload, as one can on a loaded machine).
TTL=4
echo 600 >"$T/token.ttl"
export TOKEN_TTL_FILE=$T/token.ttl TOKEN_LEEWAY=60
setup registry_start "$T/treg" "" token
unset TOKEN_TTL_FILE TOKEN_LEEWAY
setup "${PODMAN[@]}" push -q --tls-verify=false --creds alice:secret --compression-format zstd:chunked \
  "localhost/lazy/a:1" "docker://$REGISTRY/lazy/t:1"
echo $TTL >"$T/token.ttl"
python3 "$HELPERS/shaping_proxy.py" "$T/tproxy.port" "$REGISTRY_PORT" --rate 25000 --latency 0.05 \
  2>"$T/tproxy.log" &
tproxy=$!
on_exit "kill $tproxy 2>/dev/null; wait $tproxy 2>/dev/null"
setup wait_for 10 test -s "$T/tproxy.port"
TPROXY=127.0.0.1:$(cat "$T/tproxy.port")
export REGISTRY_AUTH_FILE=$T/auth.json
printf '{"auths": {"%s": {"auth": "%s"}}}\n' "$TPROXY" "$(printf alice:secret | base64)" >"$REGISTRY_AUTH_FILE"
expect_exit 0 "pull --lazy from a token registry" cairn --store "$T/tok" pull -q --insecure --lazy --no-fill "docker://$TPROXY/lazy/t:1"
tokens0=$(grep -c 'GET /token' "$T/treg/token.log")
start=$(date +%s)
expect_exit 0 "a fill that outlives its token" cairn --store "$T/tok" fill lazy/t:1
took=$(($(date +%s) - start))
tokens=$(($(grep -c 'GET /token' "$T/treg/token.log") - tokens0))
echo "# the fill took $took s, tokens of $TTL s; it asked for $tokens tokens" >&2
check "... took longer than two tokens last ($took s)" test "$took" -gt $((2 * TTL))
check "... and renewed its token ($tokens asked for)" test "$tokens" -gt 1
setup export_of "$T/tok" "$T/tok"
check "... the full pull's files" cmp "$T/tok.sums" "$T/ref.sums"
# No auth.json: the pull's --creds serve its background fill too, the
# password on the fill's stdin, not in its arguments (ps).
export REGISTRY_AUTH_FILE=$T/no-auth.json
printf secret >"$T/password"
expect_exit 0 "pull --lazy --creds USER, its password on stdin" \
  cairn --store "$T/tok2" pull -q --insecure --lazy --creds alice "docker://$REGISTRY/lazy/t:1" <"$T/password"
fillpid=$(ps -eo pid=,args= | awk -v s="$T/tok2" '$0 ~ " fill " && index($0, s) { print $1; exit }')
if [[ -n $fillpid ]]; then
  check "... its background fill's arguments hold no password" \
    sh -c "! tr '\\0' ' ' </proc/$fillpid/cmdline | grep -q secret"
fi
setup wait_for 120 sh -c "! ps -eo args= | grep -v grep | grep -q -- '--store $T/tok2 fill'"
check_json "... its background fill fetched every file with them" \
  "length == 1 and (.[0].pending_files // 0) == 0" "$CAIRN_BIN/cairn" --store "$T/tok2" images --json
unset REGISTRY_AUTH_FILE
kill "$tproxy"

# ---- the sweeps (the injector: a release build) ------------------------
if sanitizer_build; then
  echo "# the crash sweeps skipped: $CAIRN_BIN is a sanitizer build (LD_PRELOAD of the injector conflicts)" >&2
  finish
  exit
fi
declare -A STEPS
for op in ${CAIRN_FILL_CRASH_OPS:-fill file daemon}; do
  if run "$op" 0 >"$W/point"; then
    STEPS[$op]=$(cat "$W/count" 2>/dev/null || echo 0)
    cp "$W/trace" "$T/trace.$op"
    echo "# $op: ${STEPS[$op]} steps, $(grep -c ' point ' "$T/trace.$op") of them named points" >&2
  else
    fail "$(cat "$W/point")"
    STEPS[$op]=0
  fi
done
for p in "lazy: range fetched" "lazy: verified, not stored" "lazy: blob written" \
  "lazy: in the transaction" "lazy: committed" "lazy: indexes rewritten" "lazy: TOCs unlinked"; do
  # (the single fetch's points, "range fetched" and "verified, not
  # stored", are the mount's fetcher's: the fill fetches by batches)
  check "fill or the mount's fetcher passes the point \"$p\"" \
    grep -qF " point $p" "$T/trace.fill" "$T/trace.file"
done
start=$(date +%s)
# CAIRN_FILL_CRASH_ONLY="fill:12 daemon:3 fill:committed" (say): those
# points alone (a word: the last named point whose name has it: the
# last file's, whose commit completes the image)
if [ -n "${CAIRN_FILL_CRASH_ONLY:-}" ]; then
  for p in $CAIRN_FILL_CRASH_ONLY; do
    op=${p%%:*} n=${p#*:} mode=kill
    [ "$op" = daemon ] && mode=parent
    [[ $n =~ ^[0-9]+$ ]] || n=$(awk -v w="$n" '$2 == "point" && index($0, w) { n = $1 } END { print n }' "$T/trace.$op")
    if run "$op" "$n" "$mode" >"$W/point"; then ok "$p ($n) clean"; else fail "$(cat "$W/point")"; fi
  done
  finish
  exit
fi
for op in ${CAIRN_FILL_CRASH_OPS:-fill file daemon}; do
  mode=kill
  [ "$op" = daemon ] && mode=parent
  bad=0 n_points=0
  : >"$T/bad"
  for ((n = 1; n <= STEPS[$op]; n += STRIDE)); do
    n_points=$((n_points + 1))
    run "$op" "$n" "$mode" >"$W/point" && continue
    bad=$((bad + 1))
    cat "$W/point" >>"$T/bad"
  done
  # and every named point, whatever the stride
  for n in $(awk '$2 == "point" { print $1 }' "$T/trace.$op"); do
    ((STRIDE > 1 && (n - 1) % STRIDE != 0)) || continue
    n_points=$((n_points + 1))
    run "$op" "$n" "$mode" >"$W/point" && continue
    bad=$((bad + 1))
    cat "$W/point" >>"$T/bad"
  done
  if [ "$bad" = 0 ]; then
    ok "$op: kill -9 ($mode) at $n_points points of ${STEPS[$op]}, all clean"
  else
    head -3 "$T/bad" | sed 's/^/#   /'
    fail "$op: $bad of $n_points points broke an invariant"
  fi
done
echo "# sweep took $(($(date +%s) - start)) s (stride $STRIDE)" >&2

finish
