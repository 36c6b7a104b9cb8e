#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_snapshotter_suite.sh — cairn-snapshotter answers containerd's own
# snapshotter conformance suite (containerd 1.6's snapshots/testsuite,
# tests/helpers/snapshotter_suite/, run through the proxy API as containerd
# would) as containerd's overlayfs snapshotter does: 20 cases passed,
# Rename skipped, none failed. The suite is compiled once from Debian's Go
# sources (golang-github-containerd-containerd-dev) into
# $CAIRN_TEST_CACHE (about 30 s of CPU); each case's daemon with --idle 1
# (dormant after a second without a call). Also its command line: --help,
# usage errors, SIGTERM; its systemd unit, and the install's dormant form
# (libexec/cairn/cairn-snapshotter-idle). And, if it is installed,
# containerd with cairn-snapshotter as its proxy plugin imports an image
# and runs a container (ctr run), and List gives 7,000 more snapshots
# (TestCount, ours, in the suite's file). Skips (77) without cairn-snapshotter (a
# build without gRPC) or Go and containerd's sources.
source "$(dirname "$0")/../lib/test-lib.sh"
SN=$CAIRN_BIN/cairn-snapshotter
if [ ! -x "$SN" ]; then
  echo "skip: cairn-snapshotter not built (no gRPC or protobuf-c)"
  exit 77
fi
if ! command -v go >/dev/null || [ ! -d /usr/share/gocode/src/github.com/containerd/containerd ]; then
  echo "skip: golang-go or golang-github-containerd-containerd-dev missing"
  exit 77
fi
[ "$(id -u)" = 0 ] || { echo "skip: the suite mounts: root only"; exit 77; }

# The command line.
check "--help exits 0 and names --store and --address" \
  sh -c "'$SN' --help | grep -q -- '--store DIR' && '$SN' --help | grep -q -- '--address SOCK'"
expect_exit 2 "an unknown option exits 2" "$SN" --nosuch
check "its one line says so" grep -q "^cairn-snapshotter: --nosuch: unknown option" "$T/stderr"
expect_exit 2 "a relative --address exits 2" "$SN" --store "$T/s" --address rel.sock
check "and nothing is stored" test ! -e "$T/s"
expect_exit 2 "--idle of no number exits 2" "$SN" --store "$T/s" --idle 1m
check "its one line says so" grep -q "^cairn-snapshotter: --idle 1m: not a number" "$T/stderr"
expect_exit 2 "--listen-fd (the dormant form's) of no listening socket exits 2" \
  "$SN" --store "$T/s" --listen-fd 0
check "its one line says so" \
  grep -q "^cairn-snapshotter: --listen-fd 0: not a listening" "$T/stderr"
check "and nothing is stored" test ! -e "$T/s"
# SIGTERM: it stops, exits 0 and takes its socket away.
bg_start "$SN" --store "$T/st" --address "$T/sn.sock"
pid=$!
wait_for 10 test -S "$T/sn.sock" || fail "no socket at $T/sn.sock after 10 s"
kill -TERM "$pid"
wait_for 10 pid_gone "$pid" || fail "still running 10 s after SIGTERM"
wait "$pid"
check "after SIGTERM it exits 0" test $? = 0
check "and removes its socket" test ! -e "$T/sn.sock"

# Its systemd unit (packaging/cairn-snapshotter.service.in), as cmake
# --install puts it, and its ExecStart run by hand as systemd would, the
# socket elsewhere (as a drop-in would set it).
cmake --install "$CAIRN_BIN" --prefix "$T/prefix" >/dev/null
unit=$T/prefix/lib/systemd/system/cairn-snapshotter.service
check "cmake --install puts cairn-snapshotter.service in lib/systemd/system" test -f "$unit"
if command -v systemd-analyze >/dev/null; then
  check "systemd-analyze verify accepts it" systemd-analyze verify --man=no "$unit"
fi
check "it is ordered before containerd" grep -qx 'Before=containerd.service' "$unit"
check "a stop ends cairn-snapshotter alone, not the chains' cairnfs daemons" \
  grep -qx 'KillMode=process' "$unit"
check "HOME is root's, for the credentials of lazy layers (systemd sets none)" \
  grep -qx 'Environment=HOME=/root' "$unit"
exec_start=$(sed -n 's/^ExecStart=//p' "$unit")
check "ExecStart is the install's cairn-snapshotter" test "$exec_start" = \
  "$T/prefix/bin/cairn-snapshotter --address \${CAIRN_SNAPSHOTTER_ADDRESS}"
check "its default socket is the one the man page's config.toml names" \
  grep -qx 'Environment=CAIRN_SNAPSHOTTER_ADDRESS=/run/cairn/snapshotter.sock' "$unit"
check "cairn-snapshotter(8) gives containerd's config.toml lines for it" \
  grep -qF 'address = "/run/cairn/snapshotter.sock"' "$CAIRN_SRC/doc/cairn-snapshotter.8.scd"
