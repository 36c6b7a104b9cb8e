#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_bundle.sh — `cairn bundle` makes an OCI runtime bundle of a real
# three-layer image pulled from a docker-registry on 127.0.0.1, and crun
# (and runc, when installed) runs it as its author meant: from inside the
# container the test checks process.args (Entrypoint + Cmd), Env, the
# WorkingDir and the uid/gid/groups of a User given by name in the image's
# own /etc/passwd and /etc/group. Then overrides (--env, --user, --entrypoint,
# -- COMMAND), the pin the bundle holds, --rm teardown (twice), and bad input
# with the contract's exit codes. The image's programs are the host's own
# /bin/sh, id and env with their libraries (no network beyond 127.0.0.1).
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib registry
pull_test_init
command -v crun >/dev/null || { fail "crun is not installed"; finish; exit 1; }
on_exit 'for d in "$T"/b*/rootfs; do umount -l "$d"; done'

# ---- the image: programs, then users, then the application ----------------
# (a read-only root must hold the runtime's mount points: /proc, /dev, /sys,
# and the Volumes, as every real image does)
mkdir -p "$T/l1" "$T/l2/etc" "$T/l2/home/app" "$T/l3/app" "$T/l3/srv/work" "$T/l3/data"
mkdir -p "$T/l2/proc" "$T/l2/dev" "$T/l2/sys" "$T/l2/tmp"
for prog in /bin/sh /usr/bin/id /usr/bin/env /usr/bin/cat /bin/sleep; do
  real=$(readlink -f "$prog")
  mkdir -p "$T/l1$(dirname "$prog")"
  cp "$real" "$T/l1$prog"
  for lib in $(ldd "$real" | grep -o '/[^ ]*'); do
    mkdir -p "$T/l1$(dirname "$lib")"
    cp -L "$lib" "$T/l1$lib"
  done
done
printf 'root:x:0:0:root:/root:/bin/sh\napp:x:1234:2345:App:/home/app:/bin/sh\n' >"$T/l2/etc/passwd"
printf 'root:x:0:\nappgrp:x:2345:\nextra:x:3456:other,app\nunrelated:x:4567:other\n' \
  >"$T/l2/etc/group"
cat >"$T/l3/app/entry.sh" <<'EOF'
#!/bin/sh
echo "args=$0|$*"
echo "ids=$(id -u) $(id -g) $(id -G)"
echo "cwd=$(pwd)"
env | while read -r l; do echo "env:$l"; done
EOF
chmod 755 "$T/l3/app/entry.sh"
for i in 1 2 3; do setup mktar "$T/l$i" "$T/layer$i.tar"; done
export OCI_IMAGE_CONFIG='{"config": {"Entrypoint": ["/app/entry.sh", "first"],
  "Cmd": ["second", "third arg"], "Env": ["PATH=/usr/bin:/bin", "GREETING=hello world"],
  "WorkingDir": "/srv/work", "User": "app", "StopSignal": "SIGTERM",
  "Labels": {"org.example.team": "cairn"}, "Volumes": {"/data": {}}}}'
setup $OCI_IMAGE add oci app linux/amd64 "$T/layer1.tar:gzip" "$T/layer2.tar:gzip" \
  "$T/layer3.tar:raw" >/dev/null
unset OCI_IMAGE_CONFIG
setup registry_start "$T/reg"
setup registry_push "$T/oci" app team/app:1
img=$REGISTRY/team/app:1
setup cairn pull -q --insecure "docker://$img" >/dev/null

# run RUNTIME BUNDLE: runs the bundle's container (doc/testing.md: a private
# mount namespace without the cgroup2 mount, no cgroup manager); its output
# in $T/run.out.
run() {
  local runtime=$1 bundle=$2 name=cairn-bundle-$$-$RANDOM
  timeout 60 "${PRIVATE_NS[@]}" sh -c '
    umount /sys/fs/cgroup/unified 2>/dev/null
    exec "$1" --cgroup-manager=disabled run --bundle "$2" "$3"' sh "$runtime" "$bundle" "$name" \
    </dev/null >"$T/run.out" 2>"$T/run.err"
}
run_runc() {
  local bundle=$1 name=cairn-bundle-$$-$RANDOM
  timeout 60 "${PRIVATE_NS[@]}" sh -c '
    umount /sys/fs/cgroup/unified 2>/dev/null
    exec runc run --bundle "$1" "$2"' sh "$bundle" "$name" </dev/null >"$T/run.out" 2>"$T/run.err"
}
has() { grep -qxF -- "$1" "$T/run.out" || { fail "$2: no line '$1' in: $(cat "$T/run.out" "$T/run.err")"; return 1; }; }

