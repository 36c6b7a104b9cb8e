#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# demo.sh — sets up (scripts/setup.sh), then shows cairn on real data nobody
# here wrote: three Debian packages' file trees become a three-layer image,
# which is mounted with cairnfs, looked at with ls, find, cat and tar, run
# with crun, and whose pins are shown by cairn-pin and lslocks.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null
ROOT=$(pwd)
export PATH="$ROOT/build:$PATH"
D=${CAIRN_DEMO_DIR:-/tmp/cairn-demo}
export CAIRN_STORE=$D/store
MNT=$D/mnt
cleanup() { cairn umount "$MNT" >/dev/null 2>&1 || true; }
trap cleanup EXIT
cleanup
rm -rf "$D" && mkdir -p "$D/debs" "$MNT"
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
run() { printf '$ %s\n' "$*"; "$@"; }

step "fetch three real Debian packages"
cd "$D/debs"
apt-get download base-files busybox-static bash >/dev/null 2>&1 ||
  { apt-get update -qq && apt-get download base-files busybox-static bash >/dev/null; }
ls -l ./*.deb
cd "$D"
for p in base-files busybox-static bash; do dpkg-deb --fsys-tarfile debs/${p}_*.deb >"$p.tar"; done
# A top layer made here: /bin/sh and friends from busybox, and a whiteout.
mkdir -p top/bin top/usr/share/doc
ln -s /bin/busybox top/bin/sh && ln -s /bin/busybox top/bin/ls && ln -s /bin/busybox top/bin/cat
: >top/usr/share/doc/.wh.bash
tar -C top -czf top.tar.gz .
zstd -q bash.tar -o bash.tar.zst

step "import them as one image, bottom layer first (tar, tar.zst, tar, tar.gz)"
run cairn import demo:1 base-files.tar bash.tar.zst busybox-static.tar top.tar.gz
run cairn images
run cairn layers

step "mount it with cairnfs and look with standard tools"
run cairn mount demo:1 "$MNT"
run cairn mounts
run ls -l "$MNT" "$MNT/bin/sh"
run cat "$MNT/etc/os-release"
printf '$ find %s | wc -l\n' "$MNT"; find "$MNT" | wc -l
printf '$ tar -C %s -c . | wc -c\n' "$MNT"; tar -C "$MNT" -c . | wc -c
printf '$ ls %s/usr/share/doc | grep -c bash   # whited out by the top layer\n' "$MNT"
ls "$MNT/usr/share/doc" | grep -c bash || true

step "run a container on the mount with crun"
bundle=$D/bundle && mkdir -p "$bundle"
(cd "$bundle" && crun spec)
jq --arg r "$MNT" '.root = {path: $r, readonly: true} | .process.terminal = false |
  .process.args = ["/bin/sh", "-c", "echo hello from a cairnfs root; head -2 /etc/os-release"]' \
  "$bundle/config.json" >"$bundle/c.json" && mv "$bundle/c.json" "$bundle/config.json"
unshare -m --propagation private sh -c "umount /sys/fs/cgroup/unified 2>/dev/null;
  exec crun --cgroup-manager=disabled run --bundle '$bundle' cairn-demo-$$" </dev/null

step "the pins: the mount holds its image and every layer"
run cairn-pin ls
printf '$ lslocks -o COMMAND,PID,TYPE,MODE,PATH | grep %s\n' "$CAIRN_STORE"; lslocks -o COMMAND,PID,TYPE,MODE,PATH | grep -E "^COMMAND|$CAIRN_STORE/pins/" || true

step "rm of a mounted image is refused (exit 4) and names the holder"
run cairn rm demo:1 || echo "(exit $?)"

step "a hold pins it for the life of a command"
cairn-pin hold demo:1 -- sleep 2 &
sleep 0.5
run cairn-pin ls demo:1
wait

step "unmount, remove, collect, verify"
run cairn umount "$MNT"
run cairn rm demo:1
run cairn gc
run cairn fsck
run cairn images
