#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_snapshotter_remote.sh — remote snapshots under containerd (Debian's
# 1.6, one instance): an image `cairn pull` stored from a registry on
# 127.0.0.1 (behind the counting proxy) is pulled again by `ctr-remote
# image rpull --snapshotter cairn` (containerd's unpacker, which labels
# each Prepare with the chain id, containerd.io/snapshot.ref) without a
# byte of its layers: each Prepare is answered AlreadyExists with the
# committed snapshot made of the store's layer (its whiteout and hardlink
# as containerd's applier writes them), and `ctr run` of it prints what
# its files say; the snapshots' directories stay empty (the chain's cairnfs
# mount serves them). An image with one layer the store has and one it has
# not fetches that one only. An image of eStargz (then zstd:chunked) layers
# the store has not, pushed by `cairn push --format`, is recorded lazily
# from its TOCs: rpull fetches a small part of its layers' bytes, `ctr run`
# of it prints a file fetched on first read, and the container's tree is
# what `cairn mount` of the same image shows; cairn gc keeps its layers
# while its snapshots are there, and frees them once containerd removed
# it. A Prepare with the CRI plugin's labels (through containerd's proxy
# client) is recorded lazily too, from the manifest its cri.manifest-digest
# names when its tag has moved since. An image `cairn pull --lazy` stored,
# files not fetched yet, is not fetched again by rpull. The Prepare of a
# lazy image's last layer starts a background fill: every file of its
# layers is stored soon after rpull, with no container run, and read with
# the registry gone; its 3 lazy Prepares fetch its manifest and config
# once. With `cairn-snapshotter --no-fill` and the registry
# gone, a file not fetched yet fails with EIO in the container, one
# fetched already is read. After a lazy rpull of a layer of 4000 files
# the snapshotter's anonymous memory stays under 8 MiB (each call's
# handle idled once answered). From a registry with token auth (the
# credentials an auth file's), the 3 lazy Prepares of an image ask the
# token service once; another user's credentials get their own token,
# never that one. The
# snapshots hold the layers (cairn rm exits 4); what containerd removes,
# gc frees. An image of 4 layers with what layer stacking gets wrong, as
# gzip, eStargz and zstd:chunked, gives an active snapshot the same root
# tree (every entry, mode, owner, mtime, xattr, device, hard link group
# and byte) on cairn (pulled in full by `ctr images pull`, or lazily by
# rpull) as on containerd's own overlayfs snapshotter.
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib registry mount containerd
ctd_need ctr-remote
pull_test_init
CS=$STORE
db() { sqlite3 "$CS/meta.db" "$@"; }

# Two layers: a shell and its libraries (with a hardlink, a symlink and a
# file the next layer deletes), then a file (in a directory the layer has
# no entry of) and that whiteout; a third
# layer, for an image the store has half of.
mkdir -p "$T/l1/bin" "$T/l1/lib/x86_64-linux-gnu" "$T/l1/lib64" "$T/l2/etc" "$T/l3/etc"
cp /bin/dash "$T/l1/bin/dash"
ln "$T/l1/bin/dash" "$T/l1/bin/dash2"
ln -s dash "$T/l1/bin/sh"
cp -L /lib/x86_64-linux-gnu/libc.so.6 "$T/l1/lib/x86_64-linux-gnu/"
cp -L /lib64/ld-linux-x86-64.so.2 "$T/l1/lib64/"
echo bye >"$T/l1/gone"
echo "hello from the store" >"$T/l2/etc/greeting"
: >"$T/l2/.wh.gone"
echo "hello from the registry" >"$T/l3/etc/greeting"
for i in 1 3; do
  setup tar -C "$T/l$i" --numeric-owner --owner=0 --group=0 --sort=name -cf "$T/l$i.tar" .
done
# the second with no entry of etc/, as a tar of ./usr/share has none of usr/
setup tar -C "$T/l2" --numeric-owner --owner=0 --group=0 -cf "$T/l2.tar" ./etc/greeting ./.wh.gone
setup $OCI_IMAGE add "$T/oci" a linux/amd64 "$T/l1.tar:gzip" "$T/l2.tar:gzip"
setup $OCI_IMAGE add "$T/oci" b linux/amd64 "$T/l1.tar:gzip" "$T/l3.tar:gzip"
setup registry_start "$T/reg"
setup registry_push "$T/oci" a remote/a:1
setup registry_push "$T/oci" b remote/b:1
setup proxy_start "$T/proxy"
layers() { registry_manifest "remote/$1" 1 | jq -r '.layers[].digest'; }

setup sh -c "'$CAIRN_BIN/cairn' --store '$CS' pull -q --insecure 'docker://$PROXY/remote/a:1' \
  >/dev/null"
check "cairn pull stored the image's 2 layers" test "$(db 'SELECT count(*) FROM layers')" = 2

ctd_start "$CS"
# the background fills of lazy chains run in sessions of their own
on_exit "for p in \$(pgrep -f -- '--store $CS fill'); do kill \$p; done"
# whether no fill of a chain runs (each holds its log's lock)
fills_done() {
  local f
  for f in "$CS"/tmp/fill-*.log; do [ ! -e "$f" ] || flock -n "$f" true || return 1; done
}

# rpull NAME: ctr-remote's pull of remote/NAME:1, its output shown if it fails
rpull() {
  timeout 120 ctr-remote -a "$C/containerd.sock" image rpull --plain-http --snapshotter cairn \
    "$PROXY/remote/$1:1" >"$T/rpull.out" 2>&1 || { cat "$T/rpull.out" "$C/sn.err"; return 1; }
}