# ---- the image as its author meant ------------------------------------------
expect_exit 0 "bundle IMAGE DIR" cairn bundle "$img" "$T/b1"
[[ $(cat "$T/stdout") == "$T/b1" ]] || fail "bundle printed $(cat "$T/stdout"), not $T/b1"
jq -e '.root.readonly == true and .root.path == "rootfs" and .process.terminal == false
  and .annotations["org.opencontainers.image.stopSignal"] == "SIGTERM"
  and .annotations["org.example.team"] == "cairn"
  and (.mounts | map(.destination) | index("/data"))
  and .process.user.additionalGids == [3456]' "$T/b1/config.json" >/dev/null ||
  fail "config.json: $(cat "$T/b1/config.json")"
check "rootfs is served" test -x "$T/b1/rootfs/app/entry.sh"
if run crun "$T/b1"; then
  has "args=/app/entry.sh|first second third arg" "crun: Entrypoint + Cmd" &&
    has "ids=1234 2345 2345 3456" "crun: User app (uid, gid, groups)" &&
    has "cwd=/srv/work" "crun: WorkingDir" &&
    has "env:GREETING=hello world" "crun: Env" &&
    has "env:PATH=/usr/bin:/bin" "crun: the image's PATH kept" &&
    has "env:HOME=/home/app" "crun: HOME from /etc/passwd" &&
    ok "crun ran the image with its entrypoint, cmd, env, workdir and user"
else
  fail "crun run: $(cat "$T/run.err")"
fi
if command -v runc >/dev/null; then
  if run_runc "$T/b1"; then
    has "args=/app/entry.sh|first second third arg" "runc: args" &&
      has "ids=1234 2345 2345 3456" "runc: user" && has "cwd=/srv/work" "runc: cwd" &&
      has "env:GREETING=hello world" "runc: env" && ok "runc ran the same bundle alike"
  else
    fail "runc run: $(cat "$T/run.err")"
  fi
else
  echo "# runc is not installed: its run is skipped"
fi

# The bundle pins the image: rm refuses it while it exists.
expect_exit 4 "rm of a bundled image: pinned" cairn rm "$img"
expect_exit 4 "bundle over a bundle: busy" cairn bundle "$img" "$T/b1"

# ---- overrides -----------------------------------------------------------
expect_exit 0 "bundle --user --env -- COMMAND" cairn bundle -q \
  --user app:extra --env GREETING=bye --env NEW=1 "$img" "$T/b2" -- again
if run crun "$T/b2"; then
  has "args=/app/entry.sh|first again" "-- COMMAND replaces Cmd" &&
    has "ids=1234 3456 3456" "--user app:extra (no other groups)" &&
    has "env:GREETING=bye" "--env replaces" && has "env:NEW=1" "--env adds" &&
    ok "overrides: -- COMMAND, --user user:group, --env"
else
  fail "crun run (overrides): $(cat "$T/run.err")"
fi
expect_exit 0 "bundle --entrypoint, numeric user" cairn bundle -q \
  --entrypoint /bin/sh --user 0 "$img" "$T/b3" -- -c 'echo "me=$(id -u):$(id -g)"'
if run crun "$T/b3"; then
  has "me=0:0" "--entrypoint with --user 0" && ok "--entrypoint and a numeric user"
else
  fail "crun run (entrypoint): $(cat "$T/run.err")"
fi

# ---- teardown ----------------------------------------------------------------
for b in b1 b2 b3; do
  expect_exit 0 "bundle --rm $b" cairn bundle --rm "$T/$b"
  [[ ! -e $T/$b ]] || fail "$b left behind: $(ls -la "$T/$b")"
done
expect_exit 0 "bundle --rm twice" cairn bundle --rm "$T/b1"
[[ $(cat "$T/stderr") == "cairn: bundle: $T/b1: no bundle" ]] ||
  fail "bundle --rm twice: $(cat "$T/stderr")"
# DIR made with its missing parents; a DIR that stays (another file in it)
# is no bundle at a second --rm, said as such, not as an umount.
expect_exit 0 "bundle into a DIR whose parents are missing" cairn bundle -q \
  "$img" "$T/p/q/b8"
[[ -f $T/p/q/b8/config.json ]] && is_mounted "$T/p/q/b8/rootfs" ||
  fail "no bundle made in $T/p/q/b8"
touch "$T/p/q/b8/notes"
expect_exit 0 "bundle --rm of a DIR with another file" cairn bundle --rm -q \
  "$T/p/q/b8"
[[ -f $T/p/q/b8/notes && ! -e $T/p/q/b8/rootfs ]] || fail "bundle --rm: $(ls -la "$T/p/q/b8")"
expect_exit 0 "bundle --rm of it again" cairn bundle --rm "$T/p/q/b8"
[[ $(cat "$T/stderr") == "cairn: bundle: $T/p/q/b8: no bundle" ]] ||
  fail "bundle --rm of a removed bundle: $(cat "$T/stderr")"
