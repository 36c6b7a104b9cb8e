#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_cli_umount.sh — cairn umount DIR... like umount(8): several
# directories in one call, each unmounted in turn, the worst exit code; one
# that is not mounted, or does not exist, stays a success (teardown scripts
# run twice) but is said on stderr: "cairn: umount: DIR: not mounted".
source "$(dirname "$0")/../lib/test-lib.sh"

is_mounted() { awk -v d="$1" '$5 == d { f = 1 } END { exit !f }' /proc/self/mountinfo; }

mkdir -p "$T/layer" "$T/a" "$T/b" "$T/plain"
echo hello >"$T/layer/hello"
mktar "$T/layer" "$T/layer.tar"
cairn import app:1 "$T/layer.tar" >/dev/null || exit 1
on_exit "umount -l '$T/a'; umount -l '$T/b'"

# One directory not mounted, one missing, one below a missing one.
for d in "$T/plain" "$T/missing" "$T/missing/deeper"; do
  expect_exit 0 "umount ${d#"$T"/}: exit 0" cairn umount "$d"
  check "umount ${d#"$T"/}: says it was not mounted" \
    sh -c "[ \"\$(cat '$T/stderr')\" = 'cairn: umount: $d: not mounted' ]"
  check "umount ${d#"$T"/}: nothing on stdout" [ ! -s "$T/stdout" ]
done
check "nothing was created" [ ! -e "$T/missing" ]

# Several directories at once: the mounted ones unmounted, the others said.
cairn mount app:1 "$T/a" && cairn mount app:1 "$T/b"
check "a and b are mounted" sh -c "grep -q ' $T/a ' /proc/self/mountinfo && grep -q ' $T/b ' /proc/self/mountinfo"
expect_exit 0 "umount a plain missing b: exit 0" cairn umount "$T/a" "$T/plain" "$T/missing" "$T/b"
if is_mounted "$T/a" || is_mounted "$T/b"; then fail "a and b unmounted"; else ok "a and b unmounted"; fi
check "no mount is recorded" [ "$(cairn mounts --json | jq length)" = 0 ]
check "no pin is left" [ "$(cairn-pin ls --json | jq length)" = 0 ]
check "stderr names plain and missing, in order, and nothing else" \
  sh -c "[ \"\$(cat '$T/stderr')\" = 'cairn: umount: $T/plain: not mounted
cairn: umount: $T/missing: not mounted' ]"

# A failure among several: the others are still unmounted; its code wins.
cairn mount app:1 "$T/a"
expect_exit 1 "umount /proc a: exit 1 (/proc is not a cairnfs mount)" cairn umount /proc "$T/a"
check "it says so" grep -qx "cairn: umount: /proc: not a cairnfs mount" "$T/stderr"
if is_mounted "$T/a"; then fail "a was unmounted all the same"; else ok "a was unmounted all the same"; fi

# A mounted directory unmounts silently.
cairn mount app:1 "$T/a"
expect_exit 0 "umount of a mounted directory: exit 0" cairn umount "$T/a"
check "and says nothing" [ ! -s "$T/stderr" ]
expect_exit 2 "umount without a directory is a usage error" cairn umount

# A read-only mount's umount returns once its daemon (which the mount's
# root names) has let go of the pins, asking SQLite nothing: another
# process holding the database's write lock (a long import, a gc) does not
# hold it up. The daemon forgets its record after; until then no listing
# shows it, and rm of the image works at once.
cairn mount -q app:1 "$T/a"
daemon=$(cairn mounts --json | jq -r '.[0].pid')
check "the mount's root names its daemon (trusted.cairn.supervisor), for root" [ \
  "$(python3 -c 'import os, sys; print(os.getxattr(sys.argv[1], "trusted.cairn.supervisor").decode())' \
    "$T/a")" = "$daemon" ]
python3 - "$STORE/meta.db" "$T/locked" "$T/unlock" <<'PY' &
import os, sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=10)
db.execute("BEGIN IMMEDIATE")
open(sys.argv[2], "w").close()
for _ in range(3000):  # 30 s at most
    if os.path.exists(sys.argv[3]):
        break
    time.sleep(0.01)
db.execute("ROLLBACK")
PY
writer=$!
kill_at_exit $writer
wait_for 10 test -e "$T/locked" || fail "the writer did not take the write lock"
expect_exit 0 "umount of a read-only mount returns while SQLite's write lock is held" \
  timeout 5 cairn umount "$T/a"
check "it printed the directory" [ "$(cat "$T/stdout")" = "$T/a" ]
if is_mounted "$T/a"; then not_ok "a is unmounted"; else ok "a is unmounted"; fi
check "mounts lists nothing while the daemon waits to forget its record" \
  [ "$(cairn mounts --json | jq length)" = 0 ]
touch "$T/unlock"
wait "$writer"
expect_exit 0 "rm of the image right after: exit 0" cairn rm app:1
check "the daemon exits" wait_for 10 sh -c "! kill -0 $daemon"
check "and its record is gone" [ "$(cairn mounts --json | jq length)" = 0 ]
cairn import app:1 "$T/layer.tar" >/dev/null || fail "import again"

# --lazy, as umount -l: a busy mount (a process's working directory) is
# detached at once, exit 0; its daemon serves that process on with the
# image pinned, then goes when it lets go.
cairn mount app:1 "$T/a"
daemon=$(cairn mounts --json | jq -r '.[0].pid')
(cd "$T/a" && exec sleep 30) &
user=$!
on_exit "kill $user"
wait_for 5 sh -c "[ \"\$(readlink /proc/$user/cwd)\" = '$T/a' ]"
expect_exit 4 "umount of a busy mount: exit 4 (busy)" cairn umount "$T/a"
check "says who uses it: pid and command, and --lazy" [ "$(cat "$T/stderr")" = \
  "cairn: umount: $T/a: busy: used by pid $user (sleep) (umount --lazy detaches it)" ]
expect_exit 0 "umount --lazy of a busy mount: exit 0" cairn umount --lazy "$T/a"
check "prints the directory" [ "$(cat "$T/stdout")" = "$T/a" ]
check "says it is detached and still served, pinned" \
  grep -q "^cairn: umount: $T/a: detached; still in use, so cairnfs (pid $daemon) serves it and keeps its image pinned until the last user lets go$" "$T/stderr"
if is_mounted "$T/a"; then fail "a is detached"; else ok "a is detached"; fi
check "the user still reads the image" [ "$(cat /proc/$user/cwd/hello)" = hello ]
expect_exit 4 "rm of the image: pinned" cairn rm app:1
check "mounts says detached" [ "$(cairn mounts --json | jq -r '.[0].state')" = detached ]
kill $user && wait $user 2>/dev/null
check "once it let go, the daemon ends and its record goes" \
  wait_for 10 sh -c "[ \"\$(cairn mounts --json | jq length)\" = 0 ]"
expect_exit 2 "--lazy --force: refused" cairn umount --lazy --force "$T/a"

finish
