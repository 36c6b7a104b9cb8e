#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_cli_messages.sh — messages that say the right thing: an option
# where the command goes is an unknown option, not a command (--stor: did
# you mean --store?; -V); a --store that does not exist is said;
# cairn-pin lst and hodl are mistyped subcommands, not images to list, and
# cairn-pin's errors name it once; "after 1 second", not "1 seconds"; an oci: layout of
# several images names them; rm's lines in one case (Removed layer after
# Untagged:, Deleted:); a kept upper's row in mounts has PID -, not 0;
# cairnfs's refusals relayed by mount say "mount:" as mount's own; an
# image not found suggests its repository's tags, or the nearest name; a
# mistyped option its nearest (--fromat: --format).
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib registry
pull_test_init

expect_exit 2 "cairn --stor DIR images" cairn --stor "$T/x" images
check "says --stor is an unknown option, did you mean --store" \
  grep -qx "cairn: --stor: unknown option (did you mean --store?)" "$T/stderr"
expect_exit 0 "cairn --store /typo images" cairn --store "$T/typo" images
check "says the store does not exist" \
  grep -qx "cairn: store $T/typo: does not exist (nothing to list)" "$T/stderr"
expect_exit 2 "cairn -V" cairn -V
check "says -V is an unknown option" grep -q "^cairn: -V: unknown option" "$T/stderr"
expect_exit 2 "cairn-pin lst" cairn-pin lst
check "says lst is a mistyped subcommand" \
  grep -qx "cairn-pin: lst: unknown subcommand (did you mean ls?)" "$T/stderr"
expect_exit 2 "cairn-pin hodl IMAGE -- true" cairn-pin hodl app:1 -- true
check "says hodl is a mistyped subcommand" \
  grep -qx "cairn-pin: hodl: unknown subcommand (did you mean hold?)" "$T/stderr"
expect_exit 2 "cairn-pin hodl" cairn-pin hodl
check "hodl alone too, not an image to list" \
  grep -qx "cairn-pin: hodl: unknown subcommand (did you mean hold?)" "$T/stderr"
expect_exit 2 "cairn-pin IMAGE X" cairn-pin app:1 x
check "too many arguments, the program named once" \
  grep -qx "cairn-pin: ls: too many arguments" "$T/stderr"
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

mkdir -p "$T/l2" "$T/l3" && echo 2 >"$T/l2/f" && echo 3 >"$T/l3/f"
mktar "$T/l2" "$T/l2.tar" && mktar "$T/l3" "$T/l3.tar"
cairn import -q app:2 "$T/l2.tar" >/dev/null
cairn import -q myapp "$T/l3.tar" >/dev/null
expect_exit 3 "inspect app (only app:1 and app:2 exist)" cairn inspect app
check "suggests app's own tags, not myapp" \
  grep -qx "cairn: app: no such image (did you mean localhost/app:1 or localhost/app:2?)" "$T/stderr"
expect_exit 3 "inspect ap:1" cairn inspect ap:1
check "suggests the nearest name" grep -q "(did you mean localhost/app:1?)$" "$T/stderr"
expect_exit 2 "inspect --fromat" cairn inspect --fromat '{{.Id}}' app:1
check "suggests --format" \
  grep -qx "cairn: inspect: --fromat: unknown option (did you mean --format?)" "$T/stderr"

cairn import -q rmme:1 "$T/2.tar" >/dev/null
expect_exit 0 "rm" cairn rm rmme:1
check "rm: Removed layer, in the case of Untagged: and Deleted:" \
  [ "$(cut -d' ' -f1-2 "$T/stdout" | sed 's/ .*//' | tr '\n' ' ')" = "Untagged: Deleted: Removed " ]
check "rm: the layer line" grep -qE "^Removed layer sha256:[0-9a-f]{64} \(" "$T/stdout"

mkdir -p "$T/rw" && touch "$T/afile"
on_exit "umount -l '$T/rw'"
expect_exit 1 "mount IMAGE FILE" cairn mount app:1 "$T/afile"
check "mount IMAGE FILE: says mount:, one line" \
  [ "$(cat "$T/stderr")" = "cairn: mount: $T/afile: not a directory" ]
cairn mount -q --rw app:1 "$T/rw" && echo x >"$T/rw/new" && cairn umount -q "$T/rw"
expect_exit 0 "mounts with a kept upper" cairn mounts
check "its PID is -, not 0" grep -qE "^$T/rw +[0-9a-f]{12} +localhost/app:1 +- +kept " "$T/stdout"
check "--json still says 0" [ "$(cairn mounts --json | jq '.[0].pid')" = 0 ]
cairn umount -q --discard "$T/rw"

# One path on stdout, the real one, whatever was typed; bundle --rm of a
# --rw bundle says the changes it keeps, --rm --discard those it drops.
ln -s "$T/rw" "$T/link"
expect_exit 0 "mount through a symlink" cairn mount app:1 "$T/link"
check "mount prints the real path" [ "$(cat "$T/stdout")" = "$T/rw" ]
expect_exit 0 "umount through the symlink" cairn umount "$T/link"
check "umount prints the real path too" [ "$(cat "$T/stdout")" = "$T/rw" ]
on_exit "umount -l '$T/bun/rootfs'"
expect_exit 0 "bundle --rw" cairn bundle -q --rw --user 0 app:1 "$T/bun" -- /bin/true
echo change >"$T/bun/rootfs/new"
expect_exit 0 "bundle --rm of a --rw bundle, as a relative path" sh -c "cd '$T' && cairn bundle --rm bun"
check "says the changes it kept, then the real path" \
  [ "$(sed 's/upper [0-9a-f]*.*/upper/' "$T/stdout")" = "$(printf 'Kept: upper\n%s' "$T/bun")" ]
check "the kept changes are listed" [ "$(cairn mounts --json | jq -r '.[0].state')" = kept ]
expect_exit 0 "umount --discard of the removed bundle's rootfs" cairn umount --discard "$T/bun/rootfs"
check "drops the kept changes, saying so" grep -q "^Dropped: upper" "$T/stdout"
check "nothing is kept then" [ "$(cairn mounts --json | jq length)" = 0 ]
expect_exit 0 "bundle --rw again" cairn bundle -q --rw --user 0 app:1 "$T/bun" -- /bin/true
echo change >"$T/bun/rootfs/new"
expect_exit 0 "bundle --rm --discard of a --rw bundle" cairn bundle --rm --discard "$T/bun"
check "says the changes it dropped, then the real path" \
  [ "$(sed 's/upper [0-9a-f]*.*/upper/' "$T/stdout")" = "$(printf 'Dropped: upper\n%s' "$T/bun")" ]
check "nothing is kept" [ "$(cairn mounts --json | jq length)" = 0 ]
expect_exit 2 "bundle --discard without --rm" cairn bundle --discard app:1 "$T/bun"
finish
