#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
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
# cwd on the mount survives the move; a file open for writing moves too;
# commit does not wait for the removal of the upper the move left, and
# writes no copy of its layer to STORE/tmp.
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib mount
set -e

$FSTREE make-layers "$T/layers"
cairn import test:1 "$T"/layers/layer{1,2,3}.tar >/dev/null
cairn export test:1 >"$T/before.tar"
m=$T/mnt
mkdir "$m" "$T/ro"
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
$FSTREE scan "$m" >"$T/view"

expect_exit 2 "cairn commit $m" cairn commit "$m"
expect_exit 3 "cairn commit $T/ro x:1" cairn commit "$T/ro" x:1
id=$(cairn commit -m "my change" "$m" committed:1)
[ "$(cairn images --json | jq -r --arg id "$id" '.[] | select(.id == $id) | .names[0]')" = localhost/committed:1 ] ||
  fail "commit did not print the new image's id: $id"
ok "cairn commit prints the new image"

cairn inspect committed:1 >"$T/inspect"
base_layers=$(cairn inspect test:1 | jq -r '.layers | length')
[ "$(jq -r '.layers | length' "$T/inspect")" = $((base_layers + 1)) ] || fail "not base + 1 layer"
jq -e '.config.history[-1].created_by == "cairn commit" and .config.history[-1].comment == "my change"' \
  "$T/inspect" >/dev/null || jq -e '(.config | fromjson | .history[-1].comment) == "my change"' \
  "$T/inspect" >/dev/null || fail "no history entry: $(jq -c .config "$T/inspect")"
ok "its layers are the base's plus one; its config has a history entry"

top=$(jq -r '.layers[-1].id' "$T/inspect")
cairn export committed:1 >"$T/new.tar"
$FSTREE expect "$T/new.tar" >"$T/exported"
diff -u "$T/view" "$T/exported" || fail "export of the committed image differs from the rw view"
ok "cairn export of the new image equals the mount's view ($(wc -l <"$T/view") entries)"

cairn mount committed:1 "$T/ro" >/dev/null
$FSTREE scan "$T/ro" >"$T/rov"
diff -u "$T/view" "$T/rov" || fail "a read-only mount of the committed image differs"
cairn umount "$T/ro" >/dev/null
ok "a read-only mount of the new image equals the mount's view"

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
ok "the layer has .wh. whiteouts and an opaque marker"

[ "$(cat "$m/newfile")" = new ] || fail "the mount stopped serving after commit"
[ "$(image_of "$m")" = "$id" ] || fail "the mount record names $(image_of "$m"), not the commit $id"
$FSTREE scan "$m" >"$T/view2"
diff -u "$T/view" "$T/view2" || fail "the view changed when the mount moved onto the commit"
ok "after commit the mount serves the new image (its record says so), its view unchanged"

# The server pins the new image and its layers as the mount did the old:
# each pin says which mount holds it, and since when.
cairn_pin ls --json >"$T/pins"
jq -e --arg p "mount $m" 'length > 0 and all(.[]; .purpose == $p and .since != null and .since != "")' \
  "$T/pins" >/dev/null || fail "a pin of the moved mount lacks its purpose or time: $(jq -c . "$T/pins")"
ok "after the move every pin says \"mount DIR\" and since when"

# Later writes go to a fresh upper: a second commit holds only them. A
# process whose cwd is a directory made before the commit keeps using it.
python3 - "$m/newdir" "$T/cwd-ready" "$T/cwd-go" <<'PY' &
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
wait_for 10 test -e "$T/cwd-ready" || fail "the cwd helper did not start"
id2=$(cairn commit "$m" committed:2)
[ "$(image_of "$m")" = "$id2" ] || fail "the second commit did not move the mount"
echo second >"$m/second"
rm "$m/newfile"
touch "$T/cwd-go"
wait "$cwd_pid" || fail "a process whose cwd was on the mount failed after the commit"
[ "$(cat "$m/newdir/after")" = "from the old cwd" ] || fail "a file made in the old cwd"
$FSTREE scan "$m" >"$T/view3"
id3=$(cairn commit "$m" committed:3)
top3=$(cairn inspect committed:3 | jq -r '.layers[-1].id')
python3 - "$STORE" "$top3" <<'EOF2' || fail "the third commit's layer holds more than the later writes"
import sqlite3, sys
db = sqlite3.connect(f"file:{sys.argv[1]}/meta.db?mode=ro", uri=True)
paths = sorted(r[0] for r in db.execute("SELECT path FROM entries WHERE layer_id = ?", (sys.argv[2],)))
assert paths == ["", ".wh.newfile", "newdir", "newdir/after", "second"], paths
EOF2
cairn export committed:3 >"$T/new3.tar"
$FSTREE expect "$T/new3.tar" >"$T/exported3"
diff -u "$T/view3" "$T/exported3" || fail "export of the third commit differs from the view"
ok "later writes go to a fresh upper: the next commit's layer holds only them"

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
ok "a file open for writing moves to the fresh upper: its later writes are kept and committed next"
# A moved mount is restarted in place like any other: a kill -9 of its
# server, and the next serves the new image and the fresh upper
# (test_mount_restart_commit.sh tests it more).
sup=$(mount_pid "$m")
srv=$(cat "/proc/$sup/task/$sup/children" 2>/dev/null | tr ' ' '\n' | grep -m1 .) ||
  fail "no server under the supervisor $sup"
