#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_pull_kill.sh — kill -9 of a `cairn pull docker://…` at random
# instants (the promise that "interrupted downloads leave no committed partial
# layer and no lasting pin; a re-run reuses what was fully stored").
# The image is three layers of incompressible random data (~60 MiB) so a
# pull takes long enough to be hit mid-way. After every kill:
#   - the image is either committed whole or absent;
#   - every stored layer is one of the image's, with its full entry count
#     and size (as a complete pull of the same image stores it);
#   - no live pin: `cairn-pin ls --json` has no live row, and neither
#     lslocks nor /proc/locks shows a lock on a pin file of the store;
#   - `cairn fsck` is clean (run on a copy of the store, since fsck also
#     discards layers no image uses, and the re-run must see them);
#   - a re-run of the same pull succeeds with the right id and says
#     "reused" for exactly the layers that were stored before it.
# CAIRN_PULL_KILL_ROUNDS (default 6) rounds.
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib registry
pull_test_init
rounds=${CAIRN_PULL_KILL_ROUNDS:-6}

# Three layers of random bytes: 20 files of 1 MiB each, in their own dirs.
for l in 1 2 3; do
  mkdir -p "$T/src$l/layer$l"
  for ((f = 0; f < 20; f++)); do
    head -c $((1 << 20)) /dev/urandom >"$T/src$l/layer$l/f$f"
  done
  setup mktar "$T/src$l" "$T/l$l.tar"
  rm -rf "$T/src$l"
done
setup $OCI_IMAGE add oci big linux/amd64 l1.tar:raw l2.tar:gzip l3.tar:zstd >/dev/null
big_id=$($OCI_IMAGE config-digest oci big)
setup registry_start "$T/reg"
setup registry_push "$T/oci" big team/big:1
src="docker://$REGISTRY/team/big:1"

# The reference: a complete pull into a store of its own gives each
# layer's entry count and size, and how long a pull takes.
# Two timed pulls (the first may read cold caches): the longer counts.
took_ms=0
for s in ref ref2; do
  start=$(date +%s%N)
  setup cairn --store "$T/$s" pull -q --insecure "$src" >/dev/null
  t=$((($(date +%s%N) - start) / 1000000))
  ((t > took_ms)) && took_ms=$t
done
rm -rf "$T/ref2"
echo "# a full pull takes ${took_ms} ms"
cairn --store "$T/ref" layers --json | jq -S 'map({id, size, entries}) | sort_by(.id)' >"$T/ref.layers"
[[ $(jq length "$T/ref.layers") == 3 ]] || { fail "reference pull stored $(cat "$T/ref.layers")"; finish; exit 1; }
setup cairn images >/dev/null

