#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_priv.sh — what a local user, nobody (setpriv --reuid=nobody
# --regid=nogroup --clear-groups), can do through root's cairn:
#   - through root's read-only mount and root's ALS (cairnfs --als), an
#     image's root-owned 04755 program (it prints its euid) runs as nobody,
#     and its 0666 character device (1:5) cannot be opened (EACCES): both
#     are nosuid,nodev; in the ALS nothing but a layer's use file is made,
#     and its layer's blob (every file of the layer, compressed) is 0400,
#     unreadable by nobody. A
#     mount with --suid --dev shows the test would see it (euid 0, the
#     device opens);
#   - root's `cairn bundle` into a directory nobody owns mounts nothing over
#     the target of a rootfs symlink nobody planted (it refuses), and a
#     planted .config.json.tmp symlink makes it overwrite nothing; its --rm
#     unmounts nothing a planted rootfs symlink points at;
#   - root's umount, mount, bundle, bundle --rm and push oci: given a path
#     through a symlink nobody planted (at its end or on the way) refuse it
#     and leave root's mount, bundle and directory it leads to alone;
#     mount --restore refuses a recorded mountpoint nobody replaced by a
#     symlink after a simulated reboot, and mounts nothing on its target,
#     nor on a directory of the same name nobody made in a sticky directory
#     root's was removed from (another inode and owner than recorded); a
#     record of an older cairn, without them, is checked by its path and
#     that is said;
#   - root's `cairn login` with its auth.json in nobody's directory and
#     root's `cairn push oci:` into nobody's layout write through none of
#     the names the old code used (PATH.tmp<pid>, NAME.tmp-<pid>; run in a
#     new pid namespace so the pid is one of those planted, 1..20): planted
#     symlinks leave their target alone, planted files leave auth.json
#     root's and 0600, unreadable by nobody; a planted blobs symlink in the
#     layout makes push create nothing where it points;
#   - a FIFO nobody put at export -o FILE or at REGISTRY_AUTH_FILE blocks
#     neither export, pull nor login (export and login refuse it);
#   - a store nobody owns is refused by root (--store, CAIRN_STORE,
#     nobody's cairn.conf under nobody's HOME), by cairnfs run directly and
#     by cairnfs --als; with --trust-store, root's
#     import writes nothing through blobs/XX symlinks nobody planted, and
#     root's gc, import, pull, pin, mount and mount --rw refuse the store
#     when nobody replaced tmp, compressed, pins, index or uppers by a
#     symlink, writing and removing nothing where it points;
#   - a store in an existing 0755 directory: nobody reads none of its
#     files (meta.db, refs), and cairn says it made them private.
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib registry
pull_test_init
command -v setpriv >/dev/null || { fail "setpriv is not installed"; finish; exit 1; }
chmod 755 "$T" # nobody must reach the mounts and directories below it

c() { cairn "$@"; }
# euid_via DIR: what the image's setuid program prints when nobody runs it.
euid_via() { as_nobody "$1/bin/euid" 2>&1; }
# dev_open DIR: "opened", or why nobody cannot read the image's /dev/zero.
dev_open() { as_nobody sh -c 'head -c1 "$1" >/dev/null && echo opened' sh "$1/dev/zero" 2>&1; }
# unmount DIR: at exit, whatever is mounted on DIR.
unmount() { on_exit "cairn umount $1; fusermount3 -u -z $1; umount -l $1"; }

# ---- the image: bin/euid root's and 04755, dev/zero a 0666 char device 1:5
mkdir -p l/bin l/dev
printf '#include <stdio.h>\n#include <unistd.h>\nint main(void) { printf("%%d\\n", (int)geteuid()); return 0; }\n' >euid.c
setup cc -o l/bin/euid euid.c
setup chown 0:0 l/bin/euid
setup chmod 04755 l/bin/euid
setup mknod -m 0666 l/dev/zero c 1 5
setup mktar l l.tar
setup $OCI_IMAGE add oci app linux/amd64 l.tar:gzip >/dev/null
setup registry_start "$T/reg"
setup registry_push "$T/oci" app team/app:1
setup c pull -q --insecure "docker://$REGISTRY/team/app:1" app:1 >/dev/null

