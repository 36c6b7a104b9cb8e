#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_crash_points.sh — every crash point of import, pull oci:, rm, gc and
# fsck --repair, under the LD_PRELOAD injector of tests/crash/inject.c:
# the process killed at the Nth durable step (kill), a power cut there
# (cut: unsynced writes forgotten by inject-undo, namespace operations
# kept), and the Nth step failing with EIO or ENOSPC (fail, every third
# point). After each: the store opens, `cairn fsck` exits 0, every image
# committed before exports the same bytes, the operation's result is all
# there or not at all, no pin is live, and the upper layers of --rw mounts
# (kept, or left by a crash) gc's store holds are intact: gc never takes a
# user's uncommitted changes. One more cut per operation
# comes after the command returned, with another connection keeping the
# database open (as a mount does): what it reported done must survive.
#
# The same sweep covers the commands that handle a user's uncommitted
# changes on a --rw mount: commit (of a live mount with changes), umount
# --keep and mount --rw --resume (of a kept upper). The injector acts in
# the cairn command only (CAIRN_INJECT_PROG), never in the cairnfs daemon
# it talks to or starts; a cut also kills that daemon, as a power cut
# does. After each point: the store opens, fsck is clean, and the changes
# are either in the committed image or still listed by `cairn mounts`,
# and `umount --keep` (if live) then `mount --rw --resume` serves them.
# Then one cut right after each returned 0 (run_rw_after_done): commit's
# snap:1 is there with the changes, the kept upper is listed as kept, and
# both a kept and a resumed mount resume showing the writes.
#
# CI runs every point of import, every CAIRN_CRASH_STRIDE-th (default
# 2) of the others but those three, and every CAIRN_CRASH_RW_STRIDE-th
# (default 4) of theirs; CAIRN_CRASH_FULL=1 runs them all.
# CAIRN_CRASH_OPS="commit keep" (say) sweeps only those. The points of a mode
# are shared out to CAIRN_CRASH_JOBS workers (default: one per CPU), each
# with a store and scratch files of its own.
source "$(dirname "$0")/../lib/test-lib.sh"
INJECT=$CAIRN_BIN/cairn-inject.so
UNDO=$CAIRN_BIN/inject-undo
release_build_only "$CAIRN_BIN is a sanitizer build (LD_PRELOAD of the injector conflicts)"
STRIDE=${CAIRN_CRASH_STRIDE:-2}
RW_STRIDE=${CAIRN_CRASH_RW_STRIDE:-4}
[ "${CAIRN_CRASH_FULL:-0}" = 1 ] && STRIDE=1 && RW_STRIDE=1
JOBS=${CAIRN_CRASH_JOBS:-$(nproc)}

# The stores live on a tmpfs of their own: the model decides what a cut
# forgets, not the disk, and each commit's fsync and syncfs then cost
# nothing (on the shared root file system, syncfs waits for everyone's
# dirty pages). tmpfs has the file handles inject-undo needs.
mkdir -p "$T/fast"
mount -t tmpfs -o size=512m tmpfs "$T/fast" || { fail "mount a tmpfs for the stores"; finish; exit; }
on_exit "umount $T/fast"
# the --rw points' daemons and mounts, if the test stops in one
on_exit 'for p in $(pgrep -x cairnfs); do grep -qz "^CAIRN_STORE=$T/fast/" </proc/$p/environ && kill -9 $p; done; for m in $T/fast/w*/mnt; do fusermount3 -u -z $m; done'
# W: the scratch directory of the one running check_point and run_point
# (each sweep worker has its own); STORE: the store they look at.
W=$T/fast/w
mkdir -p "$W"
STORE=$W/store
export CAIRN_STORE=$STORE

