#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_store_cli.sh — the store through the built `cairn` and `cairn-pin`:
# dedup across images (a duplicate costs no file in blobs/), pins against
# rm, hostile input, the contract's exit codes, usage errors and JSON
# listings.
source "$(dirname "$0")/../lib/test-lib.sh"

# Three layers from real trees nobody here wrote, plus one made here.
mkdir -p "$T/l1" "$T/l2" "$T/l3" "$T/work"
cp -a /usr/share/zoneinfo/America "$T/l1/"
cp -a /usr/share/zoneinfo/Europe "$T/l2/"
cp -a /usr/share/zoneinfo/America/New_York "$T/l2/dup-of-layer1"
mkdir -p "$T/l3/etc" && echo "third layer" >"$T/l3/etc/motd" && : >"$T/l3/empty"
mknod "$T/l3/.wh.Europe" c 0 0 2>/dev/null || : >"$T/l3/.wh.Europe"
mktar "$T/l1" "$T/l1.tar"
mktar "$T/l2" "$T/l2.tar.gz" --gzip
mktar "$T/l3" "$T/l3.tar" --zstd
cp "$T/l3.tar" "$T/l3.tar.zst"
mktar "$T/l3" "$T/l3.tar"

cd "$T/work" || exit 1
expect_exit 0 "import app:1 from tar, tar.gz and tar.zst" cairn import app:1 "$T/l1.tar" "$T/l2.tar.gz" "$T/l3.tar.zst"
id1=$(cat "$T/stdout")
gzip -dc "$T/l2.tar.gz" >"$T/l2.tar"
expect_exit 0 "import app:2 from the same layers, uncompressed" cairn import app:2 "$T/l1.tar" "$T/l2.tar" "$T/l3.tar"
check "same layers, same config: same image id" [ "$(cat "$T/stdout")" = "$id1" ]
expect_exit 0 "import rev:1 with the layers reversed" cairn import rev:1 "$T/l3.tar" "$T/l2.tar" "$T/l1.tar"
check "two distinct images" [ "$(cairn images --json | jq length)" = 2 ]
check "each layer stored once" [ "$(cairn layers --json | jq length)" = 3 ]
distinct=$(find "$T/l1" "$T/l2" "$T/l3" -type f -size +0 -exec sha256sum {} + | cut -d' ' -f1 | sort -u | wc -l)
blobs=$(find "$STORE/blobs" -type f | wc -l)
check "each distinct file stored once ($blobs blobs, $distinct contents)" [ "$blobs" = "$distinct" ]
# A new layer whose files the store holds but one: the duplicates cost no
# file in blobs/ (a content waits in memory until its name is known).
mkdir -p "$T/l4" && cp -a "$T/l1/America" "$T/l4/" && echo "new in layer 4" >"$T/l4/new"
mktar "$T/l4" "$T/l4.tar"
n4=$(find "$T/l4" -type f -size +0 | wc -l)
expect_exit 0 "import dup:1 (layer 4), its writes in blobs/ traced" \
  env CAIRN_INJECT_DIR="$STORE" CAIRN_INJECT_PATH=/blobs/ CAIRN_INJECT_TRACE="$T/l4.trace" \
  CAIRN_INJECT_COUNT="$T/l4.count" LD_PRELOAD="$(injector_preload)" \
  "$CAIRN_BIN/cairn" --store "$STORE" import dup:1 "$T/l4.tar"
writes=$(grep -c ' write ' "$T/l4.trace")
check "$n4 files, all stored but one: only the new one written in blobs/ ($writes writes)" \
  [ "$writes" -ge 1 -a "$writes" -le 2 ]
check "... and stored once more" [ "$(find "$STORE/blobs" -type f | wc -l)" = $((distinct + 1)) ]
# A content new to the store, in 100 files of one layer: written once (the
# copies after the first find its file by name before any is made).
mkdir -p "$T/l5" && for i in $(seq 100); do echo "one content, many files" >"$T/l5/copy$i"; done
mktar "$T/l5" "$T/l5.tar"
expect_exit 0 "import copies:1 (one new content in 100 files), its writes in blobs/ traced" \
  env CAIRN_INJECT_DIR="$STORE" CAIRN_INJECT_PATH=/blobs/ CAIRN_INJECT_TRACE="$T/l5.trace" \
  LD_PRELOAD="$(injector_preload)" "$CAIRN_BIN/cairn" --store "$STORE" import copies:1 "$T/l5.tar"