[[ ! -s $T/stdout ]] || fail "bundle --rm of a removed bundle printed $(cat "$T/stdout")"
[[ -z $(cairn mounts -q) ]] || fail "mount records left: $(cairn mounts)"
# cairn umount DIR/rootfs also ends a bundle's mount (and its pin).
setup cairn bundle -q "$img" "$T/b4"
expect_exit 0 "umount DIR/rootfs" cairn umount "$T/b4/rootfs"
expect_exit 0 "bundle --rm after umount" cairn bundle --rm "$T/b4"

# --rm while a container runs on the bundle: the bundle stays (exit 4) and
# goes once the container has ended.
setup cairn bundle -q --entrypoint /bin/sh "$img" "$T/b6" -- \
  -c 'echo started; sleep 3; echo finished'
run crun "$T/b6" &
runner=$!
on_exit "kill -9 $runner"
wait_for 30 grep -q started "$T/run.out" || fail "the container did not start: $(cat "$T/run.err")"
expect_exit 4 "bundle --rm under a running container: busy" cairn bundle --rm "$T/b6"
[[ -f $T/b6/config.json ]] || fail "a busy bundle lost its config.json"
wait "$runner" || fail "the container failed: $(cat "$T/run.err")"
grep -q finished "$T/run.out" || fail "the container was cut short: $(cat "$T/run.out")"
expect_exit 0 "bundle --rm once it ended" cairn bundle --rm "$T/b6"
[[ ! -e $T/b6 ]] || fail "b6 left behind"

# ---- a writable root: the container writes, the image stays ---------------------
cairn export -q "$img" | tar -t | sort >"$T/tree.before"
expect_exit 0 "bundle --rw" cairn bundle --rw --user 0 --entrypoint /bin/sh \
  "$img" "$T/b7" -- -c 'echo written >/srv/work/new && cat /srv/work/new && echo changed >/app/entry.sh &&
  cat /app/entry.sh'
jq -e '.root.readonly == false' "$T/b7/config.json" >/dev/null || fail "--rw: root.readonly"
run crun "$T/b7" || fail "--rw: crun failed: $(cat "$T/run.err")"
has written "--rw: a new file" && has changed "--rw: a changed file" && ok "--rw: the container writes"
[[ $(cat "$T/b7/rootfs/srv/work/new" 2>/dev/null) == written ]] || fail "--rw: the write is not in rootfs"
expect_exit 0 "bundle --rm of a --rw bundle" cairn bundle --rm "$T/b7"
grep -q "^Kept: upper [0-9a-f]\{12\} " "$T/stdout" || fail "--rw: --rm did not keep the changes: $(cat "$T/stdout")"
expect_exit 0 "umount --discard of its kept changes" cairn umount --discard "$T/b7/rootfs"
grep -q "^Dropped: upper [0-9a-f]\{12\} " "$T/stdout" || fail "--rw: --discard said: $(cat "$T/stdout")"
cairn export -q "$img" | tar -t | sort >"$T/tree.after"
cmp -s "$T/tree.before" "$T/tree.after" || fail "--rw: the image changed"
cairn export -q "$img" | tar -xO --wildcards '*app/entry.sh' | grep -q '^echo "args' ||
  fail "--rw: the image's file changed"

# ---- bad input ----------------------------------------------------------------
expect_exit 3 "no such image" cairn bundle nothing:1 "$T/b5"
[[ ! -e $T/b5 ]] || fail "a failed bundle left $T/b5"
expect_exit 3 "a user the image does not know" cairn bundle --user nobody \
  "$img" "$T/b5"
grep -q 'no such user in the image' "$T/stderr" || fail "unclear user error: $(cat "$T/stderr")"
[[ $(wc -l <"$T/stderr") == 1 ]] || fail "error is not one line: $(cat "$T/stderr")"
expect_exit 3 "a group the image does not know" cairn bundle --user app:wheel \
  "$img" "$T/b5"
mkdir -p "$T/nocmd/etc"
tar -C "$T/nocmd" -cf "$T/nocmd.tar" etc
setup cairn import -q nocmd:1 "$T/nocmd.tar" >/dev/null
expect_exit 2 "an image with no Entrypoint or Cmd and no COMMAND" cairn bundle \
  nocmd:1 "$T/b5"
grep -q '^cairn: bundle: nocmd:1: image [0-9a-f]* has no Entrypoint or Cmd: .* -- COMMAND' \
  "$T/stderr" || fail "the error does not say how to give the command: $(cat "$T/stderr")"
[[ $(wc -l <"$T/stderr") == 1 ]] || fail "error is not one line: $(cat "$T/stderr")"
expect_exit 2 "needs IMAGE and DIR" cairn bundle "$img"
expect_exit 2 "--env without =" cairn bundle --env X "$img" "$T/b5"
expect_exit 2 "--rw and --read-only" cairn bundle --rw --read-only "$img" "$T/b5"
expect_exit 2 "--rm with an image" cairn bundle --rm --env X=1 "$T/b5"
[[ ! -e $T/b5 ]] || fail "a refused bundle left $T/b5"
expect_exit 0 "rm once the bundles are gone" cairn rm "$img"
finish
