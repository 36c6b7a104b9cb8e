#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_pull_lazy.sh — lazy pulls of zstd:chunked layers
# (doc/lazy-pulls.md), against Debian's docker-registry on 127.0.0.1 behind
# the shaping proxy, with a layer podman 4.3 pushed
# (--compression-format zstd:chunked):
#   cairn pull --lazy fetches the manifest, the config and the TOC only
#   (counted by the proxy), and the image has the full pull's id; fsck
#   and gc accept it, rm takes its pending
#   files and TOC along; a gzip layer is pulled in full, said once;
#   a mount works at once and ls -lR shows the full pull's tree without a
#   byte fetched; a cat of one file fetches that file only and gives its
#   bytes (concurrent reads of one file wait for one fetch; reads of
#   several files, one fetcher process: cairn fill --serve, whose
#   threads keep their connections: no more than 4, stopped once idle
#   5 s and started again by the next pending read; 8 first reads
#   against a registry that stalls hold none of the daemon's threads: a
#   lookup and a read of a fetched file meanwhile answer at once); a corrupt
#   byte in the registry's blob fails that file's read
#   (EIO) and no other, and so does an unreachable registry (the tree
#   still lists); rm while mounted is refused (exit 4);
#   cairn fill killed (-9) mid-way leaves a store fsck passes, and a fill
#   then completes it: the full pull's files, no pending rows, fsck clean;
#   the first read of a pending file of 128 MiB (one range as large)
#   streams it: the fetcher's peak memory (VmHWM) stays under 48 MiB.
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib registry mount
pull_test_init
command -v podman >/dev/null || skip "no podman"
command -v sqlite3 >/dev/null || skip "no sqlite3"
# (test-lib's sqlite3 waits for the database's lock: umount returns before
# the daemon and its fetcher have closed the store, their last writes and
# the checkpoint of the last connection, which a busy machine shows)

setup python3 "$HELPERS/lazy_tree.py" "$T/a" 34
setup registry_start "$T/reg"
setup podman_push_chunked "$T/a" lazy/a:1
# and the same image with a gzip layer
setup "${PODMAN[@]}" push -q --tls-verify=false "localhost/lazy/a:1" "docker://$REGISTRY/lazy/g:1"
setup proxy_start "$T/proxy" --rate 12500000 --latency 0.005
manifest() { registry_manifest lazy/a 1; }
pending() { sqlite3 "file:$ST/meta.db?mode=ro" "SELECT count(*) FROM pending"; }
ann() {
  manifest | jq -r --arg k "$1" '.layers[0].annotations | to_entries[] |
    select(.key | endswith($k)) | .value'
}
bsize=$(manifest | jq '.layers[0].size')
bdigest=$(manifest | jq -r '.layers[0].digest')
toc_len=$(ann zstd-chunked.manifest-position | cut -d: -f2)
echo "# layer: $bsize bytes, its TOC $toc_len bytes" >&2

# The reference: a full pull, mounted.
setup cairn --store "$T/full" pull -q --insecure "docker://$PROXY/lazy/a:1" >"$T/full.id"
setup mkdir "$T/mf" "$T/m"
setup cairn --store "$T/full" mount lazy/a:1 "$T/mf"
on_exit "$CAIRN_BIN/cairn --store '$T/full' umount '$T/mf'"

# The lazy pull: the TOC only.
proxy_reset
expect_exit 0 "pull --lazy" cairn pull --insecure --lazy --no-fill \
  "docker://$PROXY/lazy/a:1"
sed "s/^/# /" "$T/stderr" >&2
lazy_bytes=$(proxy_counts | jq .bytes)
echo "# lazy pull: $lazy_bytes bytes through the proxy (full layer $bsize)" >&2
check "pull --lazy says the TOC was fetched and how many files wait" \
  grep -Eq "lazy pull: fetched its TOC \($toc_len bytes\); 40 files to fetch" "$T/stderr"
