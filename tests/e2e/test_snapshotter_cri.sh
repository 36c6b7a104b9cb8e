#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_snapshotter_cri.sh — containerd's CRI plugin (Debian's 1.6, the
# path by which a Kubernetes node runs its pods) on cairn-snapshotter, as
# doc/containerd.md sets it up (snapshotter = "cairn",
# disable_snapshot_annotations = false), driven through the CRI's gRPC
# services by tests/helpers/cri_client.py (Debian has no crictl or
# kubelet). CRI PullImage of an image `cairn push --format estargz` wrote
# fetches its TOCs only (through the counting proxy) and cairn records its
# layers lazily, held by containerd's snapshots (`cairn-pin ls`); a pod
# (the host's network, a pause image of the test's own) runs a container
# of it whose first line, read from a file fetched on first read, is in
# its CRI log; `cairn gc` keeps the layers the running container uses,
# and the background fill its mount started stores every file of them.
# PullImage of a second eStargz image, through the CRI's v1alpha2 API
# (kubelets before 1.26), records its layer lazily and starts the fill
# (its last layer's Prepare): every file of its new layer is stored, with
# no container.
# PullImage of an image `cairn pull` stored fetches none of its layers,
# a container of it in the pod logs its file, and `cairn rm` of it exits
# 4 while containerd's snapshots hold it. PullImage from a registry with
# token auth, with credentials only its request carries: the snapshotter
# has none, its lazy Prepare gives way, and containerd downloads the layer
# into cairn's snapshot. A second pod, on a CNI network of the test's own
# (Debian's reference plugins: bridge, on a bridge device of this run's;
# host-local, on a private /24; loopback), gets an address of that subnet
# (PodSandboxStatus); a container of the lazy image in it sees the pod's
# eth0 and address, which the host's namespace has not, and the host gets
# no address or route of it; StopPodSandbox tears the network down (the
# veth, the namespace, the address). A kernel that makes no bridge skips
# that pod. Once the containers and pods are stopped and removed and the
# images removed (RemoveImage), `cairn gc` frees every layer.
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib registry containerd
ctd_need gcc
pull_test_init
CS=$STORE
db() { sqlite3 "$CS/meta.db" "$@"; }

# The pods' pause image: a static program that waits for its signal.
mkdir -p "$T/pause" "$T/l1/bin" "$T/l1/lib/x86_64-linux-gnu" "$T/l1/lib64" "$T/l2/etc" \
  "$T/lz/bin" "$T/lz/etc" "$T/lz/data"
printf '#include <unistd.h>\nint main(void) { for (;;) pause(); }\n' >"$T/pause.c"
setup gcc -static -O2 -o "$T/pause/pause" "$T/pause.c"
setup tar -C "$T/pause" --numeric-owner --owner=0 --group=0 -cf "$T/pause.tar" .
# A shell and its libraries; a file over it (an image cairn pulls first);
# sleep, a greeting and 8 MiB of data the store has not (pushed eStargz).
cp /bin/dash "$T/l1/bin/dash"
ln -s dash "$T/l1/bin/sh"
cp -L /lib/x86_64-linux-gnu/libc.so.6 "$T/l1/lib/x86_64-linux-gnu/"
cp -L /lib64/ld-linux-x86-64.so.2 "$T/l1/lib64/"
echo "hello from the store" >"$T/l2/etc/greeting"
cp /bin/sleep "$T/lz/bin/"
head -c 8388608 /dev/urandom >"$T/lz/data/big"
echo "hello lazily" >"$T/lz/etc/greeting"
for l in l1 l2 lz; do
  setup tar -C "$T/$l" --numeric-owner --owner=0 --group=0 --sort=name -cf "$T/$l.tar" .
done
OCI_IMAGE_CONFIG='{"config": {"Entrypoint": ["/pause"]}}' \
  setup $OCI_IMAGE add "$T/oci" pause linux/amd64 "$T/pause.tar:gzip" >/dev/null
setup $OCI_IMAGE add "$T/oci" a linux/amd64 "$T/l1.tar:gzip" "$T/l2.tar:gzip" >/dev/null
setup registry_start "$T/reg"
setup registry_push "$T/oci" pause cri/pause:1
setup registry_push "$T/oci" a cri/a:1
setup "$CAIRN_BIN/cairn" --store "$T/src" import -q lz:1 "$T/l1.tar" "$T/lz.tar" >/dev/null
setup "$CAIRN_BIN/cairn" --store "$T/src" push -q --insecure --no-progress --format estargz lz:1 \
  "docker://$REGISTRY/cri/lz:1" >/dev/null 2>&1