# ---- root's read-only mount: nosuid,nodev unless --suid / --dev
mkdir mnt mnt_sd
unmount "$T/mnt"
unmount "$T/mnt_sd"
setup c mount -q app:1 "$T/mnt" >/dev/null
check "mount: the program is root's and 04755 there" \
  test "$(stat -c %a:%u "$T/mnt/bin/euid")" = 4755:0
check "mount: nobody runs the setuid program as nobody (euid $(euid_via "$T/mnt"))" \
  test "$(euid_via "$T/mnt")" = 65534
check "mount: nobody cannot open the 0666 device ($(dev_open "$T/mnt"))" \
  grep -q "Permission denied" <<<"$(dev_open "$T/mnt")"
setup c mount -q --suid --dev app:1 "$T/mnt_sd" >/dev/null
check "mount --suid --dev: the program runs as root, as asked (euid $(euid_via "$T/mnt_sd"))" \
  test "$(euid_via "$T/mnt_sd")" = 0
check "mount --suid --dev: the device opens, as asked" test "$(dev_open "$T/mnt_sd")" = opened
c umount "$T/mnt_sd" >/dev/null 2>&1

# ---- root's ALS: nosuid,nodev
mkdir als
on_exit "umount -l $T/als"
setup "$CAIRN_BIN/cairnfs" --als --store "$ST" "$T/als"
layer=$(find "$T/als" -mindepth 1 -maxdepth 1 -name 'sha256:*' -printf '%f\n' | head -1)
check "ALS: serves the pulled layer" test -n "$layer"
diff=$T/als/$layer/diff
check "ALS: the program is root's and 04755 there" test "$(stat -c %a:%u "$diff/bin/euid")" = 4755:0
check "ALS: nobody runs the setuid program as nobody (euid $(euid_via "$diff"))" \
  test "$(euid_via "$diff")" = 65534
check "ALS: nobody cannot open the 0666 device ($(dev_open "$diff"))" \
  grep -q "Permission denied" <<<"$(dev_open "$diff")"
check "ALS: nobody cannot read the layer's blob (it holds every file, 0600 ones too)" \
  sh -c "! setpriv --reuid=nobody --regid=nogroup --clear-groups cat $T/als/$layer/blob >/dev/null 2>&1"
check "ALS: the blob is root's and 0400" test "$(stat -c %a:%u "$T/als/$layer/blob")" = 400:0
check "ALS: root makes nothing in a layer but its use file" \
  sh -c "! touch $T/als/$layer/other 2>/dev/null && ! touch $T/als/$layer/diff/other 2>/dev/null"
umount "$T/als"

# ---- root's bundle in nobody's directory
echo precious >rootfile
mkdir rootdir nb
echo precious >rootdir/file
chown nobody:nogroup nb
unmount "$T/rootdir"
unmount "$T/nb/rootfs"
as_nobody ln -s "$T/rootdir" nb/rootfs
expect_exit 1 "bundle: a rootfs symlink nobody planted is refused" c bundle -q app:1 "$T/nb" -- /bin/euid
check "bundle: nothing is mounted over the symlink's target" sh -c "! mountpoint -q $T/rootdir"
check "bundle: the refusal names rootfs" grep -q "nb/rootfs: a symlink" "$T/stderr"
as_nobody ln -sfn "$T/mnt" nb/rootfs # root's mount, live
expect_exit 1 "bundle --rm: a rootfs symlink nobody planted is refused" c bundle --rm -q "$T/nb"
check "bundle --rm: root's mount it points at stays mounted" mountpoint -q "$T/mnt"
mkdir nb2
chown nobody:nogroup nb2
unmount "$T/nb2/rootfs"
as_nobody ln -s "$T/rootfile" nb2/.config.json.tmp
expect_exit 0 "bundle: with .config.json.tmp planted by nobody" c bundle -q app:1 "$T/nb2" -- /bin/euid
check "bundle: the planted symlink's target is untouched" test "$(cat rootfile)" = precious
check "bundle: config.json is a regular file of root's" \
  test "$(stat -c %F:%u nb2/config.json 2>&1)" = "regular file:0"
