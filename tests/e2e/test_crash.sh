#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_crash.sh — kill -9 at random instants of imports and of gc: every
# time, the store must open, list what was committed before, and `cairn
# fsck` must report it clean (discarding incomplete work by itself).
source "$(dirname "$0")/../lib/test-lib.sh"
# CAIRN_CRASH_ROUNDS kills of each (default 8; 4 in a sanitizer build).
ROUNDS=${CAIRN_CRASH_ROUNDS:-$(sanitizer_build && echo 4 || echo 8)}

mkdir -p "$T/big" "$T/small"
cp -a /usr/share/perl "$T/big/perl"
cp -a /usr/share/doc "$T/big/doc"
cp -a /usr/share/zoneinfo/Asia "$T/small/"
mktar "$T/big" "$T/big.tar.gz" --gzip
mktar "$T/small" "$T/small.tar"

expect_exit 0 "a first image is committed" cairn import base:1 "$T/small.tar"
base=$(cat "$T/stdout")
# How long a whole import takes, to spread the kills over it.
start=$(date +%s%N)
cairn import probe:1 "$T/big.tar.gz" >/dev/null
took_ms=$(( ($(date +%s%N) - start) / 1000000 ))
cairn rm probe:1 >/dev/null
echo "# a full import takes ${took_ms} ms"

killed=0
for ((i = 0; i < ROUNDS; i++)); do
  cairn import "crash:$i" "$T/big.tar.gz" >/dev/null 2>&1 &
  pid=$!
  sleep "$(awk -v r="$RANDOM" -v t="$took_ms" 'BEGIN { printf "%.3f", (r / 32768) * t / 1000 }')"
  kill -9 "$pid" 2>/dev/null && killed=$((killed + 1))
  wait "$pid" 2>/dev/null
  if ! cairn images --json | jq -e --arg b "$base" 'map(.id) | index($b) != null' >/dev/null; then
    fail "round $i: the store opens and lists the committed image"; continue
  fi
  if ! cairn fsck >"$T/fsck" 2>&1; then fail "round $i: fsck after kill -9 of import: $(tail -3 "$T/fsck")"; continue; fi
  # Whatever the kill left, what remains is either committed or gone.
  if cairn inspect "crash:$i" >/dev/null 2>&1; then cairn rm "crash:$i" >/dev/null; fi
done
ok "$ROUNDS rounds of kill -9 during import ($killed killed mid-way): store opens, fsck clean"

# gc killed at random instants while it has work to do.
for ((i = 0; i < ROUNDS; i++)); do
  cairn import "gc:$i" "$T/big.tar.gz" >/dev/null
  # garbage for gc: the image record goes, its layer and blobs stay
  sqlite3 "$STORE/meta.db" "PRAGMA foreign_keys=ON; DELETE FROM images WHERE id=(SELECT image_id FROM names WHERE name='localhost/gc:$i')"
  rm -f "$STORE/refs" # a hand edit of images drops STORE/refs, as cairn's writers do
  cairn gc >/dev/null 2>&1 &
  pid=$!
  sleep "0.0$((RANDOM % 10))"
  kill -9 "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  if ! cairn images --json | jq -e --arg b "$base" 'map(.id) | index($b) != null' >/dev/null; then
    fail "gc round $i: the committed image survives"; continue
  fi
  if ! cairn fsck >"$T/fsck" 2>&1; then fail "gc round $i: fsck after kill -9 of gc: $(tail -3 "$T/fsck")"; fi
done
ok "$ROUNDS rounds of kill -9 during gc: store opens, fsck clean"
expect_exit 0 "a final gc" cairn gc
check "only the committed image's layer remains" [ "$(cairn layers --json | jq length)" = 1 ]
check "no blob without a row remains" [ "$(find "$STORE/blobs" -type f | wc -l)" = "$(sqlite3 "$STORE/meta.db" 'select count(*) from blobs')" ]
expect_exit 0 "fsck clean at the end" cairn fsck
finish