setup proxy_start "$T/proxy"
layers() { registry_manifest "cri/$1" 1 | jq -r '.layers[].digest'; }
# A second registry, with token auth (alice, secret), and an eStargz
# image of a layer no other image has.
reg=("$REGISTRY" "$REGISTRY_PORT" "$REGISTRY_DIR" "$REGISTRY_PID")
setup registry_start "$T/reg-auth" "" token
RAUTH=$REGISTRY
mkdir -p "$T/la/data"
head -c 1048576 /dev/urandom >"$T/la/data/private"
setup tar -C "$T/la" --numeric-owner --owner=0 --group=0 -cf "$T/la.tar" .
setup "$CAIRN_BIN/cairn" --store "$T/src" import -q la:1 "$T/l1.tar" "$T/la.tar" >/dev/null
setup "$CAIRN_BIN/cairn" --store "$T/src" push -q --insecure --no-progress --format estargz \
  --creds alice:secret la:1 "docker://$RAUTH/cri/la:1" >/dev/null 2>&1
REGISTRY=${reg[0]} REGISTRY_PORT=${reg[1]} REGISTRY_DIR=${reg[2]} REGISTRY_PID=${reg[3]}
REGISTRY_AUTH=

setup sh -c "'$CAIRN_BIN/cairn' --store '$CS' pull -q --insecure 'docker://$PROXY/cri/a:1' \
  >/dev/null"
ctd_cri "$REGISTRY/cri/pause:1" "$REGISTRY" "$PROXY" "$RAUTH"
# The pods' CNI network: Debian's plugins, the bridge plugin on a bridge
# of this run's own (made here, deleted at exit), host-local addresses of
# a private /24 (its state under $C), loopback; no gateway on the host, no
# masquerade, no port mapping: nothing of iptables or of the host's
# forwarding. A kernel that makes no bridge skips the pod on it.
BR=cairn-br$$ # IFNAMSIZ: 15 characters at most
NET=10.88.$(($$ % 256))
NETNAME=cairn-test-$$
cni=
if ip link add "$BR" type bridge 2>"$T/br.err"; then
  on_exit "ip link del $BR"
  jq -n --arg n "$NETNAME" --arg b "$BR" --arg s "$NET.0/24" --arg d "$C/cni/ipam" \
    '{cniVersion: "1.0.0", name: $n, plugins: [{type: "bridge", bridge: $b, isGateway: false,
      ipMasq: false, ipam: {type: "host-local", dataDir: $d, ranges: [[{subnet: $s}]]}},
      {type: "loopback"}]}' >"$CTD_CNI_CONF/10-cairn-test.conflist"
else
  cni="ip link add $BR type bridge: $(head -1 "$T/br.err")"
fi
ctd_start "$CS"
# the background fills of lazy chains run in sessions of their own
on_exit "for p in \$(pgrep -f -- '--store $CS fill'); do kill \$p; done"
fills_done() {
  local f
  for f in "$CS"/tmp/fill-*.log; do [ ! -e "$f" ] || flock -n "$f" true || return 1; done
}
# cri_to FILE ARGS: cri_ ARGS, its output in FILE
cri_to() { cri_ "${@:2}" >"$1"; }
wait_for 20 cri_to "$T/version" --timeout 2 version ||
  fail "the CRI plugin does not answer: $(grep -i 'cri' "$C/containerd.log" | tail -5)"
check_json "the CRI plugin answers runtime.v1's Version" '.runtime_name == "containerd"' \
  cat "$T/version"
check_json "and runtime.v1alpha2's, kubelet's before 1.26" \
  '.runtime_name == "containerd" and .runtime_api_version == "v1alpha2"' cri_ --api v1alpha2 version

# PullImage of the image cairn pulled: its manifest and config, no layer.
proxy_reset
check "CRI PullImage of the image cairn pulled" cri_to "$T/pull.a" pull "$PROXY/cri/a:1"
for d in $(layers a); do
  check "layer $d: not fetched (requests: $(proxy_fetched "$d"))" test "$(proxy_fetched "$d")" = 0
done
check "the store has its 2 layers and no more" test "$(db 'SELECT count(*) FROM layers')" = 2
check_json "ImageStatus names it by the id PullImage returned" \
  ".image.id == \"$(cat "$T/pull.a")\"" cri_ inspecti "$PROXY/cri/a:1"
