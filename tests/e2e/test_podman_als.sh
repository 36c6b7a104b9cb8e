#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_podman_als.sh — podman 4.3 takes the layers cairn pulled from
# cairn's Additional Layer Store (cairnfs --als) instead of downloading
# them: an image of two gzip layers (the host's sh and cat with their
# libraries; data with a whiteout and an opaque directory over the first)
# is pushed to a local docker-registry with skopeo, pulled by cairn, and
# pulled by podman through a counting proxy (fault_proxy.py) with
# storage.conf `additionallayerstores = ["ALS:ref"]`. The proxy's counts
# are the traffic measured: the manifest and the config are fetched, no
# layer blob is. `podman run` then reads the layers through the ALS
# (whiteout hidden, opaque directory emptied of the lower files), and while
# podman holds the image (and a container runs on it) `cairn rm` of the
# image is refused (exit 4) naming the ALS; `podman rmi` releases it and
# rm works. A daemon restarted with --podman-root takes the pins of
# podman's layers again. podman runs with the flags doc/testing.md gives for these hosts.
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib registry
use_lib mount
set -e

command -v podman >/dev/null || fail "podman is not installed (scripts/setup.sh installs it)"
command -v skopeo >/dev/null || fail "skopeo is not installed"
command -v docker-registry >/dev/null || fail "docker-registry is not installed"
OCI_IMAGE="python3 $HELPERS/oci_image.py"
PROXY_PID=
ALS=$T/als
als_stop() {
  if is_mounted "$ALS"; then
    umount "$ALS" 2>/dev/null || umount -l "$ALS" 2>/dev/null || true
  fi
}
podman_cleanup() {
  [ -d "$T/podman-root" ] || return 0
  podman_cmd rm -af >/dev/null 2>&1 || true
  podman_cmd rmi -af >/dev/null 2>&1 || true
  awk -v t="$T/podman" 'index($5, t) == 1 { print $5 }' /proc/self/mountinfo | tac |
    while read -r m; do umount -l "$m" 2>/dev/null || true; done
}
on_exit 'podman_cleanup; als_stop; [ -n "$PROXY_PID" ] && kill "$PROXY_PID" 2>/dev/null; registry_cleanup'

cat >"$T/storage.conf" <<EOF
[storage]
driver = "overlay"
graphroot = "$T/podman-root"
runroot = "$T/podman-runroot"
[storage.options]
additionallayerstores = ["$ALS:ref"]
EOF
export CONTAINERS_STORAGE_CONF=$T/storage.conf

# podman_cmd ARGS...: podman as doc/testing.md runs it, with our storage.conf.
podman_cmd() {
  timeout 120 "${PRIVATE_NS[@]}" sh -c '
    umount /sys/fs/cgroup/unified 2>/dev/null
    exec podman --cgroup-manager=cgroupfs "$@"' sh "$@" </dev/null
}
podman_settle() { wait_for 10 sh -c "! pgrep -f '$T/[p]odman-root' >/dev/null"; }

# ---- the image: layer 1 the programs and files layer 2 hides, layer 2 data
l1=$T/l1 l2=$T/l2
mkdir -p "$l1"/{etc,proc,dev,sys,tmp,run,var/tmp,data,opq} "$l2/data" "$l2/opq"
for prog in /bin/sh /usr/bin/cat /usr/bin/ls /bin/sleep; do
  real=$(readlink -f "$prog")
  mkdir -p "$l1$(dirname "$prog")"
  cp "$real" "$l1$prog"
  for lib in $(ldd "$real" | grep -o '/[^ ]*'); do
    mkdir -p "$l1$(dirname "$lib")"
    cp -L "$lib" "$l1$lib"
  done
done
echo 'root:x:0:0:root:/root:/bin/sh' >"$l1/etc/passwd"
echo gone >"$l1/data/gone"
echo old >"$l1/opq/old"
echo hello >"$l2/data/hello"
: >"$l2/data/.wh.gone"
: >"$l2/opq/.wh..wh..opq"
echo new >"$l2/opq/new"
(cd "$T" && tar -C "$l1" --numeric-owner -cf l1.tar . && tar -C "$l2" --numeric-owner -cf l2.tar .)
(cd "$T" && $OCI_IMAGE add oci app linux/amd64 l1.tar:gzip l2.tar:gzip >/dev/null) ||
  fail "building the OCI image"