check "pull --lazy: the image id of the full pull" test "$(tail -1 "$T/stdout")" = "$(cat "$T/full.id")"
check "pull --lazy: no more than manifest, config and TOC went through ($lazy_bytes bytes)" \
  test "$lazy_bytes" -lt $((toc_len + 8192))
check "pull --lazy: 40 files pending" test "$(pending)" = 40
check "pull --lazy: the TOC is kept" test -s "$ST/toc/${bdigest#sha256:}"
all_bytes=$(cd "$T/a" && find . -type f -links 1 -printf '%s\n' | awk '{ s += $1 } END { print s }')
hard_bytes=$(stat -c %s "$T/a/usr/lib/data/f02")
check_json "inspect says how much is not fetched yet" \
  ".Pending.Files == 40 and .Pending.Bytes == $((all_bytes + hard_bytes))" \
  cairn inspect lazy/a:1
expect_exit 0 "fsck passes a partial layer" cairn fsck
expect_exit 3 "fill --file of a content nothing is pending on and the store lacks" \
  cairn fill --file "sha256:$(printf %064d 0)"
expect_exit 0 "gc keeps a partial image" cairn gc
check "... its pending files and TOC" test "$(pending)" = 40 -a -s "$ST/toc/${bdigest#sha256:}"
# (export and push fill such an image first: test_lazy_complete.sh)

# A layer that is not zstd:chunked: pulled in full, said once.
expect_exit 0 "pull --lazy of a gzip layer" cairn --store "$T/st3" pull --insecure --lazy \
  "docker://$PROXY/lazy/g:1"