writes=$(grep -c ' write ' "$T/l5.trace")
check "100 copies of one new content: written once in blobs/ ($writes writes)" [ "$writes" = 1 ]
setup cairn rm -q copies:1
setup cairn rm -q dup:1
setup cairn gc --quiet
check_json "diff_id is the sha256 of the uncompressed tar" \
  "map(.id) | index(\"$(sha256sum "$T/l2.tar" | cut -d' ' -f1)\") != null" cairn layers --json
check_json "images --json has the contract's keys" \
  'all(has("id") and has("names") and has("layers") and has("size") and has("pinned"))' cairn images --json
check_json "layers --json has the contract's keys" \
  'all(has("id") and has("size") and has("images") and has("pinned"))' cairn layers --json
check_json "inspect shows the config's diff_ids" '.config.rootfs.diff_ids | length == 3' cairn inspect app:1
expect_exit 0 "inspect by 12-digit id prefix" cairn inspect "${id1:0:12}"

# Pins: a hold blocks rm, names its holder, shows in lslocks, dies with kill -9.
cairn-pin hold app:1 -- sleep 60 &
holder=$!
on_exit "pkill -9 -P $holder; kill -9 $holder"
wait_for 5 sh -c "cairn-pin ls --json | jq -e 'length > 0' >/dev/null"
expect_exit 4 "rm of a held image is exit 4" cairn rm "$id1"
check "rm names the holder's pid and purpose" grep -q "pid $holder (cairn-pin) hold sleep 60" "$T/stderr"
check "rm error is one line" [ "$(wc -l <"$T/stderr")" = 1 ]
check "lslocks shows the pin" sh -c "lslocks -n -o PID,PATH | grep -q '$holder .*pins/image/$id1'"
check_json "cairn-pin ls --json has the contract's keys" \
  'length > 0 and all(has("target") and has("kind") and has("pid") and has("command") and has("purpose") and has("since") and has("stale"))' cairn-pin ls --json
check_json "images shows it pinned" ".[] | select(.id == \"$id1\") | .pinned" cairn images --json
expect_exit 4 "cairn-pin wait times out while held" cairn-pin wait app:1 --timeout 0.3
heir=$(pgrep -P "$holder" sleep)
on_exit "kill -9 $heir"
kill -9 "$holder"
wait "$holder" 2>/dev/null
expect_exit 4 "the held command keeps the pin after its parent dies" cairn rm "$id1"
check "rm names the command that inherited the pin" grep -q "held by pid $heir " "$T/stderr"
kill -9 "$heir"
wait_for 5 sh -c "! lslocks -n -o PATH | grep -q pins/image/$id1"
expect_exit 0 "cairn-pin wait returns once the pins are gone" cairn-pin wait app:1 --timeout 5
check_json "cairn-pin ls marks the dead holder's annotation stale" 'length > 0 and all(.stale)' cairn-pin ls --json
check "stale annotations are cleaned once seen" [ "$(cairn-pin ls --json | jq length)" = 0 ]

# Two holders of one image, both killed, their commands alive: each
# holder's pin row names the command that inherited that holder's lock, not
# every process with the pin file open.
cairn-pin hold app:1 -- sleep 61 &
h1=$!
cairn-pin hold app:1 -- sleep 62 &
h2=$!
on_exit "pkill -9 -P $h1; kill -9 $h1; pkill -9 -P $h2; kill -9 $h2"
wait_for 5 pgrep -P "$h1" sleep >/dev/null
wait_for 5 pgrep -P "$h2" sleep >/dev/null
heir1=$(pgrep -P "$h1" sleep)
heir2=$(pgrep -P "$h2" sleep)
on_exit "kill -9 $heir1 $heir2"
wait_for 5 sh -c "cairn-pin ls --json | jq -e '[.[] | select(.kind == \"image\")] | length == 2' >/dev/null"
kill -9 "$h1" "$h2"
wait "$h1" "$h2" 2>/dev/null
check_json "each killed holder's pin is held by its own heir" \
  "([.[] | select(.kind == \"image\")] | length == 2) and
   ([.[] | select(.pid == $h1) | .held_by] | length == 4 and all(. == [$heir1])) and
   ([.[] | select(.pid == $h2) | .held_by] | length == 4 and all(. == [$heir2]))" cairn-pin ls --json