kill -9 "$srv"
wait_for 5 pid_gone "$srv" || fail "the server survived kill -9"
[ "$(cat "$m/held" 2>&1)" = "$(printf 'held\nmore')" ] || fail "the held file after a restart: $(cat "$m/held" 2>&1)"
kill -0 "$sup" 2>/dev/null || fail "the supervisor of a moved mount ended"
ok "a mount moved by commit is restarted in place after a kill -9 of its server"
cairn umount "$m" >/dev/null
cairn export test:1 >"$T/after.tar"
cmp "$T/before.tar" "$T/after.tar" || fail "the base image changed"
ok "the mount keeps serving; the base image is unchanged"

# A lower directory with children from three layers,
# renamed, and a file of it with two names given an xattr: the commit
# whites out the old name (nothing is written below it) and carries the
# xattr to every name of the file, under the new name.
python3 - "$T/opt" <<'PY'
import os, sys
sys.path.insert(0, os.path.join(os.environ["CAIRN_SRC"], "tests/helpers"))
import fstree
os.makedirs(sys.argv[1])
l = fstree.Layer(sys.argv[1] + "/a.tar")
l.add("opt/", "dir")
l.add("opt/app/", "dir")
l.add("opt/app/hard-a", data=b"two names\n")
l.add("opt/app/hard-b", "hard", target="opt/app/hard-a")
l.add("opt/app/f", data=b"f\n")
l.add("opt/other/", "dir")
l.add("opt/other/hard-c", data=b"kept together\n")
l.add("opt/app/hard-d", "hard", target="opt/other/hard-c")
l.close()
l = fstree.Layer(sys.argv[1] + "/b.tar")
l.add("opt/app/g", data=b"g\n")
l.close()
l = fstree.Layer(sys.argv[1] + "/c.tar")
l.add("opt/app/h", data=b"h\n")
l.close()
PY
cairn import -q app:1 "$T"/opt/{a,b,c}.tar
cairn mount --rw app:1 "$m" >/dev/null
mv "$m/opt/app" "$m/opt/app2"
python3 -c "import os, sys; os.setxattr(sys.argv[1], 'user.k', b'v')" "$m/opt/app2/hard-a"
$FSTREE scan "$m" >"$T/optview"
grep -q '^opt/app2/hard-b	.*user.k=76' "$T/optview" || fail "the rw view lacks the xattr on the second name"
cairn commit -q "$m" app:2
$FSTREE scan "$m" >"$T/optlive"
cairn export -q app:2 >"$T/app2.tar"
$FSTREE expect "$T/app2.tar" >"$T/optexp"
diff -u "$T/optview" "$T/optexp" || fail "commit of a renamed directory differs from the rw view"
diff -u "$T/optview" "$T/optlive" || fail "the mount moved onto the commit shows another tree"
cairn umount "$m" >/dev/null
ok "a renamed 3-layer directory and an xattr on a file with two names are committed as shown"

# One history entry per layer. test:1 was imported (an entry per
# layer, "imported from tarball"): the commit's config keeps them for the
# three base layers, then its own entry; `cairn history` names the new top layer as
# the commit's, and so does podman after a push to a registry.
use_lib registry
cairn inspect committed:1 >"$T/inspect"
cfg() { jq -c '.config | if type == "string" then fromjson else . end' "$T/inspect"; }
n_layers=$(jq '.layers | length' "$T/inspect")
[ "$(cfg | jq '[.history[] | select(.empty_layer != true)] | length')" = "$n_layers" ] ||
  fail "the commit's config has not one history entry per layer: $(cfg | jq -c .history)"