# The image the store has: rpull fetches its manifest and config, no layer.
proxy_reset
check "ctr-remote image rpull --snapshotter cairn of the image cairn pulled" rpull a
for d in $(layers a); do
  check "layer $d: not fetched (requests: $(proxy_fetched "$d"))" test "$(proxy_fetched "$d")" = 0
done
check "its 2 layers are committed snapshots" \
  test "$(db 'SELECT count(*) FROM snapshots WHERE kind = 3')" = 2
check "and the store has the same 2 layers" test "$(db 'SELECT count(*) FROM layers')" = 2
check "the top snapshot's chain is the image's layers" test \
  "$(db "SELECT group_concat(layer, ' ') FROM (SELECT layer FROM snapshot_layers l JOIN snapshots s
    ON s.id = l.snapshot_id WHERE s.kind = 3 AND NOT EXISTS
    (SELECT 1 FROM snapshots c WHERE c.parent = s.name) ORDER BY position)")" = \
  "$(db "SELECT group_concat(layer_id, ' ') FROM (SELECT layer_id FROM image_layers
    ORDER BY position)")"
check "the committed snapshots' directories are empty (nothing unpacked)" \
  test -z "$(find "$CS"/snapshots/*/fs -mindepth 1)"
ctr_out "$PROXY/remote/a:1" 'read l </etc/greeting; echo "$l"; [ -e /gone ] || echo no-gone
  [ /bin/dash -ef /bin/dash2 ] && [ -h /bin/sh ] && echo links' >"$T/run.out" ||
  fail "ctr run of it: $(cat "$T/run.out")"
ok "ctr run of it prints the store's file; the whiteout hides /gone; hardlink, symlink"
check "... \"$(tr '\n' ' ' <"$T/run.out")\"" \
  test "$(cat "$T/run.out")" = "$(printf 'hello from the store\nno-gone\nlinks')"

# An image the store has one layer of: that one is not fetched, the other is.
proxy_reset
check "rpull of an image the store has the bottom layer of" rpull b
set -- $(layers b)
check "its bottom layer: not fetched" test "$(proxy_fetched "$1")" = 0
check "its top layer, the store had not: fetched" test "$(proxy_fetched "$2")" -ge 1
check "and a layer of the store now" test "$(db 'SELECT count(*) FROM layers')" = 3
ctr_out "$PROXY/remote/b:1" 'read l </etc/greeting; echo "$l"' >"$T/run.out" ||
  fail "ctr run of it prints the registry's file: $(cat "$T/run.out")"
ok "ctr run of it prints the registry's file"
check "... \"$(cat "$T/run.out")\"" test "$(cat "$T/run.out")" = "hello from the registry"

