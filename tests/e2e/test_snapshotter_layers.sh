#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_snapshotter_layers.sh — under containerd (Debian's 1.6, one
# instance), cairn-snapshotter's committed snapshots are cairn layers: an
# image cairn stored is unpacked by containerd onto the same layers (none
# added), and an active snapshot of it has the root tree containerd's own
# overlayfs snapshotter gives (fstree.py's dumps); a snapshot committed from files becomes a layer (whiteouts and
# opaque directories as .wh. entries), the same files the same layer. Every
# snapshot holds its layers: cairn-pin ls names it, cairn rm refuses (exit
# 4) and gc keeps them, also while cairn-snapshotter is dead. A container's
# root is an overlay on ONE cairnfs mount of its image's chain, shared by a
# second container and ended when both are removed; a kill -9 of
# cairn-snapshotter costs a running container nothing, and the restarted
# daemon answers for the same snapshots and finds that mount; what
# containerd removes the next gc frees. With --idle 1 the daemon, a second
# without a call, becomes its dormant form (the same PID running
# cairn-snapshotter-idle, a fraction of the memory) while the container
# reads on; containerd's next calls wake it (ctr snapshots, ctr run), and
# SIGTERM ends the dormant form as it ends the daemon.
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib mount containerd
ctd_need

CS=$STORE
export CAIRN_STORE=$STORE
db() { sqlite3 "$CS/meta.db" "$@"; }
minbase_layers "$T/mb"
setup python3 "$HELPERS/oci_image.py" docker-archive "$T/img.tar" localhost/minbase:1 \
  "$T/mb/layer1.tar" "$T/mb/layer2.tar" "$T/mb/layer3.tar"
setup cairn import localhost/minbase:1 "$T/mb/layer1.tar" "$T/mb/layer2.tar" "$T/mb/layer3.tar"

ctd_start "$CS"

# The image cairn stored: containerd's unpack commits its layers, by their
# chain ids, onto the same cairn layers.
check "ctr images import --snapshotter cairn" \
  sh -c "ctr -a '$C/containerd.sock' images import --snapshotter cairn '$T/img.tar' >/dev/null"
check "its 3 layers are committed snapshots" \
  test "$(db 'SELECT count(*) FROM snapshots WHERE kind = 3')" = 3
check "and no layer was added to the store's 3" test "$(db 'SELECT count(*) FROM layers')" = 3
snaps_kib=$(du -sk "$CS/snapshots" | cut -f1)
check "and the layers are not on disk again: snapshots/ takes ${snaps_kib} KiB" \
  test "$snaps_kib" -lt 1024