kill -9 "$heir1" "$heir2"
wait_for 5 sh -c "! lslocks -n -o PATH | grep -q pins/image/$id1"
cairn-pin ls >/dev/null # shows the stale annotations once, then they go
check "the heirs' pins are gone with them" [ "$(cairn-pin ls --json | jq length)" = 0 ]

# A lock taken without cairn (flock(1)) is listed once, unannotated, even
# when a stale annotation beside it makes the listing read /proc/locks twice.
flock -s "$STORE/pins/image/$id1" sleep 60 &
locker=$!
on_exit "pkill -9 -P $locker; kill -9 $locker"
wait_for 5 sh -c "lslocks -n -o PID | grep -qw $locker"
sqlite3 "$STORE/meta.db" "INSERT INTO pins(kind, target, pid, pid_start, purpose, since)
  VALUES(0, '$id1', 999999, 0, 'gone', 0)"
check_json "a lock without annotation is listed once beside a stale annotation" \
  "([.[] | select(.pid == $locker)] | length == 1 and .[0].purpose == \"\" and (.[0].stale | not))
   and ([.[] | select(.pid == 999999)] | length == 1 and .[0].stale)" cairn-pin ls --json
pkill -9 -P "$locker"
kill -9 "$locker"
wait "$locker" 2>/dev/null
wait_for 5 sh -c "! lslocks -n -o PID | grep -qw $locker"

# rm of an unpinned image, while another image is held, looks at no
# process: no /proc walk, no file of another process, no mountinfo
# (/proc/locks, and a sanitizer's /proc/self/maps, are fine).
mkdir -p "$T/l4" && echo "loose" >"$T/l4/loose" && mktar "$T/l4" "$T/l4.tar"
expect_exit 0 "import loose:1" cairn import loose:1 "$T/l4.tar"
cairn-pin hold app:2 -- sleep 60 &
h3=$!
on_exit "pkill -9 -P $h3; kill -9 $h3"
wait_for 5 sh -c "lslocks -n -o PID | grep -qw $h3"
ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" \
  strace -f -qq -e trace=open,openat,openat2 -o "$T/rm.strace" cairn rm loose:1 # (no LeakSanitizer under ptrace)
check "rm of an unpinned image walks no /proc and opens no process's files" \
  sh -c "! grep -E '\"/proc(\"|/[0-9]|/self/mountinfo)' '$T/rm.strace'"
check "and removes it" [ "$(cairn images --json | jq 'map(select(.names == ["localhost/loose:1"])) | length')" = 0 ]
pkill -9 -P "$h3"
kill -9 "$h3"
wait "$h3" 2>/dev/null

# hold pins several images at once, and none if one of them is missing.
cairn-pin hold app:1 app:2 -- sleep 60 &
h4=$!
on_exit "pkill -9 -P $h4; kill -9 $h4"
wait_for 5 sh -c "cairn-pin ls --json | jq -e 'map(select(.pid == $h4 and .kind == \"image\")) | length == 2' >/dev/null"
check_json "hold IMAGE IMAGE pins both images and their layers" \
  "map(select(.pid == $h4)) | (map(.names[]) | index(\"localhost/app:1\") and index(\"localhost/app:2\")) and any(.kind == \"layer\")" \
  cairn-pin ls --json
pkill -9 -P "$h4"
kill -9 "$h4"
wait "$h4" 2>/dev/null
expect_exit 3 "hold with one missing image fails" cairn-pin hold app:1 nosuch:1 -- true
check_json "and leaves no pin" 'map(select(.stale | not)) | length == 0' cairn-pin ls --json