# Lazy remote snapshots: an image the store has not, its layers eStargz
# (then zstd:chunked, whose bottom layer is the same tar as the store's:
# served from the store) as `cairn push --format` writes them; a shell, a
# sleep, and 8 MiB of data the store has not.
mkdir -p "$T/lz/bin" "$T/lz/etc" "$T/lz/data"
cp /bin/sleep /bin/cat "$T/lz/bin/"
head -c 8388608 /dev/urandom >"$T/lz/data/big"
echo "hello lazily" >"$T/lz/etc/greeting"
chmod 640 "$T/lz/etc/greeting"
chown 1:2 "$T/lz/data/big"
setup tar -C "$T/lz" --numeric-owner --sort=name -cf "$T/lz.tar" .
setup "$CAIRN_BIN/cairn" --store "$T/src" import -q lz:1 "$T/l1.tar" "$T/lz.tar" >/dev/null
# the tree under $1: entries (type, mode, owner, link, size but a
# directory's), then the regular files' sha256; what runc makes left out
tree_of() {
  (cd "$1" && find . -xdev -mindepth 1 ! -path ./proc ! -path ./dev ! -path ./sys ! -path ./run \
    -printf '%p %y %M %U %G %l %s\n' | awk '$2 == "d" { $NF = "-" } 1' | sort &&
    find . -xdev -type f -exec sha256sum {} + | sort -k2)
}
images_before=$("$CAIRN_BIN/cairn" --store "$CS" images -q | sort)
# rpull's own requests are counted: no background fill of the image's
# last layer meanwhile (below, the fill started at rpull)
sn_restart "$CS" --no-fill
for f in estargz zstd:chunked; do
  n=lz-${f%%:*}
  setup "$CAIRN_BIN/cairn" --store "$T/src" push -q --insecure --no-progress --format "$f" lz:1 \
    "docker://$REGISTRY/remote/$n:1" 2>/dev/null
  size=$(registry_manifest "remote/$n" 1 | jq '[.layers[].size] | add')
  before=$(db 'SELECT id FROM layers ORDER BY id')
  proxy_reset
  check "$f: rpull of an image the store has not" rpull "$n"
  got=$(proxy_counts | jq .bytes)
  check "$f: it fetched $got bytes, under a tenth of its layers' $size" \
    test "$got" -lt $((size / 10))
  for d in $(layers "$n"); do
    check "$f: blob $d: range requests only" test "$(proxy_log | jq --arg d "$d" \
      '[.[] | select((.[0] | endswith("/blobs/" + $d)) and .[1] == "")] | length')" = 0
  done
  new=$(comm -13 <(echo "$before") <(db 'SELECT id FROM layers ORDER BY id'))
  in=$(echo $new | sed "s/ /','/g")
  check "$f: its new layers ($(echo $new)) recorded lazily, from their TOCs" test \
    "$(db "SELECT count(*) FROM layer_sources WHERE layer_id IN ('$in')")" = \
    "$(echo "$new" | wc -w)"
  check "$f: cairn gc keeps them: its snapshots hold them" sh -c "'$CAIRN_BIN/cairn' --store \
    '$CS' gc >/dev/null 2>&1 && test \"\$(sqlite3 '$CS/meta.db' \"SELECT count(*) FROM layers
    WHERE id IN ('$in')\")\" = $(echo "$new" | wc -w)"
  check "$f: no image of it in cairn images" \
    test "$("$CAIRN_BIN/cairn" --store "$CS" images -q | sort)" = "$images_before"
  ctr_out "$PROXY/remote/$n:1" 'read l </etc/greeting; echo "$l"' >"$T/run.out" ||
    fail "$f: ctr run of it prints a file fetched on first read: $(cat "$T/run.out")"
  ok "$f: ctr run of it prints a file fetched on first read"
  check "... \"$(cat "$T/run.out")\"" test "$(cat "$T/run.out")" = "hello lazily"
  # the container's tree against cairn mount's of the same image
  check "$f: ctr run -d of it" ctr_ run -d --snapshotter cairn "$PROXY/remote/$n:1" $CID \
    /bin/sleep 60
  pid=$(ctr_ tasks ls | awk -v c=$CID '$1 == c { print $2 }')
  tree_of "/proc/$pid/root" >"$T/tree.ctr" 2>&1
  setup "$CAIRN_BIN/cairn" --store "$T/ref" pull -q --lazy --no-fill --insecure \
    "docker://$REGISTRY/remote/$n:1" >"$T/ref.log" 2>&1
  mkdir -p "$T/mnt"
  setup "$CAIRN_BIN/cairn" --store "$T/ref" mount "$REGISTRY/remote/$n:1" "$T/mnt" >/dev/null
  tree_of "$T/mnt" >"$T/tree.ref" 2>&1
  "$CAIRN_BIN/cairn" --store "$T/ref" umount "$T/mnt" >/dev/null
  check "$f: the container's tree is cairn mount's ($(wc -l <"$T/tree.ref") lines)" \
    diff "$T/tree.ref" "$T/tree.ctr"
  wait_for 30 sh -c "test \"\$(sqlite3 '$CS/meta.db' \"SELECT count(*) FROM pending
    WHERE layer_id IN ('$in')\")\" = 0" && wait_for 10 fills_done
  # (the trees' sha256sum read every file too): what gc frees below
  check "$f: every file of its layers stored, by the reads or the background fill" \
    test "$(db "SELECT count(*) FROM pending WHERE layer_id IN ('$in')")" = 0
  check "$f: the background fill ended" fills_done
  ctr_kill_rm $CID "$f: the container"
  check "$f: ctr images rm --sync" ctr_rmi "$PROXY/remote/$n:1"
  wait_for 20 sh -c "test \"\$(sqlite3 '$CS/meta.db' \"SELECT count(*) FROM snapshots s
    JOIN snapshot_labels l ON l.snapshot_id = s.id WHERE l.value LIKE '%/$n:1'\")\" = 0" ||
    fail "$f: its snapshots left"
  check "$f: then cairn gc frees its layers" \
    sh -c "'$CAIRN_BIN/cairn' --store '$CS' gc >/dev/null 2>&1"
  for l in $new; do
    check "$f: layer $l gone" test "$(db "SELECT count(*) FROM layers WHERE id = '$l'")" = 0
  done
done

# The snapshotter's memory after a lazy rpull of a layer of 4000 files (a
# TOC of 4000 entries fetched, parsed and recorded): each call answered,
# its store handle's connection is closed and the freed heap given back,
# not kept in the arena of the thread that served it.
setup python3 - "$T/many" <<'PY'
import os, random, sys
t = sys.argv[1]
rnd = random.Random(9)
for d in range(40):
    os.makedirs(f"{t}/d{d:02d}", exist_ok=True)
    for i in range(100):
        open(f"{t}/d{d:02d}/f{i:03d}", "wb").write(rnd.randbytes(rnd.randint(100, 2000)))
PY
setup tar -C "$T/many" --numeric-owner --sort=name -cf "$T/many.tar" .
setup "$CAIRN_BIN/cairn" --store "$T/src" import -q many:1 "$T/many.tar" >/dev/null
setup "$CAIRN_BIN/cairn" --store "$T/src" push -q --insecure --no-progress --format estargz \
  many:1 "docker://$REGISTRY/remote/lz-many:1" 2>/dev/null
check "rpull of a lazy image of 4000 files" rpull lz-many
anon=$(awk '/^Anonymous:/ { print $2 }' "/proc/$sn_pid/smaps_rollup")
echo "# cairn-snapshotter after it: $(grep -E '^(Rss|Pss|Anonymous):' \
  "/proc/$sn_pid/smaps_rollup" | tr -s ' \n' ' ')" >&2
if sanitizer_build; then
  echo "# the snapshotter's memory, $anon KiB anonymous, is not bounded under the sanitizers"
else
  check "... the snapshotter's anonymous memory after it: $anon KiB, under 8 MiB" \
    test "$anon" -lt 8192
fi
# the fill its rpull started ends before the next checks count fills
check "... the background fill it started ends" wait_for 60 fills_done
check "ctr images rm --sync of it" ctr_rmi "$PROXY/remote/lz-many:1"

