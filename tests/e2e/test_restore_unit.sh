#!/bin/bash
# test_restore_unit.sh — the systemd unit `cmake --install` installs
# (tools/cairn-restore.service.in): systemd-analyze verify accepts it, it is
# ordered before podman, containerd and cri-o, and after a simulated reboot
# its ExecStart republishes the recorded mount. Where systemd is PID 1 the
# command runs as a transient unit (systemd-run --wait); elsewhere (this
# test machine: PID 1 is not systemd, systemctl and systemd-run cannot
# connect) the ExecStart line is run as systemd would, with the unit's
# environment. Fails without the unit (nothing installed).
source "$(dirname "$0")/mountlib.sh"

command -v systemd-analyze >/dev/null || { echo "skip: no systemd-analyze"; exit 77; }
cmake --install "$CAIRN_BIN" --prefix "$TMP/prefix" >/dev/null
unit=$TMP/prefix/lib/systemd/system/cairn-restore.service
[ -f "$unit" ] || fail "cmake --install put no unit in lib/systemd/system"
systemd-analyze verify --man=no "$unit" 2>"$TMP/err" || fail "systemd-analyze verify: $(cat "$TMP/err")"
for rt in podman.service containerd.service crio.service; do
  grep -q "^Before=.*\b$rt\b" "$unit" || fail "not ordered before $rt"
done
exec_start=$(sed -n 's/^ExecStart=//p' "$unit")
[ "$exec_start" = "$TMP/prefix/bin/cairn mount --restore" ] || fail "ExecStart=$exec_start"
pass "installed unit: verified, before the runtimes, ExecStart in the install's prefix"

$FSTREE make-layers "$TMP/layers"
cairn import app:1 "$TMP"/layers/layer{1,2,3}.tar >/dev/null 2>&1
mkdir "$TMP/mnt"
cairn mount -q app:1 "$TMP/mnt"
sup=$(mount_pid "$TMP/mnt")
kill -9 "$sup" $(cat "/proc/$sup/task/$sup/children")
wait_for 50 pid_gone "$sup" || fail "supervisor survived kill -9"
umount -l "$TMP/mnt"
if [ -d /run/systemd/system ]; then
  systemd-run --quiet --wait --collect -p KillMode=process -p Environment=CAIRN_STORE="$STORE" \
    $exec_start || fail "the unit's command failed under systemd-run"
else
  env CAIRN_STORE="$STORE" $exec_start >/dev/null || fail "the unit's command failed"
fi
[ "$(mount_state "$TMP/mnt")" = live ] || fail "not restored: $(cairn mounts --json)"
[ -f "$TMP/mnt/big.bin" ] || fail "restored mount has no content"
pass "the unit's command republishes a mount after a simulated reboot"
cairn umount "$TMP/mnt" >/dev/null