# rm --wait waits for a short hold to end.
cairn-pin hold rev:1 -- sleep 1 &
h2=$!
on_exit "kill -9 $h2"
wait_for 5 sh -c "lslocks -n -o PID | grep -qw $h2"
expect_exit 0 "rm --wait=10 succeeds once the hold ends" cairn rm --wait=10 rev:1
wait "$h2"
check "rm by name keeps layers other images use" [ "$(cairn layers --json | jq length)" = 3 ]
expect_exit 0 "rm app:1 only removes that name" cairn rm app:1
check "app:2 still there" cairn inspect app:2 >/dev/null
expect_exit 0 "rm of the last name removes the image" cairn rm app:2
check "no images left" [ "$(cairn images --json | jq length)" = 0 ]
check "its layers went with it" [ "$(cairn layers --json | jq length)" = 0 ]
check "and its blobs" [ "$(find "$STORE/blobs" -type f | wc -l)" = 0 ]

# Hostile and broken input: exit 5, store unchanged, nothing outside it.
cairn import keep:1 "$T/l3.tar" >/dev/null
snapshot() { (sqlite3 "$STORE/meta.db" .dump | grep -v '^INSERT INTO pins'; find "$STORE/blobs" -type f | sort) | sha256sum; }
before=$(snapshot)
python3 - "$T" <<'PY'
import io, sys, tarfile
t = sys.argv[1]
def tar(name, entries):
    with tarfile.open(f"{t}/{name}", "w") as tf:
        for n, kind, extra in entries:
            ti = tarfile.TarInfo(n)
            if kind == "file":
                ti.size = len(extra); tf.addfile(ti, io.BytesIO(extra))
            elif kind == "sym":
                ti.type = tarfile.SYMTYPE; ti.linkname = extra; tf.addfile(ti)
            elif kind == "hard":
                ti.type = tarfile.LNKTYPE; ti.linkname = extra; tf.addfile(ti)
tar("dotdot.tar", [("ok", "file", b"ok"), ("../../escaped", "file", b"x")])
tar("deep-dotdot.tar", [("a/b/../../../escaped", "file", b"x")])
tar("via-symlink.tar", [("l", "sym", t + "/outside"), ("l/escaped", "file", b"x")])
tar("hardlink-out.tar", [("h", "hard", "../../../etc/passwd")])
tar("hardlink-missing.tar", [("h", "hard", "not/in/layer")])
PY
head -c 5000 "$T/l1.tar" >"$T/truncated.tar"
head -c 3000 "$T/l2.tar.gz" >"$T/truncated.tar.gz"
head -c 4096 /dev/urandom >"$T/garbage.tar"
: >"$T/empty.tar"
mkdir -p "$T/outside"
for bad in dotdot deep-dotdot via-symlink hardlink-out hardlink-missing truncated garbage empty; do
  f="$T/$bad.tar"; [ -e "$f" ] || f="$T/$bad.tar.gz"
  expect_exit 5 "hostile/corrupt $bad is exit 5" cairn import bad:1 "$f"
  check "$bad: error is one line 'cairn: ...'" sh -c "[ \$(wc -l <'$T/stderr') = 1 ] && grep -q '^cairn: ' '$T/stderr'"
done
expect_exit 5 "gzip cut short is exit 5" cairn import bad:1 "$T/truncated.tar.gz"
check "the store is unchanged by all of them" [ "$(snapshot)" = "$before" ]
check "nothing was written outside the store" sh -c "[ ! -e '$T/escaped' ] && [ ! -e /escaped ] && [ -z \"\$(ls -A '$T/outside')\" ] && [ -z \"\$(ls -A '$T/work')\" ]"
check "no bad:1 image" sh -c "! cairn inspect bad:1 >/dev/null 2>&1"

# The contract's exit codes and usage errors.
expect_exit 2 "unknown command is exit 2" cairn frobnicate
expect_exit 2 "bad flag is exit 2" cairn images --bogus
check "usage errors print a usage line" grep -q '^usage: ' "$T/stderr"
check "a bad flag is one error line naming it, then the usage" \
  sh -c "head -1 '$T/stderr' | grep -q '^cairn: images: --bogus: ' &&
    sed -n 2p '$T/stderr' | grep -q '^usage: ' && ! sed 1,2d '$T/stderr' | grep -q '^[^ ]'"
