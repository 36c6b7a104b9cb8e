#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_mount_restart_supkill.sh — a --rw mount's supervisor killed -9
# inside cairn commit's move (its server kills it with the crash injector,
# tests/crash/inject.c, mode killparent, then dies itself): of the two
# uppers the move leaves (the old one, the fresh one), one is the mount's,
# `cairn mounts` lists the mount once, and `cairn mount --restore` brings
# back every write. Killed before the move's commit point, the old upper
# (on the old image) is the mount's and the fresh one, which holds only
# copies, is dropped; killed after it (at the old upper's drop), the fresh
# upper (on the commit's image) is, and the old one, whose changes the
# image holds, is dropped.
# Fails without it: both uppers were listed stale, and --restore took the
# newest (the fresh one) on the record's image.
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib mount
set -e
release_build_only "LD_PRELOAD of the injector conflicts with a sanitizer build"

rw_mount_file data:1 img lower
cairn umount "$mnt" >/dev/null
mkdir -p "$STORE/uppers"

# move_run N MODE AT: as test_mount_restart_move.sh's: a --rw mount at
# $T/mN whose servers run under the injector (MODE at step AT of a server
# started by --upgrade; trace in $T/trace.N), 40 appends, a file held
# open for writing on fd 5, then cairn commit (may fail: its mount died).
move_run() {
  local m=$T/m$1
  mkdir "$m"
  CAIRN_INJECT_DIR=$STORE/uppers CAIRN_INJECT_PROG=cairnfs CAIRN_INJECT_TRACE=$T/trace.$1 \
    CAIRN_INJECT_MODE=$2 CAIRN_INJECT_AT=$3 CAIRN_INJECT_COUNT=$T/count \
    LD_PRELOAD=$CAIRN_BIN/cairn-inject.so cairn mount -q --rw data:1 "$m"
  cairn mount --upgrade "$m" >/dev/null
  for ((k = 0; k < 40; k++)); do echo "$k" >>"$m/pad"; done
  exec 5>>"$m/img"
  echo held >&5
  cairn commit "$m" "data:c$1" >"$T/id.$1" 2>"$T/commit.err.$1" || true
  exec 5>&-
}

move_run 1 kill 0
made=$(grep -E " renameat $STORE/uppers/[0-9a-f]{64}\$" "$T/trace.1" | tail -n 1 | cut -d' ' -f1)
[ -n "$made" ] || fail "no fresh upper made in the trace: $(cat "$T/trace.1")"
# The step that renames the old upper away (its drop, after the move).
gone=$(grep -E "^[0-9]+ renameat $STORE/uppers/\.gone-" "$T/trace.1" | head -n 1 | cut -d' ' -f1)
[ -n "$gone" ] || fail "no drop of the old upper in the trace: $(cat "$T/trace.1")"
cairn umount --discard "$T/m1" >/dev/null
[ -z "$(upper_ids)" ] || fail "uppers left after the first run: $(upper_ids)"

# check_left N IMAGE: the mount $T/mN left by the kill: one upper, one
# row, and --restore serves every write on IMAGE.
check_left() {
  local m=$T/m$1
  wait_for 5 sh -c "! grep -q ' $m ' /proc/self/mountinfo || ! ls $m >/dev/null 2>&1" || true
  [ "$(cairn mounts --json | jq --arg d "$m" '[.[] | select(.dir == $d)] | length')" = 1 ] ||
    fail "run $1: cairn mounts does not list the mount once: $(cairn mounts)"
  [ "$(upper_count)" = 1 ] || fail "run $1: not one upper in the store: $(upper_ids)"
  cairn mount --restore >"$T/restore" 2>&1 || fail "run $1: mount --restore: $(cat "$T/restore")"
  [ "$(cat "$m/img")" = "$(printf 'lower\nheld')" ] || fail "run $1: img: $(cat "$m/img")"
  [ "$(wc -l <"$m/pad")" = 40 ] || fail "run $1: pad: $(wc -l <"$m/pad")"
  local on
  on=$(cairn mounts --json | jq -r --arg d "$m" '.[] | select(.dir == $d) | .image')
  [ "$on" = "$2" ] || fail "run $1: restored on $on, not $2"
  cairn umount --discard "$m" >/dev/null
}

image_id() { cairn images -q --no-trunc "$1"; }
move_run 2 killparent $((made + 1))
check_left 2 "$(image_id data:1)"
ok "a supervisor killed in a move before its commit point: one mount, on the old upper, every write back"

move_run 3 killparent "$gone"
grep -q "^$gone renameat $STORE/uppers/\.gone-" "$T/trace.3" || true
check_left 3 "$(image_id data:c3)"
ok "a supervisor killed in a move after its commit point: one mount, on the fresh upper and the commit, every write back"
[ -z "$(upper_ids)" ] || fail "uppers left: $(upper_ids)"
finish