top=$(db "SELECT name FROM snapshots s WHERE kind = 3 AND NOT EXISTS
  (SELECT 1 FROM snapshots c WHERE c.parent = s.name)")
top_key=${top##*/} # containerd's key: the store's names are NAMESPACE/N/KEY
check "the top snapshot's chain is the image's 3 layers, bottom first" test \
  "$(db "SELECT group_concat(layer, ' ') FROM (SELECT layer FROM snapshot_layers l JOIN snapshots s
    ON s.id = l.snapshot_id WHERE s.name = '$top' ORDER BY position)")" = \
  "$(db "SELECT group_concat(layer_id, ' ') FROM (SELECT layer_id FROM image_layers
    WHERE image_id = (SELECT image_id FROM names) ORDER BY position)")"

# The root an active snapshot of the image gives on cairn is the one
# containerd's own overlayfs snapshotter gives it (fstree.py's dumps: every
# entry's type, mode, owner, mtime, size and sha256, symlink target,
# device, xattrs and hard link group).
check "ctr images import onto containerd's overlayfs too" \
  sh -c "ctr -a '$C/containerd.sock' images import '$T/img.tar' >/dev/null"
check "the image's root tree on overlayfs" root_tree overlayfs "$top_key" "$T/tree.ovl"
check "and on cairn" root_tree cairn "$top_key" "$T/tree.cairn"
same_tree "$T/tree.ovl" "$T/tree.cairn" ||
  fail "cairn's root tree differs from overlayfs's: $(head -c 1500 "$T/tree.diff")"
ok "cairn's root tree of the image is overlayfs's ($(wc -l <"$T/tree.cairn") entries)"

# A snapshot committed from files: a layer, written from its directory.
snaps prepare k1 "$top_key" >/dev/null
id1=$(db "SELECT id FROM snapshots WHERE name LIKE '%/k1'")
fs1=$CS/snapshots/$id1/fs
echo new >"$fs1/new-file"
mkdir -p "$fs1/etc" "$fs1/opaque"
mknod "$fs1/etc/hostname" c 0 0 # overlayfs's whiteout
python3 -c 'import os, sys; os.setxattr(sys.argv[1], "trusted.overlay.opaque", b"y")' \
  "$fs1/opaque"
echo inside >"$fs1/opaque/f"
cp -a "$fs1" "$T/files1"
check "ctr snapshots commit of files" snaps commit m1 k1
check "its directory is emptied: its files are its layer's" \
  test -z "$(ls -A "$fs1")"

layer1=$(db "SELECT layer FROM snapshot_layers l JOIN snapshots s ON s.id = l.snapshot_id
  WHERE s.name LIKE '%/m1' ORDER BY position DESC LIMIT 1")
check "it is a new layer of the store: $layer1" \
  test "$(db "SELECT count(*) FROM layers WHERE id = '$layer1'")" = 1
check "its chain is its parent's 3 layers and its own" \
  test "$(db "SELECT count(*) FROM snapshot_layers l JOIN snapshots s ON s.id = l.snapshot_id
    WHERE s.name LIKE '%/m1'")" = 4
check "with the file, a whiteout and an opaque directory's marker" test \
  "$(db "SELECT group_concat(path || ':' || type, ' ') FROM (SELECT path, type FROM entries
    WHERE layer_id = '$layer1' AND path != '' ORDER BY path)")" = \
  "etc:1 etc/.wh.hostname:8 new-file:0 opaque:1 opaque/.wh..wh..opq:9 opaque/f:0"
check "and no overlayfs xattr" test \
  "$(db "SELECT count(*) FROM entries WHERE layer_id = '$layer1' AND xattrs IS NOT NULL
    AND instr(CAST(xattrs AS TEXT), 'overlay')")" = 0
snaps prepare k2 "$top_key" >/dev/null
id2=$(db "SELECT id FROM snapshots WHERE name LIKE '%/k2'")
cp -a "$T/files1/." "$CS/snapshots/$id2/fs/"
check "the same files committed again" snaps commit m2 k2
check "are the same layer (none added)" test "$(db "SELECT layer FROM snapshot_layers l
  JOIN snapshots s ON s.id = l.snapshot_id WHERE s.name LIKE '%/m2' ORDER BY position DESC
  LIMIT 1")" = "$layer1"
check "the store has 4 layers" test "$(db 'SELECT count(*) FROM layers')" = 4
check "Usage of a committed snapshot: its files as they were at commit" \
  sh -c "ctr -a '$C/containerd.sock' snapshots --snapshotter cairn usage m1 | grep -q '^m1 '"

# A container reads its root; cairn-snapshotter is killed meanwhile.
check "ctr run -d a container on the image" ctr_ run -d --snapshotter cairn \
  localhost/minbase:1 $CID sh -c 'i=0; while [ $i -lt 600 ]; do
    cat /etc/debian_version >/dev/null && echo $i >/count; i=$((i + 1)); sleep 0.1; done'
wait_for 20 sh -c "ctr -a '$C/containerd.sock' task ls | grep -q '^$CID .*RUNNING'" ||
  fail "$CID not running after 20 s"

# Its root: a kernel overlay on ONE cairnfs mount of the image's 3-layer
# chain, shared by a second container on the image, with the image's tree.
chain_mounts() { grep ' - fuse.cairnfs ' /proc/self/mountinfo | grep -c " $CS/snapshot-mounts/"; }
check "one cairnfs mount serves the container's 3-layer chain" test "$(chain_mounts)" = 1
lowers=$(snaps mounts /mnt $CID | grep -o 'lowerdir=[^ ,]*')
check "its overlay has one lower, that mount: $lowers" \
  sh -c "echo '$lowers' | grep -qx 'lowerdir=$CS/snapshot-mounts/[0-9a-f]*'"
check "cairn mounts lists it" sh -c "cairn mounts | grep -q '$CS/snapshot-mounts/'"
check "cairn images does not" sh -c "test \"\$(cairn images -q | wc -l)\" = 1"
df_of() { cairn df --json | jq ".[] | select(.type == \"$1\") | .$2"; }
check "nor do cairn info and df count it: 1 image" \
  test "$(cairn info --json | jq .store.images)/$(df_of images count)/$(df_of images shared_count)" = 1/1/0
check "df: m1's layer, in no image, is held by its snapshots: nothing reclaimable" \
  test "$(df_of layers reclaimable_count)" = 0
on_exit "runc --root /run/containerd/runc/default delete -f ${CID}b 2>/dev/null;"
check "ctr run -d a second container on the image" ctr_ run -d --snapshotter cairn \
  localhost/minbase:1 "${CID}b" sleep 600
check "it shares that mount" test "$(chain_mounts)" = 1
mkdir "$T/img"
setup cairn mount localhost/minbase:1 "$T/img"
(cd "$T/img" && find usr etc/apt -printf '%p %y %m %s\n' | sort) >"$T/tree.want"
ctr_ task exec --exec-id t1 $CID sh -c "cd / && find usr etc/apt -printf '%p %y %m %s\n' | sort" \
  >"$T/tree.got"
check "the container's root tree is the image's" cmp -s "$T/tree.want" "$T/tree.got"
setup cairn umount "$T/img"
before=$(snaps ls | sort)
kill -KILL "$sn_pid"
wait_for 10 pid_gone "$sn_pid" || fail "cairn-snapshotter still there after kill -9"
wait "$sn_pid" 2>/dev/null
n1=$(ctr_ task exec --exec-id r1 $CID cat /count)
sleep 1
n2=$(ctr_ task exec --exec-id r2 $CID cat /count)
check "with cairn-snapshotter dead the container reads its root on ($n1 then $n2)" \
  test "${n2:-0}" -gt "${n1:-0}"
check "and reads a file of its image" \
  sh -c "ctr -a '$C/containerd.sock' task exec --exec-id r3 $CID cat /etc/debian_version | grep -q ."
expect_exit 1 "containerd's calls fail while it is down" snaps ls
check "the chain's mount stays" test "$(chain_mounts)" = 1

# Its snapshots hold their layers, with no process running.
cairn-pin ls >"$T/pins" 2>&1
check "cairn-pin ls names containerd's snapshots as holders" \
  grep -q "containerd snapshot $top_key" "$T/pins"
check "and the container's active snapshot" grep -q "containerd snapshot $CID" "$T/pins"
expect_exit 4 "cairn rm of the image they hold exits 4" cairn rm localhost/minbase:1
check "naming them: $(cat "$T/stderr")" grep -q "in use by containerd snapshot " "$T/stderr"
check "cairn gc keeps the layers" sh -c "cairn gc >'$T/gc.out' 2>&1"
check "saying which snapshot holds them" grep -q "held by containerd snapshot" "$T/gc.out"
check "all 4 layers are there" test "$(db 'SELECT count(*) FROM layers')" = 4

# Restarted, it answers for the same snapshots, none lost or duplicated
# (once containerd's client dials again: it backs off, a few seconds).
sn_start "$CS" --idle 1
wait_for 30 sh -c "ctr -a '$C/containerd.sock' snapshots --snapshotter cairn ls >/dev/null 2>&1" ||
  fail "containerd's calls still fail 30 s after the restart"
check "restarted, containerd lists the same snapshots" test "$(snaps ls | sort)" = "$before"
check "Stat answers for the container's" sh -c "ctr -a '$C/containerd.sock' snapshots \
  --snapshotter cairn info $CID | grep -q Active"
check "Mounts too" sh -c "ctr -a '$C/containerd.sock' snapshots --snapshotter cairn mounts \
  /mnt $CID | grep -q 'mount -t'"
check "Mounts finds the chain's mount again" test "$(snaps mounts /mnt $CID |
  grep -o 'lowerdir=[^ ,]*')" = "$lowers"
check "and starts none" test "$(chain_mounts)" = 1
n3=$(ctr_ task exec --exec-id r4 $CID cat /count)
check "and the container has read on ($n3)" test "${n3:-0}" -gt "${n2:-0}"

# Dormant: no call for a second, and the same process holds only the
# socket (and containerd's connection), libc alone mapped.
IDLE_BIN=$(readlink -f "$CAIRN_BIN/libexec/cairn/cairn-snapshotter-idle")
rss_of() { awk '/^VmRSS:/ { print $2 }' "/proc/$sn_pid/status"; }
dormant() { test "$(readlink "/proc/$sn_pid/exe")" = "$IDLE_BIN"; }
rss_full=$(rss_of)
wait_for 20 dormant || fail "not dormant 20 s after its last call: $(readlink "/proc/$sn_pid/exe")"
rss_idle=$(rss_of)
check "idle, PID $sn_pid runs cairn-snapshotter-idle: RSS $rss_full KiB, then $rss_idle KiB" \
  test "$((rss_idle * 4))" -lt "${rss_full:-0}"
check "with no gRPC library mapped" sh -c "! grep -q libgrpc /proc/$sn_pid/maps"
n4=$(ctr_ task exec --exec-id r5 $CID cat /count)
sleep 1
n5=$(ctr_ task exec --exec-id r6 $CID cat /count)
check "dormant, the container reads its root on ($n4 then $n5)" test "${n5:-0}" -gt "${n4:-0}"
wait_for 20 dormant || fail "not dormant again"
check "a ctr snapshots call while dormant is answered" sh -c "ctr -a '$C/containerd.sock' \
  snapshots --snapshotter cairn info $CID | grep -q Active"
check "by the same process, woken" sh -c "kill -0 $sn_pid && ! grep -q ' Z' /proc/$sn_pid/stat"
ctr_ task kill -s KILL $CID >/dev/null 2>&1
wait_for 20 sh -c "! ctr -a '$C/containerd.sock' task ls | grep -q '^$CID .*RUNNING'"
ctr_ task delete $CID >/dev/null 2>&1
check "the container is removed with its snapshot" ctr_ containers delete "$CID"
wait_for 20 dormant || fail "not dormant before ctr run"
ran=$(ctr_out localhost/minbase:1 'cat /etc/debian_version') || ran=""
check "ctr run while dormant runs its container: '$ran'" test -n "$ran"
check "served by the same PID" kill -0 "$sn_pid"
check "the chain's mount stays for the second container" test "$(chain_mounts)" = 1
ctr_ task kill -s KILL "${CID}b" >/dev/null 2>&1
wait_for 20 sh -c "! ctr -a '$C/containerd.sock' task ls | grep -q '^${CID}b .*RUNNING'"
ctr_ task delete "${CID}b" >/dev/null 2>&1
check "the second container is removed" ctr_ containers delete "${CID}b"
wait_for 10 sh -c "! grep -q ' $CS/snapshot-mounts/' /proc/self/mountinfo"
check "with the last snapshot on the chain, its mount ends" test "$(chain_mounts)" = 0
check "and cairn mounts lists none" sh -c "! cairn mounts | grep -q '$CS/snapshot-mounts/'"

# What containerd removes, the next gc frees.
for k in m1 m2; do snaps rm "$k" 2>/dev/null; done # unless containerd's gc did
check "ctr images rm --sync removes the image's snapshots" \
  ctr_rmi localhost/minbase:1
wait_for 20 sh -c "test \"\$(sqlite3 '$CS/meta.db' 'SELECT count(*) FROM snapshots')\" = 0" ||
  fail "snapshots left: $(db 'SELECT name FROM snapshots')"
check "cairn-pin ls names no snapshot" sh -c "! cairn-pin ls | grep -q 'containerd snapshot'"
check "cairn rm of the image succeeds" sh -c "cairn rm localhost/minbase:1 >/dev/null"
check "cairn gc frees every layer" sh -c "cairn gc >/dev/null"
check "none left" test "$(db 'SELECT count(*) FROM layers')" = 0
check "the daemon reported nothing: $(head -3 "$C/sn.err")" test ! -s "$C/sn.err"
wait_for 20 dormant || fail "not dormant at the end"
kill -TERM "$sn_pid"
wait_for 10 pid_gone "$sn_pid" || fail "the dormant form still runs 10 s after SIGTERM"
wait "$sn_pid"
check "SIGTERM ends the dormant form: exit 0" test $? = 0
check "and removes its socket" test ! -e "$C/cairn.sock"
kill -TERM "$ctd_pid"
wait_for 10 pid_gone "$ctd_pid" || fail "containerd still running 10 s after SIGTERM"
finish
