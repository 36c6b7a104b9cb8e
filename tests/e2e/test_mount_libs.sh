#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_mount_libs.sh — a cairnfs daemon maps only the shared libraries a
# mount uses (libfuse3, SQLite, xxHash, libc and what they need), none of
# those of import and pull (libarchive and its ICU, libxml2, zstd ...;
# libcrypto; Jansson; libcurl): loading them tripled the time of a mount
# with cold caches, and their relocated data was private memory in every
# daemon. cairn-pin does not load them either, Jansson (its --json) apart.
# (libstdc++ is not checked: ASan builds load it.)
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib mount
set -e

IMPORT_PULL_LIBS='lib(archive|crypto|jansson|curl|xml2|icu[a-z]*|lzma|zstd|nettle)\.so'

$FSTREE make-layers "$T/layers"
cairn import app:1 "$T"/layers/layer{1,2,3}.tar >/dev/null
mkdir -p "$T/m"
cairn mount -q app:1 "$T/m"
grep -q cairntest "$T/m/etc/os-release" || fail "the mount does not serve the image"
pid=$(mount_pid "$T/m")
[ -n "$pid" ] || fail "no daemon recorded: $(cairn mounts --json)"
libs=$(awk '$6 ~ /\.so/ { print $6 }' "/proc/$pid/maps" | sort -u)
grep -q 'libfuse3\.so' <<<"$libs" || fail "the daemon's maps show no libfuse3: $libs"
if grep -E "$IMPORT_PULL_LIBS" <<<"$libs"; then
  fail "cairnfs maps the libraries above, which a mount does not use"
fi
ok "the cairnfs daemon maps only libfuse3, SQLite, xxHash and libc (and their needs)"

# cairnfs links SQLite as every program does: the loader maps the one
# library (no copy of its functions in cairnfs that loads it later).
libs=$(LD_TRACE_LOADED_OBJECTS=1 "$CAIRN_BIN/cairnfs")
grep -q 'libsqlite3\.so' <<<"$libs" || fail "cairnfs does not link SQLite: $libs"
if nm --defined-only "$CAIRN_BIN/cairnfs" | grep -E ' [Tt] sqlite3_'; then
  fail "cairnfs defines SQLite's functions (above)"
fi
ok "cairnfs links SQLite, defining none of its functions"

# Once serving, a read-only mount's supervisor and server keep no SQLite
# connection (cairn_store_idle): its page cache and schema were private
# memory in each of a host's hundreds of mounts. The store still answers
# them: the mount is listed, and goes cleanly (the record is forgotten).
server=$(server_of "$pid")
[ -n "$server" ] || fail "the daemon $pid runs no server"
for p in "$pid" "$server"; do
  if ls -l "/proc/$p/fd" | grep -E 'meta\.db(-wal|-shm)?$'; then
    fail "process $p of the mount keeps the database open (above)"
  fi
done
ok "a serving read-only mount keeps no database connection open"

# What the loader would load for cairn-pin, without running it.
libs=$(LD_TRACE_LOADED_OBJECTS=1 "$CAIRN_BIN/cairn-pin")
grep -q 'libsqlite3\.so' <<<"$libs" || fail "cairn-pin loads no SQLite? $libs"
if grep -v libjansson <<<"$libs" | grep -E "$IMPORT_PULL_LIBS"; then
  fail "cairn-pin loads the libraries above, which it does not use"
fi
ok "cairn-pin loads none of import's and pull's libraries"

# cairn runs mount, images, rm ... itself, without them, and execs the
# full cairn (libexec/cairn/cairn) for import, pull, push ... (and the help
# that lists them).
# gc runs in this cairn and sweeps containerd's chain images with
# store/snapshot_chain.c, apart from snapshot.c's lazy Prepare (pull,
# registry, TOC): a sanitizer build (-O0, instrumented), which keeps what
# an object it links refers to, loads none of their libraries either.
libs=$(LD_TRACE_LOADED_OBJECTS=1 "$CAIRN_BIN/cairn")
if grep -v libjansson <<<"$libs" | grep -E "$IMPORT_PULL_LIBS"; then
  fail "cairn loads the libraries above, which its own commands do not use"
fi
libs=$(LD_TRACE_LOADED_OBJECTS=1 "$CAIRN_BIN/libexec/cairn/cairn")
grep -q 'libcurl\.so' <<<"$libs" || fail "the full cairn loads no libcurl? $libs"
cairn images -q | grep -q . || fail "cairn images lists nothing"
cairn --help | grep -q '^  pull ' || fail "cairn --help does not list pull (the full cairn's)"
cairn pull --help | grep -q '^usage: cairn pull' || fail "cairn pull --help is not pull's"
out=$(cairn export app:1 | tar -t | grep -c .) || fail "cairn export (through the full cairn) failed"
((out > 0)) || fail "cairn export gave an empty tar"
ok "cairn loads only SQLite's and Jansson's; import/export/pull run through the full cairn"
cairn umount -q "$T/m"
[ -z "$(cairn mounts -q)" ] || fail "the mount record outlived the unmount: $(cairn mounts)"