expect_exit 2 "cairn-pin bad flag is exit 2" cairn-pin ls --bogus
expect_exit 2 "import without layers is exit 2" cairn import x:1
expect_exit 2 "invalid name is exit 2" cairn import 'Bad Name' "$T/l3.tar"
expect_exit 3 "inspect of an unknown image is exit 3" cairn inspect nosuch:1
expect_exit 3 "rm of an unknown image is exit 3" cairn rm nosuch:1
expect_exit 3 "cairn-pin ls of an unknown id is exit 3" cairn-pin ls "$(printf '%064d' 0)"
check "and says why" grep -qx "cairn-pin: 0\{64\}: no such image or layer" "$T/stderr"
expect_exit 2 "import of a directory is exit 2" cairn import x:1 "$T/l1"
check "and says it is a directory" grep -q "is a directory, not a layer tar" "$T/stderr"
expect_exit 3 "import of a missing file is exit 3" cairn import x:1 "$T/does-not-exist.tar"
expect_exit 0 "fsck is clean" cairn fsck
expect_exit 0 "gc --dry-run" cairn gc --dry-run
expect_exit 0 "gc" cairn gc
# gc's sweep of temporary files an hour old keeps one a process holds a
# lock on (a background fill's log, quiet for as long as nothing fails).
old_tmp() { setup touch -d '1 hour ago' "$STORE/tmp/$1"; }
old_tmp fill-held.log
old_tmp fill-left.log
bg_start flock -o "$STORE/tmp/fill-held.log" sleep 60
holder=$!
wait_for 10 grep -q ":$(stat -c %i "$STORE/tmp/fill-held.log") " /proc/locks ||
  fail "flock took no lock in 10 s"
expect_exit 0 "gc beside a locked hour-old temporary file" cairn gc
check "keeps the locked one" test -e "$STORE/tmp/fill-held.log"
check "and removes the unlocked one" test ! -e "$STORE/tmp/fill-left.log"
kill "$holder"
wait "$holder" 2>/dev/null
expect_exit 0 "gc once its lock is gone" cairn gc
check "removes it" test ! -e "$STORE/tmp/fill-held.log"
# First use of a new store by several processes at once: all succeed.
first_use_failures=0
for ((r = 0; r < 10; r++)); do
  pids=()
  for ((i = 0; i < 6; i++)); do cairn --store "$T/new$r" images --json >/dev/null 2>>"$T/first-use" & pids+=($!); done
  for p in "${pids[@]}"; do wait "$p" || first_use_failures=$((first_use_failures + 1)); done
done
check "6 processes opening a new store at once all succeed (10 rounds)" [ "$first_use_failures" = 0 ]

# One id rule for images and layers: the 12 digits `cairn layers` shows,
# with or without "sha256:", name a layer for cairn-pin ls (here one of a
# held image); a wrong prefix is "no such image or layer".
img=$(cairn images --json | jq -r '.[0].id')
full=$(cairn inspect "$img" --json | jq -r '.layers[0].id')
short=$(cairn layers | awk -v p="${full:0:12}" '$1 == p { print $1 }')
check "cairn layers shows the layer's 12 first digits" [ "$short" = "${full:0:12}" ]
cairn-pin hold "$img" -- sleep 60 &
lh=$!
on_exit "pkill -9 -P $lh; kill -9 $lh"
# (hold pins the image, then its layers: wait for the layer's pin)
wait_for 5 sh -c "cairn-pin ls --json $full | jq -e 'length > 0' >/dev/null"
check_json "cairn-pin ls SHORT lists the pins of the layer it names" \
  "length > 0 and all(.target == \"$full\" and .kind == \"layer\")" cairn-pin ls --json "$short"
check_json "cairn-pin ls sha256:SHORT too" "length > 0 and all(.target == \"$full\")" \
  cairn-pin ls --json "sha256:$short"
expect_exit 3 "cairn-pin ls of an unknown prefix" cairn-pin ls 000000000000
check "says no such image or layer" grep -q "cairn-pin: 000000000000: no such image or layer" "$T/stderr"
pkill -9 -P "$lh"
kill -9 "$lh"
wait "$lh" 2>/dev/null
check "the store directory is mode 0700" [ "$(stat -c %a "$STORE")" = 700 ]
finish