# ---- layers and images -------------------------------------------------
# L1: the base every store holds; L2, L3: two images sharing L1; L4+L5: a
# new two-layer image (files, a hardlink, an xattr, a whiteout); L6: a
# layer no image uses; L7: an image with a blob to corrupt.
layer() { # DIR: a few files, a hardlink and an xattr, all named by DIR
  local d=$T/src/$1
  mkdir -p "$d/etc/$1" "$d/bin"
  for i in 1 2 3; do printf '%s file %s\n' "$1" "$i" >"$d/etc/$1/f$i"; done
  head -c 20000 /dev/urandom >"$d/bin/$1.bin"
  ln "$d/etc/$1/f1" "$d/etc/$1/hard"
  ln -s "f2" "$d/etc/$1/sym"
  python3 -c 'import os, sys; os.setxattr(sys.argv[1], "user.note", b"crash points")' "$d/etc/$1/f3"
}
for l in l1 l2 l3 l4 l5 l6 l7; do layer $l; done
: >"$T/src/l5/etc/.wh.l4" # l5 deletes l4's /etc/l4
for l in l1 l2 l3 l4 l6 l7; do mktar "$T/src/$l" "$T/$l.tar" --xattrs --xattrs-include='*'; done
mktar "$T/src/l5" "$T/l5.tar.gz" --xattrs --xattrs-include='*' --gzip
mkdir -p "$T/src/p1/data" "$T/src/p2/data"
python3 "$HELPERS/oci_image.py" layer "$T/p1.tar" p1 4 3000
python3 "$HELPERS/oci_image.py" layer "$T/p2.tar" p2 3 5000
python3 "$HELPERS/oci_image.py" add "$T/oci" app linux/amd64 \
  "$T/p1.tar:gzip" "$T/p2.tar:raw" >/dev/null

# Template stores, each made once; every point starts from a copy.
make_template() { # NAME CMD...: CMD runs with CAIRN_STORE set to the template
  local name=$1; shift
  CAIRN_STORE=$T/fast/tpl/$name "$@" || { fail "template $name: $*"; exit 1; }
}
mkdir -p "$T/fast/tpl"
for t in import pull rm gc repair rw; do make_template $t cairn import base:1 "$T/l1.tar" >/dev/null; done
make_template rm cairn import a:1 "$T/l1.tar" "$T/l2.tar" >/dev/null
make_template rm cairn import b:1 "$T/l1.tar" "$T/l3.tar" >/dev/null
make_template gc cairn import unused:1 "$T/l6.tar" >/dev/null
sqlite3 "$T/fast/tpl/gc/meta.db" "PRAGMA foreign_keys=ON; DELETE FROM images WHERE id IN
  (SELECT image_id FROM names WHERE name IN ('unused:1', 'localhost/unused:1'))"