# The CRI plugin's labels (cri.image-ref, cri.layer-digest), sent as its
# unpacker sends them, through containerd's proxy client (the suite's
# TestPrepare): the layer is recorded lazily, the Prepare AlreadyExists.
if command -v go >/dev/null && [ -d /usr/share/gocode/src/github.com/containerd/containerd ]; then
  suite=$(sn_suite)
  set -- $(layers lz-estargz)
  cfg=$(registry_manifest remote/lz-estargz 1 | jq -r .config.digest)
  diff0=$(curl -sf "http://$REGISTRY/v2/remote/lz-estargz/blobs/$cfg" | jq -r '.rootfs.diff_ids[0]')
  # prep KEY LABELS [remove]: one Prepare (or Remove) through the proxy client
  prep() {
    SNAPSHOTTER_SOCK=$C/cairn.sock PREPARE_KEY=$1 PREPARE_LABELS=$2 REMOVE=${3:-} \
      timeout 60 "$suite" -test.run '^TestPrepare$' 2>&1 | grep '^prepare:'
  }
  cri=containerd.io/snapshot/cri
  labels="containerd.io/snapshot.ref=$diff0,$cri.image-ref=$PROXY/remote/lz-estargz:1"
  proxy_reset
  check "a Prepare with the CRI plugin's labels: AlreadyExists" \
    test "$(prep cri/1/extract "$labels,$cri.layer-digest=$1")" = "prepare: already exists"
  check "its layer recorded lazily" \
    test "$(db "SELECT count(*) FROM layer_sources WHERE layer_id = '${diff0#sha256:}'")" = 1
  check "from its TOC: range requests only" test "$(proxy_log | jq --arg d "$1" \
    '[.[] | select((.[0] | endswith("/blobs/" + $d)) and .[1] == "")] | length')" = 0
  check "the committed snapshot cri/1/$diff0 removed" \
    test "$(prep "cri/1/$diff0" "" 1)" = "prepare: ok"
  "$CAIRN_BIN/cairn" --store "$CS" gc >/dev/null 2>&1
  check "then cairn gc frees the layer" \
    test "$(db "SELECT count(*) FROM layers WHERE id = '${diff0#sha256:}'")" = 0
  # The manifest the plugin resolved (cri.manifest-digest), whatever its
  # tag names by the Prepare: an eStargz image of a new layer, its tag
  # then moved to another image.
  mkdir -p "$T/mv/data"
  head -c 65536 /dev/urandom >"$T/mv/data/moved"
  setup tar -C "$T/mv" --numeric-owner --sort=name -cf "$T/mv.tar" .
  setup "$CAIRN_BIN/cairn" --store "$T/src" import -q mv:1 "$T/mv.tar" >/dev/null
  setup "$CAIRN_BIN/cairn" --store "$T/src" push -q --insecure --no-progress --format estargz \
    mv:1 "docker://$REGISTRY/remote/mv:1" 2>/dev/null
  mvm=sha256:$(registry_manifest remote/mv 1 | sha256sum | cut -d' ' -f1)
  mvl=$(layers mv)
  mvcfg=$(registry_manifest remote/mv 1 | jq -r .config.digest)
  mvd=$(curl -sf "http://$REGISTRY/v2/remote/mv/blobs/$mvcfg" | jq -r '.rootfs.diff_ids[0]')
  setup "$CAIRN_BIN/cairn" --store "$T/src" push -q --insecure --no-progress --format estargz \
    lz:1 "docker://$REGISTRY/remote/mv:1" 2>/dev/null
  check "the tag names another manifest now" \
    test "sha256:$(registry_manifest remote/mv 1 | sha256sum | cut -d' ' -f1)" != "$mvm"
  labels="containerd.io/snapshot.ref=$mvd,$cri.image-ref=$PROXY/remote/mv:1"
  labels="$labels,$cri.layer-digest=$mvl,$cri.manifest-digest=$mvm"
  proxy_reset
  check "a Prepare with the manifest's digest: AlreadyExists" \
    test "$(prep cri/2/extract "$labels")" = "prepare: already exists"
  check "the layer recorded lazily" \
    test "$(db "SELECT count(*) FROM layer_sources WHERE layer_id = '${mvd#sha256:}'")" = 1
  check "the manifest asked for by its digest, not by the tag" test "$(proxy_log | jq --arg m \
    "$mvm" '[.[] | select(.[0] | endswith("/manifests/" + $m))] | length')" -ge 1
  check "the committed snapshot cri/2/$mvd removed" test "$(prep "cri/2/$mvd" "" 1)" = "prepare: ok"
  "$CAIRN_BIN/cairn" --store "$CS" gc >/dev/null 2>&1
  check "then cairn gc frees the layer" \
    test "$(db "SELECT count(*) FROM layers WHERE id = '${mvd#sha256:}'")" = 0
else
  echo "# no go or containerd's Go sources: the CRI labels' Prepare not checked"
fi

# An image `cairn pull --lazy` stored, its files not fetched yet: rpull
# fetches nothing of its layers (the store has them), `ctr run` reads a
# file fetched on first read.
setup "$CAIRN_BIN/cairn" --store "$CS" pull -q --lazy --no-fill --insecure \
  "docker://$PROXY/remote/lz-zstd:1" >/dev/null 2>&1
check "the lazily pulled image has files pending" \
  test "$(db "SELECT count(*) FROM pending WHERE path = 'etc/greeting'")" -ge 1
