#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_crun.sh — a real OCI runtime (crun) runs a container whose root
# filesystem is a cairnfs mount of a Debian minbase image (root.readonly).
# crun 1.8 refuses hybrid cgroups, so it runs in a private mount namespace
# without the cgroup2 mount and without a cgroup manager (doc/testing.md).
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib mount
set -e

command -v crun >/dev/null || fail "crun is not installed"
minbase_layers "$T/layers"
cairn import debian:12 "$T"/layers/layer{1,2,3}.tar >/dev/null
bundle=$T/bundle
mkdir -p "$bundle/rootfs"
cairn mount debian:12 "$bundle/rootfs"

(cd "$bundle" && crun spec)
jq '.root.path = "rootfs" | .root.readonly = true | .process.terminal = false
    | .process.args = ["/bin/sh", "-c", "cat /etc/os-release"]' \
  "$bundle/config.json" >"$bundle/config.new"
mv "$bundle/config.new" "$bundle/config.json"

name=cairn-test-$$
timeout 60 "${PRIVATE_NS[@]}" sh -c '
  umount /sys/fs/cgroup/unified 2>/dev/null
  exec crun --cgroup-manager=disabled run --bundle "$1" "$2"' sh "$bundle" "$name" \
  </dev/null >"$T/stdout" 2>"$T/stderr" || fail "crun failed: $(cat "$T/stderr")"
grep -q '^PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"' "$T/stdout" ||
  fail "unexpected output: $(cat "$T/stdout") $(cat "$T/stderr")"
ok "crun ran /bin/sh -c 'cat /etc/os-release' from a cairnfs root"

cairn umount "$bundle/rootfs"
not_mounted "$bundle/rootfs" || fail "umount"