rm -f "$T/fast/tpl/gc/refs" # a hand edit of images drops STORE/refs, as cairn's writers do
# gc's store also holds a user's uncommitted changes: the upper layer of a
# --rw mount kept by umount --keep, and one a kill -9 of its daemon left.
# gc must never take either, at any crash point.
mkdir -p "$T/rw-kept" "$T/rw-crashed"
make_template gc cairn mount -q --rw base:1 "$T/rw-kept"
echo kept >"$T/rw-kept/kept.txt"
make_template gc cairn umount -q --keep "$T/rw-kept"
make_template gc cairn mount -q --rw base:1 "$T/rw-crashed"
echo crashed >"$T/rw-crashed/crashed.txt"
sync "$T/rw-crashed/crashed.txt"
sup=$(CAIRN_STORE=$T/fast/tpl/gc cairn mounts --json | jq -r '.[] | select(.pid > 0) | .pid')
kill -9 "$sup" $(cat "/proc/$sup/task/$sup/children" 2>/dev/null || true)
wait_for 50 sh -c "! grep -qs cairnfs /proc/$sup/comm"
umount -l "$T/rw-crashed"
uppers_intact() { # the two uppers of gc's template, with their files
  [ "$(cat "$STORE"/uppers/*/root/kept.txt 2>/dev/null)" = kept ] &&
    [ "$(cat "$STORE"/uppers/*/root/crashed.txt 2>/dev/null)" = crashed ]
}
make_template repair cairn import c:1 "$T/l7.tar" >/dev/null
blob=$(sqlite3 "$T/fast/tpl/repair/meta.db" "SELECT blob FROM entries e JOIN image_layers il ON il.layer_id = e.layer_id
  JOIN names n ON n.image_id = il.image_id WHERE n.name IN ('c:1', 'localhost/c:1') AND e.path LIKE '%.bin'")
printf 'corrupt' | dd of="$T/fast/tpl/repair/blobs/${blob:0:2}/$blob" bs=1 seek=100 conv=notrunc status=none

# What each operation does, and what it leaves when done.
declare -A OP=(
  [import]="cairn import --quiet new:1 $T/l4.tar $T/l5.tar.gz"
  [pull]="cairn pull --quiet --jobs 1 oci:$T/oci:app app:1"
  [rm]="cairn rm a:1"
  [gc]="cairn gc --quiet"
  [repair]="cairn fsck --repair"
)
declare -A RESULT=([import]=new:1 [pull]=app:1 [rm]=a:1 [gc]="" [repair]=c:1)
declare -A SURVIVORS=([import]="base:1" [pull]="base:1" [rm]="base:1 b:1" [gc]="base:1" [repair]="base:1")

export_sum() { cairn export "$1" 2>/dev/null | sha256sum | cut -d' ' -f1; }
layer_count() { cairn layers --json | jq length; }

# References: each image's export, in the template (before) and after the
# operation ran to its end (done); the number of steps it takes.
declare -A REF STEPS LAYERS_BEFORE LAYERS_DONE
for op in import pull rm gc repair; do
  export CAIRN_STORE=$T/fast/ref-$op
  cp -a "$T/fast/tpl/$op" "$CAIRN_STORE"
  for img in ${SURVIVORS[$op]} ${RESULT[$op]}; do
    cairn inspect "$img" >/dev/null 2>&1 && REF[$op/$img]=$(export_sum "$img")
  done
  LAYERS_BEFORE[$op]=$(layer_count)
  CAIRN_INJECT_DIR=$CAIRN_STORE CAIRN_INJECT_COUNT=$T/count LD_PRELOAD=$INJECT \
    ${OP[$op]} >/dev/null 2>"$T/stderr"
  cairn fsck >/dev/null 2>&1 || fail "reference: $op leaves a store that fsck finds clean"
  STEPS[$op]=$(cat "$T/count")
  LAYERS_DONE[$op]=$(layer_count)
  r=${RESULT[$op]}
  [ -n "$r" ] && [ "$op" = import -o "$op" = pull ] && REF[$op/$r]=$(export_sum "$r")
  echo "# $op: ${STEPS[$op]} durable steps"
done
export CAIRN_STORE=$STORE

# has_image NAME: NAME is in the listing check_point took.
has_image() { jq -e --arg n "$1" 'any(.[].names[]; . == $n or . == "localhost/" + $n)' "$W/images" >/dev/null; }

# check_point OP WHAT [done]: the store after a crash or a failure of OP
# (done: OP reported success). Prints nothing and returns 0 when every
# invariant holds, else one line saying which did not.
check_point() {
  local op=$1 what=$2 done=${3:-} img r=${RESULT[$1]} problems=""
  cairn images --json >"$W/images" 2>"$W/err" || { echo "$what: the store does not open: $(cat "$W/err")"; return 1; }
  if ! cairn fsck >"$W/fsck" 2>&1; then
    # fsck --repair not done (yet): the corrupt blob is the one problem
    if [ "$op" != repair ] || [ -n "$done" ] || [ "$(grep -c '^problem' "$W/fsck")" != 1 ] ||
      ! grep -q "blob $blob" "$W/fsck" || ! has_image c:1; then
      problems+=" fsck: $(grep -m3 problem "$W/fsck" | tr '\n' ' ')$(tail -1 "$W/fsck");"
    fi
  fi
  for img in ${SURVIVORS[$op]}; do
    [ "$(export_sum "$img")" = "${REF[$op/$img]}" ] || problems+=" $img lost or changed;"
  done
  if [ -n "$r" ]; then
    if has_image "$r"; then
      [ -z "${REF[$op/$r]:-}" ] || [ "$(export_sum "$r")" = "${REF[$op/$r]}" ] ||
        problems+=" $r is there but exports other bytes;"
    elif [ -n "$done" ] && [ "$op" != rm ] && [ "$op" != repair ]; then
      problems+=" $r was reported done but is gone;"
    fi
    [ -n "$done" ] && [ "$op" = rm -o "$op" = repair ] && has_image "$r" &&
      problems+=" $r was removed but is back;"
  fi
  if [ "$op" = gc ]; then
    local n
    n=$(layer_count)
    [ "$n" = "${LAYERS_BEFORE[gc]}" ] || [ "$n" = "${LAYERS_DONE[gc]}" ] || problems+=" $n layers;"
    [ -n "$done" ] && [ "$n" != "${LAYERS_DONE[gc]}" ] && problems+=" gc reported done but its layer is back;"
    uppers_intact || problems+=" a --rw mount's uncommitted changes are gone;"
  fi
  [ "$(cairn-pin ls --json | jq 'map(select(.stale | not)) | length')" = 0 ] || problems+=" a pin is live;"
  [ -z "$problems" ] && return 0
  echo "$what:$problems"
  return 1
}

# run_point OP N MODE [ERRNO]: from the template, OP under the injector.
run_point() {
  local op=$1 n=$2 mode=$3 err=${4:-EIO}
  rm -rf "$STORE" "$W/log"
  cp -a "$T/fast/tpl/$op" "$STORE"
  # (a subshell that outlives the command keeps bash's "Killed" off stderr)
  (
    CAIRN_INJECT_DIR=$STORE CAIRN_INJECT_AT=$n CAIRN_INJECT_MODE=$mode CAIRN_INJECT_ERRNO=$err \
      CAIRN_INJECT_LOG=$W/log CAIRN_INJECT_COUNT=$W/count timeout 60 env LD_PRELOAD="$INJECT" ${OP[$op]} >/dev/null 2>"$W/stderr"
    exit $?
  ) 2>/dev/null
  local rc=$?
  [ "$mode" = cut ] && { "$UNDO" "$W/log" >/dev/null || echo "$op $mode at $n: inject-undo failed"; }
  case $mode in
  kill | cut) [ $rc = 137 ] || { echo "$op $mode at $n: exit $rc, not killed"; return 1; } ;;
  fail)
    if [ $rc = 124 ]; then echo "$op fail($err) at $n: hangs"; return 1; fi
    if [ $rc != 0 ] && { [ "$(wc -l <"$W/stderr")" != 1 ] || ! grep -q '^cairn: ' "$W/stderr"; }; then
      echo "$op fail($err) at $n: exit $rc, stderr not one 'cairn: ' line: $(head -c 300 "$W/stderr")"
      return 1
    fi
    ;;
  esac
  check_point "$op" "$op $mode${4:+($4)} at $n" "$([ "$mode" = fail ] && [ $rc = 0 ] && echo done)"
}

