#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_mount_detach.sh — `cairn umount` of a mount that a running container
# (crun) still uses detaches the host's view only: it exits 4 naming the
# processes whose mount namespaces hold the mount, `cairn mounts` says
# detached, the daemon's pins hold (`cairn-pin ls` says detached) and rm
# refuses; the container runs to its end with its root filesystem intact;
# then the daemon exits by itself, its pins and record go, and rm works.
# crun runs as test_crun.sh runs it (doc/testing.md): in a private mount
# namespace — which holds a copy of the mount too, as the container's does.
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib mount
set -e

command -v crun >/dev/null || fail "crun is not installed"
minbase_layers "$T/layers"
cairn import debian:12 "$T"/layers/layer{1,2,3}.tar >/dev/null
bundle=$T/bundle
rootfs=$bundle/rootfs
mkdir -p "$rootfs"
cairn mount debian:12 "$rootfs"
daemon=$(mount_pid "$rootfs")

(cd "$bundle" && crun spec)
# The container waits for $T/sig/go, its /mnt/go (at most 60 s), so that it outlasts
# the checks below however slow the machine is.
mkdir -p "$T/sig"
jq --arg sig "$T/sig" '.root.path = "rootfs" | .root.readonly = true | .process.terminal = false
    | .mounts += [{destination: "/mnt", type: "bind", source: $sig, options: ["rbind", "ro"]}]
    | .process.args = ["/bin/sh", "-c",
        "echo started; i=0; while [ ! -e /mnt/go ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done; cat /etc/os-release"]' \
  "$bundle/config.json" >"$bundle/config.new"
mv "$bundle/config.new" "$bundle/config.json"

bg_start timeout 60 "${PRIVATE_NS[@]}" sh -c '
  umount /sys/fs/cgroup/unified 2>/dev/null
  exec crun --cgroup-manager=disabled run --bundle "$1" "$2"' sh "$bundle" "cairn-detach-$$" \
  </dev/null >"$T/ctr.out" 2>"$T/ctr.err"
runner=${BG_PIDS[-1]}
wait_for 10 grep -q started "$T/ctr.out" || fail "container did not start: $(cat "$T/ctr.err")"

# ---- while the container runs
expect_exit 4 "cairn umount $rootfs" cairn umount "$rootfs"
grep -Eq "^cairn: umount: $rootfs: detached here, still in use by pid [0-9]+ \((crun|sh|sleep)\)" \
  "$T/stderr" || fail "umount message: $(cat "$T/stderr")"
[ "$(wc -l <"$T/stderr")" = 1 ] || fail "umount said more than one line: $(cat "$T/stderr")"
not_mounted "$rootfs" || fail "the host's view is still mounted"
pid_gone "$daemon" && fail "umount stopped the daemon under a running container"
[ "$(mount_state "$rootfs")" = detached ] || fail "mounts: $(cairn mounts --json)"
cairn mounts | grep -q detached || fail "mounts table: $(cairn mounts)"
pins=$(cairn_pin ls --json)
jq -e --arg p "mount $rootfs (detached)" --argjson d "$daemon" \
  'length > 1 and all(.[]; .pid == $d and .stale == false and .purpose == $p)' <<<"$pins" \
  >/dev/null || fail "pins of a detached mount: $pins"
expect_exit 4 "cairn rm debian:12" cairn rm debian:12
grep -q "detached" "$T/stderr" || fail "rm message: $(cat "$T/stderr")"
cairn gc >/dev/null
[ "$(cairn layers --json | jq length)" = 3 ] || fail "gc removed layers of a detached mount"
expect_exit 4 "cairn umount $rootfs" cairn umount "$rootfs"
ok "umount under a running container: detached, exit 4 naming a holder, pins hold, rm refused"

# ---- the container runs to its end with its root filesystem
touch "$T/sig/go"
status=0
wait "$runner" || status=$?
[ "$status" = 0 ] || fail "container exited $status: $(cat "$T/ctr.err")"
grep -q '^PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"' "$T/ctr.out" ||
  fail "container output cut short: $(cat "$T/ctr.out") $(cat "$T/ctr.err")"
ok "the container finished with its full output"

# ---- then the daemon exits by itself and releases everything
wait_for 10 pid_gone "$daemon" || fail "daemon outlived the last user of its mount"
[ "$(cairn_pin ls --json | jq length)" = 0 ] || fail "pins left: $(cairn_pin ls)"
[ "$(cairn mounts --json | jq length)" = 0 ] || fail "record left: $(cairn mounts --json)"
cairn umount "$rootfs" || fail "umount after the end"
cairn rm debian:12 >/dev/null || fail "rm after the container ended"
ok "daemon exited by itself: pins and record gone, rm works"
