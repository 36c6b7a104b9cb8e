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
# PullImage of a second eStargz image starts the fill (its last layer's
# Prepare): every file of its new layer is stored, with no container.
# PullImage of an image `cairn pull` stored fetches none of its layers,
# a container of it in the pod logs its file, and `cairn rm` of it exits
# 4 while containerd's snapshots hold it. PullImage from a registry with
# token auth, with credentials only its request carries: the snapshotter
# has none, its lazy Prepare gives way, and containerd downloads the layer
# into cairn's snapshot. Once the containers and pod are
# stopped and removed and the images removed (RemoveImage), `cairn gc`
# frees every layer.
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
# cri_container NAME IMAGE SCRIPT: a container of IMAGE in the pod that
# runs `sh -c SCRIPT`, its log NAME.log; its id on stdout and in CRI_IDS.
cri_container() {
  local id
  jq -n --arg n "$1" --arg i "$2" --arg s "$3" '{metadata: {name: $n}, image: {image: $i},
    command: ["/bin/sh", "-c", $s], log_path: ($n + ".log"),
    linux: {security_context: {namespace_options: {network: "NODE"}}}}' >"$T/$1.json"
  id=$(cri_ create "$pod" "$T/$1.json" "$T/pod.json") || return 1
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

# PullImage of a second eStargz image, no container of it: the Prepare
# of its last layer (the plugin's cri.image-layers label lists it alone)
# starts the background fill, which stores every file of its new layer.
mkdir -p "$T/lz2/data"
head -c 1048576 /dev/urandom >"$T/lz2/data/fresh"
setup tar -C "$T/lz2" --numeric-owner --owner=0 --group=0 -cf "$T/lz2.tar" .
setup "$CAIRN_BIN/cairn" --store "$T/src" import -q lz2:1 "$T/l1.tar" "$T/lz2.tar" >/dev/null
setup "$CAIRN_BIN/cairn" --store "$T/src" push -q --insecure --no-progress --format estargz \
  lz2:1 "docker://$REGISTRY/cri/lz2:1" >/dev/null 2>&1
before=$(db 'SELECT id FROM layers ORDER BY id')
check "CRI PullImage of a second eStargz image" cri_to "$T/pull.lz2" pull "$PROXY/cri/lz2:1"
new2=$(comm -13 <(echo "$before") <(db 'SELECT id FROM layers ORDER BY id'))
check "its new layer recorded lazily" test "$(echo $new2 | wc -w)" = 1
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