[ "$(cfg | jq -r '.history[0:3][] | .comment' | sort -u)" = "imported from tarball" ] ||
  fail "the base layers' entries are not the import's: $(cfg | jq -c .history)"
cairn history --json committed:1 >"$T/hist"
[ "$(jq 'length' "$T/hist")" = "$n_layers" ] || fail "cairn history rows: $(cat "$T/hist")"
[ "$(jq -r '.[0].created_by' "$T/hist")" = "cairn commit" ] &&
  [ "$(jq -r '.[0].id' "$T/hist")" = "$top" ] ||
  fail "cairn history does not give the commit the top layer $top: $(jq -c '.[0]' "$T/hist")"
[ "$(jq -r '[.[].id] | reverse | join(" ")' "$T/hist")" = \
  "$(jq -r '[.layers[].id] | join(" ")' "$T/inspect")" ] || fail "history rows do not match the layers"
ok "the commit's history has one entry per layer; cairn history gives it the top layer"

registry_start "$T/reg"
BG_PIDS+=("$REGISTRY_PID")
cairn push -q --insecure committed:1 "docker://$REGISTRY/committed:1" >/dev/null
skopeo inspect --tls-verify=false --config "docker://$REGISTRY/committed:1" >"$T/pushed"
[ "$(jq '[.history[] | select(.empty_layer != true)] | length' "$T/pushed")" = \
  "$(jq '.rootfs.diff_ids | length' "$T/pushed")" ] || fail "pushed config: $(jq -c .history "$T/pushed")"
podman=(podman --root "$T/podman" --runroot "$T/podman-run" --storage-driver vfs)
"${podman[@]}" pull -q --tls-verify=false "docker://$REGISTRY/committed:1" >/dev/null
"${podman[@]}" history --format json "$REGISTRY/committed:1" >"$T/phist"
[ "$(jq 'length' "$T/phist")" = "$n_layers" ] || fail "podman history: $(jq -c . "$T/phist")"
[ "$(jq -r '.[0].comment' "$T/phist")" = "my change" ] &&
  [ "$(jq -r '[.[1:][] | .id] | unique | join(" ")' "$T/phist")" = "<missing>" ] ||
  fail "podman history of the pushed commit: $(jq -c '.[] | {id, comment, size}' "$T/phist")"
[ "$(jq '.[0].size' "$T/phist")" = "$(cairn layers --json | jq --arg t "$top" '.[] | select(.id == $t) | .size')" ] ||
  fail "podman gives the commit's row another layer's size: $(jq -c '.[0]' "$T/phist")"
"${podman[@]}" rmi -a -f >/dev/null 2>&1 || true
ok "pushed, podman history shows one row per layer, the commit's on the top layer"
registry_stop

