#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_cli_info.sh — cairn info [--json]: cairn's version, the store (its
# directory and which rule chose it: --store, CAIRN_STORE, XDG_DATA_HOME,
# HOME), its schema version and counts, the libfuse cairnfs uses, and the
# kernel; the kernel's FUSE protocol is said to be unknown without a mount,
# and as the kernel told it to a live mount's daemon with one.
# (The default for root, /var/lib/cairn, is left alone: a test writes
# nothing outside $T.)
source "$(dirname "$0")/../lib/test-lib.sh"

mkdir -p "$T/l1" "$T/l2"
echo one >"$T/l1/one"
echo two >"$T/l2/two"
mktar "$T/l1" "$T/1.tar"
mktar "$T/l2" "$T/2.tar"
cairn import app:1 "$T/1.tar" "$T/2.tar" >/dev/null || exit 1
cairn import app:2 "$T/1.tar" "$T/2.tar" >/dev/null || exit 1
cairn import base "$T/1.tar" >/dev/null || exit 1

info() { jq -r "$1" "$T/info.json"; }
expect_exit 0 "info --json" sh -c "cairn info --json >'$T/info.json'"
check "the store is \$CAIRN_STORE" [ "$(info .store.dir)" = "$(realpath "$STORE")" ]
check "chosen by CAIRN_STORE" [ "$(info .store.from)" = CAIRN_STORE ]
check "schema version as the store records it" \
  [ "$(info .store.schema_version)" = "$(sqlite3 "$STORE/meta.db" "SELECT value FROM meta WHERE key = 'schema_version'")" ]
check "2 images, 3 names, 2 layers, 2 blobs" \
  [ "$(info '[.store.images, .store.names, .store.layers, .store.blobs] | join(" ")')" = "2 3 2 2" ]
check "cairn's version" [ "cairn $(info .version) (git $(info .git))" = "$(cairn --version)" -o \
  "cairn $(info .version)" = "$(cairn --version)" ]
check "libfuse as cairnfs and pkg-config say" \
  [ "$(info .fuse.libfuse)" = "$(pkg-config --modversion fuse3)" -a \
  "libfuse $(info .fuse.libfuse)" = "$(cairnfs --version | grep '^libfuse')" ]
check "the cairnfs asked is the one next to cairn" [ "$(info .fuse.cairnfs)" = "$CAIRN_BIN/cairnfs" ]
check "the kernel protocol is null, and why" \
  [ "$(info .fuse.kernel_protocol)" = null -a -n "$(info .fuse.kernel_protocol_note)" ]
check "the kernel release" [ "$(info .fuse.kernel)" = "$(uname -r)" ]

expect_exit 0 "info (table)" cairn --store "$STORE" info
check "says --store chose it" grep -qx "store chosen by: *--store" "$T/stdout"
check "names the store" grep -qx "store: *$(realpath "$STORE")" "$T/stdout"
check "counts the images and names" grep -qx "images: *2 (3 names)" "$T/stdout"
check "says the kernel FUSE protocol is unknown without a mount" \
  grep -q "^kernel FUSE protocol: *unknown without a mount" "$T/stdout"
check "libfuse line" grep -q "^libfuse: *$(pkg-config --modversion fuse3) " "$T/stdout"

# With a live mount, the protocol the kernel told its daemon.
mkdir "$T/mnt"
setup cairn mount -q app:1 "$T/mnt"
on_exit "cairn umount -q '$T/mnt'"
expect_exit 0 "info with a live mount" cairn info
check "says the kernel FUSE protocol, as told to the mount" \
  grep -qx "kernel FUSE protocol: *7\.[0-9][0-9]* (as told to the mount at $T/mnt)" "$T/stdout"
check_json "info --json: kernel_protocol 7.N" '.fuse.kernel_protocol | test("^7\\.[0-9]+$")' cairn info --json
cairn umount -q "$T/mnt"

# Another user's defaults: XDG_DATA_HOME, else HOME.
chmod 711 "$T"
mkdir -p "$T/home" && chown 65534:65534 "$T/home"
info_as_nobody() { env -u CAIRN_STORE -u XDG_DATA_HOME HOME="$T/home" "$@" setpriv --reuid 65534 --regid 65534 --clear-groups cairn info --json; }
check "HOME: ~/.local/share/cairn" \
  [ "$(info_as_nobody | jq -r '.store.from + " " + .store.dir')" = "HOME (~/.local/share) $T/home/.local/share/cairn" ]
check "XDG_DATA_HOME" \
  [ "$(info_as_nobody XDG_DATA_HOME="$T/home/xdg" | jq -r '.store.from + " " + .store.dir')" = "XDG_DATA_HOME $T/home/xdg/cairn" ]

# A store that is not there: info says what it knows, exit 0, makes nothing.
expect_exit 0 "info on a missing store" cairn --store "$T/none/store" info
check "names the store" grep -qx "store: *$T/none/store" "$T/stdout"
check "says there is none yet" grep -qx "store state: *none here yet (cairn import or pull makes it)" "$T/stdout"
check "and the version" grep -q "^cairn: *cairn " "$T/stdout"
check "makes nothing" [ ! -e "$T/none" ]
check_json "info --json: state missing, counts 0" \
  '.store.state == "missing" and .store.images == 0 and .store.schema_version == null' \
  cairn --store "$T/none/store" info --json
# A store nobody may open (root's, 0700): what info knows, why not, a hint, exit 1.
nb() { env -u CAIRN_STORE -u XDG_DATA_HOME HOME="$T/home" setpriv --reuid=nobody --regid=nogroup --clear-groups "$@"; }
expect_exit 1 "info as nobody on root's store: exit 1" nb cairn --store "$STORE" info
check "still says the version and the store" \
  sh -c "grep -q '^cairn: *cairn ' '$T/stdout' && grep -qx 'store: *$STORE' '$T/stdout'"
check "says it cannot be opened and why, with a hint" \
  grep -qx "store state: *cannot be opened: $STORE: Permission denied (use --store DIR or CAIRN_STORE=DIR for a store of yours)" "$T/stdout"
check "one line on stderr" [ "$(cat "$T/stderr")" = \
  "cairn: info: store: $STORE: Permission denied (use --store DIR or CAIRN_STORE=DIR for a store of yours)" ]
nb cairn --store "$STORE" info --json >"$T/nobody.json" 2>/dev/null
check_json "info --json as nobody: state unusable, the error" \
  '.store.state == "unusable" and (.store.error | test("Permission denied")) and .store.images == null and .version != null' \
  cat "$T/nobody.json"
# A user whose HOME does not exist: no store, and none can be made there.
nh() { env -u CAIRN_STORE -u XDG_DATA_HOME HOME="$T/nohome" setpriv --reuid=nobody --regid=nogroup --clear-groups "$@"; }
expect_exit 1 "info as a user whose HOME does not exist: exit 1" nh cairn info
check "says the store is not usable and why" \
  grep -qx "store state: *not usable: there is none, and none can be made: $T: not writable by this user (use --store DIR or CAIRN_STORE=DIR for a store of yours)" "$T/stdout"
nh cairn info --json >"$T/nohome.json" 2>/dev/null
check_json "info --json: state unusable" '.store.state == "unusable" and (.store.error | test("none can be made"))' \
  cat "$T/nohome.json"
check "makes nothing" [ ! -e "$T/nohome" ]

expect_exit 2 "info takes no operand" cairn info x
expect_exit 0 "info --help" cairn info --help
check "info --help names --json" grep -q -- "--json" "$T/stdout"
finish