check "containerd's snapshots of it are cairn's, in the namespace k8s.io" \
  test "$(ctr_ -n k8s.io snapshots --snapshotter cairn ls | grep -c Committed)" = 2
expect_exit 4 "cairn rm of it: held by the CRI plugin's snapshots" \
  "$CAIRN_BIN/cairn" --store "$CS" rm "$PROXY/cri/a:1"

# PullImage of the eStargz image the store has not: lazy, from its TOCs.
# Its own bytes are counted: no background fill of its last layer's
# Prepare meanwhile (--no-fill; below, the fill its mount starts, and
# the one a PullImage starts).
sn_restart "$CS" --no-fill
size=$(registry_manifest cri/lz 1 | jq '[.layers[].size] | add')
before=$(db 'SELECT id FROM layers ORDER BY id')
proxy_reset
check "CRI PullImage of an eStargz image the store has not" \
  cri_to "$T/pull.lz" pull "$PROXY/cri/lz:1"
got=$(proxy_counts | jq .bytes)
check "it fetched $got bytes, under a tenth of its layers' $size" test "$got" -lt $((size / 10))
for d in $(layers lz); do
  check "blob $d: range requests only" test "$(proxy_log | jq --arg d "$d" \
    '[.[] | select((.[0] | endswith("/blobs/" + $d)) and .[1] == "")] | length')" = 0
done
new=$(comm -13 <(echo "$before") <(db 'SELECT id FROM layers ORDER BY id'))
in=$(echo $new | sed "s/ /','/g")
nl=$(layers lz | wc -l)
check "its $nl layers are new to the store ($(echo $new))" test "$(echo $new | wc -w)" = "$nl"
check "recorded lazily, from their TOCs" \
  test "$(db "SELECT count(*) FROM layer_sources WHERE layer_id IN ('$in')")" = "$nl"
check "its files are pending (etc/greeting not fetched)" \
  test "$(db "SELECT count(*) FROM pending WHERE path = 'etc/greeting'")" -ge 1
for l in $new; do
  check "cairn-pin ls $l: held by a containerd snapshot" sh -c \
    "'$CAIRN_BIN/cairn-pin' --store '$CS' ls $l | grep -q 'containerd snapshot sha256:'"
done

# A pod on the host's network and a container of the lazy image in it.
sn_restart "$CS"
cat >"$T/pod.json" <<EOF
{"metadata": {"name": "cairn-cri", "uid": "$CID", "namespace": "cairn-test"},
 "log_directory": "$T/logs",
 "linux": {"security_context": {"namespace_options": {"network": "NODE"}}}}
EOF
mkdir -p "$T/logs"
pod=$(cri_ runp "$T/pod.json") || fail "CRI RunPodSandbox: $(tail -3 "$C/containerd.log")"
echo "$pod" >>"$CRI_IDS"
ok "CRI RunPodSandbox of a pod on the host's network (pause image pulled onto cairn)"
# cri_container NAME IMAGE SCRIPT [POD POD.json]: a container of IMAGE in
# the pod POD (default: the one on the host's network), on its network,
# that runs `sh -c SCRIPT`, its log NAME.log; its id on stdout and in
# CRI_IDS.
cri_container() {
  local id p=${4:-$pod} pj=${5:-$T/pod.json} net
  net=$(jq -r '.linux.security_context.namespace_options.network // "POD"' "$pj")
  jq -n --arg n "$1" --arg i "$2" --arg s "$3" --arg net "$net" '{metadata: {name: $n},
    image: {image: $i}, command: ["/bin/sh", "-c", $s], log_path: ($n + ".log"),
    linux: {security_context: {namespace_options: {network: $net}}}}' >"$T/$1.json"
  id=$(cri_ create "$p" "$T/$1.json" "$pj") || return 1
  echo "$id" >>"$CRI_IDS"
  echo "$id"
}
ctr=$(cri_container lazy "$PROXY/cri/lz:1" 'read l </etc/greeting; echo "cri: $l"; exec sleep 60') ||
  fail "CRI CreateContainer of the lazy image: $(tail -3 "$C/containerd.log")"
ok "CRI CreateContainer of the lazy image"
check "CRI StartContainer" cri_ start "$ctr"
wait_for 30 grep -q ' stdout F cri: hello lazily$' "$T/logs/lazy.log" ||
  fail "the container's line in its CRI log: $(head -c 300 "$T/logs/lazy.log" 2>&1)"
