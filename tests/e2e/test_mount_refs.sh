#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_mount_refs.sh — a read-only mount of an image that STORE/refs lists
# takes its pins by that file and answers before it opens the database,
# then writes its pin annotations and its record; cairn mounts and
# cairn-pin ls right after the mount answered wait for them. The file
# follows cairn tag (a moved name mounts its new image), and a mount
# without it asks the database and writes it again.
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib mount
set -e

$FSTREE make-layers "$T/layers"
cairn import -q app:1 "$T"/layers/layer{1,2,3}.tar >/dev/null
cairn import -q base:1 "$T"/layers/layer1.tar >/dev/null
app=$(cairn inspect app:1 | jq -r .id)
base=$(cairn inspect base:1 | jq -r .id)
[ "$app" != "$base" ] || fail "the two images are one"
mkdir -p "$T/m"
listing() { (cd "$T/m" && find . -printf '%p %y %s\n' | sort | md5sum); }
cairn mount -q app:1 "$T/m"
want_app=$(listing)
cairn umount "$T/m" >/dev/null
cairn mount -q base:1 "$T/m"
want_base=$(listing)
cairn umount "$T/m" >/dev/null
[ "$want_app" != "$want_base" ] || fail "app:1 and base:1 look the same: the test cannot tell them apart"

grep -qx "n localhost/app:1 $app" "$STORE/refs" || fail "STORE/refs does not name app:1: $(cat "$STORE/refs")"
cairn tag base:1 app:1 >/dev/null
grep -qx "n localhost/app:1 $base" "$STORE/refs" || fail "cairn tag did not move app:1 in STORE/refs"
cairn mount -q app:1 "$T/m"
[ "$(listing)" = "$want_base" ] || fail "app:1, moved to base:1's image, mounts another"
[ "$(cairn mounts --json | jq -r .[0].image)" = "$base" ] || fail "recorded: $(cairn mounts --json)"
cairn umount "$T/m" >/dev/null
cairn tag "$app" app:1 >/dev/null
ok "cairn tag moves a name in STORE/refs, and a mount of the name follows it"

# The database write-locked for 3 s: the mount answers meanwhile (no
# database before its verdict); the listings wait for its record.
python3 -c '
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
time.sleep(3)
db.execute("COMMIT")' "$STORE/meta.db" >"$T/locker.out" &
locker=$!
BG_PIDS+=("$locker")
wait_for 10 grep -q locked "$T/locker.out" || fail "the locker did not lock the database"
"$CAIRN_BIN/cairnfs" --store "$STORE" app:1 "$T/m"
kill -0 "$locker" 2>/dev/null || fail "the mount answered only once the database was free"
[ "$(cairn mounts --json | jq -r '.[0].dir')" = "$T/m" ] ||
  fail "cairn mounts right after the mount answered does not list it: $(cairn mounts --json)"
purpose=$(cairn_pin ls --json | jq -r --arg id "$app" '.[] | select(.target == $id) | .purpose')
[ "$purpose" = "mount $T/m" ] || fail "the image's pin says '$purpose'"
wait "$locker"
cairn umount "$T/m" >/dev/null
ok "a mount answers while the database is locked, and cairn mounts and cairn-pin ls wait for its record"

rm "$STORE/refs"
cairn mount -q app:1 "$T/m"
[ "$(listing)" = "$want_app" ] || fail "without STORE/refs the mount serves something else"
grep -qx "n localhost/app:1 $app" "$STORE/refs" || fail "the mount did not write STORE/refs again"
cairn umount "$T/m" >/dev/null
ok "without STORE/refs a mount asks the database and writes the file again"