# A cut after the command returned (success reported) while another
# connection keeps the database open, so that closing does not checkpoint.
run_after_done() {
  local op=$1
  rm -rf "$STORE" "$W/log"
  cp -a "$T/fast/tpl/$op" "$STORE"
  mkfifo "$T/hold"
  sqlite3 "$STORE/meta.db" <"$T/hold" >/dev/null &
  local holder=$!
  on_exit "kill -9 $holder"
  exec 7>"$T/hold"
  echo "SELECT count(*) FROM images;" >&7
  wait_for 5 [ -e "$STORE/meta.db-wal" ]
  CAIRN_INJECT_DIR=$STORE CAIRN_INJECT_MODE=cut CAIRN_INJECT_LOG=$W/log \
    CAIRN_INJECT_COUNT=$T/count LD_PRELOAD=$INJECT ${OP[$op]} >/dev/null 2>"$T/stderr"
  local rc=$?
  kill -9 "$holder"
  wait "$holder" 2>/dev/null
  exec 7>&-
  rm -f "$T/hold"
  [ $rc = 0 ] || { echo "$op: exit $rc: $(cat "$T/stderr")"; return 1; }
  "$UNDO" "$W/log" >/dev/null
  check_point "$op" "$op cut after it returned" done
}

# ---- the --rw mount's changes: commit, umount --keep, mount --resume ----
# Each point mounts base:1 writable at $W/mnt (in its own store) and
# writes changed.txt; resume's points first keep that upper. The test's
# own unmounts use -f: a container another test starts meanwhile may
# hold a copy of the mount in its namespace.
RW_OPS="commit keep resume"
rw_setup() { # OP
  mkdir -p "$W/mnt"
  cairn mount -q --rw base:1 "$W/mnt" || return 1
  echo uncommitted >"$W/mnt/changed.txt" || return 1
  [ "$1" != resume ] || cairn umount -q --keep -f "$W/mnt"
}
rw_run() { # OP: the command under test
  case $1 in
  commit) cairn commit -q "$W/mnt" snap:1 ;;
  keep) cairn umount -q --keep "$W/mnt" ;;
  resume) cairn mount -q --rw --resume "$W/mnt" ;;
  esac
}
store_daemons() { # the pids of the cairnfs processes serving $STORE
  local p
  for p in $(pgrep -x cairnfs); do
    grep -qzxF "CAIRN_STORE=$STORE" 2>/dev/null <"/proc/$p/environ" && echo "$p"
  done
}
rw_cleanup() { # no mount, no daemon, no upper left at $W/mnt
  timeout 30 cairn umount -q -f "$W/mnt" >/dev/null 2>&1
  local pids
  pids=$(store_daemons)
  [ -z "$pids" ] || kill -9 $pids 2>/dev/null
  fusermount3 -u -z "$W/mnt" 2>/dev/null
  true
}
mount_state() { # the state `cairn mounts` lists for $W/mnt, or nothing
  timeout 30 cairn mounts --json 2>/dev/null | jq -r --arg d "$(realpath "$W/mnt")" '.[] | select(.dir == $d) | .state' | head -1
}

