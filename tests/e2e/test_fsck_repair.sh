#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_fsck_repair.sh — `cairn fsck --repair` of a corrupt blob that a live
# mount uses removes nothing: it quarantines the blob (reads of that one
# file fail with EIO, the rest of the image keeps working), names the mount
# that holds the image and exits 4; a plain fsck then reports the missing
# blob (exit 5). Importing the same layer again heals the blob. Once the
# mount is gone, a repair removes the image, naming it, its layer and
# the file, and fsck is clean. A plain fsck's error names the file and the
# image. A blob of a pulled layer, whose compressed layer the store kept,
# is rebuilt from it by a repair, verified, and nothing is removed.
# Without that copy, the pull's record of where the layer came from
# (layer_origins) lets a repair fetch it again from the registry, verify
# it and rebuild the blob (the mount reads the right bytes); with the
# registry's blob altered (it does not verify), or the registry stopped,
# the repair says so and removes the image, naming it, its layer and the
# file. From an HTTPS registry, the repair trusts the CAs of --cert-dir as
# the pull did (one that does not exist is exit 3, nothing removed).
# Fails without it: the repair removed the pulled image; plain fsck ended
# with "Bad message", and the removal named no image, layer nor file; a
# layer kept no record of its registry, and a repair without a kept copy
# removed the image.
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib mount
use_lib registry
set -e

mkdir -p "$T/layer/etc"
echo "the first file" >"$T/layer/etc/one"
echo "the second file" >"$T/layer/etc/two"
tar -C "$T/layer" --numeric-owner -cf "$T/layer.tar" .
mnt=$T/mnt
mkdir "$mnt"

# db SQL: the store's database (test-lib.sh's sqlite3 waits for a
# daemon's write to end)
db() { sqlite3 "$STORE/meta.db" "$@"; }
# corrupt PATH: overwrites one byte of the blob of the layer's entry PATH,
# as disk rot would (blobs are read-only files).
corrupt() {
  local blob
  blob=$(db "SELECT blob FROM entries WHERE path = '$1'")
  [ -n "$blob" ] || fail "no blob for $1"
  chmod 0644 "$STORE/blobs/${blob:0:2}/$blob"
  printf X | dd of="$STORE/blobs/${blob:0:2}/$blob" bs=1 count=1 conv=notrunc status=none
}
has_image() { cairn images --json | jq -e --arg n "$1" 'any(.[].names[]; . == $n or . == "localhost/" + $n)' >/dev/null; }

# ---- a mounted image: kept, its corrupt blob quarantined, exit 4
cairn import app:1 "$T/layer.tar" >/dev/null
cairn mount app:1 "$mnt"
pid=$(mount_pid "$mnt")
corrupt etc/one
expect_exit 4 "cairn fsck --repair" cairn fsck --repair
grep -q "^cairn: fsck: .*pinned by pid $pid (cairnfs) mount $mnt" "$T/stderr" ||
  fail "the error does not name the mount: $(cat "$T/stderr")"
[ "$(wc -l <"$T/stderr")" = 1 ] || fail "more than one error line: $(cat "$T/stderr")"
grep -q "quarantined" "$T/stdout" || fail "no report of the quarantine: $(cat "$T/stdout")"
has_image app:1 || fail "repair removed a mounted image: $(cairn images)"
[ "$(cairn_pin ls --json | jq length)" -gt 0 ] || fail "the mount's pins are gone"
[ "$(cat "$mnt/etc/two")" = "the second file" ] || fail "a healthy file of the image broke"
cat "$mnt/etc/one" >/dev/null 2>"$T/cat.err" && fail "the corrupt file still reads"
grep -q "Input/output error" "$T/cat.err" || fail "not EIO: $(cat "$T/cat.err")"
expect_exit 5 "cairn fsck" cairn fsck
grep -q "missing: etc/one in layer sha256:[0-9a-f]\{12\}; image [0-9a-f]\{12\} (localhost/app:1)$" "$T/stdout" ||
  fail "fsck does not report the quarantined blob and its users: $(cat "$T/stdout")"
grep -qx "cairn: fsck: [0-9]* problems found; the first: blob [0-9a-f]*: missing: etc/one in layer sha256:[0-9a-f]\{12\}; image [0-9a-f]\{12\} (localhost/app:1)" \
  "$T/stderr" || fail "fsck's error names nothing: $(cat "$T/stderr")"
ok "a mounted image is kept (exit 4 naming the mount); its corrupt file reads EIO, the rest works"

# ---- the same layer imported again heals the blob, even under the mount
cairn import app:2 "$T/layer.tar" >/dev/null
[ "$(cat "$mnt/etc/one")" = "the first file" ] || fail "the healed file does not read"
expect_exit 0 "cairn fsck" cairn fsck
ok "importing the layer again heals the quarantined blob"