# What no layer holds. A socket any user made in the mount is left out (as
# podman's commit does: a base file it replaced goes), said on stderr
# with its path; sparse files with more holes than a layer holds (64 GiB)
# fail the commit (exit 5), naming the file and its owner, making nothing.
# Fails without it: commit failed on the socket (pax cannot archive it),
# and the holes' error named no file.
s=$T/sk
mkdir "$s"
cairn mount -q --rw test:1 "$s"
rm "$s/etc/os-release"
sock() { python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' "$1"; }
sock "$s/etc/os-release"
sock "$s/app.sock"
echo kept >"$s/kept"
cairn commit "$s" sockets:1 >"$T/stdout" 2>"$T/stderr" || fail "commit with sockets: $(cat "$T/stderr")"
grep -qx "cairn: commit: $s: /app.sock: a socket, not committed (a layer cannot hold one)" "$T/stderr" &&
  grep -qx "cairn: commit: $s: /etc/os-release: a socket, not committed (a layer cannot hold one)" "$T/stderr" ||
  fail "commit said: $(cat "$T/stderr")"
cairn export sockets:1 | tar -t >"$T/list"
grep -q '^kept$' "$T/list" && ! grep -q 'app.sock' "$T/list" && ! grep -q 'etc/os-release' "$T/list" ||
  fail "the committed image holds: $(cat "$T/list")"
ok "commit leaves sockets out, saying which (a base file one replaced goes)"
cairn umount -q --discard "$s"

cairn mount -q --rw test:1 "$s"
truncate -s 60G "$s/a"
truncate -s 10G "$s/b"
chown nobody "$s/b"
n_images=$(cairn images -q | wc -l)
expect_exit 5 "cairn commit $s holes:1" cairn commit "$s" holes:1
grep -qx "cairn: commit: $s: /b, owned by nobody (uid $(id -u nobody)): a sparse file with 10 GiB of holes; with the other files' (60 GiB) more than a layer holds (64 GiB): nothing committed (remove or shrink it in the mount)" \
  "$T/stderr" || fail "commit said: $(cat "$T/stderr")"
[ "$(cairn images -q | wc -l)" = "$n_images" ] && [ "$(stat -c %s "$s/b")" = $((10 << 30)) ] ||
  fail "a failed commit made an image, or the mount lost the file"
ok "holes past what a layer holds fail the commit naming the file and its owner, making nothing"
cairn umount -q --discard "$s"

# The upper a commit's move leaves is renamed away at once, and its files
# removed after the move's answer: commit returns without waiting for
# them. The server's unlinks slowed (half a second each, by strace), the
# old upper is still being removed when commit returns, then goes.
cairn mount -q --rw test:1 "$s"
for i in 1 2 3 4 5 6 7 8; do echo "$i" >"$s/slow$i"; done
old=$(upper_ids)
srv=$(server_of "$(mount_pid "$s")")
bg_start strace -f -p "$srv" -o /dev/null -e trace=unlinkat \
  -e inject=unlinkat:delay_enter=500000 2>"$T/strace.err"
st_pid=$!
wait_for 10 grep -q attached "$T/strace.err" || fail "strace did not attach: $(cat "$T/strace.err")"
cairn commit -q "$s" slow:1 >/dev/null
[ -d "$STORE/uppers/.gone-${old:0:16}" ] && ! [ -e "$STORE/uppers/$old" ] ||
  fail "commit waited for the old upper's removal, or left it listed: $(ls -a "$STORE/uppers")"
echo after >"$s/after"
ok "commit returns with the old upper renamed away, its files still being removed"
kill "$st_pid"
wait "$st_pid" 2>/dev/null || true
wait_for 20 eval "! [ -e '$STORE/uppers/.gone-${old:0:16}' ]" ||
  fail "the old upper was never removed: $(ls -a "$STORE/uppers")"
[ "$(cat "$s/slow8" "$s/after")" = "8
after" ] || fail "the moved mount lost files"
ok "the old upper's files go after the move"
cairn umount -q --discard "$s"

# The layer's tar goes from the upper to the store through a pipe: no copy
# of the layer is written to STORE/tmp (here a tmpfs of 1 MiB, for a layer
# of 8 MiB), and the layer is the upper's file, byte for byte.
cairn mount -q --rw test:1 "$s"
head -c 8M /dev/urandom >"$s/big8"
mount -t tmpfs -o size=1m tmpfs "$STORE/tmp"
cairn commit -q "$s" piped:1 >/dev/null 2>"$T/stderr" ||
  fail "commit needed room for the layer in STORE/tmp: $(cat "$T/stderr")"
cairn export piped:1 | tar -xOf - big8 | cmp - "$s/big8" || fail "the piped layer differs"
ok "commit stores its layer with no copy of it in STORE/tmp"
cairn umount -q --discard "$s"
umount "$STORE/tmp"

# What the tar's writer meets is what commit says (not the store's view of
# a tar cut short): a lower file written in full (its directory renamed)
# whose blob file is missing.
cairn mount -q --rw test:1 "$s"
mv "$s/data" "$s/data2"
base=$(cairn images --json | jq -r '.[] | select(.names[0] == "localhost/test:1") | .id')
b=$(sqlite3 "$STORE/meta.db" "SELECT blob FROM entries JOIN image_layers USING (layer_id)
  WHERE image_id = '$base' AND path = 'data/x' AND blob IS NOT NULL")
mv "$STORE/blobs/${b:0:2}/$b" "$T/saved-blob"
n_images=$(cairn images -q | wc -l)
n_layers=$(cairn layers --json | jq length)
expect_exit 3 "cairn commit $s lost:1" cairn commit "$s" lost:1
grep -qx "cairn: commit: $s: data2/x: blob: No such file or directory" "$T/stderr" ||
  fail "commit said: $(cat "$T/stderr")"
[ "$(cairn images -q | wc -l)" = "$n_images" ] || fail "a failed commit made an image"
[ "$(cairn layers --json | jq length)" = "$n_layers" ] ||
  fail "a failed commit stored the part of its layer written before the failure"
mv "$T/saved-blob" "$STORE/blobs/${b:0:2}/$b"
ok "a file the tar's writer cannot read fails the commit naming it, making nothing"
cairn umount -q --discard "$s"