check "bundle: rootfs is the mount" mountpoint -q "$T/nb2/rootfs"
expect_exit 0 "bundle --rm" c bundle --rm -q "$T/nb2"

# A race: nobody swaps rootfs, a directory, with a symlink to root's
# directory (renameat2 RENAME_EXCHANGE, again and again) while root's
# bundle runs, 40 times at most. Whatever each bundle says, root's mount
# never lands on the symlink's target: it is made on the directory bundle
# checked (through an O_PATH fd of it), and undone if rootfs is then no
# longer that directory. findmnt --poll watches the mount table meanwhile.
mkdir nb3 racedir
chown nobody:nogroup nb3
as_nobody mkdir nb3/rootfs
as_nobody ln -s "$T/racedir" nb3/swap
unmount "$T/racedir"
unmount "$T/nb3/rootfs"
unmount "$T/nb3/swap"
as_nobody /usr/bin/python3 -c '
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
a, b = (os.fsencode(sys.argv[1] + n) for n in ("/rootfs", "/swap"))
end = time.monotonic() + 60
while time.monotonic() < end and os.path.isdir(sys.argv[1]):
    libc.renameat2(-100, a, -100, b, 2)  # AT_FDCWD, RENAME_EXCHANGE
' "$T/nb3" &
swapper=$!
on_exit "kill -9 $swapper"
findmnt --poll --timeout 60000 --mountpoint "$T/racedir" -n -o ACTION,TARGET >"$T/watch" 2>/dev/null &
watcher=$!
on_exit "kill -9 $watcher"
for i in $(seq 40); do
  c bundle -q app:1 "$T/nb3" -- /bin/euid >/dev/null 2>>"$T/race.err" &&
    c bundle --rm -q "$T/nb3" >/dev/null 2>>"$T/race.err"
  [ -s "$T/watch" ] && break
done
kill -9 "$swapper" "$watcher" 2>/dev/null; sort "$T/race.err" | uniq -c | head -5 | sed "s/^/# /"
wait "$swapper" "$watcher" 2>/dev/null
check "bundle racing a rootfs swap: no mount ever on the symlink's target ($i rounds)" \
  test ! -s "$T/watch"
check "bundle racing a rootfs swap: nothing left mounted there" sh -c "! mountpoint -q $T/racedir"

# ---- root's commands given a path through a symlink nobody planted: each
# path is resolved once, following no symlink in a directory another user
# can write, and acted on through that resolution.
pd=$T/pathdir
mkdir "$pd" rootdir3
chown nobody:nogroup "$pd"
unmount "$T/rootdir3"
as_nobody ln -s "$T/mnt" "$pd/m"
expect_exit 1 "umount: a symlink nobody planted to root's mount is refused" c umount "$pd/m"
check "umount: the refusal says why" \
  grep -q "pathdir/m: a symlink in a directory another user can write" "$T/stderr"
check "umount: root's mount it points at stays mounted" mountpoint -q "$T/mnt"
as_nobody ln -s "$T" "$pd/up"
expect_exit 1 "umount: a planted symlink on the way is refused" c umount "$pd/up/mnt"
check "umount: root's mount stays mounted" mountpoint -q "$T/mnt"
as_nobody ln -s "$T/rootdir3" "$pd/r3"
expect_exit 1 "mount: onto a symlink nobody planted is refused" c mount -q app:1 "$pd/r3"
check "mount: nothing is mounted on its target" sh -c "! mountpoint -q $T/rootdir3"
expect_exit 1 "bundle: a DIR that is a symlink nobody planted is refused" \
  c bundle -q app:1 "$pd/r3" -- /bin/euid
check "bundle: nothing is made in its target" test -z "$(ls -A rootdir3)"
check "bundle: nothing is mounted on its target" sh -c "! mountpoint -q $T/rootdir3"
unmount "$T/rb/rootfs"
setup c bundle -q app:1 "$T/rb" -- /bin/euid >/dev/null
as_nobody ln -s "$T/rb" "$pd/rb"
expect_exit 1 "bundle --rm: a DIR that is a symlink nobody planted is refused" \
  c bundle --rm -q "$pd/rb"
