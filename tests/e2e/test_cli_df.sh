#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_cli_df.sh — cairn df, as podman system df: images, layers and blobs
# of a store built here with known sizes; a layer two images use is counted
# once (and once in PINNED when two pinned images share it), a blob two
# layers hold is shared; reclaimable is what gc then frees
# (unused layers and their blobs, not a pinned one); --json exact numbers;
# a blob's bytes are what its file takes on disk (st_blocks).
source "$(dirname "$0")/../lib/test-lib.sh"

for l in A B C D E; do mkdir -p "$T/$l"; done
head -c 1000 /dev/urandom >"$T/A/base"
head -c 2000 /dev/urandom >"$T/B/top"
cp "$T/A/base" "$T/B/dup" # the same content: one blob for two layers
head -c 3000 /dev/urandom >"$T/C/c"
head -c 4000 /dev/urandom >"$T/D/d"
head -c 5000 /dev/urandom >"$T/E/e"
for l in A B C D E; do mktar "$T/$l" "$T/$l.tar"; done
cairn import app:1 "$T/A.tar" "$T/B.tar" >/dev/null || exit 1
cairn import app:2 "$T/A.tar" "$T/C.tar" >/dev/null || exit 1
solo=$(cairn import solo "$T/D.tar") || exit 1
held=$(cairn import held "$T/E.tar") || exit 1

# The layers' sizes, by their one file.
lsize() { cairn inspect "$1" | jq ".layers[$2].size"; }
A=$(lsize app:1 0) B=$(lsize app:1 1) C=$(lsize app:2 1) D=$(lsize solo 0) E=$(lsize held 0)
all=$((A + B + C + D + E))
# The disk space of the blob holding FILE's content (found by content).
balloc() {
  local f
  f=$(find "$STORE/blobs" -type f -exec cmp -s {} "$1" \; -print -quit)
  echo $(($(stat -c %b "$f") * 512))
}
bA=$(balloc "$T/A/base") bB=$(balloc "$T/B/top") bC=$(balloc "$T/C/c") bD=$(balloc "$T/D/d")
bE=$(balloc "$T/E/e")
df_is() { # TYPE FIELD VALUE
  local got
  got=$(cairn df --json | jq ".[] | select(.type == \"$1\") | .$2")
  check "$1 $2 = $3" [ "$got" = "$3" ] || echo "# got $got"
}

expect_exit 0 "cairn df" cairn df
check "the table has a row per type" \
  sh -c "sed -n 1p '$T/stdout' | grep -q '^TYPE *TOTAL *SIZE *SHARED *UNIQUE *RECLAIMABLE *PINNED' &&
         grep -q '^Images  *4 ' '$T/stdout' && grep -q '^Layers  *5 ' '$T/stdout' &&
         grep -q '^Blobs  *5 ' '$T/stdout'"
df_is images count 4
df_is images bytes $all
df_is images shared_count 2
df_is images shared_bytes "$A"
df_is layers count 5
df_is layers bytes $all
df_is layers shared_count 1
df_is layers shared_bytes "$A"
df_is layers unique_bytes $((all - A))
df_is blobs count 5
df_is blobs bytes $((bA + bB + bC + bD + bE))
df_is blobs shared_count 1
df_is blobs shared_bytes $bA
df_is blobs unique_bytes $((bB + bC + bD + bE))
for t in images layers blobs; do df_is $t reclaimable_bytes 0; done
df_is images pinned_count 0

# A pin: its image and layer are pinned.
cairn-pin hold held -- sleep 60 &
holder=$!
on_exit "kill -9 $holder"
wait_for 5 pgrep -P "$holder" sleep >/dev/null
sleeper=$(pgrep -P "$holder" sleep)
on_exit "kill -9 $sleeper"
df_is images pinned_count 1
df_is images pinned_bytes "$E"
df_is layers pinned_count 1
df_is layers pinned_bytes "$E"
# Two pinned images that share layer A: its bytes counted once.
pinned_held=$holder pinned_sleeper=$sleeper
hold_image app:1
app1_holder=$holder app1_sleeper=$sleeper
hold_image app:2
df_is images pinned_count 3
df_is images pinned_bytes $((A + B + C + E))
kill -9 "$sleeper" "$holder" "$app1_sleeper" "$app1_holder"
wait "$holder" "$app1_holder" 2>/dev/null
holder=$pinned_held sleeper=$pinned_sleeper

# Two images lost as a crash between an image's row and its sweep leaves
# them: D's layer and blob are reclaimable; E's are pinned, gc keeps them.
sqlite3 "$STORE/meta.db" "PRAGMA foreign_keys=ON; DELETE FROM images WHERE id IN ('$solo', '$held')"
rm -f "$STORE/refs" # a hand edit of images drops STORE/refs, as cairn's writers do
df_is images count 2
df_is layers count 5
df_is layers reclaimable_count 1
df_is layers reclaimable_bytes "$D"
df_is blobs reclaimable_count 1
df_is blobs reclaimable_bytes $bD
pct=$((bD * 100 / (bA + bB + bC + bD + bE)))
check "the table says $pct% of the blobs are reclaimable" grep -q "^Blobs .* ($pct%) " <(cairn df)
before=$(cairn df --json)
cairn gc >/dev/null || fail "gc"
check "gc freed what df said: D's layer" \
  [ "$(cairn df --json | jq '.[1].count')" = "$(($(jq '.[1].count' <<<"$before") - 1))" ]
df_is blobs bytes $((bA + bB + bC + bE))
for t in layers blobs; do df_is $t reclaimable_bytes 0; done

kill -9 "$sleeper" "$holder"
wait "$holder" 2>/dev/null
cairn gc >/dev/null || fail "gc"
df_is layers count 3
df_is blobs count 3
df_is blobs bytes $((bA + bB + bC))

expect_exit 2 "df takes no operand" cairn df x
expect_exit 0 "df --help" cairn df --help
check "df --help names --json" grep -q -- "--json" "$T/stdout"
finish
