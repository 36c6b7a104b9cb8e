#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_mount_restore.sh — a simulated reboot (every cairn process killed,
# every mount lazily unmounted, the store kept) followed by `cairn mount
# --restore` gives back every recorded mount, with the same content, its
# image pinned by the new supervisor; a container (crun) runs on a restored
# root. A record whose image was removed while it was not mounted is
# reported (exit 3) and forgotten, not skipped. Records of an earlier boot
# survive gc (they are what --restore republishes); the test makes its
# records look older than this boot (since = 0).
# Fails without --restore (exit 2) and without the boot check in
# cn_mount_clean_stale (rm's sweep would drop the records).
source "$(dirname "$0")/mountlib.sh"

command -v crun >/dev/null || fail "crun is not installed"
minbase_layers "$TMP/layers"
cairn import debian:12 "$TMP"/layers/layer{1,2,3}.tar >/dev/null 2>&1
$FSTREE make-layers "$TMP/small"
cairn import app:1 "$TMP"/small/layer{1,2,3}.tar >/dev/null 2>&1
cairn import gone:1 "$TMP"/small/layer1.tar >/dev/null 2>&1
bundle=$TMP/bundle
mkdir -p "$bundle/rootfs" "$TMP/app" "$TMP/gone"
cairn mount -q debian:12 "$bundle/rootfs"
cairn mount -q app:1 "$TMP/app"
cairn mount -q gone:1 "$TMP/gone"
sums() { (cd "$1" && find . -type f -print0 | sort -z | xargs -0 md5sum); }
sums "$bundle/rootfs" >"$TMP/debian.before"
sums "$TMP/app" >"$TMP/app.before"

# ---- the reboot: every cairn process gone, every mount gone, the store kept
pids=$(cairn mounts --json | jq -r '.[].pid')
for p in $pids; do
  kids=$(cat "/proc/$p/task/$p/children" 2>/dev/null || true)
  kill -9 $p $kids
done
for p in $pids; do wait_for 50 pid_gone "$p" || fail "cairnfs $p survived kill -9"; done
for m in "$bundle/rootfs" "$TMP/app" "$TMP/gone"; do umount -l "$m"; done
[ "$(cairn mounts --json | jq '[.[] | select(.state == "stale")] | length')" = 3 ] ||
  fail "not 3 stale records: $(cairn mounts --json)"
sqlite3 "$STORE/meta.db" "UPDATE mounts SET since = 0" # written before this boot
cairn rm gone:1 >/dev/null || fail "a stale record blocked rm"
cairn gc >/dev/null 2>&1
[ "$(cairn mounts --json | jq length)" = 3 ] || fail "gc dropped an earlier boot's record"
pass "simulated reboot: 3 stale records of an earlier boot, kept by rm and gc"

assert_status 3 cairn mount --restore
grep -q "$TMP/gone: image .* was removed" "$TMP/err" || fail "gone image not reported: $(cat "$TMP/err")"
[ "$(sort "$TMP/out")" = "$(printf '%s\n' "$TMP/app" "$bundle/rootfs" | sort)" ] ||
  fail "restore printed: $(cat "$TMP/out")"
[ "$(mount_state "$bundle/rootfs")" = live ] || fail "debian not live: $(cairn mounts --json)"
[ "$(mount_state "$TMP/app")" = live ] || fail "app not live"
[ -z "$(mount_state "$TMP/gone")" ] || fail "the gone image's record stayed"
sums "$bundle/rootfs" | cmp -s - "$TMP/debian.before" || fail "debian content differs"
sums "$TMP/app" | cmp -s - "$TMP/app.before" || fail "app content differs"
sup=$(mount_pid "$TMP/app")
"$CAIRN_BIN/cairn-pin" --store "$STORE" ls --json | jq -e --argjson p "$sup" \
  '[.[] | select(.pid == $p)] | length > 0' >/dev/null || fail "restored mount holds no pin"
assert_status 4 cairn rm app:1
pass "restore: 2 mounts back with the same content and pins, the gone image reported (exit 3)"

assert_status 0 cairn mount --restore
[ ! -s "$TMP/out" ] || fail "a second restore mounted: $(cat "$TMP/out")"
pass "restore again: nothing to do, exit 0"

(cd "$bundle" && crun spec)
jq '.root.path = "rootfs" | .root.readonly = true | .process.terminal = false
    | .process.args = ["/bin/sh", "-c", "cat /etc/os-release"]' \
  "$bundle/config.json" >"$bundle/config.new"
mv "$bundle/config.new" "$bundle/config.json"
timeout 60 unshare -m --propagation private sh -c '
  umount /sys/fs/cgroup/unified 2>/dev/null
  exec crun --cgroup-manager=disabled run --bundle "$1" "$2"' sh "$bundle" "cairn-restore-$$" \
  </dev/null >"$TMP/out" 2>"$TMP/err" || fail "crun failed: $(cat "$TMP/err")"
grep -q '^PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"' "$TMP/out" ||
  fail "unexpected output: $(cat "$TMP/out") $(cat "$TMP/err")"
pass "crun runs a container on the restored root"

cairn umount "$bundle/rootfs" "$TMP/app" >/dev/null
[ "$(cairn mounts --json | jq length)" = 0 ] || fail "records left"
