#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_snapshotter_race.sh — the race cairn exists for, through containerd
# (Debian's 1.6, one instance, cairn-snapshotter its proxy plugin): three
# images from a registry on 127.0.0.1 share a base layer (two also a second
# one); workers pull them with `ctr-remote image rpull --snapshotter cairn`
# and remove them with `ctr images rm --sync` (containerd's gc), while
# another pulls and removes them with `cairn pull`, `cairn rm` and `cairn
# gc`. Every pull succeeds; every image containerd lists at the end runs
# and prints its own file; no layer a snapshot holds was freed; fsck is
# clean; once everything is removed gc frees every layer.
# Before it, a crash: cairn-snapshotter killed after a Remove dropped the
# last snapshot of a chain but before it unmounted the chain's cairnfs
# mount; the restarted daemon ends that mount and drops its chain image.
# And calls served at once: a Stat answers while a Prepare is held 8 s
# (the injector's sleep, before the chain's cairnfs is started).
# CAIRN_SNAPSHOTTER_RACE_SECONDS (default 45) how long the workers run;
# CAIRN_SNAPSHOTTER_RACE_ROUNDS (default 1000) the most rounds each makes.
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib registry mount containerd
ctd_need ctr-remote
pull_test_init
CS=$STORE
secs=${CAIRN_SNAPSHOTTER_RACE_SECONDS:-45}
rounds=${CAIRN_SNAPSHOTTER_RACE_ROUNDS:-1000}
db() { sqlite3 "$CS/meta.db" "$@"; }
chain_mounts() { grep -c " $CS/snapshot-mounts/" /proc/self/mountinfo; }

# A base layer with a shell, one layer per image with its greeting, and
# image c on a's two layers.
mkdir -p "$T/base/bin" "$T/base/lib/x86_64-linux-gnu" "$T/base/lib64"
cp /bin/dash "$T/base/bin/dash"
ln -s dash "$T/base/bin/sh"
cp -L /lib/x86_64-linux-gnu/libc.so.6 "$T/base/lib/x86_64-linux-gnu/"
cp -L /lib64/ld-linux-x86-64.so.2 "$T/base/lib64/"
for i in a b c; do
  mkdir -p "$T/$i/etc"
  echo "hello from $i" >"$T/$i/etc/greeting"
done
for i in base a b c; do
  setup tar -C "$T/$i" --numeric-owner --owner=0 --group=0 --sort=name -cf "$T/$i.tar" .
done
setup $OCI_IMAGE add "$T/oci" a linux/amd64 "$T/base.tar:gzip" "$T/a.tar:gzip"
setup $OCI_IMAGE add "$T/oci" b linux/amd64 "$T/base.tar:gzip" "$T/b.tar:gzip"
setup $OCI_IMAGE add "$T/oci" c linux/amd64 "$T/base.tar:gzip" "$T/a.tar:gzip" "$T/c.tar:gzip"
setup registry_start "$T/reg"
for i in a b c; do setup registry_push "$T/oci" $i race/$i:1; done

ctd_start "$CS"
ref() { echo "$REGISTRY/race/$1:1"; }
# rpull NAME [OUT]: ctr-remote's pull of image NAME
rpull() {
  timeout 120 ctr-remote -a "$C/containerd.sock" image rpull --plain-http --snapshotter cairn \
    "$(ref "$1")" >"${2:-$T/rpull.out}" 2>&1
}

