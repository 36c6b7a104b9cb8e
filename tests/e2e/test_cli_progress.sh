#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_cli_progress.sh — progress of import, pull, export and gc (one
# display, tools/progress_bar.c). On a terminal (script(1) gives one): a bar
# with its percentage and bytes, the rate and time left, and each finished
# step's line written once with its final time, frozen (pull's timers used
# to keep running on every redraw); pull's storing phase has a percentage
# too. Without a terminal: one plain line per step. -q/--quiet: nothing on
# stderr on success. Pulls come from the real registry (registry.sh), the
# one on a terminal through fault_proxy.py's slow mode.
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib registry
pull_test_init
setup $OCI_IMAGE layer small.tar small 3 1000
# Random data: the registry stores it as skopeo compresses it, and it
# stays big, so that fetching and storing take frames.
mkdir -p big
setup head -c 80000000 /dev/urandom >big/data
setup mktar big big.tar
setup $OCI_IMAGE add oci app linux/amd64 small.tar:raw big.tar:raw >/dev/null
setup registry_start "$T/reg"
setup registry_push "$T/oci" app team/app:1
SRC="docker://$REGISTRY/team/app:1"
# The pull on a terminal goes through fault_proxy.py at 40 MiB/s, so that
# its fetching takes frames on any machine.
python3 "$HELPERS/fault_proxy.py" "$T/proxy.port" "$REGISTRY_PORT" 2>"$T/proxy.log" &
proxy_pid=$!
on_exit "kill $proxy_pid; wait $proxy_pid"
setup wait_for 10 test -s "$T/proxy.port"
PROXY=127.0.0.1:$(cat "$T/proxy.port")
setup wait_http "http://$PROXY/_proxy/healthz" 200 10
setup curl -sf "http://$PROXY/_proxy/set?mode=slow&n=1000&rate=$((40 << 20))" -o /dev/null
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
big=$(mib "$(stat -c %s big.tar)")   # the file, as import reads it
data=$(mib $((80000000 + 3 * 1000))) # its files' data, as export writes it

# on_tty OUT CMD: runs the shell command CMD with a terminal as its stdin,
# stdout and stderr (script -qfec), what the terminal got in OUT with the
# carriage returns taken out; the exit code is CMD's.
on_tty() {
  local out=$1
  shift
  script -qfec "$*" /dev/null >"$out.raw"
  local rc=$?
  tr -d '\r' <"$out.raw" >"$out"
  return $rc
}
# frames FILE PATTERN: how many lines of FILE match the extended regex.
count() { grep -cE -- "$2" "$1"; }
bar='\[[#.]{5,20}\] +[0-9]{1,3}%'
size='[0-9.]+ (B|KiB|MiB)'

# ---- import ----------------------------------------------------------------
check "import on a terminal" on_tty "$T/imp" "cairn import imp:1 small.tar big.tar"
check "import: a bar with percent and bytes" grep -qE "big.tar  storing $bar  $size / $big" "$T/imp"
check "import: each layer's final line written once (frozen)" \
  [ "$(count "$T/imp" '^(.\[1A)?.\[Ksmall.tar  storing done, 10.0 KiB in [0-9.]+s$')" = 1 -a \
  "$(count "$T/imp" '^(.\[1A)?.\[Kbig.tar  storing done, '"$big"' in [0-9.]+s$')" = 1 ]
cairn rm -q imp:1
expect_exit 0 "import without a terminal" cairn import imp:2 small.tar big.tar
check "import: one plain line per layer" [ "$(grep -c . "$T/stderr")" = 2 -a \
  "$(count "$T/stderr" '^(small|big).tar  storing done, '"$size"' in [0-9.]+s$')" = 2 ]
cairn rm -q imp:2
expect_exit 0 "import -q" cairn import -q imp:3 small.tar big.tar
check "import -q: nothing on stderr, the id alone on stdout" [ ! -s "$T/stderr" -a "$(grep -cxE "[0-9a-f]{64}" "$T/stdout")" = 1 -a "$(wc -l <"$T/stdout")" = 1 ]
cairn rm -q imp:3

