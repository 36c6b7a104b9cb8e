# SPDX-License-Identifier: Apache-2.0
# containerd-toml.sh — the config of a private containerd, as
# tests/lib/containerd.sh and bench/bench_containerd.sh write it. Sourced
# alone (it needs nothing of test-lib.sh, and defines nothing else):
#   ctd_toml DIR [PLUGIN...]  prints a config (version 2) with containerd's
#                             root, state and socket (containerd.sock) in
#                             DIR, and a proxy snapshotter PLUGIN for each
#                             one named, on DIR/PLUGIN.sock.
# What a caller adds it prints around it: its top-level keys before, its
# tables after.
ctd_toml() {
  local dir=$1 p
  shift
  cat <<TOML
version = 2
root = "$dir/root"
state = "$dir/state"
[grpc]
  address = "$dir/containerd.sock"
[proxy_plugins]
TOML
  for p in "$@"; do
    printf '  [proxy_plugins.%s]\n    type = "snapshot"\n    address = "%s/%s.sock"\n' \
      "$p" "$dir" "$p"
  done
}
