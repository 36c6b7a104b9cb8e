#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_exit_codes.sh — the contract's error channel for cairn, cairn-pin
# and cairnfs alike: a failure is one line "PROG: WHAT: WHY" on stderr (a
# usage error adds the usage after it) and its exit code says what kind it
# was: 1 failure, 2 usage, 3 not found, 4 pinned/busy, 5 integrity; a
# command cairn-pin hold cannot run is the shell's 127 or 126. The cases
# the other tests already cover (rm of a held image, mount of an unknown
# image, corrupt layers, pull errors) are not repeated here.
source "$(dirname "$0")/../lib/test-lib.sh"

mkdir -p "$T/layer" "$T/mnt" "$T/work"
echo hello >"$T/layer/hello"
mktar "$T/layer" "$T/layer.tar"
cairn import app:1 "$T/layer.tar" >/dev/null || exit 1
cd "$T/work" || exit 1

# fails CODE PROG NAME CMD...: CMD exits CODE, saying why in one line
# "PROG: WHAT: WHY" (exit 2: followed by the usage, and nothing else).
fails() {
  local code=$1 prog=$2 name=$3
  shift 3
  expect_exit "$code" "$name: exit $code" "$@"
  local first rest
  first=$(head -1 "$T/stderr")
  rest=$(tail -n +2 "$T/stderr")
  if [[ $first =~ ^$prog:\ [^\ ].*:\ [^\ ] ]] &&
    { [ -z "$rest" ] || { [ "$code" = 2 ] && [[ $rest == usage:\ * ]]; }; }; then
    ok "$name: one line '$first'"
  else
    fail "$name: not one line '$prog: WHAT: WHY': $(head -c 300 "$T/stderr")"
  fi
}

# ---- 2: usage errors name what was wrong, then give the usage
fails 2 cairn "--store without a directory" cairn --store
fails 2 cairn "mount without a directory" cairn mount app:1
check "and says which command" grep -q '^cairn: mount: needs an image and a directory$' "$T/stderr"
fails 2 cairn "mount --resume without --rw" cairn mount --resume "$T/mnt"
fails 2 cairn "umount without a directory" cairn umount
fails 2 cairn "pull without a source" cairn pull
fails 2 cairn "pull --jobs 0" cairn pull --jobs 0 "oci:$T/none"
fails 2 cairn "gc with an argument" cairn gc now
fails 2 cairn "export without an image" cairn export
fails 2 cairn "rm --wait=soon" cairn rm --wait=soon app:1
fails 2 cairn-pin "cairn-pin --store without a directory" cairn-pin --store
fails 2 cairn-pin "hold without a command" cairn-pin hold app:1
fails 2 cairn-pin "wait --timeout soon" cairn-pin wait app:1 --timeout soon
fails 2 cairnfs "cairnfs with an unknown option" cairnfs --bogus app:1 "$T/mnt"
check "and names the option" grep -q '^cairnfs: --bogus: ' "$T/stderr"
fails 2 cairnfs "cairnfs without a directory" cairnfs app:1
fails 2 cairnfs "cairnfs with a third operand" cairnfs app:1 "$T/mnt" extra
expect_exit 2 "cairn alone is a usage error" cairn

# ---- 3: not found
fails 3 cairn-pin "hold of an unknown image" cairn-pin hold nosuch:1 -- true
fails 3 cairn-pin "wait for an unknown image" cairn-pin wait nosuch:1
fails 3 cairn-pin "ls of an unknown image" cairn-pin ls nosuch:1

