#!/bin/bash
# test_commit.sh — `cairn commit DIR NAME`: the changes of a --rw mount
# (new, changed and deleted files, a deleted tree, an opaque directory, a
# renamed lower directory, a copied-up hardlink, xattrs, modes, owners) as
# an OCI layer on the image: the new image has the base's layers plus one,
# whose tar has .wh. whiteouts and .wh..wh..opq; its config keeps the
# base's with a history entry; fstree.py (the OCI rules, in Python) applied
# to the base layers plus the new one, `cairn export` of the new image and
# a read-only mount of it all equal the rw mount's view; the base image is
# unchanged and the mount keeps serving, moved onto the new image with a
# fresh upper: a second commit holds only the later writes; a process's
# cwd on the mount survives the move; a file open for writing moves too.
source "$(dirname "$0")/mountlib.sh"

$FSTREE make-layers "$TMP/layers"
cairn import test:1 "$TMP"/layers/layer{1,2,3}.tar >/dev/null
cairn export test:1 >"$TMP/before.tar"
m=$TMP/mnt
mkdir "$m" "$TMP/ro"
cairn mount --rw test:1 "$m" >/dev/null

echo new >"$m/newfile"
mkdir -p "$m/newdir/sub"
echo deep >"$m/newdir/sub/f"
echo changed >>"$m/etc/os-release"
rm "$m/etc/config"
rm -r "$m/usr"
mkdir "$m/usr"
echo only >"$m/usr/only"
mv "$m/bin" "$m/bin2"
echo more >>"$m/hard/orig"
chmod 0600 "$m/empty.txt"
chown 7:8 "$m/big.bin"
python3 -c "import os,sys; os.setxattr(sys.argv[1], 'user.c', b'v')" "$m/data/x"
ln -s newfile "$m/newlink"
$FSTREE scan "$m" >"$TMP/view"

assert_status 2 cairn commit "$m"
assert_status 3 cairn commit "$TMP/ro" x:1
id=$(cairn commit -m "my change" "$m" committed:1)
[ "$(cairn images --json | jq -r --arg id "$id" '.[] | select(.id == $id) | .names[0]')" = localhost/committed:1 ] ||
  fail "commit did not print the new image's id: $id"
pass "cairn commit prints the new image"

cairn inspect committed:1 >"$TMP/inspect"
base_layers=$(cairn inspect test:1 | jq -r '.layers | length')
[ "$(jq -r '.layers | length' "$TMP/inspect")" = $((base_layers + 1)) ] || fail "not base + 1 layer"
jq -e '.config.history[-1].created_by == "cairn commit" and .config.history[-1].comment == "my change"' \
  "$TMP/inspect" >/dev/null || jq -e '(.config | fromjson | .history[-1].comment) == "my change"' \
  "$TMP/inspect" >/dev/null || fail "no history entry: $(jq -c .config "$TMP/inspect")"
pass "its layers are the base's plus one; its config has a history entry"

top=$(jq -r '.layers[-1].id' "$TMP/inspect")
cairn export committed:1 >"$TMP/new.tar"
$FSTREE expect "$TMP/new.tar" >"$TMP/exported"
diff -u "$TMP/view" "$TMP/exported" || fail "export of the committed image differs from the rw view"
pass "cairn export of the new image equals the mount's view ($(wc -l <"$TMP/view") entries)"

cairn mount committed:1 "$TMP/ro" >/dev/null
$FSTREE scan "$TMP/ro" >"$TMP/rov"
diff -u "$TMP/view" "$TMP/rov" || fail "a read-only mount of the committed image differs"
cairn umount "$TMP/ro" >/dev/null
pass "a read-only mount of the new image equals the mount's view"

# The layer's tar in OCI form: rebuild it from the store's layer listing.
python3 - "$STORE" "$top" <<'EOF' || fail "the layer lacks OCI whiteouts"
import sqlite3, sys
db = sqlite3.connect(f"file:{sys.argv[1]}/meta.db?mode=ro", uri=True)
cols = [r[1] for r in db.execute("PRAGMA table_info(entries)")]
rows = db.execute("SELECT * FROM entries WHERE layer_id = ?", (sys.argv[2],)).fetchall()
paths = {r[cols.index("path")] for r in rows}
for want in ("etc/.wh.config", "usr/.wh..wh..opq", ".wh.bin"):
    assert want in paths, (want, sorted(paths)[:40])
EOF
pass "the layer has .wh. whiteouts and an opaque marker"

