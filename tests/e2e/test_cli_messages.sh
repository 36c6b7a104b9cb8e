#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_cli_messages.sh — messages that say the right thing: an option
# where the command goes is an unknown option, not a command (--stor: did
# you mean --store?; -V); cairn-pin lst is a mistyped subcommand, not an
# image to list; "after 1 second", not "1 seconds"; an oci: layout of
# several images names them.
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib registry
pull_test_init

expect_exit 2 "cairn --stor DIR images" cairn --stor "$T/x" images
check "says --stor is an unknown option, did you mean --store" \
  grep -qx "cairn: --stor: unknown option (did you mean --store?)" "$T/stderr"
expect_exit 2 "cairn -V" cairn -V
check "says -V is an unknown option" grep -q "^cairn: -V: unknown option" "$T/stderr"
expect_exit 2 "cairn-pin lst" cairn-pin lst
check "says lst is a mistyped subcommand" \
  grep -qx "cairn-pin: lst: unknown subcommand (did you mean ls?)" "$T/stderr"
expect_exit 2 "cairn-pin --stor DIR" cairn-pin --stor "$T/x"
check "says --stor is an unknown option" \
  grep -qx "cairn-pin: --stor: unknown option (did you mean --store?)" "$T/stderr"

two_layers
cairn import -q app:1 "$T/1.tar" >/dev/null
hold_image app:1
expect_exit 4 "cairn-pin wait --timeout 1 (held)" cairn-pin wait --timeout 1 app:1
check "says after 1 second" grep -q "still pinned after 1 second by " "$T/stderr"

setup $OCI_IMAGE layer a.tar a 2 100
setup $OCI_IMAGE add lay v1 linux/amd64 a.tar:raw >/dev/null
setup $OCI_IMAGE add lay v2 linux/amd64 a.tar:gzip >/dev/null
expect_exit 2 "pull oci:DIR of two images" cairn pull "oci:$T/lay"
check "names them" grep -q "holds 2 images (v1, v2); name one as oci:$T/lay:REF" "$T/stderr"
finish
