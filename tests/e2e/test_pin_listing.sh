#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Pin listings stay true while the kernel's lock list churns: a live pin is
# never shown stale, and so its annotation (who, why) is never cleaned away.
# /proc/locks is read a page at a time, each page found again by its place
# in a list that other processes' locks keep changing, so a reader can skip
# lines; cairn-pin ls must confirm a lock it missed before it calls a pin
# stale (and cairn-pin ls deletes what it shows stale).
source "$(dirname "$0")/../lib/test-lib.sh"

n=40
mkdir -p "$T/l"
names=()
for ((i = 1; i <= n; i++)); do
  echo "$i" >"$T/l/f"
  mktar "$T/l" "$T/t.tar"
  cairn import -q "img$i:1" "$T/t.tar" >/dev/null || { fail "import img$i:1"; finish; exit 1; }
  names+=("img$i:1")
done

cairn-pin hold "${names[@]}" -- sleep 300 &
holder=$!
on_exit "pkill -9 -P $holder; kill -9 $holder"
wait_for 10 sh -c "[ \$(cairn-pin ls -q | wc -l) = $((2 * n)) ]"
check "the holder pins $n images and their layers" [ "$(cairn-pin ls -q | wc -l)" = $((2 * n)) ]

mkdir -p "$T/churn"
python3 "$HELPERS/lock_churn.py" "$T/churn" 8000 120 >"$T/churn.out" &
churner=$!
on_exit "kill -9 $churner"
wait_for 30 grep -q ready "$T/churn.out"

stale=0 lost=0 rounds=40
for ((k = 0; k < rounds; k++)); do
  cairn-pin ls --json >"$T/ls.json" || { fail "cairn-pin ls (round $k)"; break; }
  stale=$((stale + $(jq "map(select(.pid == $holder and .stale)) | length" "$T/ls.json")))
  lost=$((lost + $(jq "map(select(.pid == $holder and .purpose != \"hold sleep 300\")) | length" "$T/ls.json")))
done
check "$rounds listings under lock churn show none of the $((2 * n)) live pins stale ($stale)" [ "$stale" = 0 ]
check "and keep every annotation (lost: $lost)" [ "$lost" = 0 ]
check_json "every pin is still listed" "map(select(.pid == $holder)) | length == $((2 * n))" cairn-pin ls --json
finish
