#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_pull_race.sh — the race cairn exists for: images that share layers,
# several processes at once, each looping "pull one image; rm the other".
# A pull pins every layer before it looks for it and keeps the pins until
# its image is committed, so a concurrent rm never takes a layer from under
# it: zero pull failures, fsck clean, no pin left behind.
# CAIRN_PULL_RACE_ROUNDS (default 100; 50 in a sanitizer build, which is
# there for memory errors on the same paths and took 145 s of CI for 100)
# rounds per process; CAIRN_PULL_RACE_PROCS (default 4) processes.
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib registry
pull_test_init
rounds=${CAIRN_PULL_RACE_ROUNDS:-$(sanitizer_build && echo 50 || echo 100)}
procs=${CAIRN_PULL_RACE_PROCS:-4}

setup $OCI_IMAGE layer shared1.tar shared1 100 4000
setup $OCI_IMAGE layer shared2.tar shared2 50 8000
setup $OCI_IMAGE layer a.tar only-a 5 1000
setup $OCI_IMAGE layer b.tar only-b 5 1000
setup $OCI_IMAGE add oci a linux/amd64 shared1.tar:gzip shared2.tar:zstd a.tar:gzip >/dev/null
setup $OCI_IMAGE add oci b linux/amd64 shared1.tar:gzip shared2.tar:zstd b.tar:gzip >/dev/null
setup registry_start "$T/reg"
setup registry_push "$T/oci" a team/a:1
setup registry_push "$T/oci" b team/b:1

# racer I: pulls one image and removes the other, ROUNDS times; writes one
# line per failure to $T/failures.I.
racer() {
  local i=$1 mine other r code
  if ((i % 2)); then mine=a other=b; else mine=b other=a; fi
  for ((r = 0; r < rounds; r++)); do
    code=0
    cairn pull -q --insecure "docker://$REGISTRY/team/$mine:1" \
      >/dev/null 2>"$T/pull.$i.err" || code=$?
    ((code == 0)) || echo "round $r pull $mine: exit $code: $(cat "$T/pull.$i.err")" >>"$T/failures.$i"
    code=0
    cairn rm "$REGISTRY/team/$other:1" >/dev/null 2>"$T/rm.$i.err" || code=$?
    # rm may find the image gone (3) or being removed by another rm (4).
    ((code == 0 || code == 3 || code == 4)) || echo "round $r rm $other: exit $code: $(cat "$T/rm.$i.err")" >>"$T/failures.$i"
  done
}

# The store exists before the racers start: concurrent first opens of a
# new store are another matter than the pull/rm race.
setup cairn images >/dev/null
pids=()
for ((i = 0; i < procs; i++)); do
  racer "$i" &
  pids+=($!)
  on_exit "kill $!"
done
for p in "${pids[@]}"; do wait "$p"; done

failures=$(cat "$T"/failures.* 2>/dev/null | wc -l)
if ((failures == 0)); then ok "$procs processes x $rounds rounds of pull/rm: no failure"; else
  fail "$failures failures, first: $(cat "$T"/failures.* | head -3)"; fi
expect_exit 0 "fsck clean after the race" cairn fsck
pins=$("$CAIRN_BIN/cairn-pin" --store "$ST" ls --json | jq length)
[[ $pins == 0 ]] || fail "$pins pins left after every pull ended"
# What remains is whole: the last pull of each image can be mounted-read.
for img in a b; do
  if cairn inspect "$REGISTRY/team/$img:1" >/dev/null 2>&1; then
    expect_exit 0 "remaining image $img intact" cairn inspect "$REGISTRY/team/$img:1"
  fi
done
finish