# check_rw_point OP WHAT [done]: the store, and where the changes are.
check_rw_point() {
  local op=$1 what=$2 done=${3:-} problems="" state got
  timeout 30 cairn images --json >"$W/images" 2>"$W/err" || { echo "$what: the store does not open: $(cat "$W/err")"; rw_cleanup; return 1; }
  timeout 60 cairn fsck >"$W/fsck" 2>&1 || problems+=" fsck: $(grep -m3 problem "$W/fsck" | tr '\n' ' ')$(tail -1 "$W/fsck");"
  [ "$(export_sum base:1)" = "${REF[rw/base:1]}" ] || problems+=" base:1 lost or changed;"
  if [ "$op" = commit ] && has_image snap:1; then
    got=$(timeout 30 cairn export snap:1 2>/dev/null | tar -xO changed.txt 2>/dev/null)
    [ "$got" = uncommitted ] || problems+=" snap:1 was committed without the changes;"
  else
    [ "$op" = commit ] && [ -n "$done" ] && problems+=" commit reported done but snap:1 is gone;"
    state=$(mount_state)
    case $state in
    "") problems+=" the uncommitted changes are gone: $W/mnt is not listed by cairn mounts;" ;;
    *)
      case $state in
      live | restarting | detached)
        timeout 30 cairn umount -q --keep -f "$W/mnt" >/dev/null 2>"$W/err" ||
          problems+=" umount --keep of the $state mount fails: $(cat "$W/err");"
        ;;
      esac
      if timeout 30 cairn mount -q --rw --resume "$W/mnt" 2>"$W/err"; then
        [ "$(cat "$W/mnt/changed.txt" 2>/dev/null)" = uncommitted ] ||
          problems+=" the mount ($state) resumed without the changes;"
      else
        problems+=" the mount ($state) does not resume: $(cat "$W/err");"
      fi
      ;;
    esac
  fi
  rw_cleanup
  [ "$(cairn-pin ls --json | jq 'map(select(.stale | not)) | length')" = 0 ] || problems+=" a pin is live;"
  [ -z "$problems" ] && return 0
  echo "$what:$problems"
  return 1
}