ok "its CRI log has the line it read from a file fetched on first read"
check_json "ContainerStatus: running" '.status.state == "CONTAINER_RUNNING"' cri_ inspect "$ctr"
setup sh -c "timeout 60 ctr -a '$C/containerd.sock' -n k8s.io snapshots --snapshotter cairn ls \
  >'$T/snaps'"
active() { awk -v k="$1" '$1 == k && $NF == "Active" { f = 1 } END { exit !f }' "$T/snaps"; }
check "its root is an active snapshot of cairn's" active "$ctr"
check "and the pod's" active "$pod"
# A second container in the pod, of the image cairn pulled: it prints
# the store's file and exits 0.
ctr2=$(cri_container stored "$PROXY/cri/a:1" 'read l </etc/greeting; echo "cri: $l"') ||
  fail "CRI CreateContainer of the image cairn pulled: $(tail -3 "$C/containerd.log")"
check "CRI CreateContainer and StartContainer of the image cairn pulled" cri_ start "$ctr2"
exited() { cri_ inspect "$1" | jq -e '.status.state == "CONTAINER_EXITED"' >/dev/null; }
wait_for 30 exited "$ctr2" || fail "it has not exited 30 s after its start"
check_json "it exited 0" '(.status.exit_code // 0) == 0' cri_ inspect "$ctr2"
check "its CRI log has the store's line" grep -q ' stdout F cri: hello from the store$' \
  "$T/logs/stored.log"
check "CRI RemoveContainer of it" cri_ rm "$ctr2"
check "cairn gc keeps the layers the running container uses" sh -c "'$CAIRN_BIN/cairn' --store \
  '$CS' gc >/dev/null 2>&1 && test \"\$(sqlite3 '$CS/meta.db' \"SELECT count(*) FROM layers
  WHERE id IN ('$in')\")\" = $nl"
wait_for 30 sh -c "test \"\$(sqlite3 '$CS/meta.db' \"SELECT count(*) FROM pending
  WHERE layer_id IN ('$in')\")\" = 0" && wait_for 10 fills_done
check "the background fill stored every file of its layers (pending: $(db "SELECT count(*)
  FROM pending WHERE layer_id IN ('$in')"))" \
  test "$(db "SELECT count(*) FROM pending WHERE layer_id IN ('$in')")" = 0

# PullImage of a second eStargz image, no container of it, through the
# CRI's v1alpha2 API (a kubelet before 1.26): the Prepare of its last
# layer (the plugin's cri.image-layers label lists it alone) starts the
# background fill, which stores every file of its new layer.
mkdir -p "$T/lz2/data"
head -c 1048576 /dev/urandom >"$T/lz2/data/fresh"
setup tar -C "$T/lz2" --numeric-owner --owner=0 --group=0 -cf "$T/lz2.tar" .
setup "$CAIRN_BIN/cairn" --store "$T/src" import -q lz2:1 "$T/l1.tar" "$T/lz2.tar" >/dev/null
setup "$CAIRN_BIN/cairn" --store "$T/src" push -q --insecure --no-progress --format estargz \
  lz2:1 "docker://$REGISTRY/cri/lz2:1" >/dev/null 2>&1
before=$(db 'SELECT id FROM layers ORDER BY id')
check "CRI v1alpha2 PullImage of a second eStargz image" cri_to "$T/pull.lz2" --api v1alpha2 \
  pull "$PROXY/cri/lz2:1"
new2=$(comm -13 <(echo "$before") <(db 'SELECT id FROM layers ORDER BY id'))
check "its new layer recorded lazily" test "$(echo $new2 | wc -w)" = 1
check_json "v1alpha2 ImageStatus of it: its id" ".image.id == \"$(cat "$T/pull.lz2")\"" \
  cri_ --api v1alpha2 inspecti "$PROXY/cri/lz2:1"
wait_for 30 sh -c "test \"\$(sqlite3 '$CS/meta.db' \"SELECT count(*) FROM pending
  WHERE layer_id = '$new2'\")\" = 0" && wait_for 10 fills_done
check "no container of it, its files stored by the fill PullImage started (pending: $(db \
  "SELECT count(*) FROM pending WHERE layer_id = '$new2'"))" \
  test "$(db "SELECT count(*) FROM pending WHERE layer_id = '$new2'")" = 0

