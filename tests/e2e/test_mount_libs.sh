#!/bin/bash
# test_mount_libs.sh — a cairnfs daemon maps only the shared libraries a
# mount uses (libfuse3, SQLite, xxHash, libc and what they need), none of
# those of import and pull (libarchive and its ICU, libxml2, zstd ...;
# libcrypto; Jansson; libcurl): loading them tripled the time of a mount
# with cold caches, and their relocated data was private memory in every
# daemon. cairn-pin does not load them either, Jansson (its --json) apart.
# (libstdc++ is not checked: ASan builds load it.)
source "$(dirname "$0")/mountlib.sh"

IMPORT_PULL_LIBS='lib(archive|crypto|jansson|curl|xml2|icu[a-z]*|lzma|zstd|nettle)\.so'

$FSTREE make-layers "$TMP/layers"
cairn import app:1 "$TMP"/layers/layer{1,2,3}.tar >/dev/null
mkdir -p "$TMP/m"
cairn mount -q app:1 "$TMP/m"
grep -q cairntest "$TMP/m/etc/os-release" || fail "the mount does not serve the image"
pid=$(mount_pid "$TMP/m")
[ -n "$pid" ] || fail "no daemon recorded: $(cairn mounts --json)"
libs=$(awk '$6 ~ /\.so/ { print $6 }' "/proc/$pid/maps" | sort -u)
grep -q 'libfuse3\.so' <<<"$libs" || fail "the daemon's maps show no libfuse3: $libs"
if grep -E "$IMPORT_PULL_LIBS" <<<"$libs"; then
  fail "cairnfs maps the libraries above, which a mount does not use"
fi
pass "the cairnfs daemon maps only libfuse3, SQLite, xxHash and libc (and their needs)"

# What the loader would load for cairn-pin, without running it.
libs=$(LD_TRACE_LOADED_OBJECTS=1 "$CAIRN_BIN/cairn-pin")
grep -q 'libsqlite3\.so' <<<"$libs" || fail "cairn-pin loads no SQLite? $libs"
if grep -v libjansson <<<"$libs" | grep -E "$IMPORT_PULL_LIBS"; then
  fail "cairn-pin loads the libraries above, which it does not use"
fi
pass "cairn-pin loads none of import's and pull's libraries"
cairn umount -q "$TMP/m"