check "bundle --rm: root's bundle it points at keeps its config.json" test -f rb/config.json
check "bundle --rm: and its root stays mounted" mountpoint -q "$T/rb/rootfs"
setup c bundle --rm -q "$T/rb"
expect_exit 1 "push oci: a DIR that is a symlink nobody planted is refused" \
  c push -q app:1 "oci:$pd/r3:1"
check "push oci: nothing is written where it points" test -z "$(ls -A rootdir3)"

# ---- root's login, auth.json in nobody's directory
ad=$T/authdir
mkdir "$ad"
chown nobody:nogroup "$ad"
# login_pidns: root's login as pid 1 (or a little more) of a new pid namespace.
login_pidns() {
  unshare --pid --fork env REGISTRY_AUTH_FILE="$ad/auth.json" \
    cairn login --insecure -u alice --password-stdin "$REGISTRY" <<<secret
}
for i in $(seq 1 20); do as_nobody ln -s "$T/rootfile" "$ad/auth.json.tmp$i"; done
expect_exit 0 "login: with symlinks planted at auth.json.tmpPID" login_pidns
check "login: the planted symlinks' target is untouched" test "$(cat rootfile)" = precious
check "login: auth.json is root's, 0600, a regular file" \
  test "$(stat -c %F:%u:%a "$ad/auth.json" 2>&1)" = "regular file:0:600"
rm -f "$ad"/auth.json*
for i in $(seq 1 20); do as_nobody sh -c 'umask 0; : >"$1"' sh "$ad/auth.json.tmp$i"; done
expect_exit 0 "login: with files nobody made at auth.json.tmpPID" login_pidns
check "login: auth.json is root's and 0600" \
  test "$(stat -c %F:%u:%a "$ad/auth.json" 2>&1)" = "regular file:0:600"
check "login: nobody cannot read auth.json" \
  sh -c "! setpriv --reuid=nobody --regid=nogroup --clear-groups cat $ad/auth.json >/dev/null 2>&1"
check "login: nobody's files got no credentials" \
  sh -c "! cat $ad/auth.json.tmp* | grep -q auths"

# ---- FIFOs nobody planted block none of root's commands (timeout 20: 124
# if one waits for a writer or reader)
as_nobody mkfifo "$ad/out.tar" "$ad/fifo.json"
expect_exit 1 "export -o: a FIFO nobody planted is refused, not waited on" \
  timeout 20 cairn export -q -o "$ad/out.tar" app:1
check "export -o: the refusal says why" grep -q "out.tar: not a regular file" "$T/stderr"
expect_exit 0 "pull: a FIFO at REGISTRY_AUTH_FILE is not waited on" \
  timeout 20 env REGISTRY_AUTH_FILE="$ad/fifo.json" cairn pull -q --insecure \
  "docker://$REGISTRY/team/app:1" app:1
expect_exit 1 "login: a FIFO at REGISTRY_AUTH_FILE is refused, not waited on" \
  timeout 20 env REGISTRY_AUTH_FILE="$ad/fifo.json" cairn login --insecure \
  -u alice --password-stdin "$REGISTRY" <<<secret
check "login: the refusal says why" grep -q "fifo.json: not a regular file" "$T/stderr"

# ---- root's push to an OCI layout in nobody's directory
od=$T/ocidir
mkdir "$od"
chown nobody:nogroup "$od"
as_nobody mkdir "$od/layout" "$od/layout2"
for i in $(seq 1 20); do
  for n in oci-layout index.json; do as_nobody ln -s "$T/rootfile" "$od/layout/$n.tmp-$i"; done
done
expect_exit 0 "push oci: with symlinks planted at NAME.tmp-PID" \
  unshare --pid --fork cairn push -q app:1 "oci:$od/layout:1"
check "push oci: the planted symlinks' target is untouched" test "$(cat rootfile)" = precious
check "push oci: index.json is a regular file of root's" \
  test "$(stat -c %F:%u "$od/layout/index.json" 2>&1)" = "regular file:0"