# PullImage with credentials that only the request carries (kubelet's
# image pull secrets), from the registry with token auth: the snapshotter
# has none for it, so its lazy Prepare gives way to an ordinary one, and
# containerd downloads the layer with them into cairn's snapshot.
before=$(db 'SELECT id FROM layers ORDER BY id')
refused() { ! cri_ "$@" >/dev/null 2>"$T/refused"; }
check "CRI PullImage with no credentials: refused" refused pull "$RAUTH/cri/la:1"
check "CRI PullImage with credentials in its auth, from a registry with token auth" \
  cri_to "$T/pull.la" pull "$RAUTH/cri/la:1" alice:secret
new3=$(comm -13 <(echo "$before") <(db 'SELECT id FROM layers ORDER BY id'))
check "its new layer is stored ($new3)" test "$(echo $new3 | wc -w)" = 1
check "whole, by containerd's download: no source, nothing pending" test \
  "$(db "SELECT (SELECT count(*) FROM layer_sources WHERE layer_id = '$new3') +
    (SELECT count(*) FROM pending WHERE layer_id = '$new3')")" = 0
check "cairn-pin ls $new3: held by a containerd snapshot" sh -c \
  "'$CAIRN_BIN/cairn-pin' --store '$CS' ls $new3 | grep -q 'containerd snapshot sha256:'"