# shellcheck disable=SC2086 # the unit's words
CAIRN_STORE=$T/ustore bg_start ${exec_start//\$\{CAIRN_SNAPSHOTTER_ADDRESS\}/$T/unit.sock}
pid=$!
check "ExecStart serves on the unit's socket" wait_for 10 test -S "$T/unit.sock"
check "in the store of CAIRN_STORE" wait_for 10 test -f "$T/ustore/meta.db"
kill -TERM "$pid"
wait_for 10 pid_gone "$pid" || fail "still running 10 s after SIGTERM"
# The install's dormant form: found in its libexec/cairn/, wherever the
# install is.
bg_start "$T/prefix/bin/cairn-snapshotter" --store "$T/ustore" --address "$T/unit.sock" --idle 1
pid=$!
wait_for 10 test -S "$T/unit.sock" || fail "no socket at $T/unit.sock after 10 s"
idle_bin=$T/prefix/libexec/cairn/cairn-snapshotter-idle
check "idle a second, the install's daemon runs its $idle_bin" \
  wait_for 20 sh -c "test \"\$(readlink /proc/$pid/exe)\" = '$idle_bin'"
# (a sanitizer build's programs map its runtimes too, and what they need)
if sanitizer_build; then
  check "which maps no gRPC, SQLite or curl library" sh -c "! grep -q -e libgrpc \
    -e libsqlite -e libcurl /proc/$pid/maps"
else
  check "which maps no library but libc" sh -c "! grep '\.so' /proc/$pid/maps |
    grep -v -e '/libc\.so' -e '/ld-linux' -q"
fi
kill -TERM "$pid"
wait_for 10 pid_gone "$pid" || fail "the dormant form still runs 10 s after SIGTERM"
wait "$pid"
check "after SIGTERM it exits 0" test $? = 0
check "and removes its socket" test ! -e "$T/unit.sock"

# The suite, compiled once for this source of it and this containerd.
use_lib containerd
suite=$(sn_suite)

# Each case starts its own daemon on a fresh store under $T (TMPDIR), and
# kills it when done; the suite unmounts what it mounted.
mkdir -p "$T/tmp"
(cd "$T/tmp" && TMPDIR=$T/tmp SNAPSHOTTER_CMD="$SN --store ROOT --address SOCK --idle 1" \
  timeout 600 "$suite" -test.root -test.v -test.run '^TestSnapshotter$' >"$T/suite.log" 2>&1)
rc=$?
cases() { grep -cE "^    --- $1: TestSnapshotter/" "$T/suite.log"; }
passed=$(cases PASS) failed=$(cases FAIL) skipped=$(cases SKIP)
echo "# containerd's suite: $passed passed, $failed failed, $skipped skipped"
if [ "$failed" = 0 ] && [ "$rc" = 0 ]; then
  ok "no case of containerd's suite fails"
else
  fail "no case of containerd's suite fails (exit $rc): $(grep -E -A3 "^    --- FAIL" "$T/suite.log" |
    head -20)"
fi
check "20 cases pass (as containerd's overlayfs)" test "$passed" -ge 20
check "no daemon is left" sh -c "! pgrep -f '^$SN --store $T/' >/dev/null"

# containerd itself (Debian's 1.6, a private config: every path under $T)
# with cairn-snapshotter as its proxy plugin: it imports a Debian minbase
# image into snapshots and runs a container on them (runc).
if ! command -v containerd >/dev/null || ! command -v ctr >/dev/null; then
  echo "# containerd not installed: its checks skipped"
  finish
  exit 0
fi
use_lib mount containerd
minbase_layers "$T/mb"
setup python3 "$HELPERS/oci_image.py" docker-archive "$T/img.tar" localhost/minbase:1 \
  "$T/mb/layer1.tar" "$T/mb/layer2.tar" "$T/mb/layer3.tar"
ctd_start "$T/cstore"
check "containerd lists the cairn snapshotter ok" \
  sh -c "ctr -a '$C/containerd.sock' plugins ls | grep -Eq 'snapshotter.*cairn +- +ok'"
check "ctr images import --snapshotter cairn" \
  sh -c "ctr -a '$C/containerd.sock' images import --snapshotter cairn '$T/img.tar' >'$T/import.log'"
check "its 3 layers are committed snapshots" \
  sh -c "ctr -a '$C/containerd.sock' snapshots --snapshotter cairn ls | grep -c Committed | grep -qx 3"
out=$(ctr_out localhost/minbase:1 'echo written >/x && cat /x /etc/debian_version')
check "ctr run on them: the container writes and reads its root: $out" \
  test "$(echo "$out" | head -1)" = written
check "and it is gone after --rm (only the 3 layers left)" \
  sh -c "ctr -a '$C/containerd.sock' snapshots --snapshotter cairn ls | tail -n +2 | wc -l | grep -qx 3"
base=$(snaps ls | awk 'NF == 2 && $2 == "Committed" { print $1 }') # the one with no parent
check "the bottom layer is there: $base" test -n "$base"
expect_exit 1 "removing a layer with a child fails" snaps rm "$base"
check "with containerd's failed precondition" grep -q "cannot remove snapshot with child" "$T/stderr"
# A host's thousands of snapshots: List streams them all (rows written
# straight into the store's table, as many prepares would; counted by the
# suite's TestCount, since ctr lists containerd's own records).
count() { SNAPSHOTTER_SOCK=$C/cairn.sock timeout 60 "$suite" -test.run '^TestCount$' 2>&1; }
# containerd removes the container's snapshot from the snapshotter by
# its own garbage collection, after `ctr run --rm` returns: wait for it.
count_is() { [ "$(count | sed -n 's/^snapshots: //p')" = "$1" ]; }
wait_for 30 count_is 3 || fail "List counts 3 snapshots once containerd collected: $(count | head -1)"
before=$(count | sed -n 's/^snapshots: //p')
check "List counts the snapshots there: $before" test -n "$before"
setup sqlite3 "$T/cstore/meta.db" "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1
  FROM n WHERE i < 7000) INSERT INTO snapshots(name, parent, kind, created, updated)
  SELECT 'many-' || i, '', 3, 0, 0 FROM n"
out=$(count)
check "List gives all $((before + 7000)) snapshots: $(echo "$out" | head -1)" \
  grep -qx "snapshots: $((before + 7000))" <<<"$out"
check "the daemon reported nothing: $(head -3 "$C/sn.err")" test ! -s "$C/sn.err"
ctd_stop
finish
