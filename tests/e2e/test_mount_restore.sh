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
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib mount
set -e

command -v crun >/dev/null || fail "crun is not installed"
minbase_layers "$T/layers"
cairn import debian:12 "$T"/layers/layer{1,2,3}.tar >/dev/null 2>&1
$FSTREE make-layers "$T/small"
cairn import app:1 "$T"/small/layer{1,2,3}.tar >/dev/null 2>&1
cairn import gone:1 "$T"/small/layer1.tar >/dev/null 2>&1
bundle=$T/bundle
mkdir -p "$bundle/rootfs" "$T/app" "$T/gone"
cairn mount -q debian:12 "$bundle/rootfs"
cairn mount -q app:1 "$T/app"
cairn mount -q gone:1 "$T/gone"
sums() { (cd "$1" && find . -type f -print0 | sort -z | xargs -0 md5sum); }
sums "$bundle/rootfs" >"$T/debian.before"
sums "$T/app" >"$T/app.before"

# ---- the reboot: every cairn process gone, every mount gone, the store kept
pids=$(cairn mounts --json | jq -r '.[].pid')
for p in $pids; do
  kids=$(cat "/proc/$p/task/$p/children" 2>/dev/null || true)
  kill -9 $p $kids
done
for p in $pids; do wait_for 5 pid_gone "$p" || fail "cairnfs $p survived kill -9"; done
for m in "$bundle/rootfs" "$T/app" "$T/gone"; do umount -l "$m"; done
[ "$(cairn mounts --json | jq '[.[] | select(.state == "stale")] | length')" = 3 ] ||
  fail "not 3 stale records: $(cairn mounts --json)"
sqlite3 "$STORE/meta.db" "UPDATE mounts SET since = 0" # written before this boot
cairn rm gone:1 >/dev/null || fail "a stale record blocked rm"
cairn gc >/dev/null 2>&1
[ "$(cairn mounts --json | jq length)" = 3 ] || fail "gc dropped an earlier boot's record"
ok "simulated reboot: 3 stale records of an earlier boot, kept by rm and gc"

expect_exit 3 "cairn mount --restore" cairn mount --restore
grep -q "$T/gone: image .* was removed" "$T/stderr" || fail "gone image not reported: $(cat "$T/stderr")"
[ "$(sort "$T/stdout")" = "$(printf '%s\n' "$T/app" "$bundle/rootfs" | sort)" ] ||
  fail "restore printed: $(cat "$T/stdout")"
[ "$(mount_state "$bundle/rootfs")" = live ] || fail "debian not live: $(cairn mounts --json)"
[ "$(mount_state "$T/app")" = live ] || fail "app not live"
[ -z "$(mount_state "$T/gone")" ] || fail "the gone image's record stayed"
sums "$bundle/rootfs" | cmp -s - "$T/debian.before" || fail "debian content differs"
sums "$T/app" | cmp -s - "$T/app.before" || fail "app content differs"
sup=$(mount_pid "$T/app")
"$CAIRN_BIN/cairn-pin" --store "$STORE" ls --json | jq -e --argjson p "$sup" \
  '[.[] | select(.pid == $p)] | length > 0' >/dev/null || fail "restored mount holds no pin"
expect_exit 4 "cairn rm app:1" cairn rm app:1
ok "restore: 2 mounts back with the same content and pins, the gone image reported (exit 3)"

expect_exit 0 "cairn mount --restore" cairn mount --restore
[ ! -s "$T/stdout" ] || fail "a second restore mounted: $(cat "$T/stdout")"
ok "restore again: nothing to do, exit 0"

(cd "$bundle" && crun spec)
jq '.root.path = "rootfs" | .root.readonly = true | .process.terminal = false
    | .process.args = ["/bin/sh", "-c", "cat /etc/os-release"]' \
  "$bundle/config.json" >"$bundle/config.new"
mv "$bundle/config.new" "$bundle/config.json"
timeout 60 "${PRIVATE_NS[@]}" sh -c '
  umount /sys/fs/cgroup/unified 2>/dev/null
  exec crun --cgroup-manager=disabled run --bundle "$1" "$2"' sh "$bundle" "cairn-restore-$$" \
  </dev/null >"$T/stdout" 2>"$T/stderr" || fail "crun failed: $(cat "$T/stderr")"
grep -q '^PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"' "$T/stdout" ||
  fail "unexpected output: $(cat "$T/stdout") $(cat "$T/stderr")"
ok "crun runs a container on the restored root"

cairn umount "$bundle/rootfs" "$T/app" >/dev/null
[ "$(cairn mounts --json | jq length)" = 0 ] || fail "records left"