proxy_reset
check "rpull of an image the store has from a lazy pull" rpull lz-zstd
for d in $(layers lz-zstd); do
  check "layer $d: not fetched (requests: $(proxy_fetched "$d"))" test "$(proxy_fetched "$d")" = 0
done
ctr_out "$PROXY/remote/lz-zstd:1" 'read l </etc/greeting; echo "$l"' >"$T/run.out" ||
  fail "ctr run of it prints a file fetched on first read: $(cat "$T/run.out")"
ok "ctr run of it prints a file fetched on first read"
check "... \"$(cat "$T/run.out")\"" test "$(cat "$T/run.out")" = "hello lazily"
check "ctr images rm --sync of it" ctr_rmi "$PROXY/remote/lz-zstd:1"

# Two more images of eStargz layers, each with 2 MiB the store has not
# (what it has, a lazy layer links instead of fetching it).
for i in 1 2; do
  mkdir -p "$T/lf$i/data"
  head -c 2097152 /dev/urandom >"$T/lf$i/data/fresh"
  setup tar -C "$T/lf$i" --numeric-owner --sort=name -cf "$T/lf$i.tar" .
  setup "$CAIRN_BIN/cairn" --store "$T/src" import -q "lf$i:1" "$T/l1.tar" "$T/lz.tar" \
    "$T/lf$i.tar" >/dev/null
  setup "$CAIRN_BIN/cairn" --store "$T/src" push -q --insecure --no-progress --format estargz \
    "lf$i:1" "docker://$REGISTRY/remote/lz-fill$i:1" 2>/dev/null
done

# The background fill: rpull of a lazy image starts it (its last layer's
# Prepare), and every file of its layers is stored within a bounded wait;
# then, the registry gone (a proxy at 2 MB/s, which the lazy layers were
# recorded from, stopped), every file reads in the container. A kill -9
# of cairn-snapshotter while the fill runs leaves it running, and the
# snapshotter started again starts no second fill when a container of the
# image mounts the chain.
sn_restart "$CS"
P1=$PROXY
setup proxy_start "$T/proxy-slow" --rate 2000000
setup rpull lz-fill1
fill_runs() { ! fills_done; }
check "rpull started a background fill (no container yet)" fill_runs
check "ctr run -d of the lazy image" ctr_ run -d --snapshotter cairn \
  "$PROXY/remote/lz-fill1:1" $CID /bin/sleep 60
check "the background fill runs" fill_runs
kill -9 "$sn_pid"
wait_for 10 pid_gone "$sn_pid" || fail "cairn-snapshotter still runs"
wait "$sn_pid" 2>/dev/null
check "kill -9 of cairn-snapshotter: the fill still runs" fill_runs
sn_start "$CS"
wait_for 30 sh -c "ctr -a '$C/containerd.sock' snapshots --snapshotter cairn ls >/dev/null 2>&1" ||
  fail "containerd's calls still fail 30 s after the restart"
check "cairn-snapshotter started again, the fill still runs" fill_runs
on_exit "runc --root /run/containerd/runc/default delete -f ${CID}b 2>/dev/null;"
check "a second container of the image, the snapshotter started again" ctr_ run -d \
  --snapshotter cairn "$PROXY/remote/lz-fill1:1" ${CID}b /bin/sleep 60
# (a background fill, not the mount's fetcher, fill --serve)
check "one fill runs: $(pgrep -fa -- "--store $CS fill --no-progress" | tr '\n' ' ')" \
  test "$(pgrep -fc -- "--store $CS fill --no-progress")" -le 1
# (its end checks each eStargz layer against its diff_id: the blob's
# bytes no request of it brought, then the whole blob's digest)
t0=$SECONDS
wait_for 30 sh -c "test \"\$(sqlite3 '$CS/meta.db' 'SELECT count(*) FROM pending')\" = 0" &&
  wait_for 30 fills_done
check "within 30 s the background fill stored every file (pending: $(db \
  'SELECT count(*) FROM pending'))" test "$(db 'SELECT count(*) FROM pending')" = 0
check "and ended ($((SECONDS - t0)) s after the second container)" fills_done
check "cairn fsck: clean" sh -c "'$CAIRN_BIN/cairn' --store '$CS' fsck >'$T/fsck.out' 2>&1"
kill "$PROXY_PID"
wait_for 10 pid_gone "$PROXY_PID" || fail "the proxy still runs"
# every regular file under the image's directories, read (dash has no find)
readall='r() { for f in "$1"/* "$1"/.[!.]*; do if [ -h "$f" ]; then :; elif [ -d "$f" ]; then
  r "$f"; elif [ -f "$f" ]; then cat "$f" >/dev/null || echo "failed: $f"; fi; done; }
  for d in bin data etc lib lib64; do r /$d; done; echo read'
check "the registry gone, every file reads in the container" sh -c "timeout 60 ctr -a \
  '$C/containerd.sock' tasks exec --exec-id all $CID /bin/sh -c '$readall' >'$T/all.out' 2>&1 &&
  test \"\$(cat '$T/all.out')\" = read"
check "... $(head -c 200 "$T/all.out"); /data/fresh as pushed" sh -c "timeout 60 ctr -a \
  '$C/containerd.sock' tasks exec --exec-id fresh $CID /bin/cat /data/fresh |
  cmp -s - '$T/lf1/data/fresh'"
for c in $CID ${CID}b; do
  ctr_kill_rm $c
done
check "ctr images rm --sync" ctr_rmi "$PROXY/remote/lz-fill1:1"