check "... says it pulls it in full, once" test "$(grep -c \
  "no lazy pull (not a registry's zstd:chunked or eStargz layer whose TOC the manifest vouches for); pulling it in full" "$T/stderr")" = 1
check "... and leaves nothing pending" \
  test "$(sqlite3 "file:$T/st3/meta.db?mode=ro" "SELECT count(*) FROM pending")" = 0

# rm of a partial image: its pending rows and TOC go with it. (Pulled
# through a second proxy, stopped then: its registry is unreachable.)
proxy1=$PROXY
setup proxy_start "$T/proxy2"
PROXY2=$PROXY proxy2_pid=$PROXY_PID PROXY=$proxy1
setup cairn --store "$T/st2" pull -q --insecure --lazy --no-fill "docker://$PROXY2/lazy/a:1" >/dev/null
setup kill "$proxy2_pid"
setup wait_for 10 pid_gone "$proxy2_pid"
setup mkdir "$T/m2"
expect_exit 0 "mount with the registry unreachable" cairn --store "$T/st2" mount lazy/a:1 "$T/m2"
on_exit "$CAIRN_BIN/cairn --store '$T/st2' umount '$T/m2' 2>/dev/null || true"
start=$(date +%s)
if timeout 60 cat "$T/m2/usr/lib/data/f12" >/dev/null 2>"$T/cat2.err"; then
  fail "registry unreachable: a pending file's read fails"
else
  ok "registry unreachable: a pending file's read fails"
fi
took=$(($(date +%s) - start))
check "... with EIO, in bounded time (${took}s)" grep -q "Input/output error" "$T/cat2.err"
check "... while the tree still lists" test "$(ls "$T/m2/usr/lib/data" | wc -l)" = 40
expect_exit 0 "umount" cairn --store "$T/st2" umount "$T/m2"
# (fsck checks the pending rows against the kept TOC, and the TOC itself)
db2() { sqlite3 "$T/st2/meta.db" "$@"; }
f00=$(db2 "SELECT sha256 FROM pending WHERE path = 'usr/lib/data/f00'")
setup db2 "UPDATE pending SET sha256 = '$(printf %064d 0)' WHERE path = 'usr/lib/data/f00'"
expect_exit 5 "fsck: a pending row the kept TOC does not list is a problem" \
  cairn --store "$T/st2" fsck
check "... naming the file" grep -q "pending file usr/lib/data/f00 is not the one its kept TOC lists" \
  "$T/stdout"
check "... a problem line like every other of fsck's" \
  grep -q "^problem: layer [0-9a-f]*: pending file usr/lib/data/f00 is not the one" "$T/stdout"
check "... which the error names as the first" \
  grep -q "fsck: 1 problems found; the first: layer .*pending file usr/lib/data/f00" "$T/stderr"
setup db2 "UPDATE pending SET sha256 = '$f00' WHERE path = 'usr/lib/data/f00'"
expect_exit 0 "... and fsck is clean again once it is right" cairn --store "$T/st2" fsck
setup cp "$T/st2/toc/${bdigest#sha256:}" "$T/toc.good"
setup python3 -c 'import sys; p=sys.argv[1]; b=bytearray(open(p,"rb").read()); b[20]^=1; open(p,"wb").write(b)' \
  "$T/st2/toc/${bdigest#sha256:}"
expect_exit 5 "fsck: a kept TOC that changed is a problem" cairn --store "$T/st2" fsck
check "... said" grep -q "its kept TOC is not the one the pull verified" "$T/stdout"
expect_exit 0 "rm of a partial image" cairn --store "$T/st2" rm lazy/a:1
check "rm: no pending rows left" \
  test "$(sqlite3 "file:$T/st2/meta.db?mode=ro" "SELECT count(*) FROM pending")" = 0
check "rm: no layer source left" \
  test "$(sqlite3 "file:$T/st2/meta.db?mode=ro" "SELECT count(*) FROM layer_sources")" = 0
check "rm: its TOC is gone" test -z "$(ls -A "$T/st2/toc")"
expect_exit 0 "fsck after rm of a partial image" cairn --store "$T/st2" fsck

# A mount at once; its tree without a byte fetched.
proxy_reset
expect_exit 0 "mount of the lazily pulled image" cairn mount lazy/a:1 "$T/m"
on_exit "$CAIRN_BIN/cairn --store '$ST' umount '$T/m' 2>/dev/null || true"
# ("total": the blocks of a stored file, which a pending one has not)
(cd "$T/m" && ls -lnR --time-style=+%s .) | grep -v '^total' >"$T/lazy.ls"
(cd "$T/mf" && ls -lnR --time-style=+%s .) | grep -v '^total' >"$T/full.ls"
check "ls -lR of the mount: the full pull's tree (names, modes, owners, sizes, times)" cmp "$T/lazy.ls" "$T/full.ls"
check_json "ls -lR fetched nothing" '.requests == 0' proxy_counts

# One file read: that file alone fetched, its bytes right.
proxy_reset
check "cat of a pending file gives its bytes" cmp "$T/m/usr/lib/data/f05" "$T/a/usr/lib/data/f05"
f05=$(stat -c %s "$T/a/usr/lib/data/f05")
one=$(proxy_counts | jq .bytes)
echo "# f05: $f05 bytes; the read fetched $one" >&2
check_json "the read: one range request" '.requests == 1 and .ranges == 1' proxy_counts
check "the read fetched about that file's bytes, not the layer's ($one)" \
  test "$one" -lt $((f05 + 4096))
check "that file is no longer pending" test "$(pending)" = 39
# Concurrent reads of one pending file (at different offsets: separate
# requests to the daemon) wait for one fetch.
big=$(cd "$T/a/usr/lib/data" && ls -S f1* f2* | head -1)
bigsize=$(stat -c %s "$T/a/usr/lib/data/$big")
proxy_reset
readers=()
for k in 0 1 2 3; do
  dd if="$T/m/usr/lib/data/$big" of="$T/part$k" bs=4096 skip=$((k * bigsize / 4 / 4096)) \
    count=1 status=none &
  readers+=($!)
done
for p in "${readers[@]}"; do wait "$p"; done
for k in 0 1 2 3; do
  dd if="$T/a/usr/lib/data/$big" of="$T/want$k" bs=4096 skip=$((k * bigsize / 4 / 4096)) \
    count=1 status=none
done
check "concurrent reads of one pending file ($big, $bigsize bytes) give its bytes" \
  cmp <(cat "$T"/part?) <(cat "$T"/want?)
echo "# concurrent reads: $(proxy_counts | jq -c '{requests, bytes}')" >&2
check_json "... after one fetch" '.requests == 1' proxy_counts
# Reads of several pending files, at once and one after another: one
# fetcher process (cairn fill --serve, started on the mount's first
# pending read) serves them all, not a process each, and stays for the
# next reads, each of its threads over one connection it keeps (the
# proxy counts them). (The fillers of $ST seen every 20 ms meanwhile.)
fillers() {
  local p
  for p in $(pgrep -x cairn); do
    tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -qF -- "--store $ST fill" && echo "$p"
  done
  true
}
: >"$T/fillers"
rm -f "$T/reads.done"
proxy_reset
(for _ in $(seq 1000); do
  fillers >>"$T/fillers"
  [ -e "$T/reads.done" ] && break
  sleep 0.02
done) &
watcher=$!
readers=()
for i in 30 31 32 33 34 35 36 37; do
  cat "$T/m/usr/lib/data/f$i" >"$T/r$i" &
  readers+=($!)
done
for p in "${readers[@]}"; do wait "$p"; done
for i in 38 39; do cat "$T/m/usr/lib/data/f$i" >"$T/r$i"; done
touch "$T/reads.done"
wait "$watcher"
bad=""
for i in 30 31 32 33 34 35 36 37 38 39; do cmp -s "$T/r$i" "$T/a/usr/lib/data/f$i" || bad+=" f$i"; done
check "10 pending files read (8 at once) give their bytes${bad:+ (not:$bad)}" test -z "$bad"
echo "# 10 first reads: $(proxy_counts | jq -c '{requests, connections}')" >&2
check_json "... a request each, over at most 4 connections (the fetcher's threads)" \
  '.requests == 10 and .connections <= 4' proxy_counts
seen=$(sort -u "$T/fillers" | tr '\n' ' ')
check "... fetched by one fetcher process, not one each (seen: ${seen:-none})" \
  test "$(sort -u "$T/fillers" | wc -l)" = 1
check "... which the mount keeps for its next reads" test "$(fillers | tr '\n' ' ')" = "$seen"
# The fetcher killed: the mount starts another on its next pending read
# (not within a second of the last start).
setup kill -9 $seen
setup wait_for 50 sh -c "! kill -0 $seen 2>/dev/null"
sleep 1.1
check "the fetcher killed, the next pending read starts another and reads" \
  cmp "$T/m/usr/lib/data/f08" "$T/a/usr/lib/data/f08"
check "... one new fetcher" test "$(fillers | wc -l)" = 1 -a "$(fillers | tr '\n' ' ')" != "$seen"
# The fetcher idle (no fetch in flight for 5 s): the mount stops it, and
# costs cairnfs alone; the next pending read starts another at once.
idle=$(fillers | tr -d '\n')
no_fillers() { [ -z "$(fillers)" ]; }
t0=$SECONDS
wait_for 15 no_fillers
check "an idle fetcher is stopped ($((SECONDS - t0)) s after the last read)" no_fillers
check "... it ended, not killed" sh -c "! kill -0 $idle 2>/dev/null"
check "the next pending read starts another at once and reads" \
  cmp "$T/m/usr/lib/data/f06" "$T/a/usr/lib/data/f06"
check "... one fetcher" test "$(fillers | wc -l)" = 1
check "a hardlink and a symlink to pending files read right" \
  cmp "$T/m/usr/lib/hard" "$T/a/usr/lib/data/f02"
check "the symlink's target" cmp "$T/m/usr/lib/link" "$T/a/usr/lib/data/f01"

# Eight first reads while the registry stalls (4 s before each request):
# they wait without holding the daemon's worker threads (8), so that a
# lookup and a read of a fetched file (its page cache dropped: the read
# reaches the daemon) answer at once (before: after the first fetches,
# 4 s). Then the eight give their bytes.
curl -sf "http://$PROXY/_proxy/set?latency=4" >/dev/null
proxy_reset
slow=$(cd "$T/a/usr/lib/data" && ls f1[3-9] f2? | grep -vx "$big" | head -8)
stalled=()
for i in $slow; do
  cat "$T/m/usr/lib/data/$i" >"$T/slow.$i" &
  stalled+=($!)
  BG_PIDS+=($!)
done
arrived() { [ "$(proxy_counts | jq .requests)" -ge 4 ]; }
setup wait_for 10 arrived
check "while 8 first reads wait on the registry, a lookup answers at once" \
  timeout 2 sh -c "! stat '$T/m/usr/lib/nosuch.$$' 2>/dev/null"
check "... and a read of a fetched file, not from the page cache" timeout 2 python3 -c '
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
assert os.read(fd, 1 << 20) == open(sys.argv[2], "rb").read()' \
  "$T/m/usr/lib/data/f05" "$T/a/usr/lib/data/f05"
for p in "${stalled[@]}"; do
  wait_for 60 pid_gone "$p" || fail "a first read against the stalling registry did not end"
done
curl -sf "http://$PROXY/_proxy/set?latency=0.005" >/dev/null
bad=""
for i in $slow; do cmp -s "$T/slow.$i" "$T/a/usr/lib/data/$i" || bad+=" $i"; done
check "the 8 first reads give their bytes${bad:+ (not:$bad)}" test -z "$bad"

# A corrupt byte in one file's frames in the registry: that read fails
# (EIO), the others do not.
blob=$(registry_blob_path "$bdigest")
setup cp "$blob" "$T/blob.good"
setup python3 - "$blob" "$(ann zstd-chunked.manifest-position)" <<'PY'
import json, subprocess, sys
path, (off, length) = sys.argv[1], map(int, sys.argv[2].split(":")[:2])
b = bytearray(open(path, "rb").read())
toc = json.loads(subprocess.run(["zstd", "-dcq"], input=bytes(b[off:off + length]),
                                capture_output=True, check=True).stdout)
e = next(e for e in toc["entries"] if e.get("name", "").endswith("usr/lib/data/f07"))
b[e["offset"] + 100] ^= 0xFF
open(path, "wb").write(b)
PY
if cat "$T/m/usr/lib/data/f07" >/dev/null 2>"$T/cat.err"; then
  fail "a corrupt file's read fails"
else
  ok "a corrupt file's read fails"
fi
check "... with EIO" grep -q "Input/output error" "$T/cat.err"
check "... and stays pending" test "$(pending)" = 37 -o "$(sqlite3 "file:$ST/meta.db?mode=ro" \
  "SELECT count(*) FROM pending WHERE path = 'usr/lib/data/f07'")" = 1
check "another file still reads" cmp "$T/m/usr/lib/data/f09" "$T/a/usr/lib/data/f09"
setup cp "$T/blob.good" "$blob"

expect_exit 4 "rm of the mounted lazy image is refused" cairn rm lazy/a:1
expect_exit 0 "umount" cairn umount "$T/m"

# A fill killed mid-way, then resumed.
before=$(pending)
curl -sf "http://$PROXY/_proxy/set?rate=200000&latency=0.05" >/dev/null
cairn fill "$(cat "$T/full.id")" >"$T/fill1.out" 2>"$T/fill1.err" &
fill_pid=$!
for _ in $(seq 200); do
  [ "$(pending)" -lt $((before - 2)) ] && break
  sleep 0.05
done
kill -9 "$fill_pid" 2>/dev/null
wait "$fill_pid" 2>/dev/null
left=$(pending)
echo "# the killed fill left $left of $before files pending" >&2
check "the fill was killed mid-way ($left of $before left)" test "$left" -gt 0 -a "$left" -lt "$before"
curl -sf "http://$PROXY/_proxy/set?rate=12500000&latency=0.005" >/dev/null
expect_exit 0 "fsck after the killed fill" cairn fsck
expect_exit 0 "the fill resumes" cairn fill lazy/a:1
sed "s/^/# /" "$T/stderr" >&2
check "no pending rows remain" test "$(pending)" = 0
check "the layer is complete" test "$(sqlite3 "file:$ST/meta.db?mode=ro" \
  "SELECT count(*) FROM layers WHERE state != 'complete'")" = 0
check "its TOC is gone" test ! -e "$ST/toc/${bdigest#sha256:}"
check_json "inspect: nothing pending" 'has("Pending") | not' cairn inspect lazy/a:1
expect_exit 0 "fsck after the fill" cairn fsck
check "the image id is the full pull's" \
  test "$(cairn images --json | jq -r '.[0].id')" = "$(cat "$T/full.id")"
for s in "$ST" "$T/full"; do
  cairn --store "$s" export -q lazy/a:1 | tar -tvf - | sort >"$s.files"
  rm -rf "$s.x" && mkdir "$s.x" && cairn --store "$s" export -q lazy/a:1 | tar -C "$s.x" -xf -
  (cd "$s.x" && find . -type f -print0 | sort -z | xargs -0 sha256sum) >"$s.sums"
done
check "export: the full pull's listing" cmp "$ST.files" "$T/full.files"
check "export: the full pull's files, byte for byte" cmp "$ST.sums" "$T/full.sums"
expect_exit 0 "a mount of the filled image" cairn mount lazy/a:1 "$T/m"
proxy_reset
check "reads of the filled image fetch nothing" cmp "$T/m/usr/lib/data/f11" "$T/a/usr/lib/data/f11"
check_json "... no request" '.requests == 0' proxy_counts
expect_exit 0 "umount" cairn umount "$T/m"
expect_exit 0 "rm of the filled image" cairn rm lazy/a:1

# A large pending file: its range streams from the registry into a file
# and from there through the decompressor, never whole in memory (before:
# twice, 256 MiB and more for this one). The fetcher's VmHWM is read
# while it stays, after the read.
mkdir -p "$T/big"
head -c 128M /dev/urandom >"$T/big/f"
setup sh -c "tar -C '$T/big' --numeric-owner -cf '$T/big.tar' f"
setup cairn --store "$T/bigsrc" import -q big:1 "$T/big.tar" >/dev/null
setup cairn --store "$T/bigsrc" push -q --insecure --no-progress --format zstd:chunked big:1 \
  "docker://$REGISTRY/lazy/big:1" >/dev/null
ST=$T/bigst
expect_exit 0 "pull --lazy of a 128 MiB file" cairn --store "$ST" pull -q --insecure --lazy \
  --no-fill "docker://$REGISTRY/lazy/big:1"
expect_exit 0 "mount it" cairn --store "$ST" mount big:1 "$T/m"
check "its first read gives its bytes" cmp "$T/m/f" "$T/big/f"
f=$(fillers)
check "one fetcher read it ($f)" test -n "$f" -a "$(echo "$f" | wc -l)" = 1
hwm=$(awk '/^VmHWM:/ { print $2 }' "/proc/$f/status")
if sanitizer_build; then # shadow memory and ASan's quarantine: the release run measures it
  echo "# the fetcher's peak memory, $hwm KiB, is not bounded under the sanitizers"
else
  check "the fetcher's peak memory: $hwm KiB, under 48 MiB" test "$hwm" -lt 49152
fi
expect_exit 0 "umount" cairn --store "$ST" umount "$T/m"
rm -rf "$T/big" "$T/big.tar" "$T/bigsrc"
finish
