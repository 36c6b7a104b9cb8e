#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_als_unit.sh — the systemd unit that serves podman's Additional
# Layer Store from boot (packaging/cairn-als.service.in, installed by
# `cmake --install`): systemd-analyze verify accepts it, it is ordered
# before podman, its command is the install's cairnfs --als with
# --podman-root; and its ExecStartPre and ExecStart, run by hand as
# systemd would (its Environment= set to the test's directories, as a
# drop-in would), create the directory and serve the pulled layer, and
# pin again, as after a reboot, the layer a podman image of the graphroot
# stands on. Fails without the unit (nothing installed).
source "$(dirname "$0")/../lib/test-lib.sh"
OCI_IMAGE="python3 $HELPERS/oci_image.py"

command -v systemd-analyze >/dev/null || { echo "skip: no systemd-analyze"; exit 77; }
cmake --install "$CAIRN_BIN" --prefix "$T/prefix" >/dev/null
unit=$T/prefix/lib/systemd/system/cairn-als.service
check "cmake --install puts cairn-als.service in lib/systemd/system" test -f "$unit"
[ -f "$unit" ] || exit 1
check "systemd-analyze verify accepts it" systemd-analyze verify --man=no "$unit"
for rt in podman.service podman-restart.service; do
  check "it is ordered before $rt" grep -q "^Before=.*\b$rt\b" "$unit"
done
check "it is wanted at boot" grep -qx 'WantedBy=multi-user.target' "$unit"
check "it forks (ready once the ALS is mounted)" grep -qx 'Type=forking' "$unit"
exec_pre=$(sed -n 's/^ExecStartPre=//p' "$unit")
exec_start=$(sed -n 's/^ExecStart=//p' "$unit")
check "ExecStart is the install's cairnfs --als with --podman-root" test "$exec_start" = \
  "$T/prefix/bin/cairnfs --als --podman-root \${CAIRN_PODMAN_ROOT} \${CAIRN_ALS}"
check "the default directory is the one doc/als.md's storage.conf line names" \
  grep -qx 'Environment=CAIRN_ALS=/var/lib/cairn-als' "$unit"
check "doc/als.md gives podman's storage.conf line for it" \
  grep -q 'additionallayerstores = \["/var/lib/cairn-als:ref"\]' "$CAIRN_SRC/doc/als.md"

# A pulled image: its compressed layer is kept, the ALS serves it.
mkdir -p "$T/l"
echo hi >"$T/l/file"
mktar "$T/l" "$T/l.tar"
(cd "$T" && $OCI_IMAGE add oci app linux/amd64 l.tar:gzip >/dev/null) || exit 1
cairn pull -q "oci:$T/oci:app" app:1 >/dev/null || exit 1
digest=$(ls "$T/oci/blobs/sha256" | while read -r b; do
  [ "$(head -c 2 "$T/oci/blobs/sha256/$b" | od -An -tx1 | tr -d ' ')" = 1f8b ] && echo "sha256:$b"
done)
[ -n "$digest" ] || exit 1
layer=$(cairn inspect app:1 | jq -r '.layers[0].id')

# What systemd runs at boot, with the unit's variables set (no word of
# them split: ${VAR} is one argument) and the store from the environment.
als=$T/var/cairn-als graphroot=$T/containers
mkdir -p "$graphroot/overlay/podmanlayer1"
echo "$als/$digest" >"$graphroot/overlay/podmanlayer1/additionallayer" # podman's own record
run_unit_line() {
  local line=${1//\$\{CAIRN_ALS\}/$als}
  line=${line//\$\{CAIRN_PODMAN_ROOT\}/$graphroot}
  [[ $line != *'$'* ]] || return 1 # a variable the test does not set
  # shellcheck disable=SC2086 # the unit's words
  env CAIRN_STORE="$STORE" $line
}
check "ExecStartPre creates the directory" run_unit_line "$exec_pre"
check "ExecStart mounts the ALS and returns" run_unit_line "$exec_start"
on_exit "umount -l '$als'"
check "the ALS serves the pulled layer" grep -qx hi "$als/$digest/diff/file"
check "its info names the layer" grep -q "$layer" "$als/$digest/info"
purpose=$(cairn-pin ls --json | jq -r --arg id "$layer" '.[] | select(.target == $id) | .purpose')
check "the layer podman's image stands on is pinned again at start ($purpose)" \
  test "$purpose" = "als $als (podman)"
umount "$als"
check "it is unmounted" bash -c "! grep -q ' $als fuse' /proc/self/mounts"

# On a fresh podman root (no overlay/ yet) it starts without a word.
als2=$T/var/als2
mkdir -p "$als2" "$T/fresh-root"
check "cairnfs --als on a fresh podman root" env CAIRN_STORE="$STORE" \
  "$CAIRN_BIN/cairnfs" --als --podman-root "$T/fresh-root" "$als2" 2>"$T/fresh.err"
on_exit "umount -l '$als2' 2>/dev/null"
check "it says nothing on a fresh podman root: $(cat "$T/fresh.err")" test ! -s "$T/fresh.err"
# cairn mounts lists it (no image), cairn umount stops it, as its own
# daemon, and the daemon exits, its record with it.
als_pid=$(pgrep -f "cairnfs --als --podman-root $T/fresh-root" | head -1)
cairn mounts --json | jq -e --arg d "$als2" --argjson p "${als_pid:-0}" \
  '.[] | select(.dir == $d and .pid == $p and .state == "live" and .image == "")' \
  >/dev/null && ok "cairn mounts lists the ALS" || fail "cairn mounts: $(cairn mounts)"
expect_exit 0 "cairn umount of the ALS" cairn umount "$als2"
check "cairn umount prints the ALS's directory" grep -qx "$als2" "$T/stdout"
check "the ALS is unmounted" bash -c "! grep -q ' $als2 fuse' /proc/self/mounts"
check "its daemon exits" wait_for 10 pid_gone "${als_pid:-0}"
[[ $(cairn mounts --json | jq --arg d "$als2" '[.[] | select(.dir == $d)] | length') == 0 ]] ||
  fail "the ALS's record stays: $(cairn mounts)"
finish