# ---- pull ------------------------------------------------------------------
check "pull on a terminal" on_tty "$T/pull" "cairn pull --insecure --jobs 1 'docker://$PROXY/team/app:1' p:1"
check "pull: fetching with a bar" grep -qE "  fetching $bar  $size / $size" "$T/pull"
check "pull: storing with a bar" grep -qE "  storing $bar  $size / $size" "$T/pull"
check "pull: a rate and the time left" grep -qE "$size/s  ETA [0-9]+(s|m[0-9]{2}s)$" "$T/pull"
for id in $(jq -r '.rootfs.diff_ids[] | .[7:19]' <(skopeo inspect --tls-verify=false --config "$SRC")); do
  check "pull: layer $id's final line written once, with its final time (frozen)" \
    [ "$(count "$T/pull" '^(.\[[0-9]+A)?.\[K'"$id"'  downloaded '"$size"' in [0-9.]+s$')" = 1 ]
done
cairn rm -q p:1
expect_exit 0 "pull without a terminal" cairn pull --insecure "$SRC" p:2
check "pull: one plain line per layer" [ "$(grep -c . "$T/stderr")" = 2 -a \
  "$(count "$T/stderr" '^[0-9a-f]{12}  downloaded '"$size"' in [0-9.]+s$')" = 2 ]
expect_exit 0 "pull -q" cairn pull -q --insecure "$SRC" p:3
check "pull -q: nothing on stderr" [ ! -s "$T/stderr" ]

# ---- export ----------------------------------------------------------------
check "export on a terminal" on_tty "$T/exp" "cairn export p:2 >'$T/out.tar'"
check "export: a bar with percent and bytes" grep -qE "^(.\[1A)?.\[Kp:2  writing $bar  $size / $data" "$T/exp"
check "export: the final line written once" \
  [ "$(count "$T/exp" '^(.\[1A)?.\[Kp:2  writing done, '"$data"' in [0-9.]+s$')" = 1 ]
check "export: the tar is whole" cmp -s <(tar -xOf "$T/out.tar" data) big/data
expect_exit 0 "export without a terminal" sh -c "cairn export p:2 >'$T/out.tar'"
check "export: one plain line" grep -qxE "p:2  writing done, $data in [0-9.]+s" "$T/stderr"
check "export: only it" [ "$(grep -c . "$T/stderr")" = 1 ]
expect_exit 0 "export -q" sh -c "cairn export -q p:2 >'$T/out.tar'"
check "export -q: nothing on stderr" [ ! -s "$T/stderr" ]

# ---- gc --------------------------------------------------------------------
mkdir -p "$T/l1" "$T/l2"
echo one >"$T/l1/one"
echo two >"$T/l2/two"
mktar "$T/l1" "$T/l1.tar"
mktar "$T/l2" "$T/l2.tar"
# rm frees an image's layers itself: layers whose image row is gone (as
# test_cli_units.sh makes them) are gc's.
gc_work() {
  local id
  id=$(cairn import g:1 "$T/l1.tar" "$T/l2.tar" 2>/dev/null) &&
    sqlite3 "$STORE/meta.db" "PRAGMA foreign_keys=ON; DELETE FROM images WHERE id = '$id'" &&
    rm -f "$STORE/refs" # a hand edit of images drops STORE/refs, as cairn's writers do
}
setup gc_work
check "gc on a terminal" on_tty "$T/gc" "cairn gc"
for step in "unused layers and blobs" "blob files no layer uses" "pin, index and temporary files"; do
  check "gc: '$step' written once, done" \
    [ "$(count "$T/gc" "^(.\[1A)?.\[K$step  done in [0-9.]+s$")" = 1 ]
done
check "gc: freed the layers" grep -q "freed 2 layers" "$T/gc"
expect_exit 0 "gc without a terminal" cairn gc
check "gc: one plain line per step" [ "$(grep -c . "$T/stderr")" = 3 -a \
  "$(count "$T/stderr" '^[a-z, ]+  done in [0-9.]+s$')" = 3 ]
setup gc_work
expect_exit 0 "gc -q" cairn gc -q
check "gc -q: nothing on stderr or stdout" [ ! -s "$T/stderr" -a ! -s "$T/stdout" ]
check "gc -q: still freed them (the 2 layers of p:2 are left)" [ "$(cairn layers -q | wc -l)" = 2 ]
finish