expect_exit 0 "push oci: the layout reads back" skopeo inspect "oci:$od/layout:1"
mkdir rootdir2
as_nobody ln -s "$T/rootdir2" "$od/layout2/blobs"
c push -q app:1 "oci:$od/layout2:1" >/dev/null 2>&1
check "push oci: a planted blobs symlink makes nothing where it points" \
  test -z "$(ls -A rootdir2)"

# ---- a store nobody owns, given to root: refused by --store, CAIRN_STORE
# and nobody's cairn.conf (root keeping nobody's HOME, as sudo -E does);
# with --trust-store, blobs/XX symlinks nobody planted are not written
# through.
ns=$T/nbstore
mkdir "$ns" crond
chown nobody:nogroup "$ns"
expect_exit 1 "a store nobody owns: root refuses it" cairn --store "$ns" import -q evil:1 l.tar
check "a store nobody owns: the refusal says whose" \
  grep -q "nbstore: owned by uid 65534, not root" "$T/stderr"
expect_exit 1 "a store nobody owns: through CAIRN_STORE too" \
  env CAIRN_STORE="$ns" cairn import -q evil:1 l.tar
nh=$T/nbhome
mkdir "$nh"
chown nobody:nogroup "$nh"
as_nobody mkdir -p "$nh/.config/cairn"
as_nobody sh -c 'echo "store = $1" >"$2"' sh "$ns" "$nh/.config/cairn/cairn.conf"
expect_exit 0 "root with nobody's HOME: info" env -u CAIRN_STORE -u XDG_CONFIG_HOME HOME="$nh" cairn info
check "root with nobody's HOME: nobody's cairn.conf is not read" \
  grep -q "cairn.conf (not yours: not read)" "$T/stdout"
check "root with nobody's HOME: its store is not used" sh -c "! grep -q nbstore $T/stdout"
as_nobody sh -c 'mkdir -p "$1/blobs" && for a in 0 1 2 3 4 5 6 7 8 9 a b c d e f; do
  for b in 0 1 2 3 4 5 6 7 8 9 a b c d e f; do ln -s "$2" "$1/blobs/$a$b"; done; done' \
  sh "$ns" "$T/crond"
expect_exit 1 "--trust-store: an import into planted blobs/XX symlinks fails" \
  cairn --trust-store --store "$ns" import -q evil:1 l.tar
check "--trust-store: nothing is written where the symlinks point" test -z "$(ls -A crond)"

# ---- with --trust-store, the store's other directories: nobody replaces
# each by a symlink to a directory of root's, and root's commands (gc,
# import, pull, pin, mount, mount --rw) refuse the store, writing and
# removing nothing where it points (its listing and mtime unchanged, an
# hour-old file gc's sweep of tmp would remove still there).
ns2=$T/nbstore2
setup cairn --store "$ns2" import -q app:2 l.tar
chown -R nobody:nogroup "$ns2"
mkdir rootd mnt2
unmount "$T/mnt2"
setup touch -d '-1 hour' rootd/old
rootd_state() { echo "$(ls -A "$T/rootd" | tr '\n' ' ')$(stat -c %y "$T/rootd")"; }
rootd_before=$(rootd_state)
# plant NAME: nobody puts a symlink to rootd at STORE/NAME (the real one aside).
plant() {
  [ ! -e "$ns2/$1" ] || as_nobody mv "$ns2/$1" "$ns2/$1.real"
  as_nobody ln -s "$T/rootd" "$ns2/$1"
}
unplant() {
  as_nobody rm "$ns2/$1"
  [ ! -e "$ns2/$1.real" ] || as_nobody mv "$ns2/$1.real" "$ns2/$1"
}
# planted NAME WHAT CMD...: CMD refuses the store with NAME planted, and
# rootd is left as it was.
planted() {
  local name=$1 what=$2
  shift 2
  plant "$name"
  expect_exit 1 "--trust-store, a planted $name symlink: $what is refused" "$@"
  check "--trust-store, a planted $name symlink: $what says why" \
    grep -q "nbstore2/$name: a symlink: refused" "$T/stderr"
  check "--trust-store, a planted $name symlink: $what leaves its target alone" \
    test "$(rootd_state)" = "$rootd_before"
  unplant "$name"
}
c2() { cairn --trust-store --store "$ns2" "$@"; }
planted tmp gc c2 gc
planted tmp import c2 import -q evil:2 l.tar
planted tmp "pull" c2 pull -q --insecure "docker://$REGISTRY/team/app:1" evil:3
planted compressed "pull" c2 pull -q --insecure "docker://$REGISTRY/team/app:1" evil:3
planted pins "cairn-pin hold" "$CAIRN_BIN/cairn-pin" --trust-store --store "$ns2" hold app:2 -- true
planted index mount c2 mount -q app:2 "$T/mnt2"
planted uppers "mount --rw" c2 mount -q --rw app:2 "$T/mnt2"
planted snapshot-mounts gc c2 gc # where cairn-snapshotter mounts its chains
check "--trust-store, planted symlinks: nothing was mounted" sh -c "! mountpoint -q $T/mnt2"
expect_exit 0 "--trust-store, the symlinks taken away: the store is used again" c2 gc