registry_start "$T/reg" || fail "registry did not start"
registry_push "$T/oci" app team/app:1 || fail "skopeo copy to the registry"
manifest=$(skopeo inspect --raw --tls-verify=false "docker://$REGISTRY/team/app:1")
mapfile -t layer_digests < <(jq -r '.layers[].digest' <<<"$manifest")
[ "${#layer_digests[@]}" = 2 ] || fail "the image has ${#layer_digests[@]} layers, not 2"
layer_bytes=$(jq '[.layers[].size] | add' <<<"$manifest")

# ---- cairn pulls it, keeping the compressed layers; the ALS serves them
cairn pull -q --insecure "docker://$REGISTRY/team/app:1" app:1 >/dev/null || fail "cairn pull"
mkdir -p "$ALS"
"$CAIRN_BIN/cairnfs" --als --store "$STORE" "$ALS" || fail "cairnfs --als did not start"
wait_for 10 is_mounted "$ALS" || fail "the ALS is not mounted"
for d in "${layer_digests[@]}"; do
  [ -d "$ALS/$d/diff" ] || fail "no $ALS/$d/diff"
  cmp -s "$ALS/$d/blob" "$(registry_blob_path "$d")" || fail "$d/blob is not the registry's blob"
  jq -e --arg d "$d" '.["compressed-diff-digest"] == $d and .compression == 2' "$ALS/$d/info" \
    >/dev/null || fail "$d/info: $(cat "$ALS/$d/info")"
  ref=$(printf '//%s/team/app:1' "$REGISTRY" | base64 -w0)
  [ -d "$ALS/$ref/$d/diff" ] || fail "no reference directory $ref/$d"
done
top=$ALS/${layer_digests[1]}/diff
[ "$(stat -c '%F %t:%T' "$top/data/gone")" = "character special file 0:0" ] ||
  fail "the whiteout is not a 0/0 device: $(stat -c '%F %t:%T' "$top/data/gone")"
xattr() { python3 -c 'import os, sys; print(os.getxattr(sys.argv[1], sys.argv[2]).decode())' "$@"; }
[ "$(xattr "$top/opq" trusted.overlay.opaque 2>&1)" = y ] ||
  fail "opq has no trusted.overlay.opaque=y: $(xattr "$top/opq" trusted.overlay.opaque 2>&1)"
[ "$(cat "$top/data/hello")" = hello ] || fail "layer 2's file through the ALS"
[ ! -e "$top/opq/old" ] || fail "layer 2's diff shows layer 1's opq/old"
ok "cairnfs --als serves each pulled layer: info, the exact blob, diff in overlayfs's encoding"

# ---- podman pulls through a counting proxy: no layer blob is downloaded
python3 "$HELPERS/fault_proxy.py" "$T/proxy.port" "$REGISTRY_PORT" 2>"$T/proxy.log" &
PROXY_PID=$!
wait_for 10 test -s "$T/proxy.port" || fail "the proxy did not start"
proxy=127.0.0.1:$(cat "$T/proxy.port")
podman_cmd pull -q --tls-verify=false "docker://$proxy/team/app:1" >"$T/stdout" 2>"$T/stderr" ||
  fail "podman pull: $(cat "$T/stderr")"
counts=$(curl -s "http://$proxy/_proxy/counts")
blob_gets=0
for d in "${layer_digests[@]}"; do
  n=$(jq --arg d "$d" '[.paths | to_entries[] | select(.key | endswith($d)) | .value] | add // 0' \
    <<<"$counts")
  blob_gets=$((blob_gets + n))
done
manifest_gets=$(jq '[.paths | to_entries[] | select(.key | test("/manifests/")) | .value] | add // 0' \
  <<<"$counts")
echo "# podman pull through the proxy: $(jq -c .paths <<<"$counts")"
echo "# layer blob requests: $blob_gets (of $layer_bytes compressed layer bytes, none fetched)"
[ "$manifest_gets" -ge 1 ] || fail "the proxy saw no manifest request: podman did not pull through it"
[ "$blob_gets" = 0 ] || fail "podman downloaded layer blobs cairn holds: $(jq -c .paths <<<"$counts")"
ok "podman pull took both layers from cairn: $blob_gets layer requests, 0 of $layer_bytes bytes"