# cairn-snapshotter --no-fill, and the registry (a second proxy in front
# of it) gone: what the container read keeps working, a file not fetched
# yet fails with EIO.
kill -TERM "$sn_pid"
wait_for 10 pid_gone "$sn_pid" || fail "cairn-snapshotter still runs"
wait "$sn_pid" 2>/dev/null
sn_start "$CS" --no-fill
setup proxy_start "$T/proxy-nofill"
setup rpull lz-fill2
check "a lazily pulled file is pending" \
  test "$(db "SELECT count(*) FROM pending WHERE path = 'data/fresh'")" -ge 1
check "--no-fill: rpull started no fill" test -z "$(pgrep -f -- "--store $CS fill")"
check "ctr run -d of the lazy image" ctr_ run -d --snapshotter cairn \
  "$PROXY/remote/lz-fill2:1" $CID /bin/sh -c 'cat /bin/cat >/dev/null; exec sleep 60'
wait_for 20 sh -c "test \"\$(sqlite3 '$CS/meta.db' \"SELECT count(*) FROM pending
  WHERE path IN ('bin/cat', 'bin/sleep')\")\" = 0" || fail "cat and sleep not fetched"
sleep 1
check "--no-fill: no background fill" test -z "$(pgrep -f -- "--store $CS fill")"
kill "$PROXY_PID"
wait_for 10 pid_gone "$PROXY_PID" || fail "the proxy still runs"
ctr_ tasks exec --exec-id gone $CID /bin/cat /data/fresh >"$T/gone.out" 2>&1
check "a file not fetched yet: $(head -c 200 "$T/gone.out")" \
  grep -q 'Input/output error' "$T/gone.out"
check "a file fetched already: read" sh -c "timeout 60 ctr -a '$C/containerd.sock' tasks exec \
  --exec-id kept $CID /bin/cat /bin/cat | cmp -s - '$T/lz/bin/cat'"
ctr_kill_rm $CID
check "ctr images rm --sync" ctr_rmi "$PROXY/remote/lz-fill2:1"

# An image rpulled and not run: its last layer's Prepare starts the fill,
# and within a bounded wait every file of its 3 lazy layers is stored;
# then, the registry gone, a container of it reads every file. Its
# Prepares fetch its manifest and config once (kept for the next ones),
# not once a layer.
sn_restart "$CS"
for i in 1 2 3; do
  mkdir -p "$T/lt$i/t$i"
  head -c 524288 /dev/urandom >"$T/lt$i/t$i/data"
  echo "layer $i" >"$T/lt$i/t$i/name"
  [ $i != 1 ] || { mkdir -p "$T/lt1/bin" && cp /bin/sleep /bin/cat "$T/lt1/bin/"; }
  setup tar -C "$T/lt$i" --numeric-owner --sort=name -cf "$T/lt$i.tar" .
done
setup "$CAIRN_BIN/cairn" --store "$T/src" import -q lt:1 "$T/l1.tar" "$T/lt1.tar" "$T/lt2.tar" \
  "$T/lt3.tar" >/dev/null
setup "$CAIRN_BIN/cairn" --store "$T/src" push -q --insecure --no-progress --format estargz \
  lt:1 "docker://$REGISTRY/remote/lt:1" 2>/dev/null
setup proxy_start "$T/proxy-three"
before=$(db 'SELECT id FROM layers ORDER BY id')
proxy_reset
check "rpull of an image of 3 layers the store has not" rpull lt
new=$(comm -13 <(echo "$before") <(db 'SELECT id FROM layers ORDER BY id'))
in=$(echo $new | sed "s/ /','/g")
check "its 3 new layers recorded lazily" test "$(echo "$new" | wc -w)" = 3
cfg=$(registry_manifest remote/lt 1 | jq -r .config.digest)
check "its config fetched twice, by containerd and the first lazy Prepare (requests: \
$(proxy_fetched "$cfg"))" test "$(proxy_fetched "$cfg")" = 2
by_tag=$(proxy_log | jq '[.[] | select(.[0] | endswith("/manifests/1"))] | length')
check "its manifest by tag twice, containerd's HEAD and the first Prepare's (requests: \
$by_tag)" test "$by_tag" = 2
wait_for 30 sh -c "test \"\$(sqlite3 '$CS/meta.db' \"SELECT count(*) FROM pending
  WHERE layer_id IN ('$in')\")\" = 0" && wait_for 30 fills_done
check "no container run, within 30 s every file of its layers stored (pending: $(db \
  "SELECT count(*) FROM pending WHERE layer_id IN ('$in')"))" \
  test "$(db "SELECT count(*) FROM pending WHERE layer_id IN ('$in')")" = 0
check "and the fill ended" fills_done
kill "$PROXY_PID"
wait_for 10 pid_gone "$PROXY_PID" || fail "the proxy still runs"
check "the registry gone, ctr run -d of the image" ctr_ run -d --snapshotter cairn \
  "$PROXY/remote/lt:1" $CID /bin/sleep 60
check "every file reads in the container" sh -c "timeout 60 ctr -a '$C/containerd.sock' tasks \
  exec --exec-id all $CID /bin/sh -c '${readall/bin data etc lib lib64/bin lib lib64 t1 t2 t3}' \
  >'$T/all.out' 2>&1 && test \"\$(cat '$T/all.out')\" = read"
check "... $(head -c 200 "$T/all.out"); /t3/data as pushed" sh -c "timeout 60 ctr -a \
  '$C/containerd.sock' tasks exec --exec-id t3 $CID /bin/cat /t3/data | cmp -s - '$T/lt3/t3/data'"