# ---- 4: pinned or busy
cairn-pin hold app:1 -- sleep 30 &
holder=$!
on_exit "pkill -9 -P $holder; kill -9 $holder"
wait_for 5 sh -c "lslocks -n -o PID | grep -qw $holder"
fails 4 cairn-pin "wait while held, for 0.2 s" cairn-pin wait app:1 --timeout 0.2
check "and names the holder" grep -q "^cairn-pin: app:1: still pinned after 0.2 seconds by pid $holder " "$T/stderr"
pkill -9 -P "$holder"
kill -9 "$holder"
wait "$holder" 2>/dev/null
wait_for 5 sh -c "! lslocks -n -o PATH | grep -q '$STORE/pins/'"
cairn mount app:1 "$T/mnt" || fail "mount app:1"
on_exit "umount -l '$T/mnt'"
fails 4 cairn "mount onto a live mount" cairn mount app:1 "$T/mnt"
check "with the hint, after mount:" \
  grep -q "^cairn: mount: $T/mnt: already a live cairnfs mount (hint: cairn umount $T/mnt)$" "$T/stderr"
fails 4 cairnfs "cairnfs onto a live mount" cairnfs app:1 "$T/mnt"
expect_exit 0 "umount" cairn umount "$T/mnt"

# ---- 1: failures
mkdir -p "$T/tmpfs"
mount -t tmpfs none "$T/tmpfs" || fail "mount a tmpfs"
on_exit "umount -l '$T/tmpfs'"
fails 1 cairn "umount of a tmpfs" cairn umount "$T/tmpfs"
check "says it is not a cairnfs mount, after umount:" \
  grep -q "^cairn: umount: $T/tmpfs: not a cairnfs mount$" "$T/stderr"
fails 3 cairn "mount of an unknown image" cairn mount nope:1 "$T/mnt"
check "says mount: first" grep -q '^cairn: mount: nope:1: no such image$' "$T/stderr"
check "and leaves it mounted" mountpoint -q "$T/tmpfs"
: >"$T/file"
fails 1 cairn "a store that is a file" cairn --store "$T/file" images
check "names the store" grep -q "^cairn: store: .*$T/file: " "$T/stderr"
fails 1 cairnfs "cairnfs onto a file" cairnfs app:1 "$T/file"
# Failures of the system calls cairn mount makes to start cairnfs (strace
# injects them; LeakSanitizer cannot run under ptrace).
inject() { ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" strace -o /dev/null "$@"; }
fails 1 cairn "mount when pipe2 fails" \
  inject -e trace=pipe2 -e inject=pipe2:error=EMFILE cairn mount app:1 "$T/mnt"
check "says pipe: Too many open files" grep -q '^cairn: mount: pipe: Too many open files$' "$T/stderr"
fails 1 cairn "mount when fork fails" \
  inject -e trace=clone,clone3 -e inject=clone,clone3:error=EAGAIN cairn mount app:1 "$T/mnt"
check "nothing was mounted" sh -c "! mountpoint -q '$T/mnt'"
fails 1 cairn-pin "hold when waiting for the command fails" \
  inject -e trace=wait4 -e inject=wait4:error=ECHILD cairn-pin hold app:1 -- true

# ---- 126, 127: cairn-pin hold of a command it cannot run, as the shell says
fails 127 cairn-pin "hold of a missing command" cairn-pin hold app:1 -- "$T/no-such-command"
check "names it" grep -q "^cairn-pin: $T/no-such-command: No such file or directory$" "$T/stderr"
fails 126 cairn-pin "hold of a file that is not executable" cairn-pin hold app:1 -- "$T/file"
check_json "no pin is left" 'map(select(.stale | not)) | length == 0' cairn-pin ls --json

# ---- 5: a store whose database is not a database, for all three
mkdir -p "$T/bad"
cairn --store "$T/bad" images >/dev/null
head -c 8192 /dev/urandom >"$T/bad/meta.db"
rm -f "$T/bad/meta.db-wal" "$T/bad/meta.db-shm"
fails 5 cairn "cairn on a corrupt database" cairn --store "$T/bad" images
fails 5 cairn-pin "cairn-pin on a corrupt database" cairn-pin --store "$T/bad" ls
fails 5 cairnfs "cairnfs on a corrupt database" cairnfs --store "$T/bad" app:1 "$T/mnt"
check "cairnfs says it as cairn does" grep -q "^cairnfs: store: database: " "$T/stderr"
finish