# ---- podman runs it, reading through the ALS
podman_run() {
  podman_cmd run --rm --cgroups=disabled --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 \
    --network=none "$proxy/team/app:1" "$@"
}
podman_run /bin/sh -c 'cat /data/hello; ls /data; ls /opq' >"$T/stdout" 2>"$T/stderr" ||
  fail "podman run: $(cat "$T/stderr")"
[ "$(cat "$T/stdout")" = "$(printf 'hello\nhello\nnew')" ] ||
  fail "podman run output: $(cat "$T/stdout") $(cat "$T/stderr")"
ok "podman run on the ALS layers: whiteout and opaque directory as the image says"

# ---- pins: podman's image and container hold cairn's layers
expect_exit 4 "cairn rm app:1" cairn rm app:1
grep -q "als $ALS" "$T/stderr" || fail "rm's reason does not name the ALS: $(cat "$T/stderr")"
podman_run /bin/sh -c 'echo started; sleep 3; cat /data/hello' >"$T/ctr.out" 2>"$T/ctr.err" &
runner=$!
BG_PIDS+=("$runner")
wait_for 30 grep -q started "$T/ctr.out" || fail "container did not start: $(cat "$T/ctr.err")"
expect_exit 4 "cairn rm app:1" cairn rm app:1
expect_exit 0 "cairn gc" cairn gc
for d in "${layer_digests[@]}"; do [ -s "$ALS/$d/blob" ] || fail "gc took $d from the ALS"; done
wait "$runner" || fail "the container failed: $(cat "$T/ctr.err")"
[ "$(tail -1 "$T/ctr.out")" = hello ] || fail "container output: $(cat "$T/ctr.out")"
podman_settle || true
ok "while podman holds the image and runs a container, cairn rm is refused (exit 4)"

# ---- a restarted daemon takes the pins of podman's layers again
umount "$ALS" || fail "umount of the ALS"
wait_for 10 not_mounted "$ALS" || fail "the ALS stayed mounted"
"$CAIRN_BIN/cairnfs" --als --store "$STORE" --podman-root "$T/podman-root" "$ALS" ||
  fail "cairnfs --als did not restart"
expect_exit 4 "cairn rm app:1" cairn rm app:1
podman_run /usr/bin/cat /data/hello >"$T/stdout" 2>"$T/stderr" || fail "podman run after a restart: $(cat "$T/stderr")"
[ "$(cat "$T/stdout")" = hello ] || fail "podman run after a restart: $(cat "$T/stdout")"
ok "a restart with --podman-root pins podman's layers again; podman runs on"

podman_cmd rmi -a >/dev/null 2>"$T/stderr" || fail "podman rmi: $(cat "$T/stderr")"
expect_exit 0 "cairn rm app:1" cairn rm app:1
[ -z "$(ls "$STORE/compressed")" ] || fail "the kept blobs outlived their layers: $(ls "$STORE/compressed")"
[ -z "$(ls "$ALS")" ] || fail "the ALS still lists removed layers: $(ls "$ALS")"
ok "podman rmi releases the pins: cairn rm removes the image, its layers and kept blobs"

# ---- fsck checks the kept blobs; --repair forgets a broken one
st2=$T/st2
"$CAIRN_BIN/cairn" --store "$st2" pull -q --insecure "docker://$REGISTRY/team/app:1" >/dev/null ||
  fail "second pull"
expect_exit 0 "$CAIRN_BIN/cairn --store $st2 fsck" "$CAIRN_BIN/cairn" --store "$st2" fsck
: >"$st2/compressed/${layer_digests[0]#sha256:}"
expect_exit 5 "$CAIRN_BIN/cairn --store $st2 fsck" "$CAIRN_BIN/cairn" --store "$st2" fsck
grep -q "kept compressed blob ${layer_digests[0]}" "$T/stdout" "$T/stderr" ||
  fail "fsck does not name the broken kept blob: $(cat "$T/stdout" "$T/stderr")"
expect_exit 0 "$CAIRN_BIN/cairn --store $st2 fsck --repair" "$CAIRN_BIN/cairn" --store "$st2" fsck --repair
expect_exit 0 "$CAIRN_BIN/cairn --store $st2 fsck" "$CAIRN_BIN/cairn" --store "$st2" fsck
ok "fsck reports a kept blob of the wrong size (exit 5); --repair forgets it"