# ---- cairnfs started by root directly (not through cairn mount) on a
# store nobody owns: refused as cairn refuses it, the ALS too, unless
# --trust-store (which cairn mount --trust-store passes on).
ns3=$T/nbstore3
setup cairn --store "$ns3" import -q app:3 l.tar
chown nobody:nogroup "$ns3"
mkdir mnt3 als3
unmount "$T/mnt3"
unmount "$T/als3"
expect_exit 1 "cairnfs as root on a store nobody owns: refused" \
  "$CAIRN_BIN/cairnfs" --store "$ns3" app:3 "$T/mnt3"
check "cairnfs as root on a store nobody owns: the refusal says whose" \
  grep -q "nbstore3: owned by uid 65534, not root: .*--trust-store" "$T/stderr"
check "cairnfs as root on a store nobody owns: nothing is mounted" sh -c "! mountpoint -q $T/mnt3"
expect_exit 1 "cairnfs as root on a store nobody owns: through -o store= too" \
  "$CAIRN_BIN/cairnfs" app:3 "$T/mnt3" -o "store=$ns3"
expect_exit 1 "cairnfs --als as root on a store nobody owns: refused" \
  "$CAIRN_BIN/cairnfs" --als --store "$ns3" "$T/als3"
check "cairnfs --als: nothing is mounted" sh -c "! mountpoint -q $T/als3"
expect_exit 0 "cairnfs --trust-store as root on a store nobody owns: mounts" \
  "$CAIRN_BIN/cairnfs" --trust-store --store "$ns3" app:3 "$T/mnt3"
check "cairnfs --trust-store: the image is served" test -x "$T/mnt3/bin/euid"
setup cairn --trust-store --store "$ns3" umount -q "$T/mnt3"
expect_exit 0 "cairn mount --trust-store on a store nobody owns: cairnfs is told" \
  cairn --trust-store --store "$ns3" mount -q app:3 "$T/mnt3"
setup cairn --trust-store --store "$ns3" umount -q "$T/mnt3"

# ---- a store in an existing 0755 directory
mkdir s755
chmod 755 s755
expect_exit 0 "store in a 0755 directory: import" cairn --store "$T/s755" import -q app:2 l.tar
check "store in a 0755 directory: cairn says so" grep -q "s755: mode 0755 lets other users in" \
  "$T/stderr"
setup cairn --store "$T/s755" mount -q app:2 "$T/mnt_sd" >/dev/null
setup cairn --store "$T/s755" umount "$T/mnt_sd" >/dev/null
check "store in a 0755 directory: meta.db and refs are there" test -e s755/meta.db -a -e s755/refs
check "store in a 0755 directory: none of its files is open to others ($(find s755 -maxdepth 1 -type f -perm /077 -printf '%f:%m '))" \
  test -z "$(find s755 -maxdepth 1 -type f -perm /077)"
check "store in a 0755 directory: nobody cannot read meta.db" \
  sh -c "! setpriv --reuid=nobody --regid=nogroup --clear-groups cat $T/s755/meta.db >/dev/null 2>&1"