[ "$(cat "$m/newfile")" = new ] || fail "the mount stopped serving after commit"
image_of() { cairn mounts --json | jq -r --arg d "$1" '.[] | select(.dir == $d) | .image'; }
[ "$(image_of "$m")" = "$id" ] || fail "the mount record names $(image_of "$m"), not the commit $id"
$FSTREE scan "$m" >"$TMP/view2"
diff -u "$TMP/view" "$TMP/view2" || fail "the view changed when the mount moved onto the commit"
pass "after commit the mount serves the new image (its record says so), its view unchanged"

# Later writes go to a fresh upper: a second commit holds only them. A
# process whose cwd is a directory made before the commit keeps using it.
python3 - "$m/newdir" "$TMP/cwd-ready" "$TMP/cwd-go" <<'PY' &
import os, sys, time
os.chdir(sys.argv[1])
open(sys.argv[2], "w").close()
for _ in range(600):
    if os.path.exists(sys.argv[3]):
        break
    time.sleep(0.05)
with open("after", "w") as f:
    f.write("from the old cwd\n")
assert open("sub/f").read() == "deep\n"
PY
cwd_pid=$!
wait_for 100 test -e "$TMP/cwd-ready" || fail "the cwd helper did not start"
id2=$(cairn commit "$m" committed:2)
[ "$(image_of "$m")" = "$id2" ] || fail "the second commit did not move the mount"
echo second >"$m/second"
rm "$m/newfile"
touch "$TMP/cwd-go"
wait "$cwd_pid" || fail "a process whose cwd was on the mount failed after the commit"
[ "$(cat "$m/newdir/after")" = "from the old cwd" ] || fail "a file made in the old cwd"
$FSTREE scan "$m" >"$TMP/view3"
id3=$(cairn commit "$m" committed:3)
top3=$(cairn inspect committed:3 | jq -r '.layers[-1].id')
python3 - "$STORE" "$top3" <<'EOF2' || fail "the third commit's layer holds more than the later writes"
import sqlite3, sys
db = sqlite3.connect(f"file:{sys.argv[1]}/meta.db?mode=ro", uri=True)
paths = sorted(r[0] for r in db.execute("SELECT path FROM entries WHERE layer_id = ?", (sys.argv[2],)))
assert paths == ["", ".wh.newfile", "newdir", "newdir/after", "second"], paths
EOF2
cairn export committed:3 >"$TMP/new3.tar"
$FSTREE expect "$TMP/new3.tar" >"$TMP/exported3"
diff -u "$TMP/view3" "$TMP/exported3" || fail "export of the third commit differs from the view"
pass "later writes go to a fresh upper: the next commit's layer holds only them"

# A file open for writing moves along: what is written through it after
# the commit is in the fresh upper (and the next commit), nothing lost.
exec 5>>"$m/held"
echo held >&5
id4=$(cairn commit "$m" committed:4)
[ "$(image_of "$m")" = "$id4" ] || fail "the mount did not move with a file open for writing"
echo more >&5
exec 5>&-
[ "$(cat "$m/held")" = "$(printf 'held\nmore')" ] || fail "writes to the held file after the move: $(cat "$m/held")"
[ "$(cairn export committed:4 | tar -xOf - held 2>/dev/null)" = held ] || fail "the held file in its commit"
cairn commit -q "$m" committed:5
[ "$(cairn export committed:5 | tar -xOf - held 2>/dev/null)" = "$(printf 'held\nmore')" ] ||
  fail "the held file's later writes are not in the next commit"
pass "a file open for writing moves to the fresh upper: its later writes are kept and committed next"
# A moved mount is not restarted: its server serves an image and an upper
# its supervisor does not hold, so a kill -9 ends the mount (stale), and
# no server ever serves the old image and upper again in its place.
sup=$(mount_pid "$m")
srv=$(cat "/proc/$sup/task/$sup/children" 2>/dev/null | tr ' ' '\n' | grep -m1 .) ||
  fail "no server under the supervisor $sup"
kill -9 "$srv"
for ((k = 0; k < 50; k++)); do kill -0 "$sup" 2>/dev/null || break; sleep 0.1; done
kill -0 "$sup" 2>/dev/null && fail "the supervisor of a moved mount restarted its server"
[ "$(cat "$m/held" 2>/dev/null)" = held ] && fail "a server serves the old upper in the moved mount's place"
pass "a mount moved by commit is not restarted after a kill -9 of its server (it ends, stale)"
cairn umount "$m" >/dev/null
cairn export test:1 >"$TMP/after.tar"
cmp "$TMP/before.tar" "$TMP/after.tar" || fail "the base image changed"
pass "the mount keeps serving; the base image is unchanged"
