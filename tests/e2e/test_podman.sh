#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_podman.sh — podman 4.3 runs a container whose root is a cairnfs
# mount with a writable kernel overlay on top (`--rootfs MNT:O`): the
# image's files are read through cairnfs, the container's writes (a
# changed file, a new file) land in podman's overlay upper layer and never
# in the image (the mount shows the image unchanged afterwards), and a
# read-only run (`--rootfs MNT --read-only`) works too. While a podman
# container runs, the mount pins the image (rm exit 4) and a host-side
# `cairn umount` only detaches it (exit 4); when the container ends, the
# daemon exits and rm works. podman runs with the flags doc/testing.md gives for
# these hosts: a private mount namespace without the cgroup2 mount,
# cgroupfs with --cgroups=disabled, its own --root/--runroot, lowered
# ulimits, no network. The image is the host's sh, cat, id and sleep with
# their libraries, imported as one layer.
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib mount
set -e

command -v podman >/dev/null || fail "podman is not installed (scripts/setup.sh installs it)"
root=$T/layer
# (the mount points a read-only root must have: podman --read-only mounts
# tmpfs on /run, /tmp and /var/tmp)
mkdir -p "$root"/{etc,proc,dev,sys,tmp,run,var/tmp,data} "$T/mnt"
for prog in /bin/sh /usr/bin/id /usr/bin/cat /bin/sleep; do
  real=$(readlink -f "$prog")
  mkdir -p "$root$(dirname "$prog")"
  cp "$real" "$root$prog"
  for lib in $(ldd "$real" | grep -o '/[^ ]*'); do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
  done
done
echo hello >"$root/data/hello"
echo 'root:x:0:0:root:/root:/bin/sh' >"$root/etc/passwd"
# A read-only root must also have what podman binds or links there (it
# makes them on a writable one): /etc/mtab, hosts, hostname, resolv.conf.
ln -s /proc/self/mounts "$root/etc/mtab"
touch "$root/etc/hosts" "$root/etc/hostname" "$root/etc/resolv.conf"
tar -C "$root" --numeric-owner -cf "$T/layer.tar" .
cairn import -q pod:1 "$T/layer.tar"
cairn mount -q pod:1 "$T/mnt"

# podman_run ARGS...: `podman run --rm ARGS` as doc/testing.md runs it.
podman_run() {
  timeout 120 "${PRIVATE_NS[@]}" sh -c '
    umount /sys/fs/cgroup/unified 2>/dev/null
    root=$1 runroot=$2; shift 2
    exec podman --cgroup-manager=cgroupfs --root "$root" --runroot "$runroot" run --rm \
      --cgroups=disabled --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 --network=none "$@"' \
    sh "$T/podman-root" "$T/podman-runroot" "$@" </dev/null
}
# podman's own cleanup (conmon runs `podman container cleanup`) may still
# run when podman run returns: wait for it before $T goes. ([p]: the
# pattern does not match pgrep's own sh.)
podman_settle() { wait_for 10 sh -c "! pgrep -f '$T/[p]odman-root' >/dev/null"; }

# ---- writes go to podman's overlay, never to the image
podman_run --rootfs "$T/mnt:O" /bin/sh -c \
  'cat /data/hello; echo changed >/data/hello; echo new >/newfile; cat /data/hello /newfile; id -u' \
  >"$T/stdout" 2>"$T/stderr" || fail "podman run --rootfs MNT:O: $(cat "$T/stderr")"
[ "$(cat "$T/stdout")" = "$(printf 'hello\nchanged\nnew\n0')" ] ||
  fail "podman output: $(cat "$T/stdout") $(cat "$T/stderr")"
[ "$(cat "$T/mnt/data/hello")" = hello ] || fail "the container's write reached the image"
[ ! -e "$T/mnt/newfile" ] || fail "the container's new file is in the image"
ok "podman --rootfs MNT:O: reads from cairnfs, writes to its overlay, the image unchanged"

podman_run --read-only --rootfs "$T/mnt" /usr/bin/cat /data/hello >"$T/stdout" 2>"$T/stderr" ||
  fail "podman run --read-only --rootfs MNT: $(cat "$T/stderr")"
[ "$(cat "$T/stdout")" = hello ] || fail "read-only output: $(cat "$T/stdout")"
ok "podman --read-only --rootfs MNT"

# ---- a running podman container holds the mount and its pins
daemon=$(mount_pid "$T/mnt")
podman_run --rootfs "$T/mnt:O" /bin/sh -c 'echo started; sleep 3; cat /data/hello' \
  >"$T/ctr.out" 2>"$T/ctr.err" &
runner=$!
BG_PIDS+=("$runner")
wait_for 30 grep -q started "$T/ctr.out" || fail "container did not start: $(cat "$T/ctr.err")"
expect_exit 4 "cairn rm pod:1" cairn rm pod:1
expect_exit 4 "cairn umount $T/mnt" cairn umount "$T/mnt"
grep -q "detached here, still in use by" "$T/stderr" || fail "umount message: $(cat "$T/stderr")"
pid_gone "$daemon" && fail "umount stopped the daemon under a running podman container"
status=0
wait "$runner" || status=$?
[ "$status" = 0 ] || fail "container exited $status: $(cat "$T/ctr.err")"
[ "$(tail -1 "$T/ctr.out")" = hello ] || fail "container output: $(cat "$T/ctr.out")"
wait_for 10 pid_gone "$daemon" || fail "the daemon outlived the last container"
wait_for 5 sh -c "[ \"\$($CAIRN_BIN/cairn --store $STORE mounts -q | wc -l)\" = 0 ]" ||
  fail "mount record left: $(cairn mounts)"
cairn rm pod:1 >/dev/null || fail "rm after the container ended"
ok "a running podman container pins the image; host umount detaches; the end releases"
podman_settle || fail "podman processes outlived their containers: $(pgrep -af podman-root)"
