#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_export.sh — `cairn export IMAGE` writes the merged root filesystem
# as a tar: the tar, read back by Python's tarfile (not by cairn), is
# exactly the tree the OCI rules define for the layers (fstree.py), and a
# re-import of it gives an image with the same tree.
source "$(dirname "$0")/../lib/test-lib.sh"
FSTREE="python3 $HELPERS/fstree.py"

$FSTREE make-layers "$T/layers"
expect_exit 0 "import a three-layer image with every rule and entry type" \
  cairn import rules:1 "$T"/layers/layer{1,2,3}.tar
$FSTREE expect "$T"/layers/layer{1,2,3}.tar >"$T/want"
expect_exit 0 "export to a file" sh -c "cairn export rules:1 >'$T/export.tar'"
$FSTREE expect "$T/export.tar" >"$T/got"
check "the exported tar is the merged tree, entry by entry ($(wc -l <"$T/want") entries)" \
  diff -u "$T/want" "$T/got"
expect_exit 0 "re-import the export as one layer" cairn import flat:1 "$T/export.tar"
expect_exit 0 "export the re-import" sh -c "cairn export flat:1 >'$T/export2.tar'"
$FSTREE expect "$T/export2.tar" >"$T/got2"
check "the round trip keeps the tree" diff -u "$T/want" "$T/got2"
check "export of the re-import is byte for byte the first export" cmp "$T/export.tar" "$T/export2.tar"
expect_exit 2 "export refuses a terminal" script -qec "cairn export rules:1" /dev/null
expect_exit 3 "export of an unknown image is exit 3" sh -c "cairn export nosuch:1 >/dev/null"
finish