# run_rw_point OP N MODE [ERRNO]: as run_point, for a --rw mount's op.
run_rw_point() {
  local op=$1 n=$2 mode=$3 err=${4:-EIO} what="$1 $3${4:+($4)} at $2"
  rm -rf "$STORE" "$W/log"
  cp -a "$T/fast/tpl/rw" "$STORE"
  rw_setup "$op" >/dev/null 2>"$W/err" || { echo "$what: setup: $(cat "$W/err")"; rw_cleanup; return 1; }
  (
    export CAIRN_INJECT_DIR=$STORE CAIRN_INJECT_PROG=cairn CAIRN_INJECT_AT=$n CAIRN_INJECT_MODE=$mode \
      CAIRN_INJECT_ERRNO=$err CAIRN_INJECT_LOG=$W/log CAIRN_INJECT_COUNT=$W/count LD_PRELOAD=$INJECT
    timeout 60 bash -c "$(declare -f rw_run); W=$W; rw_run $op" >/dev/null 2>"$W/stderr"
    exit $?
  ) 2>/dev/null
  local rc=$?
  if [ "$mode" = cut ]; then
    # a power cut stops the daemon too; its mount is gone at reboot
    local pids
    pids=$(store_daemons)
    [ -z "$pids" ] || kill -9 $pids 2>/dev/null
    umount -l "$W/mnt" 2>/dev/null
    "$UNDO" "$W/log" >/dev/null || echo "$what: inject-undo failed"
  fi
  case $mode in
  # (their step counts vary a little from run to run: umount and mount
  # wait for the daemon; a command that ended before step N reported done)
  kill | cut) [ $rc = 137 ] || [ $rc = 0 ] || { echo "$what: exit $rc, not killed"; rw_cleanup; return 1; } ;;
  fail)
    if [ $rc = 124 ]; then echo "$what: hangs"; rw_cleanup; return 1; fi
    if [ $rc != 0 ] && { [ "$(wc -l <"$W/stderr")" -lt 1 ] || ! grep -q '^cairn: ' "$W/stderr"; }; then
      echo "$what: exit $rc, no 'cairn: ' line: $(head -c 300 "$W/stderr")"
      rw_cleanup
      return 1
    fi
    ;;
  esac
  check_rw_point "$op" "$what" "$([ $rc = 0 ] && echo done)"
}

# run_rw_after_done OP: OP from its setup, under the injector's cut mode
# with no point (the writes of the cairn command are logged, none is cut),
# another connection keeping the database open as in run_after_done; it
# returns 0, then the power goes: the daemons stop, the mount is gone, the
# command's unsynced writes are forgotten. What it reported done must be
# there: commit's snap:1 with the changes; keep's upper listed as kept;
# the resumed mount's upper listed; and both resume with the changes.
run_rw_after_done() {
  local op=$1 what="$1 cut after it returned" holder rc state pids
  rm -rf "$STORE" "$W/log"
  cp -a "$T/fast/tpl/rw" "$STORE"
  rw_setup "$op" >/dev/null 2>"$W/err" || { echo "$what: setup: $(cat "$W/err")"; rw_cleanup; return 1; }
  # (the daemon is not under the injector: what the user wrote through the
  # mount counts as synced, which is the user's to do, doc/crash-safety.md;
  # the command's own writes are what this checks)
  mkfifo "$T/hold"
  sqlite3 "$STORE/meta.db" <"$T/hold" >/dev/null &
  holder=$!
  on_exit "kill -9 $holder"
  exec 7>"$T/hold"
  echo "SELECT count(*) FROM images;" >&7
  wait_for 5 [ -e "$STORE/meta.db-wal" ]
  (
    export CAIRN_INJECT_DIR=$STORE CAIRN_INJECT_PROG=cairn CAIRN_INJECT_MODE=cut \
      CAIRN_INJECT_LOG=$W/log CAIRN_INJECT_COUNT=$W/count LD_PRELOAD=$INJECT
    timeout 60 bash -c "$(declare -f rw_run); W=$W; rw_run $op" >/dev/null 2>"$W/stderr"
  )
  rc=$?
  # the power cut: the holder, the daemons and the mount go at once
  pids=$(store_daemons)
  kill -9 "$holder" $pids 2>/dev/null
  wait "$holder" 2>/dev/null
  exec 7>&-
  rm -f "$T/hold"
  umount -l "$W/mnt" 2>/dev/null
  [ $rc = 0 ] || { echo "$what: exit $rc: $(cat "$W/stderr")"; rw_cleanup; return 1; }
  "$UNDO" "$W/log" >/dev/null || { echo "$what: inject-undo failed"; rw_cleanup; return 1; }
  if [ "$op" = keep ]; then
    state=$(mount_state)
    [ "$state" = kept ] || { echo "$what: $W/mnt is listed as '$state', not kept"; rw_cleanup; return 1; }
  fi
  check_rw_point "$op" "$what" done
}

