# SPDX-License-Identifier: Apache-2.0
# containerd.sh — test-lib.sh's helpers for a private containerd whose
# proxy plugin `cairn` is cairn-snapshotter (`use_lib containerd`).
#
# Gives: SN (the built cairn-snapshotter), C ($T/ctd: containerd's root,
# state, sockets and logs; the snapshotter's stderr is $C/sn.err), and
#   ctd_need [CMD]   skips the test without what it needs;
#   ctd_cri SANDBOX_IMAGE HOST...  (before ctd_start) containerd's CRI
#                    plugin on cairn: its settings for this containerd,
#                    the registries HOST over plain HTTP, Debian's CNI
#                    plugins, a pod network the conflist a test puts in
#                    CTD_CNI_CONF; cri_ ARGS runs
#                    tests/helpers/cri_client.py on its socket;
#   ctd_start STORE  cairn-snapshotter on STORE, then containerd (sn_pid,
#                    ctd_pid), each waited for on its socket;
#   sn_start STORE [OPTION...]  cairn-snapshotter alone (after a kill, say);
#   sn_restart STORE [OPTION...]  cairn-snapshotter stopped (SIGTERM) and
#                    started again, containerd's calls waited for;
#   ctr_ ARGS        ctr on this containerd, 60 s at most;
#   ctr_out IMAGE SCRIPT  what a container of IMAGE running SCRIPT printed;
#   snaps ARGS       ctr_ snapshots --snapshotter cairn ARGS;
#   ctr_kill_rm ID [WHAT]  container ID killed, waited for, its task and it removed;
#   ctd_stop         both stopped by SIGTERM, as their units would be;
#   chain_id DIFF_ID...  the chain id of those layers, bottom first;
#   root_tree SNAPSHOTTER CHAIN OUT  fstree.py's dump of the root an active
#                    snapshot on CHAIN gives (overlayfs: containerd's own);
#   same_tree OVERLAYFS OTHER  diff of two dumps into $T/tree.diff, less
#                    what overlayfs gives of its own;
#   sn_suite         the path of containerd's snapshotter suite
#                    (tests/helpers/snapshotter_suite/, with our TestCount
#                    and TestPrepare), compiled once into $CAIRN_TEST_CACHE
#                    (about 30 s of CPU; the test holds the cache's lock).
# A container a test runs is named CID (unique to the test run: runc's
# state is the host's); at exit, whatever the exit, it is deleted and the
# shim that names this containerd's socket killed.

SN=$CAIRN_BIN/cairn-snapshotter
C=$T/ctd
CTD_CNI_CONF=$C/cni/conf
CID=cairn-$(basename "$0" .sh | tr _ -)-$$
mkdir -p "$C"
source "$TESTLIB/containerd-toml.sh"
{
  ctd_toml "$C" cairn
  cat <<TOML
# containerd's garbage collection only when a call asks for it (--sync):
# a snapshot a test makes by hand (ctr snapshots prepare) loses ctr's
# lease as ctr exits, and a collection its 100th change set off would
# remove it at a moment of its own, in the middle of the test.
[plugins]
  [plugins."io.containerd.gc.v1.scheduler"]
    mutation_threshold = 1000000
TOML
} >"$C/containerd.toml"

# ctd_need [CMD...]: skips the test (exit 77) unless cairn-snapshotter is
# built, it runs as root, and containerd, ctr, runc and each CMD are there.
ctd_need() {
  [ -x "$SN" ] || { echo "skip: cairn-snapshotter not built (no gRPC or protobuf-c)"; exit 77; }
  local _tl_c
  for _tl_c in containerd ctr runc "$@"; do
    command -v "$_tl_c" >/dev/null || { echo "skip: no $_tl_c"; exit 77; }
  done
  [ "$(id -u)" = 0 ] || { echo "skip: containerd needs root"; exit 77; }
}