ctr_kill_rm $CID
check "ctr images rm --sync" ctr_rmi "$PROXY/remote/lt:1"
PROXY=$P1

# The container's root tree under cairn is containerd's overlayfs's: an
# image of 4 layers with what stacking gets wrong (fstree.py's 3 layers:
# whiteouts of files and directories, opaque directories, a directory
# replaced by a file and a file by a directory, hard links within a layer
# and a group an upper layer breaks, user.* and security.capability
# xattrs, setuid, setgid and sticky modes, owners, device nodes and a
# fifo, empty files, sub-second mtimes; then a 4th: both replacements
# back, a 255-byte name, an 830-byte path, a symlink loop, an opaque
# directory again, a whiteout of a directory an upper layer added, a new
# hard link group, an empty directory), as gzip, eStargz and zstd:chunked.
# Each is pulled by `ctr images pull` onto containerd's own overlayfs
# snapshotter, and onto cairn: the gzip by `ctr images pull --snapshotter
# cairn` (containerd applies each layer, cairn commits it as a layer), the
# others by rpull (recorded lazily from their TOCs, read through the
# chain's mount). The root each gives an active snapshot of the image's
# chain id (a container's: an overlay, mounted in a namespace of its own)
# is dumped by fstree.py (every entry's path, type, mode, owner, mtime,
# size and sha256, symlink target, device numbers, every xattr and hard
# link group) and the dumps compared.
$FSTREE make-layers "$T/tl"
python3 - "$T/tl/layer4.tar" "$HELPERS" <<'PY'
import sys
sys.path.insert(0, sys.argv[2])
import fstree
l = fstree.Layer(sys.argv[1])
l.add("file2dir", data=b"a file again\n", mtime=1700000002.5)
l.add("dir2file/", "dir", mode=0o700, mtime=1700000003)
l.add("dir2file/again", data=b"a directory again\n")
l.add("n" * 255, data=b"the longest name\n")
deep = ""
for i in range(4):
    deep += "d%d" % i + "x" * 198 + "/"
    l.add(deep, "dir")
l.add(deep + "f" * 30, data=b"deep\n")
l.add("loop/", "dir")
l.add("loop/a", "lnk", target="b", mode=0o777)
l.add("loop/b", "lnk", target="a", mode=0o777)
l.add("loop/self", "lnk", target="self", mode=0o777)
l.add("emptydir/", "dir", mode=0o750, mtime=1700000004)
l.add("hard/a_link", data=b"no longer one of orig's names\n")
l.add("newhard/", "dir")
l.add("newhard/x", data=b"a new group\n", uid=7, gid=8, mode=0o640, mtime=1700000005.25)
l.add("newhard/y", "hard", target="newhard/x")
l.add("opq/.wh..wh..opq")
l.add("opq/newer", data=b"newer\n")
l.add(".wh.fresh")
l.add("bin/sgid", data=b"sgid again\n", mode=0o2750, gid=50)
l.add("data/x", data=b"new xattrs\n", xattrs={"user.test": b"again"})
l.add("bin/cap", data=b"cap\n", mode=0o755, xattrs={"security.capability": fstree.CAP_NET_BIND})
l.add("empty2", data=b"")
l.close()
PY
tl=$(for i in 1 2 3 4; do echo "$T/tl/layer$i.tar"; done)
setup $OCI_IMAGE add "$T/oci" tree linux/amd64 $(for l in $tl; do echo "$l:gzip"; done)
setup registry_push "$T/oci" tree remote/tree:1
setup "$CAIRN_BIN/cairn" --store "$T/src" import -q tree:1 $tl >/dev/null
for f in estargz zstd:chunked; do
  setup "$CAIRN_BIN/cairn" --store "$T/src" push -q --insecure --no-progress --format "$f" tree:1 \
    "docker://$REGISTRY/remote/tree-${f%%:*}:1" 2>/dev/null
done
# chain_of REPO: the chain id of remote/REPO:1's layers
chain_of() {
  local cfg
  cfg=$(registry_manifest "remote/$1" 1 | jq -r .config.digest)
  chain_id $(curl -sf "http://$REGISTRY/v2/remote/$1/blobs/$cfg" | jq -r '.rootfs.diff_ids[]')
}
# gc_frees IN: cairn gc, after which none of the layers IN ('A','B') is left
gc_frees() {
  "$CAIRN_BIN/cairn" --store "$CS" gc >/dev/null 2>&1 &&
    test "$(db "SELECT count(*) FROM layers WHERE id IN ('$1')")" = 0
}
for n in tree tree-estargz tree-zstd; do
  chain=$(chain_of $n)
  check "$n: ctr images pull (containerd's overlayfs)" \
    sh -c "timeout 60 ctr -a '$C/containerd.sock' images pull --plain-http \
      '$PROXY/remote/$n:1' >'$T/pull.out' 2>&1"
  check "$n: its root tree" root_tree overlayfs "$chain" "$T/tree.ovl"
  before=$(db 'SELECT id FROM layers ORDER BY id')
  if [ $n = tree ]; then
    check "$n: ctr images pull --snapshotter cairn" sh -c "timeout 60 ctr -a \
      '$C/containerd.sock' images pull --snapshotter cairn --plain-http '$PROXY/remote/$n:1' \
      >'$T/pull.out' 2>&1 && grep -q '^done' '$T/pull.out'"
  else
    check "$n: rpull --snapshotter cairn" rpull $n
  fi
  new=$(comm -13 <(echo "$before") <(db 'SELECT id FROM layers ORDER BY id'))
  in=$(echo $new | sed "s/ /','/g")
  if [ $n = tree ]; then
    check "$n: its 4 layers committed as cairn layers" test "$(echo $new | wc -w)" = 4
    check "$n: with no overlayfs xattr" test "$(db "SELECT count(*) FROM entries
      WHERE layer_id IN ('$in') AND xattrs IS NOT NULL
      AND instr(CAST(xattrs AS TEXT), 'overlay')")" = 0
  else
    check "$n: its 4 layers recorded lazily" test "$(db "SELECT count(*) FROM layer_sources
      WHERE layer_id IN ('$in')")" = 4
  fi
  check "$n: cairn's root tree" root_tree cairn "$chain" "$T/tree.cairn"
  same_tree "$T/tree.ovl" "$T/tree.cairn" ||
    fail "$n: cairn's root tree differs from overlayfs's: $(head -c 1500 "$T/tree.diff")"
  ok "$n: cairn's root tree is overlayfs's ($(wc -l <"$T/tree.cairn") entries)"
  check "$n: ctr images rm --sync" ctr_rmi "$PROXY/remote/$n:1"
  wait_for 20 gc_frees "$in" || fail "$n: cairn gc left its layers"
  ok "$n: then cairn gc frees its layers"