# ---- corrupt again; once unmounted, a repair removes the image
corrupt etc/one
expect_exit 4 "cairn fsck --repair" cairn fsck --repair
cairn umount "$mnt"
image=$(cairn images -q --no-trunc app:1)
layer=$(db "SELECT layer_id FROM entries WHERE path = 'etc/one'")
expect_exit 0 "cairn fsck --repair" cairn fsck --repair
grep -q "^repaired: removed blob [0-9a-f]*, which no kept layer or registry rebuilds: etc/one in layer sha256:${layer:0:12}; image ${image:0:12} (localhost/app:1, localhost/app:2)$" \
  "$T/stdout" && grep -qx "removed image ${image:0:12} (localhost/app:1, localhost/app:2)" "$T/stdout" &&
  grep -qx "removed layer sha256:$layer" "$T/stdout" || fail "the repair did not name what it removed: $(cat "$T/stdout")"
has_image app:1 && fail "repair kept the image after the mount went: $(cairn images)"
[ "$(cairn images --json | jq length)" = 0 ] || fail "images left: $(cairn images)"
[ "$(cairn layers --json | jq length)" = 0 ] || fail "layers left: $(cairn layers)"
[ -z "$(find "$STORE/blobs" -type f)" ] || fail "blob files left: $(find "$STORE/blobs" -type f)"
[ -z "$(find "$STORE/pins" -type f)" ] || fail "pin files left: $(find "$STORE/pins" -type f)"
expect_exit 0 "cairn fsck" cairn fsck
ok "unmounted: the repair removes the image, its layer and blobs; fsck is clean"

