#!/bin/bash
# test_mount_refs.sh — a mount takes its pins by STORE/refs (which images
# and names the store has, read before SQLite is loaded) and then asks the
# database, so the file can cost time but never mount the wrong image: a
# file that names another image for the name mounts the right one and
# leaves no pin on the other; a missing file mounts by the database and is
# written again; and cairnfs links no SQLite (it loads it at run time).
source "$(dirname "$0")/mountlib.sh"

$FSTREE make-layers "$TMP/layers"
cairn import -q app:1 "$TMP"/layers/layer{1,2,3}.tar >/dev/null
cairn import -q base:1 "$TMP"/layers/layer1.tar >/dev/null
app=$(cairn inspect app:1 | jq -r .id)
base=$(cairn inspect base:1 | jq -r .id)
[ "$app" != "$base" ] || fail "the two images are one"
mkdir -p "$TMP/m"
listing() { (cd "$TMP/m" && find . -printf '%p %y %s\n' | sort | md5sum); }
cairn mount -q app:1 "$TMP/m"
want=$(listing)
cairn umount "$TMP/m" >/dev/null
cairn mount -q base:1 "$TMP/m"
[ "$(listing)" != "$want" ] || fail "app:1 and base:1 look the same: the test cannot tell them apart"
cairn umount "$TMP/m" >/dev/null

grep -qx "n app:1 $app" "$STORE/refs" || fail "STORE/refs does not name app:1: $(cat "$STORE/refs")"
# A file that lags the database (as a hand edit, or a bug, would make it).
sed -i "s/^n app:1 .*/n app:1 $base/" "$STORE/refs"
cairn mount -q app:1 "$TMP/m"
[ "$(listing)" = "$want" ] || fail "a stale STORE/refs mounted another image for app:1"
[ "$(cairn mounts --json | jq -r .[0].image)" = "$app" ] || fail "recorded: $(cairn mounts --json)"
pinned=$(cairn_pin ls --json | jq -r '[.[] | select(.kind == "image") | .target] | unique | join(" ")')
[ "$pinned" = "$app" ] || fail "the mount pins images '$pinned', not only $app"
cairn rm base:1 >/dev/null || fail "base:1, which STORE/refs named, is left pinned"
cairn umount "$TMP/m" >/dev/null
pass "a STORE/refs that names another image mounts the right one and pins nothing else"

rm "$STORE/refs"
cairn mount -q app:1 "$TMP/m"
[ "$(listing)" = "$want" ] || fail "without STORE/refs the mount serves something else"
grep -qx "n app:1 $app" "$STORE/refs" || fail "the mount did not write STORE/refs again"
cairn umount "$TMP/m" >/dev/null
pass "without STORE/refs a mount asks the database and writes the file again"

libs=$(LD_TRACE_LOADED_OBJECTS=1 "$CAIRN_BIN/cairnfs")
grep -q 'libfuse3\.so' <<<"$libs" || fail "cairnfs loads no libfuse3? $libs"
if grep 'libsqlite3\.so' <<<"$libs"; then
  fail "cairnfs has SQLite among the libraries the loader maps before main"
fi
pass "cairnfs loads SQLite at run time, not before main"