done

# The snapshots hold the layers; once containerd removes them gc frees them.
expect_exit 4 "cairn rm of the pulled image: held by containerd's snapshots" \
  "$CAIRN_BIN/cairn" --store "$CS" rm "$PROXY/remote/a:1"
check "ctr images rm --sync of both" ctr_rmi "$PROXY/remote/a:1" "$PROXY/remote/b:1"
wait_for 20 sh -c "test \"\$(sqlite3 '$CS/meta.db' 'SELECT count(*) FROM snapshots')\" = 0" ||
  fail "snapshots left: $(db 'SELECT name FROM snapshots')"
check "then cairn rm and gc free every layer" sh -c "'$CAIRN_BIN/cairn' --store '$CS' rm \
  '$PROXY/remote/a:1' '$PROXY/remote/lz-zstd:1' >/dev/null &&
  '$CAIRN_BIN/cairn' --store '$CS' gc >/dev/null 2>&1"
check "none left" test "$(db 'SELECT count(*) FROM layers')" = 0
check "no snapshot directory left" test -z "$(ls -A "$CS/snapshots")"
check "the daemon reported nothing: $(head -3 "$C/sn.err")" test ! -s "$C/sn.err"

# ---- a token registry: one token for an image's lazy Prepares ---------
# cairn-snapshotter, with the credentials of an auth file, asks the token
# service once for the 3 lazy Prepares of an image, each of which opens a
# registry source (each asked again before); another user's credentials
# (the auth file's, changed) are never given that token: bob, whose
# tokens grant bob/ only, gets his own, and the Prepares are ordinary ones.
for i in 1 2 3 4 5 6; do
  mkdir -p "$T/tk$i/d$i"
  echo "layer $i" >"$T/tk$i/d$i/f"
  setup tar -C "$T/tk$i" --numeric-owner --sort=name -cf "$T/tk$i.tar" .
done
setup registry_start "$T/treg" "" token
for n in 1 2; do
  k=$((3 * n - 2))
  setup "$CAIRN_BIN/cairn" --store "$T/src" import -q "tk:$n" "$T/tk$k.tar" "$T/tk$((k + 1)).tar" \
    "$T/tk$((k + 2)).tar" >/dev/null
  setup "$CAIRN_BIN/cairn" --store "$T/src" push -q --insecure --no-progress --format estargz \
    --creds alice:secret "tk:$n" "docker://$REGISTRY/team/tk:$n" >/dev/null 2>&1
done
export REGISTRY_AUTH_FILE=$T/sn-auth.json
printf '{"auths":{"%s":{"auth":"%s"}}}' "$REGISTRY" "$(printf alice:secret | base64)" \
  >"$REGISTRY_AUTH_FILE"
sn_restart "$CS" --no-fill
# the token service's tokens to cairn for USER
sn_tokens() { grep -c "issued to $1 for repository:team/tk:pull (cairn" "$T/treg/token.log"; }
trpull() {
  timeout 120 ctr-remote -a "$C/containerd.sock" image rpull --plain-http --user alice:secret \
    --snapshotter cairn "$REGISTRY/team/tk:$1" >"$T/rpull.out" 2>&1 ||
    { cat "$T/rpull.out" "$C/sn.err"; return 1; }
}
before=$(db 'SELECT count(*) FROM layer_sources') t0=$(sn_tokens alice)
check "rpull of 3 eStargz layers from a token registry, alice's auth file" trpull 1
check "... its 3 layers recorded lazily" \
  test "$(($(db 'SELECT count(*) FROM layer_sources') - before))" = 3
asked=$(($(sn_tokens alice) - t0))
check "... with one token asked ($asked)" test "$asked" = 1
printf '{"auths":{"%s":{"auth":"%s"}}}' "$REGISTRY" "$(printf bob:hunter2 | base64)" \
  >"$REGISTRY_AUTH_FILE"
before=$(db 'SELECT count(*) FROM layer_sources')
check "rpull of another image of the repository, bob's auth file" trpull 2
check "... bob's own token asked ($(sn_tokens bob))" test "$(sn_tokens bob)" -ge 1
check "... alice's not used: no layer recorded lazily" \
  test "$(db 'SELECT count(*) FROM layer_sources')" = "$before"
unset REGISTRY_AUTH_FILE
ctd_stop
finish