# ---- a pulled layer's blob: rebuilt from the kept compressed layer
registry_start "$T/reg"
BG_PIDS+=("$REGISTRY_PID")
cairn import app:1 "$T/layer.tar" >/dev/null
cairn push -q --insecure app:1 "docker://$REGISTRY/app:1" >/dev/null
cairn push -q --insecure app:1 "docker://$REGISTRY/other:1" >/dev/null
cairn rm app:1 >/dev/null
cairn gc >/dev/null
cairn pull -q --insecure "docker://$REGISTRY/app:1" >/dev/null
cairn pull -q --insecure "docker://$REGISTRY/other:1" >/dev/null # the layer reused
cairn rm "$REGISTRY/other:1" >/dev/null
registry_stop
# each pull recorded where it got the layer: registry, repository, blob
layer=$(db "SELECT layer_id FROM entries WHERE path = 'etc/one'")
origins=$(db "SELECT layer_id, registry || '/' || repository, insecure,
  digest = (SELECT digest FROM layer_blobs WHERE layer_id = '$layer')
  FROM layer_origins ORDER BY repository" | tr '\n' ' ')
[ "$origins" = "$layer|$REGISTRY/app|1|1 $layer|$REGISTRY/other|1|1 " ] ||
  fail "the pulls did not record where the layer came from: $origins"
ok "each pull records the registry, repository and blob of the layer"
[ -n "$(find "$STORE/compressed" -type f)" ] || fail "setup: the pull kept no compressed layer"
corrupt etc/one
expect_exit 5 "cairn fsck" cairn fsck
expect_exit 0 "cairn fsck --repair" cairn fsck --repair
grep -q "^repaired: rebuilt blob [0-9a-f]* (etc/one) from the kept compressed layer sha256:[0-9a-f]\{64\}$" "$T/stdout" ||
  fail "no rebuild: $(cat "$T/stdout")"
! grep -q "^removed" "$T/stdout" || fail "the repair removed: $(cat "$T/stdout")"
has_image "$REGISTRY/app:1" || fail "the repair removed the pulled image: $(cairn images)"
[ "$(cairn export "$REGISTRY/app:1" | tar -xO etc/one)" = "the first file" ] || fail "the rebuilt file"
expect_exit 0 "cairn fsck" cairn fsck
ok "a pulled layer's corrupt blob is rebuilt from the kept compressed layer; nothing removed"

# ---- no kept copy: the blob comes back from the registry the layer came from
registry_start "$T/reg" "$REGISTRY_PORT"
BG_PIDS+=("$REGISTRY_PID")
rm -f "$STORE"/compressed/*
corrupt etc/one
expect_exit 5 "cairn fsck" cairn fsck
expect_exit 0 "cairn fsck --repair" cairn fsck --repair
hex64='[0-9a-f]\{64\}'
# (the latest pull's origin first: other's, or app's when both pulls fell
# in the same second)
grep -qx "repaired: layer sha256:$layer from $REGISTRY/\(app\|other\): rebuilt blob [0-9a-f]* (etc/one) from its blob sha256:$hex64" \
  "$T/stdout" || fail "no rebuild from the registry: $(cat "$T/stdout")"
! grep -q "^removed" "$T/stdout" || fail "the repair removed: $(cat "$T/stdout")"
cairn mount "$REGISTRY/app:1" "$mnt"
[ "$(cat "$mnt/etc/one")" = "the first file" ] || fail "the mount reads the wrong bytes: $(cat "$mnt/etc/one")"
[ "$(cat "$mnt/etc/two")" = "the second file" ] || fail "the other file broke"
cairn umount "$mnt"
expect_exit 0 "cairn fsck" cairn fsck
ok "no kept copy: the corrupt blob is fetched again from the registry, verified; the mount reads it"

# ---- the registry's blob altered: it does not verify; the repair removes and names
digest=$(db "SELECT digest FROM layer_origins WHERE repository = 'app'")
regblob=$(registry_blob_path "$digest")
cp "$regblob" "$T/regblob"
chmod u+w "$regblob"
printf X | dd of="$regblob" bs=1 seek=20 count=1 conv=notrunc status=none
corrupt etc/one
expect_exit 0 "cairn fsck --repair" cairn fsck --repair
grep -q "^not rebuilt from $REGISTRY/app (layer sha256:$layer, blob $digest): .*digest mismatch" \
  "$T/stdout" || fail "the blob that does not verify is not said: $(cat "$T/stdout")"
grep -q "^repaired: removed blob [0-9a-f]*, which no kept layer or registry rebuilds: etc/one" "$T/stdout" &&
  grep -qx "removed layer sha256:$layer" "$T/stdout" || fail "the repair did not remove: $(cat "$T/stdout")"
[ "$(cairn images --json | jq length)" = 0 ] || fail "images left: $(cairn images)"
ok "a registry's blob that does not verify rebuilds nothing; the repair removes, naming it"

# ---- the registry stopped: nothing rebuilds it; the repair removes and names
cp "$T/regblob" "$regblob"
cairn pull -q --insecure "docker://$REGISTRY/app:1" >/dev/null
rm -f "$STORE"/compressed/*
registry_stop
image=$(cairn images -q --no-trunc "$REGISTRY/app:1")
corrupt etc/one
expect_exit 0 "cairn fsck --repair --retries 1" cairn fsck --repair --retries 1
grep -q "^not rebuilt from $REGISTRY/app (layer sha256:$layer, blob sha256:$hex64): ." "$T/stdout" ||
  fail "the failed fetch is not said: $(cat "$T/stdout")"
grep -q "^repaired: removed blob [0-9a-f]*, which no kept layer or registry rebuilds: etc/one in layer sha256:${layer:0:12}; image ${image:0:12} ($REGISTRY/app:1)$" \
  "$T/stdout" && grep -qx "removed image ${image:0:12} ($REGISTRY/app:1)" "$T/stdout" &&
  grep -qx "removed layer sha256:$layer" "$T/stdout" || fail "the repair did not name what it removed: $(cat "$T/stdout")"
[ "$(cairn images --json | jq length)" = 0 ] || fail "images left: $(cairn images)"
expect_exit 0 "cairn fsck" cairn fsck
ok "the registry stopped: the repair removes the image, naming it, its layer and the file"

# ---- an HTTPS registry: the repair verifies it with the CAs of --cert-dir, as the pull did
registry_start "$T/reg-tls" "" tls
BG_PIDS+=("$REGISTRY_PID")
mkdir "$T/certs" && cp "$T/reg-tls/certs/ca.crt" "$T/certs/test-ca.crt"
cairn import app:1 "$T/layer.tar" >/dev/null
cairn push -q --cert-dir "$T/certs" app:1 "docker://$REGISTRY/app:1" >/dev/null
cairn rm app:1 >/dev/null
cairn pull -q --cert-dir "$T/certs" "docker://$REGISTRY/app:1" >/dev/null
rm -f "$STORE"/compressed/*
corrupt etc/one
expect_exit 3 "a --cert-dir that does not exist is exit 3" cairn fsck --repair --cert-dir "$T/nope"
grep -qx "cairn: fsck: --cert-dir $T/nope: No such file or directory" "$T/stderr" ||
  fail "the error does not name it: $(cat "$T/stderr")"
has_image "$REGISTRY/app:1" || fail "a bad --cert-dir removed the image: $(cairn images)"
expect_exit 0 "cairn fsck --repair --cert-dir" cairn fsck --repair --cert-dir "$T/certs"
grep -qx "repaired: layer sha256:$layer from $REGISTRY/app: rebuilt blob [0-9a-f]* (etc/one) from its blob sha256:$hex64" \
  "$T/stdout" || fail "no rebuild from the HTTPS registry: $(cat "$T/stdout")"
[ "$(cairn export "$REGISTRY/app:1" | tar -xO etc/one)" = "the first file" ] || fail "the rebuilt file"
expect_exit 0 "cairn fsck" cairn fsck
ok "an HTTPS registry: the repair fetches the layer with the CAs of --cert-dir"