# ---- a crash between a Remove and its chain's unmount ----------------------
check "rpull of image a" rpull a
top=$(db "SELECT name FROM snapshots s WHERE kind = 3 AND NOT EXISTS
  (SELECT 1 FROM snapshots c WHERE c.parent = s.name)")
# (a container's snapshot: one ctr snapshots makes is containerd's gc's
# to remove whenever it runs, once ctr's lease is gone)
check "a container of it: its snapshot's Prepare mounts the chain" \
  ctr_ containers create --snapshotter cairn "$(ref a)" "$CID"
check "... once" test "$(chain_mounts)" = 1
chain=$(db "SELECT image_id FROM snapshot_mounts")
kill -TERM "$sn_pid"
wait_for 10 pid_gone "$sn_pid" || fail "cairn-snapshotter still running after SIGTERM"
wait "$sn_pid" 2>/dev/null
# Restarted with the injector: killed once the Remove has committed, before
# the unmount.
LD_PRELOAD=$(injector_preload) CAIRN_INJECT_DIR=$CS CAIRN_INJECT_MODE=kill \
  CAIRN_INJECT_PROG=cairn-snapshotter CAIRN_INJECT_POINT="snapshot: chain unused" sn_start "$CS"
wait_for 60 sh -c "ctr -a '$C/containerd.sock' snapshots --snapshotter cairn ls >/dev/null 2>&1" ||
  fail "containerd's calls still fail 60 s after the restart"
# containerd removes its record, and the snapshotter's in its next gc,
# which the removal of an image's name with --sync runs now
check "the container deleted" ctr_ containers delete "$CID"
ctr_ images tag "$(ref a)" "$(ref a)-gc" >/dev/null
ctr_ images rm --sync "$(ref a)-gc" >/dev/null 2>&1
wait_for 10 pid_gone "$sn_pid"
check "cairn-snapshotter was killed in the Remove, after its transaction" pid_gone "$sn_pid"
wait "$sn_pid" 2>/dev/null
check "its rows are gone" test "$(db 'SELECT count(*) FROM snapshot_mounts')" = 0
check "the chain's mount is left" test "$(chain_mounts)" = 1
rm -f "$C/cairn.sock" # the killed daemon's
sn_start "$CS"
check "restarted: the mount no snapshot uses is ended" test "$(chain_mounts)" = 0
check "its chain image is dropped" \
  test "$(db "SELECT count(*) FROM images WHERE id = '$chain'")" = 0
check "and its mount point" test ! -e "$CS/snapshot-mounts/$chain"
wait_for 60 sh -c "ctr -a '$C/containerd.sock' snapshots --snapshotter cairn ls >/dev/null 2>&1" ||
  fail "containerd's calls still fail 60 s after the restart"

# ---- calls served at once -------------------------------------------------
# A Prepare whose Mounts sleeps (the injector, at the test point before a
# chain's cairnfs is started) while a Stat is asked: the Stat answers.
# sn_restart [NAME=VALUE...]: cairn-snapshotter stopped and started
# again, with those in its environment
sn_restart() {
  kill -TERM "$sn_pid"
  wait_for 10 pid_gone "$sn_pid" || fail "cairn-snapshotter still running after SIGTERM"
  wait "$sn_pid" 2>/dev/null
  (($#)) && local -x "$@"
  sn_start "$CS"
  wait_for 60 sh -c "ctr -a '$C/containerd.sock' snapshots --snapshotter cairn ls \
    >/dev/null 2>&1" || fail "containerd's calls still fail 60 s after the restart"
}
sn_restart LD_PRELOAD="$(injector_preload)" CAIRN_INJECT_DIR="$CS" CAIRN_INJECT_MODE=sleep \
  CAIRN_INJECT_SECONDS=8 CAIRN_INJECT_PROG=cairn-snapshotter CAIRN_INJECT_COUNT="$T/inject.count" \
  CAIRN_INJECT_POINT="snapshot: chain mount"
(snaps prepare p1 "${top##*/}" >/dev/null 2>"$T/p1.err" && touch "$T/p1.done") &
p1=$!
on_exit "kill $p1 2>/dev/null"
wait_for 10 sh -c "test \"\$(sqlite3 '$CS/meta.db' \"SELECT count(*) FROM snapshots
  WHERE name LIKE '%/p1'\")\" = 1" || fail "the Prepare of p1 made no snapshot in 10 s"
t0=$(date +%s%N)
snaps info "${top##*/}" >"$T/info.out" 2>&1
ms=$((($(date +%s%N) - t0) / 1000000))
check "a Stat during a Prepare that sleeps 8 s answers (in $ms ms)" \
  sh -c "grep -q Committed '$T/info.out' && test $ms -lt 4000"
check "before the Prepare does" test ! -e "$T/p1.done"
wait "$p1"
check "the Prepare then succeeds: $(cat "$T/p1.err")" test -e "$T/p1.done"
snaps rm p1 >/dev/null 2>&1 # unless containerd's gc did
sn_restart

# ---- the race ---------------------------------------------------------------
end=$((SECONDS + secs))
# ctr worker I: rpull one image, remove another (containerd's gc frees
# its snapshots), until the end; a line per failure in $T/fail.ctr.I
ctr_worker() {
  local i=$1 r mine other
  for ((r = 0; r < rounds && SECONDS < end; r++)); do
    mine=$(echo a b c | cut -d' ' -f$(((r + i) % 3 + 1)))
    other=$(echo a b c | cut -d' ' -f$(((r + i + 1) % 3 + 1)))
    rpull $mine "$T/rpull.$i" ||
      echo "round $r rpull $mine: $(tail -3 "$T/rpull.$i" | tr '\n' ' ')" >>"$T/fail.ctr.$i"
    timeout 60 ctr -a "$C/containerd.sock" images rm --sync "$(ref $other)" >"$T/rm.$i" 2>&1 ||
      grep -q 'not found' "$T/rm.$i" ||
      echo "round $r ctr images rm $other: $(tail -3 "$T/rm.$i" | tr '\n' ' ')" >>"$T/fail.ctr.$i"
  done
  echo "$r" >"$T/rounds.ctr.$i"
}
# cairn worker: cairn pull one image, cairn rm another (3: not there, 4:
# held by containerd's snapshots), cairn gc
cairn_worker() {
  local r mine other code
  for ((r = 0; r < rounds && SECONDS < end; r++)); do
    mine=$(echo a b c | cut -d' ' -f$((r % 3 + 1)))
    other=$(echo a b c | cut -d' ' -f$(((r + 2) % 3 + 1)))
    "$CAIRN_BIN/cairn" --store "$CS" pull -q --insecure "docker://$(ref $mine)" \
      >/dev/null 2>"$T/cpull.err" || echo "round $r cairn pull $mine: $(cat "$T/cpull.err")" \
      >>"$T/fail.cairn"
    code=0
    "$CAIRN_BIN/cairn" --store "$CS" rm "$(ref $other)" >/dev/null 2>"$T/crm.err" || code=$?
    ((code == 0 || code == 3 || code == 4)) ||
      echo "round $r cairn rm $other: exit $code: $(cat "$T/crm.err")" >>"$T/fail.cairn"
    "$CAIRN_BIN/cairn" --store "$CS" gc >/dev/null 2>"$T/cgc.err" ||
      echo "round $r cairn gc: $(cat "$T/cgc.err")" >>"$T/fail.cairn"
  done
  echo "$r" >"$T/rounds.cairn"
}
pids=()
for i in 0 1; do
  ctr_worker $i &
  pids+=($!)
  on_exit "kill $! 2>/dev/null"
done
cairn_worker &
pids+=($!)
on_exit "kill $! 2>/dev/null"
for p in "${pids[@]}"; do wait "$p"; done
n=$(cat "$T"/rounds.* | tr '\n' ' ')
failures=$(cat "$T"/fail.* 2>/dev/null | wc -l)
if ((failures == 0)); then ok "$secs s of rpull / ctr images rm / cairn pull, rm, gc (rounds: $n)"
else fail "$failures failures (rounds: $n), first: $(cat "$T"/fail.* | head -3)"; fi

# Every image containerd lists runs, and prints its own greeting.
imgs=$(ctr_ images ls -q)
for img in $imgs; do
  i=${img%:1}
  i=${i##*/}
  ctr_out "$img" 'read l </etc/greeting; echo "$l"' >"$T/run.out" ||
    fail "ctr run of $img: $(cat "$T/run.out")"
  check "... \"$(cat "$T/run.out")\"" test "$(cat "$T/run.out")" = "hello from $i"
done
check "no layer a snapshot holds was freed" test "$(db "SELECT count(*) FROM snapshot_layers
  WHERE layer NOT IN (SELECT id FROM layers)")" = 0
expect_exit 0 "cairn fsck is clean" "$CAIRN_BIN/cairn" --store "$CS" fsck

# Everything removed, gc frees every layer.
if [ -n "$imgs" ]; then
  check "ctr images rm --sync of every image" sh -c "timeout 60 ctr -a '$C/containerd.sock' \
    images rm --sync $(echo $imgs) >/dev/null"
fi
wait_for 20 sh -c "test \"\$(sqlite3 '$CS/meta.db' 'SELECT count(*) FROM snapshots')\" = 0" ||
  fail "snapshots left: $(db 'SELECT name FROM snapshots')"
for i in a b c; do "$CAIRN_BIN/cairn" --store "$CS" rm "$(ref $i)" >/dev/null 2>&1; done
check "cairn gc" sh -c "'$CAIRN_BIN/cairn' --store '$CS' gc >/dev/null 2>&1"
check "frees every layer" test "$(db 'SELECT count(*) FROM layers')" = 0
check "no chain mount left" test "$(chain_mounts)" = 0
check "no snapshot directory left" test -z "$(ls -A "$CS/snapshots")"
check "the daemon reported nothing: $(head -3 "$C/sn.err")" test ! -s "$C/sn.err"
ctd_stop
finish