check "store in a 0755 directory: nobody cannot read refs" \
  sh -c "! setpriv --reuid=nobody --regid=nogroup --clear-groups cat $T/s755/refs >/dev/null 2>&1"
chmod 644 s755/meta.db # as an older cairn left it
expect_exit 0 "a loosened meta.db: images" cairn --store "$T/s755" images -q
check "a loosened meta.db: cairn says it made it private" \
  grep -q "made its files private: meta.db (was 0644)" "$T/stderr"
check "a loosened meta.db: it is 0600 again" test "$(stat -c %a s755/meta.db)" = 600

# ---- mount --restore after a "reboot" (its daemon killed, its mount gone,
# its record made older than this boot), the mountpoint in nobody's
# directory replaced by a symlink to root's directory: refused.
rd=$T/restdir
mkdir "$rd" rootdir4
chown nobody:nogroup "$rd"
as_nobody mkdir "$rd/m"
unmount "$rd/m"
unmount "$T/rootdir4"
setup c mount -q app:1 "$rd/m" >/dev/null
sup=$(c mounts --json | jq -r --arg d "$rd/m" '.[] | select(.dir == $d) | .pid')
kill -9 "$sup" $(cat "/proc/$sup/task/$sup/children" 2>/dev/null)
wait_for 5 pid_gone "$sup"
umount -l "$rd/m"
setup sqlite3 "$ST/meta.db" "UPDATE mounts SET since = 0 WHERE dir = '$rd/m'"
as_nobody mv "$rd/m" "$rd/old"
as_nobody ln -s "$T/rootdir4" "$rd/m"
expect_exit 1 "mount --restore: a mountpoint nobody replaced by a symlink is refused" \
  c mount --restore
check "mount --restore: the refusal names it" grep -q "restdir/m: a symlink" "$T/stderr"
check "mount --restore: nothing is mounted on the symlink's target" \
  sh -c "! mountpoint -q $T/rootdir4"

# ---- the same after a "reboot" that emptied a sticky /tmp-like directory:
# root's mountpoint there is gone and nobody made its own directory of the
# same name (no symlink: the path alone is the same): its inode and owner
# are not the recorded ones, refused; nothing is mounted on nobody's.
sd=$T/sticky
mkdir "$sd"
chmod 1777 "$sd"
mkdir "$sd/m"
unmount "$sd/m"
setup c mount -q app:1 "$sd/m" >/dev/null
sup=$(c mounts --json | jq -r --arg d "$sd/m" '.[] | select(.dir == $d) | .pid')
kill -9 "$sup" $(cat "/proc/$sup/task/$sup/children" 2>/dev/null)
wait_for 5 pid_gone "$sup"
umount -l "$sd/m"
setup sqlite3 "$ST/meta.db" "UPDATE mounts SET since = 0 WHERE dir = '$sd/m'"
rmdir "$sd/m"
as_nobody mkdir "$sd/m"
expect_exit 1 "mount --restore: a mountpoint nobody made again in a sticky directory is refused" \
  c mount --restore
check "mount --restore: the refusal names it and says why" grep -q \
  "sticky/m: not the directory recorded (inode [0-9]* of uid 0, now inode [0-9]* of uid 65534)" \
  "$T/stderr"
check "mount --restore: nothing is mounted on nobody's directory" sh -c "! mountpoint -q $sd/m"
# A record of an older cairn (no inode, no owner): its path alone is
# checked, and --restore says so.
as_nobody rmdir "$sd/m"
mkdir "$sd/m"
setup sqlite3 "$ST/meta.db" \
  "UPDATE mounts SET dir_dev = NULL, dir_ino = NULL, dir_uid = NULL WHERE dir = '$sd/m'"
expect_exit 1 "mount --restore: again (nobody's symlink above is still refused)" c mount --restore
check "mount --restore: an older record is restored, checked by its path only" grep -q \
  "sticky/m: recorded by an older cairn, without its inode and owner: checked by its path only" \
  "$T/stderr"
check "mount --restore: the older record's directory is mounted again" mountpoint -q "$sd/m"

finish