# sweep_worker K OP MODE POINT...: points K, K+JOBS, ... of the list, in a
# store and scratch directory of its own; a broken point's lines go to
# $W/bad and one byte to $W/nbad.
sweep_worker() {
  local k=$1 op=$2 mode=$3 n errno i
  shift 3
  local points=("$@")
  W=$T/fast/w$k
  STORE=$W/store
  export CAIRN_STORE=$STORE
  mkdir -p "$W"
  : >"$W/bad"
  : >"$W/nbad"
  for ((i = k; i < ${#points[@]}; i += JOBS)); do
    n=${points[i]}
    errno=EIO
    [ "$mode" = fail ] && ((n % 2 == 0)) && errno=ENOSPC
    if [[ " $RW_OPS " = *" $op "* ]]; then
      run_rw_point "$op" "$n" "$mode" $([ "$mode" = fail ] && echo "$errno") >"$W/point" && continue
    else
      run_point "$op" "$n" "$mode" $([ "$mode" = fail ] && echo "$errno") >"$W/point" && continue
    fi
    cat "$W/point" >>"$W/bad"
    printf x >>"$W/nbad"
  done
}

# The --rw ops' references: the number of steps each takes from its setup.
REF[rw/base:1]=$(CAIRN_STORE=$T/fast/tpl/rw export_sum base:1)
for op in $RW_OPS; do
  rm -rf "$STORE"
  cp -a "$T/fast/tpl/rw" "$STORE"
  rw_setup "$op" >/dev/null || fail "reference: $op: setup"
  CAIRN_INJECT_DIR=$STORE CAIRN_INJECT_PROG=cairn CAIRN_INJECT_COUNT=$T/count LD_PRELOAD=$INJECT \
    rw_run "$op" >/dev/null 2>"$T/stderr" || fail "reference: $op: $(cat "$T/stderr")"
  STEPS[$op]=$(cat "$T/count")
  check_rw_point "$op" "reference: $op" done >"$W/point" || fail "$(cat "$W/point")"
  echo "# $op: ${STEPS[$op]} durable steps"
done

start=$(date +%s)
for op in ${CAIRN_CRASH_OPS:-import pull rm gc repair $RW_OPS}; do
  stride=$STRIDE
  [ "$op" = import ] && stride=1
  [[ " $RW_OPS " = *" $op "* ]] && stride=$RW_STRIDE
  for mode in kill cut fail; do
    points=()
    for ((n = 1; n <= STEPS[$op]; n += stride)); do
      [ "$mode" = fail ] && ((n % 3 != 1 && n != STEPS[$op])) && continue
      points+=("$n")
    done
    pids=()
    for ((k = 0; k < JOBS; k++)); do
      sweep_worker "$k" "$op" "$mode" "${points[@]}" &
      pids+=($!)
    done
    wait "${pids[@]}"
    bad=$(cat "$T"/fast/w[0-9]*/nbad | wc -c)
    if [ "$bad" = 0 ]; then
      ok "$op, $mode: ${#points[@]} crash points of ${STEPS[$op]}, all clean"
    else
      fail "$op, $mode: $bad of ${#points[@]} crash points broke an invariant"
      cat "$T"/fast/w[0-9]*/bad | head -3 | sed 's/^/#   /'
    fi
  done
  if [[ " $RW_OPS " = *" $op "* ]]; then
    if run_rw_after_done "$op" >"$W/point"; then
      ok "$op: a power cut after it returned keeps what it reported done"
    else
      fail "$(cat "$W/point")"
    fi
    continue
  fi
  if run_after_done "$op" >"$W/point"; then
    ok "$op: a power cut after it returned keeps what it reported done"
  else
    fail "$(cat "$W/point")"
  fi
done
echo "# sweep took $(($(date +%s) - start)) s (stride $STRIDE, $JOBS workers)"
finish
