#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_pull_mount_same.sh — one image, two transports: `cairn pull docker://…`
# (a real docker-registry on 127.0.0.1, filled by skopeo) and `cairn pull
# oci:…` of the same image give identical image ids, and cairnfs mounts of
# the two (each from its own store) show the same tree: the same
# `find -printf` listing (path, type, mode, owner, size, mtime, link
# target), the same file contents (sha256), and both the tree the OCI rules
# define for the layers (fstree.py expect). The layers are fstree.py's:
# whiteouts, opaque dirs, hardlinks, symlinks, devices, xattrs.
# Every mount is unmounted by the exit trap, lazily if need be.
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib registry
pull_test_init
FSTREE="python3 $HELPERS/fstree.py"
# Sanitizer reports of the daemons (their stderr goes nowhere) land here.
export ASAN_OPTIONS="log_path=$T/sanitizer:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="log_path=$T/sanitizer:print_stacktrace=1:${UBSAN_OPTIONS:-}"

# unmount_all: every mount under $T, topmost first, lazily; then the daemons.
unmount_all() {
  local m s pids=""
  for s in docker oci; do
    [[ -d $T/st-$s ]] && pids+=" $(cairn --store "$T/st-$s" mounts --json 2>/dev/null | jq -r '.[].pid')"
  done
  for m in $(awk -v t="$T/" 'index($5, t) == 1 { print $5 }' /proc/self/mountinfo | tac); do
    umount -l "$m" 2>/dev/null || true
  done
  for p in $pids; do grep -qs cairnfs "/proc/$p/comm" && kill -9 "$p"; done
  return 0
}
on_exit unmount_all

setup $FSTREE make-layers "$T/layers"
setup $OCI_IMAGE add oci app linux/amd64 layers/layer1.tar:gzip layers/layer2.tar:zstd \
  layers/layer3.tar:raw >/dev/null
app_id=$($OCI_IMAGE config-digest oci app)
setup registry_start "$T/reg"
setup registry_push "$T/oci" app team/app:1

expect_exit 0 "pull docker://" cairn --store "$T/st-docker" pull -q --insecure "docker://$REGISTRY/team/app:1" app:1
docker_id=$(cat "$T/stdout")
expect_exit 0 "pull oci:" cairn --store "$T/st-oci" pull -q "oci:$T/oci:app" app:1
oci_id=$(cat "$T/stdout")
if [[ $docker_id == "$oci_id" && $docker_id == "$app_id" ]]; then ok "identical image ids ($app_id)"; else
  fail "ids differ: docker:// $docker_id, oci: $oci_id, config digest $app_id"; fi
for s in docker oci; do
  cairn --store "$T/st-$s" inspect app:1 | jq -c '[.layers[].id]' >"$T/$s.layers"
done
check "the same layers (diff_ids) either way" cmp -s "$T/docker.layers" "$T/oci.layers"

mkdir -p "$T/m-docker" "$T/m-oci"
for s in docker oci; do
  expect_exit 0 "mount the $s pull" cairn --store "$T/st-$s" mount app:1 "$T/m-$s"
done

# listing DIR: one line per entry, relative paths, sorted; then every
# regular file's sha256.
listing() {
  (cd "$1" && find . -printf '%p %y %m %U %G %s %T@ %l\n' | LC_ALL=C sort &&
    find . -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum)
}
setup listing "$T/m-docker" >"$T/docker.find"
setup listing "$T/m-oci" >"$T/oci.find"
n=$(grep -c . "$T/docker.find")
if ((n >= 40)) && diff -u "$T/docker.find" "$T/oci.find" >"$T/find.diff"; then
  ok "the two mounts show the same tree ($n lines of find + sha256)"
else
  fail "the mounts differ ($n lines): $(head -20 "$T/find.diff")"
fi
# Both are the tree the OCI rules define (computed by fstree.py, not cairn).
setup $FSTREE expect "$T"/layers/layer{1,2,3}.tar >"$T/want"
for s in docker oci; do
  $FSTREE scan "$T/m-$s" >"$T/$s.scan"
  if diff -u "$T/want" "$T/$s.scan" >"$T/$s.diff"; then ok "the $s mount is the OCI-rules tree"; else
    fail "the $s mount differs from the OCI rules: $(head -20 "$T/$s.diff")"; fi
done

# cairn df counts the compressed layers the docker:// pull kept (for
# podman's ALS) as the files in STORE/compressed are, pinned with their
# layers while mounted, and gone with them.
df_compressed() { cairn --store "$T/st-docker" df --json | jq -r ".[] | select(.type == \"compressed\") | .$1"; }
kept_files=$(find "$T/st-docker/compressed" -type f | wc -l)
kept_bytes=$(find "$T/st-docker/compressed" -type f -printf '%s\n' | awk '{ s += $1 } END { print s + 0 }')
got="$(df_compressed count) $(df_compressed bytes) $(df_compressed pinned_count)"
if ((kept_files > 0)) && [[ $got == "$kept_files $kept_bytes $kept_files" ]]; then
  ok "cairn df counts the $kept_files kept compressed layers ($kept_bytes bytes), pinned by the mount"
else
  fail "cairn df says count/bytes/pinned $got of compressed layers; STORE/compressed holds $kept_files files, $kept_bytes bytes"
fi
check "cairn df's table has the row" grep -q "^Compressed  *$kept_files " <(cairn --store "$T/st-docker" df)

for s in docker oci; do
  expect_exit 0 "umount the $s mount" cairn --store "$T/st-$s" umount "$T/m-$s"
  expect_exit 0 "fsck of the $s store" cairn --store "$T/st-$s" fsck
done
expect_exit 0 "rm of the docker:// image" cairn --store "$T/st-docker" rm -q app:1
got="$(df_compressed count) $(df_compressed bytes) $(find "$T/st-docker/compressed" -type f | wc -l)"
check "the kept compressed layers went with their layers (df: count, bytes; files: $got)" \
  test "$got" = "0 0 0"
if compgen -G "$T/sanitizer.*" >/dev/null; then
  fail "sanitizer reports: $(cat "$T"/sanitizer.* | head -40)"
fi
finish