# store_whole ROUND: the checks above, for the state a kill left.
store_whole() {
  local r=$1 n
  cairn layers --json | jq -S 'map({id, size, entries}) | sort_by(.id)' >"$T/now.layers" ||
    { fail "round $r: layers --json"; return 1; }
  # Every stored layer is a reference layer, row for row (no partial one).
  n=$(jq -n --slurpfile now "$T/now.layers" --slurpfile ref "$T/ref.layers" \
    '[$now[0][] | select(. as $l | $ref[0] | index($l) | not)] | length')
  [[ $n == 0 ]] || { fail "round $r: partial or unknown layer: $(cat "$T/now.layers")"; return 1; }
  # The image: whole or absent.
  n=$(image_count)
  if [[ $n == 1 ]]; then
    cairn inspect "$big_id" | jq -e '.layers | length == 3' >/dev/null &&
      [[ $(jq length "$T/now.layers") == 3 ]] ||
      { fail "round $r: committed image without all its layers"; return 1; }
  elif [[ $n != 0 ]]; then
    fail "round $r: $n images"; return 1
  fi
  # No live pin, by the store's account and by the kernel's.
  n=$("$CAIRN_BIN/cairn-pin" --store "$ST" ls --json | jq 'map(select(.stale | not)) | length')
  [[ $n == 0 ]] || { fail "round $r: live pins: $("$CAIRN_BIN/cairn-pin" --store "$ST" ls --json)"; return 1; }
  if lslocks -n -o PATH 2>/dev/null | grep -q "^$ST/pins/"; then
    fail "round $r: lslocks shows a pin file locked: $(lslocks -n -o PID,PATH | grep "$ST/pins/")"; return 1
  fi
  local ino
  for ino in $(find "$ST/pins" -type f -printf '%i\n' 2>/dev/null); do
    if grep -q ":$ino " /proc/locks; then fail "round $r: /proc/locks holds pin inode $ino"; return 1; fi
  done
  # fsck on a copy: fsck also discards unused layers, and the re-run
  # must find the real store as the kill left it.
  # (A pull killed before it made the store's database left no store: the
  # next command that writes makes it, one that reads says so.)
  [ -e "$ST/meta.db" ] || return 0
  rm -rf "$T/copy"
  cp -a "$ST" "$T/copy"
  cairn --store "$T/copy" fsck >"$T/fsck" 2>&1 || { fail "round $r: fsck: $(tail -3 "$T/fsck")"; return 1; }
  return 0
}

killed=0 partial=0 pid=
on_exit '[[ -n $pid ]] && kill -9 $pid'
for ((r = 0; r < rounds; r++)); do
  jobs=()
  ((r % 2)) && jobs=(--jobs 1) # one layer after another: more partial states
  cairn pull --insecure "${jobs[@]}" "$src" >/dev/null 2>"$T/killed.err" &
  pid=$!
  sleep "$(awk -v x="$RANDOM" -v t="$took_ms" 'BEGIN { printf "%.3f", (0.05 + 0.75 * x / 32768) * t / 1000 }')"
  kill -9 "$pid" 2>/dev/null && killed=$((killed + 1))
  wait "$pid" 2>/dev/null
  pid=
  store_whole "$r" || continue
  stored=$(cairn layers --json | jq -r '.[].id')
  nstored=$(grep -c . <<<"$stored")
  ((nstored > 0 && nstored < 3)) && partial=$((partial + 1))
  echo "# round $r: killed after $(grep -c . "$T/killed.err") progress lines; $nstored layers stored, $(image_count) images"

  # The re-run: succeeds, same id, reuses exactly what was stored.
  code=0
  cairn pull --insecure "$src" >"$T/rerun.out" 2>"$T/rerun.err" || code=$?
  if [[ $code != 0 || $(cat "$T/rerun.out") != "$big_id" ]]; then
    fail "round $r: re-run exit $code, id $(cat "$T/rerun.out"): $(cat "$T/rerun.err")"; continue
  fi
  reused=$(grep -c "reused" "$T/rerun.err")
  bad=0
  for id in $stored; do grep -q "^${id:0:12}  reused" "$T/rerun.err" || bad=1; done
  if [[ $reused != "$nstored" || $bad != 0 ]]; then
    fail "round $r: $nstored layers were stored, the re-run reused $reused: $(cat "$T/rerun.err")"; continue
  fi
  cairn fsck >"$T/fsck" 2>&1 || { fail "round $r: fsck after re-run: $(cat "$T/fsck")"; continue; }
  ok "round $r: kill -9 left a whole store ($nstored layers); the re-run reused them"
  # Back to an empty store for the next round.
  cairn rm "$big_id" >/dev/null 2>&1
  cairn gc >/dev/null 2>&1
  [[ $(cairn layers --json | jq length) == 0 ]] || fail "round $r: layers left after rm + gc"
done
echo "# $killed of $rounds pulls killed while running, $partial with some but not all layers stored"
((killed >= 1)) || fail "no pull was killed while running (the image is too small to hit)"
expect_exit 0 "fsck clean at the end" cairn fsck
finish