# ctd_cri SANDBOX_IMAGE HOST...: containerd's CRI plugin (its services on
# containerd's socket, namespace k8s.io) unpacks into cairn, with the labels
# a remote snapshotter reads (disable_snapshot_annotations = false), its
# pods' pause image SANDBOX_IMAGE, each registry HOST (127.0.0.1:PORT)
# spoken to over plain HTTP, its containers' oom_score_adj not below
# containerd's (runc may not set -998 without CAP_SYS_RESOURCE), its files
# under $C. Its CNI plugins are Debian's (containernetworking-plugins, in
# /usr/lib/cni), its CNI network the conflist a test writes into
# $C/cni/conf (CTD_CNI_CONF) before ctd_start, if any: without one, only
# a pod on the host's network runs. Skips
# the test (exit 77) without python3-grpcio, python3-protobuf or protoc
# (cri_client.py's). CRI_IDS ($C/cri.ids): the pods' and containers' ids,
# one a line, that a test adds; at exit each one's runc container is
# deleted.
ctd_cri() {
  local _tl_h
  /usr/bin/python3 -c 'import grpc, google.protobuf' 2>/dev/null ||
    { echo "skip: no python3-grpcio or python3-protobuf"; exit 77; }
  command -v protoc >/dev/null || { echo "skip: no protoc (protobuf-compiler)"; exit 77; }
  mkdir -p "$CTD_CNI_CONF"
  cat >>"$C/containerd.toml" <<TOML
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "$1"
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    # not below containerd's own (the tests' machines may not lower it)
    restrict_oom_score_adj = true
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "cairn"
      disable_snapshot_annotations = false
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "$CTD_CNI_CONF"
TOML
  for _tl_h in "${@:2}"; do
    cat >>"$C/containerd.toml" <<TOML
    [plugins."io.containerd.grpc.v1.cri".registry.mirrors."$_tl_h"]
      endpoint = ["http://$_tl_h"]
TOML
  done
  CRI_IDS=$C/cri.ids
  : >"$CRI_IDS"
  on_exit "for i in \$(cat '$CRI_IDS'); do runc --root /run/containerd/runc/k8s.io delete -f \$i;" \
    "done"
}
cri_() {
  timeout 90 /usr/bin/python3 "$HELPERS/cri_client.py" --socket "$C/containerd.sock" \
    --gen "$C/cri-gen" "$@"
}

sn_start() {
  bg_start "$SN" --store "$1" --address "$C/cairn.sock" "${@:2}" 2>>"$C/sn.err"
  sn_pid=$!
  wait_for 10 test -S "$C/cairn.sock" || fail "cairn-snapshotter: no socket after 10 s"
}

sn_restart() {
  kill -TERM "$sn_pid"
  wait_for 10 pid_gone "$sn_pid" || fail "cairn-snapshotter still runs"
  wait "$sn_pid" 2>/dev/null
  sn_start "$@"
  wait_for 30 sh -c "ctr -a '$C/containerd.sock' snapshots --snapshotter cairn ls \
    >/dev/null 2>&1" || fail "containerd's calls still fail 30 s after the restart"
}

ctd_start() {
  sn_start "$1"
  bg_start containerd --config "$C/containerd.toml" >"$C/containerd.log" 2>&1
  ctd_pid=$!
  wait_for 20 test -S "$C/containerd.sock" || fail "containerd: no socket after 20 s"
  on_exit "runc --root /run/containerd/runc/default delete -f $CID 2>/dev/null;" \
    "for p in \$(pgrep -f -- '-address $C/containerd.sock\$'); do kill -9 \$p; done"
}

ctr_() { timeout 60 ctr -a "$C/containerd.sock" "$@"; }
# ctr_rmi REF...: `ctr images rm --sync` of them (containerd's gc run
# before it returns), its list of the names removed not printed.
ctr_rmi() { ctr_ images rm --sync "$@" >/dev/null; }

# ctr_out IMAGE SCRIPT: runs `/bin/sh -c SCRIPT` in a container of IMAGE
# on cairn (ctr run --rm, 60 s at most), and prints what it wrote to its
# stdout and stderr; fails as ctr run does. The output comes through a
# file of $C bind-mounted at /.ctr-out, not through ctr's FIFOs, whose copy
# can lose the output of a process that exits at once (it races the task's
# end: one run in dozens here).
ctr_out() {
  local _tl_d _tl_rc=0
  _tl_d=$(mktemp -d "$C/out.XXXXXX")
  ctr_ run --rm --snapshotter cairn --mount "type=bind,src=$_tl_d,dst=/.ctr-out,options=rbind:rw" \
    "$1" "$CID" /bin/sh -c "exec >/.ctr-out/out 2>&1; $2" >"$_tl_d/ctr.out" 2>&1 || _tl_rc=$?
  cat "$_tl_d/ctr.out" "$_tl_d/out" 2>/dev/null
  return $_tl_rc
}
snaps() { ctr_ snapshots --snapshotter cairn "$@"; }
# ctr_kill_rm ID [WHAT]: the task of container ID killed (SIGKILL) and
# waited for (20 s at most), then its task and the container removed,
# each a check named by WHAT (default: the container).
ctr_kill_rm() {
  local _tl_w=${2:-the container $1}
  ctr_ tasks kill -s SIGKILL "$1" >/dev/null
  wait_for 20 sh -c "! timeout 60 ctr -a '$C/containerd.sock' tasks ls |
    grep -q '^$1 .*RUNNING'" || fail "$_tl_w: still runs"
  check "$_tl_w: its task removed" ctr_ tasks rm "$1"
  check "$_tl_w: removed" ctr_ containers rm "$1"
}