# A pod on a network of its own (the CRI's default, POD), which the CRI
# plugin sets up with the CNI plugins: its address is of the conflist's
# subnet; a container of the lazy image in it (its root cairn's) sees the
# pod's eth0 and address, which the host's namespace has not; the host
# gets no address or route of it; StopPodSandbox tears the network down.
in_net() { [[ $1 == "$NET".* && ${1#"$NET".} =~ ^[0-9]+$ ]] && ((BASH_REMATCH > 0 &&
  BASH_REMATCH < 255)); }
other_netns() {
  [ -e "$2" ] && [ "$(readlink "/proc/$1/ns/net")" != "$(readlink /proc/$$/ns/net)" ]
}
# local_ip ADDR FIB: ADDR is a local address in FIB (/proc/net/fib_trie
# with its lines' indent removed): a line `|-- ADDR`, then `/32 host LOCAL`
local_ip() { awk -v a="|-- $1" 'p == a && $0 == "/32 host LOCAL" { f = 1 } { p = $0 }
  END { exit !f }' "$2"; }
# netns_at_exit: the network namespace of the pod $T/netpod.status shows
# (containerd's, named cni-UUID), if any, removed at exit whatever the exit
netns_at_exit() {
  netns=$(jq -r '.info.info.runtimeSpec.linux.namespaces[]? | select(.type == "network") |
    .path // ""' "$T/netpod.status")
  [[ $netns == */netns/cni-* ]] && on_exit "umount '$netns'; rm -f '$netns'"
}
ports() { ip -o link show master "$BR" | awk -F': ' '{ sub(/@.*/, "", $2); print $2 }'; }
net_pod() {
  local fwd ip pid veth c
  fwd=$(cat /proc/sys/net/ipv4/ip_forward)
  cat >"$T/netpod.json" <<EOF
{"metadata": {"name": "cairn-cri-net", "uid": "$CID-net", "namespace": "cairn-test"},
 "log_directory": "$T/logs"}
EOF
  if ! netpod=$(cri_ runp "$T/netpod.json"); then
    # a pod whose network's teardown failed too is left, its namespace too
    for netpod in $(cri_ pods | jq -r --arg u "$CID-net" '.items[] | select(.metadata.uid == $u) |
      .id'); do
      echo "$netpod" >>"$CRI_IDS"
      cri_ inspectp "$netpod" >"$T/netpod.status" && netns_at_exit
    done
    fail "CRI RunPodSandbox of a pod on the CNI network: $(tail -3 "$C/containerd.log")"
  fi
  echo "$netpod" >>"$CRI_IDS"
  ok "CRI RunPodSandbox of a pod on the CNI network (bridge $BR)"
  cri_ inspectp "$netpod" >"$T/netpod.status"
  netns_at_exit
  ip=$(jq -r '.status.network.ip // ""' "$T/netpod.status")
  pid=$(jq -r '.info.info.pid' "$T/netpod.status")
  check_json "PodSandboxStatus: ready" '(.status.state // "SANDBOX_READY") == "SANDBOX_READY"' \
    cat "$T/netpod.status"
  check "its IP, $ip, is of the conflist's $NET.0/24" in_net "$ip"
  check "its pause runs in a network namespace of its own ($netns)" other_netns "$pid" "$netns"
  veth=$(ports)
  check "the pod's veth ($veth) is the one port of $BR" test "$(echo $veth | wc -w)" = 1
  check "host-local's record of its address is under \$C" test -e "$C/cni/ipam/$NETNAME/$ip"
  check "the host has no address on $BR, no route to the pod through it" test -z \
    "$(ip -4 -o addr show dev "$BR")$(ip -4 route show table all | grep -w "dev $BR")"
  c=$(cri_container net "$PROXY/cri/lz:1" 'for i in /sys/class/net/*; do echo "net: ${i##*/}"
    done; while read -r l; do echo "fib: $l"; done </proc/net/fib_trie' "$netpod" \
    "$T/netpod.json") || fail "CRI CreateContainer in it: $(tail -3 "$C/containerd.log")"
  check "CRI CreateContainer and StartContainer of the lazy image in it" cri_ start "$c"
  setup sh -c "timeout 60 ctr -a '$C/containerd.sock' -n k8s.io snapshots --snapshotter cairn \
    ls >'$T/snaps'"
  check "its root is an active snapshot of cairn's" active "$c"
  wait_for 30 exited "$c" || fail "it has not exited 30 s after its start"
  check_json "it exited 0" '(.status.exit_code // 0) == 0' cri_ inspect "$c"
  sed -n 's/.* stdout F fib: //p' "$T/logs/net.log" >"$T/net.fib"
  sed 's/^ *//' /proc/net/fib_trie >"$T/host.fib"
  check "its interfaces: eth0 and lo, none of the host's others ($(ls /sys/class/net | xargs))" \
    test "$(sed -n 's/.* stdout F net: //p' "$T/logs/net.log" | xargs)" = "eth0 lo"
  check "its local address is the pod's, $ip" local_ip "$ip" "$T/net.fib"
  check "and 127.0.0.1 (its lo is up)" local_ip 127.0.0.1 "$T/net.fib"
  check "the host's namespace has not that address" test "$(grep -cFx -- "|-- $ip" \
    "$T/host.fib")" = 0
  check "CRI RemoveContainer of it" cri_ rm "$c"
  check "CRI StopPodSandbox of the pod on the CNI network" cri_ stopp "$netpod"
  check "its network torn down: its veth gone, no port left on $BR" sh -c \
    "! ip link show dev '$veth' >/dev/null 2>&1 && [ -z \"\$(ip -o link show master '$BR')\" ]"
  check "its network namespace removed" test ! -e "$netns"
  check "host-local released its address" test ! -e "$C/cni/ipam/$NETNAME/$ip"
  check "CRI RemovePodSandbox of it" cri_ rmp "$netpod"
  check "the host's IPv4 forwarding as it was ($fwd)" \
    test "$(cat /proc/sys/net/ipv4/ip_forward)" = "$fwd"
}
if [ -n "$cni" ]; then
  echo "# skipped: the pod on a CNI network: no bridge device ($cni)"
else
  net_pod
fi

# Stopped and removed, the images removed: cairn gc frees every layer.
check "CRI StopContainer" cri_ stop "$ctr" 0
check_json "ContainerStatus: exited" '.status.state == "CONTAINER_EXITED"' cri_ inspect "$ctr"
check "CRI RemoveContainer" cri_ rm "$ctr"
check "CRI StopPodSandbox" cri_ stopp "$pod"
check "CRI RemovePodSandbox" cri_ rmp "$pod"
check_json "no container left" '.containers == null' cri_ ps
check_json "no pod left" '.items == null' cri_ pods
for i in lz lz2 a pause la; do
  r=$PROXY/cri/$i:1
  [ $i = pause ] && r=$REGISTRY/cri/pause:1
  [ $i = la ] && r=$RAUTH/cri/la:1
  check "CRI RemoveImage of $r" cri_ rmi "$r"
done
check_json "ListImages: none left" '.images == null' cri_ images
wait_for 30 fills_done || fail "the background fill still runs"
wait_for 20 sh -c "test \"\$(sqlite3 '$CS/meta.db' 'SELECT count(*) FROM snapshots')\" = 0" ||
  fail "snapshots left: $(db 'SELECT name FROM snapshots')"
ok "containerd removed every snapshot"
check "then cairn rm and gc free every layer" sh -c "'$CAIRN_BIN/cairn' --store '$CS' rm \
  '$PROXY/cri/a:1' >/dev/null && '$CAIRN_BIN/cairn' --store '$CS' gc >/dev/null 2>&1"
check "none left" test "$(db 'SELECT count(*) FROM layers')" = 0
check "the daemon reported nothing: $(head -3 "$C/sn.err")" test ! -s "$C/sn.err"
ctd_stop
finish
