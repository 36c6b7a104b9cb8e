#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_cli_import.sh — what cairn import takes: a layer from the standard
# input ("-", as tar), and layers compressed with xz and bzip2 besides gzip
# and zstd, found from their bytes whatever the file is called; the same
# layer gives the same image however it came.
source "$(dirname "$0")/../lib/test-lib.sh"

mkdir -p "$T/l/etc" && echo "hello" >"$T/l/etc/greeting" && mktar "$T/l" "$T/l.tar"
expect_exit 0 "import a plain tar" cairn import plain:1 "$T/l.tar"
id=$(cat "$T/stdout")
expect_exit 0 "import - reads the standard input" sh -c "cairn import stdin:1 - <'$T/l.tar'"
check "the same image" [ "$(cat "$T/stdout")" = "$id" ]
for z in xz bzip2 gzip zstd; do
  $z -c "$T/l.tar" >"$T/l.tar.$z"
  expect_exit 0 "import a $z layer" cairn import "$z:1" "$T/l.tar.$z"
  check "the same image ($z)" [ "$(cat "$T/stdout")" = "$id" ]
done
cp "$T/l.tar.xz" "$T/misnamed.tar.gz"
expect_exit 0 "an xz layer named .gz" cairn import misnamed:1 "$T/misnamed.tar.gz"
check "the same image (misnamed)" [ "$(cat "$T/stdout")" = "$id" ]
expect_exit 0 "xz from the standard input" sh -c "cairn import stdinxz:1 - <'$T/l.tar.xz'"
check "the same image (xz on stdin)" [ "$(cat "$T/stdout")" = "$id" ]
check "help says -" sh -c "cairn import --help | grep -q 'reads one from the standard input'"

finish
