#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_snapshotter_suite.sh — cairn-snapshotter answers containerd's own
# snapshotter conformance suite (containerd 1.6's snapshots/testsuite,
# tests/helpers/snapshotter_suite/, run through the proxy API as containerd
# would) as containerd's overlayfs snapshotter does: 20 cases passed,
# Rename skipped, none failed. The suite is compiled once from Debian's Go
# sources (golang-github-containerd-containerd-dev) into
# $CAIRN_TEST_CACHE (about 30 s of CPU). Also its command line: --help,
# usage errors, SIGTERM. Skips (77) without cairn-snapshotter (a build without
# gRPC) or Go and containerd's sources.
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
# SIGTERM: it stops, exits 0 and takes its socket away.
bg_start "$SN" --store "$T/st" --address "$T/sn.sock"
pid=$!
wait_for 10 test -S "$T/sn.sock" || fail "no socket at $T/sn.sock after 10 s"
kill -TERM "$pid"
wait_for 10 pid_gone "$pid" || fail "still running 10 s after SIGTERM"
wait "$pid"
check "after SIGTERM it exits 0" test $? = 0
check "and removes its socket" test ! -e "$T/sn.sock"

# The suite, compiled once for this source of it and this containerd.
CACHE=${CAIRN_TEST_CACHE:-/var/cache/cairn-test}
src=$CAIRN_SRC/tests/helpers/snapshotter_suite/suite_test.go
key=$({ sha256sum <"$src" && dpkg-query -W -f '${Version}' golang-github-containerd-containerd-dev; } |
  sha256sum | cut -c1-16)
suite=$CACHE/snapshotter-suite-$key
if [ ! -x "$suite" ]; then
  mkdir -p "$CACHE" "$T/gopath/src/snsuite"
  cp "$src" "$T/gopath/src/snsuite/"
  start=$SECONDS
  (cd "$T/gopath/src/snsuite" && GO111MODULE=off GOPATH="$T/gopath:/usr/share/gocode" \
    GOCACHE="$T/gocache" go test -c -o "$suite.tmp" .) >"$T/go.log" 2>&1 ||
    { not_ok "building the suite: $(tail -5 "$T/go.log")"; finish; exit 1; }
  mv "$suite.tmp" "$suite"
  echo "# the suite built in $((SECONDS - start)) s"
fi

# Each case starts its own daemon on a fresh store under $T (TMPDIR), and
# kills it when done; the suite unmounts what it mounted.
mkdir -p "$T/tmp"
(cd "$T/tmp" && TMPDIR=$T/tmp SNAPSHOTTER_CMD="$SN --store ROOT --address SOCK" \
  timeout 600 "$suite" -test.root -test.v >"$T/suite.log" 2>&1)
rc=$?
cases() { grep -cE "^    --- $1: TestSnapshotter/" "$T/suite.log"; }
passed=$(cases PASS) failed=$(cases FAIL) skipped=$(cases SKIP)
echo "# containerd's suite: $passed passed, $failed failed, $skipped skipped"
if [ "$failed" = 0 ] && [ "$rc" = 0 ]; then
  ok "no case of containerd's suite fails"
else
  not_ok "no case of containerd's suite fails (exit $rc): $(grep -E -A3 "^    --- FAIL" "$T/suite.log" |
    head -20)"
fi
check "20 cases pass (as containerd's overlayfs)" test "$passed" -ge 20
check "no daemon is left" sh -c "! pgrep -f '^$SN --store $T/' >/dev/null"
finish
