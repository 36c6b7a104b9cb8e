#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_restore_unit.sh — the systemd unit `cmake --install` installs
# (packaging/cairn-restore.service.in): systemd-analyze verify accepts it, it is
# ordered before podman, containerd and cri-o, and after a simulated reboot
# `systemctl start cairn-restore.service` republishes the recorded mount.
# PID 1 of the test machine is not systemd (systemctl and systemd-run
# cannot connect), so the test starts a systemd manager of its own: a user
# instance (`systemd --user`) in a private mount namespace whose
# /run/systemd is a tmpfs holding system/ (the mark systemd takes for
# "booted with systemd"; the host's /run is not touched), links the
# installed unit into it (--runtime, with HOME and XDG dirs in the test's
# directory: nothing is written to the real home) and starts it with
# systemctl. The restored mount
# lives in that namespace, where it is checked and unmounted.
# Fails without the unit (nothing installed) or if its command fails.
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib mount
set -e

command -v systemd-analyze >/dev/null || { echo "skip: no systemd-analyze"; exit 77; }
cmake --install "$CAIRN_BIN" --prefix "$T/prefix" >/dev/null
unit=$T/prefix/lib/systemd/system/cairn-restore.service
[ -f "$unit" ] || fail "cmake --install put no unit in lib/systemd/system"
systemd-analyze verify --man=no "$unit" 2>"$T/stderr" || fail "systemd-analyze verify: $(cat "$T/stderr")"
for rt in podman.service containerd.service crio.service; do
  grep -q "^Before=.*\b$rt\b" "$unit" || fail "not ordered before $rt"
done
exec_start=$(sed -n 's/^ExecStart=//p' "$unit")
[ "$exec_start" = "$T/prefix/bin/cairn mount --restore" ] || fail "ExecStart=$exec_start"
ok "installed unit: verified, before the runtimes, ExecStart in the install's prefix"

$FSTREE make-layers "$T/layers"
cairn import app:1 "$T"/layers/layer{1,2,3}.tar >/dev/null 2>&1
mkdir "$T/mnt"
cairn mount -q app:1 "$T/mnt"
sup=$(mount_pid "$T/mnt")
kill -9 "$sup" $(cat "/proc/$sup/task/$sup/children")
wait_for 5 pid_gone "$sup" || fail "supervisor survived kill -9"
umount -l "$T/mnt"
cat >"$T/in-ns.sh" <<'EOS'
set -eu
unit=$1 store=$2 cairn=$3 mnt=$4
export XDG_RUNTIME_DIR=$5
# Nothing of the manager's or systemctl's state outside the test's dir.
export HOME=$XDG_RUNTIME_DIR/home XDG_CONFIG_HOME=$XDG_RUNTIME_DIR/home/config
export XDG_DATA_HOME=$XDG_RUNTIME_DIR/home/data XDG_STATE_HOME=$XDG_RUNTIME_DIR/home/state
export XDG_CACHE_HOME=$XDG_RUNTIME_DIR/home/cache
mkdir -p "$HOME"
mount -t tmpfs tmpfs /run/systemd
mkdir /run/systemd/system
/lib/systemd/systemd --user >"$XDG_RUNTIME_DIR/manager.log" 2>&1 &
manager=$!
trap 'kill $manager 2>/dev/null || true' EXIT
for ((i = 0; i < 50; i++)); do
  [ -S "$XDG_RUNTIME_DIR/systemd/private" ] && break
  sleep 0.1
done
systemctl --user link --runtime "$unit" >/dev/null
systemctl --user set-environment CAIRN_STORE="$store"
systemctl --user start cairn-restore.service
systemctl --user is-active cairn-restore.service
"$cairn" --store "$store" mounts --json >"$XDG_RUNTIME_DIR/mounts.json"
ls "$mnt" >"$XDG_RUNTIME_DIR/ls"
"$cairn" --store "$store" umount -q "$mnt"
systemctl --user stop cairn-restore.service
EOS
mkdir -m 700 "$T/xdg"
timeout 60 "${PRIVATE_NS[@]}" bash "$T/in-ns.sh" "$unit" "$STORE" \
  "$CAIRN_BIN/cairn" "$T/mnt" "$T/xdg" >"$T/stdout" 2>"$T/stderr" ||
  fail "systemctl start cairn-restore.service: $(cat "$T/stderr" "$T/xdg/manager.log" 2>/dev/null | tail -5)"
[ "$(cat "$T/stdout")" = active ] || fail "unit not active: $(cat "$T/stdout")"
jq -e --arg d "$T/mnt" '.[] | select(.dir == $d and .state == "live")' "$T/xdg/mounts.json" \
  >/dev/null || fail "not restored: $(cat "$T/xdg/mounts.json")"
grep -qx big.bin "$T/xdg/ls" || fail "restored mount has no content: $(cat "$T/xdg/ls")"
ok "systemctl start cairn-restore.service republishes a mount after a simulated reboot"