ctd_stop() {
  local _tl_p
  for _tl_p in "$ctd_pid" "$sn_pid"; do
    kill -TERM "$_tl_p"
    wait_for 10 pid_gone "$_tl_p" || fail "$_tl_p still running 10 s after SIGTERM"
    wait "$_tl_p" 2>/dev/null
  done
}

sn_suite() {
  local cache=${CAIRN_TEST_CACHE:-/var/cache/cairn-test} key suite start
  local src=$CAIRN_SRC/tests/helpers/snapshotter_suite/suite_test.go
  key=$({ sha256sum <"$src" &&
    dpkg-query -W -f '${Version}' golang-github-containerd-containerd-dev; } |
    sha256sum | cut -c1-16)
  suite=$cache/snapshotter-suite-$key
  if [ ! -x "$suite" ]; then
    mkdir -p "$cache" "$T/gopath/src/snsuite"
    cp "$src" "$T/gopath/src/snsuite/"
    start=$SECONDS
    (cd "$T/gopath/src/snsuite" && GO111MODULE=off GOPATH="$T/gopath:/usr/share/gocode" \
      GOCACHE="$T/gocache" go test -c -o "$suite.tmp" .) >"$T/go.log" 2>&1 ||
      fail "building the suite: $(tail -5 "$T/go.log")"
    mv "$suite.tmp" "$suite"
    echo "# the suite built in $((SECONDS - start)) s" >&2
  fi
  echo "$suite"
}

chain_id() {
  local _tl_c=$1 _tl_d
  for _tl_d in "${@:2}"; do
    _tl_c=sha256:$(printf '%s %s' "$_tl_c" "$_tl_d" | sha256sum | cut -c1-64)
  done
  echo "$_tl_c"
}

# root_tree: the snapshot is prepared by ctr (key tree-SNAPSHOTTER),
# mounted as its Mounts say (a container's root: an overlay) in a mount
# namespace of its own, dumped, and removed.
root_tree() {
  local _tl_m _tl_rc=0
  ctr_ snapshots --snapshotter "$1" prepare --mounts "tree-$1" "$2" >"$C/mounts.json" || return 1
  _tl_m=$(jq -r '.[0] | "mount -t \(.Type) -o \(.Options | join(",")) \(.Source)"' \
    "$C/mounts.json")
  mkdir -p "$C/root-$1"
  timeout 120 "${PRIVATE_NS[@]}" sh -c "$_tl_m '$C/root-$1' &&
    python3 '$HELPERS/fstree.py' scan '$C/root-$1'" >"$3" || _tl_rc=1
  ctr_ snapshots --snapshotter "$1" rm "tree-$1" || _tl_rc=1
  return $_tl_rc
}

# same_tree leaves out what overlayfs gives of its own: the link count (a
# merged directory's is 1, and a lower layer's file keeps the count of
# names an upper layer removed; the hard link groups are compared), and
# the mtime of a directory containerd's applier made at the pull (a parent
# a layer's tar writes into without listing it, made again in that
# layer's snapshot, has the pull's time; cairn's is the layer's that
# lists it).
CTD_T0=$(date +%s)000000000
same_tree() {
  local _tl_n='NR == FNR { if ($2 == "dir" && $5 >= t0) now[$1] = 1; next }
    { $7 = "-"; if ($1 in now) $5 = "now"; print }'
  diff <(awk -F'\t' -v OFS='\t' -v t0="$CTD_T0" "$_tl_n" "$1" "$1") \
    <(awk -F'\t' -v OFS='\t' -v t0="$CTD_T0" "$_tl_n" "$1" "$2") >"$T/tree.diff"
}
