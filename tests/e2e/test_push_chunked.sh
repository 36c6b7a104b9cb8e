#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_push_chunked.sh — `cairn push --format zstd:chunked|estargz` writes
# lazily-pullable layers (doc/lazy-pulls.md),
# pushed to Debian's docker-registry on 127.0.0.1:
#   zstd:chunked: the manifest carries the annotations podman 4.3 reads, the
#   blob decompresses to the layer's exact tar, every file's data starts a
#   frame of its own (a 9 MB file in 4 MiB chunks, each checked); cairn
#   pulls it back with the same image id, and a second image sharing all but
#   two files is pulled partially (cairn's TOC parser and partial pull);
#   podman 4.3, its partial pulls on (enable_partial_images, overlay),
#   pulls it through its differ with the same image id and runs a command;
#   eStargz: the reference (containerd's estargz package, through
#   tests/helpers/estargz_ref) verifies every chunk of the blob against the
#   toc.digest annotation; cairn's parser reads its TOC (a lazy pull's
#   route); a pull back gives the id of the config pushed (its diff_ids
#   include the TOC), the same files plus stargz.index.json;
#   A's pushes carry an access list (cairn mount --record-access: ranks in
#   the TOC, "cairn.prefetch", which podman and the reference ignore; in
#   eStargz also the listed files first, then .prefetch.landmark).
#   a bad --format is a usage error.
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib registry
pull_test_init

# ---- two trees: programs to run (real binaries and their libraries),
# 30 data files, a 9 MB file, links, an empty file; B changes two files.
setup python3 - "$T" <<'PY'
import os, random, sys
t = sys.argv[1]
rnd = random.Random(17)
for name in ("a", "b"):
    os.makedirs(f"{t}/{name}/data", exist_ok=True)
for i in range(30):
    data = rnd.randbytes(rnd.choice((100, 3000, 20000, 70000)))
    for name in ("a", "b"):
        d = data if not (name == "b" and i in (4, 11)) else rnd.randbytes(len(data))
        open(f"{t}/{name}/data/f{i:02d}", "wb").write(d)
big = rnd.randbytes(9 * 1000 * 1000)
for name in ("a", "b"):
    open(f"{t}/{name}/data/big", "wb").write(big)
    os.symlink("f01", f"{t}/{name}/data/link")
    os.link(f"{t}/{name}/data/f02", f"{t}/{name}/data/hard")
    open(f"{t}/{name}/empty", "wb").close()
    open(f"{t}/{name}/data/hello", "w").write("hello from cairn\n")
PY
for n in a b; do
  mkdir -p "$T/$n"/{etc,proc,dev,sys,tmp,run,var/tmp}
  for prog in /bin/sh /usr/bin/cat; do
    real=$(readlink -f "$prog")
    mkdir -p "$T/$n$(dirname "$prog")"
    cp "$real" "$T/$n$prog"
    for lib in $(ldd "$real" | grep -o '/[^ ]*'); do
      mkdir -p "$T/$n$(dirname "$lib")"
      cp -L "$lib" "$T/$n$lib"
    done
  done
  echo 'root:x:0:0:root:/root:/bin/sh' >"$T/$n/etc/passwd"
  setup tar -C "$T/$n" --sort=name --numeric-owner -cf "$T/$n.tar" .
done
ida=$(cairn import -q chk/a:1 "$T/a.tar")
idb=$(cairn import -q chk/b:1 "$T/b.tar")
setup registry_start "$T/reg"
R=$REGISTRY
# A's access list: its pushes rank two files in their TOCs
setup mkdir "$T/m"
setup cairn mount -q --record-access chk/a:1 "$T/m"
on_exit "cairn umount -q '$T/m' 2>/dev/null || true"
setup cat "$T/m/data/big" "$T/m/data/hello" >/dev/null
setup cairn umount -q "$T/m"
check "A has an access list of 2 files" wait_for 10 eval \
  '[ "$(cairn inspect -f "{{json .AccessList}}" chk/a:1)" = "{\"Files\":2}" ]'
manifest() {
  curl -sf -H 'Accept: application/vnd.oci.image.manifest.v1+json' "http://$R/v2/$1/manifests/1"
}

# ---- usage
expect_exit 2 "a bad --format is a usage error" \
  cairn push --format zstd chk/a:1 "docker://$R/x:1"
check "  said in one line" grep -q '^cairn: push: --format: needs zstd:chunked or estargz$' \
  "$T/stderr"
expect_exit 2 "--format with --compress is a usage error" \
  cairn push --format estargz --compress gzip chk/a:1 "docker://$R/x:1"

# ---- zstd:chunked
for n in a b; do
  expect_exit 0 "push --format zstd:chunked ($n)" cairn push --insecure \
    --no-progress --format zstd:chunked "chk/$n:1" "docker://$R/zc/$n:1"
done
ranked() { # the files A's zstd:chunked TOC ranks
  local pos off len
  pos=$(manifest zc/a | jq -r '.layers[0].annotations["io.containers.zstd-chunked.manifest-position"]')
  off=$(cut -d: -f1 <<<"$pos") len=$(cut -d: -f2 <<<"$pos")
  tail -c +$((off + 1)) "$(registry_blob_path "$(manifest zc/a | jq -r '.layers[0].digest')")" |
    head -c "$len" | zstd -dcq | jq -r '.entries[] | select(."cairn.prefetch") | .name'
}
check "zstd:chunked: A's TOC ranks its 2 recorded files" test "$(ranked | wc -l)" = 2
check_json "zstd:chunked: a zstd layer with the annotations podman 4.3 reads" \
  '.layers[0].mediaType == "application/vnd.oci.image.layer.v1.tar+zstd" and
   (.layers[0].annotations["io.containers.zstd-chunked.manifest-position"] | test("^[0-9]+:[0-9]+:[0-9]+:1$")) and
   (.layers[0].annotations["io.containers.zstd-chunked.manifest-checksum"] | test("^sha256:[0-9a-f]{64}$"))' \
  manifest zc/a
digest=$(manifest zc/a | jq -r '.layers[0].digest')
blob=$(registry_blob_path "$digest")
diff_a=$(cairn inspect "$ida" | jq -r '.config.rootfs.diff_ids[0]')
check "zstd:chunked: the blob decompresses to the layer's exact tar (its diff_id)" \
  test "sha256:$(zstd -dcq "$blob" | sha256sum | cut -c1-64)" = "$diff_a"
# Every file's data (each chunk) is a frame of its own: decompressed alone
# from its offset, it is the file's bytes (the chunk's digest).
setup python3 - "$blob" "$(manifest zc/a | jq -r '.layers[0].annotations | tojson')" \
  >"$T/frames.out" 2>&1 <<'PY'
import hashlib, json, subprocess, sys
b = open(sys.argv[1], "rb").read()
ann = json.loads(sys.argv[2])
off, ln, uln, _ = map(int, ann["io.containers.zstd-chunked.manifest-position"].split(":"))
frame = b[off:off + ln]
assert "sha256:" + hashlib.sha256(frame).hexdigest() == ann["io.containers.zstd-chunked.manifest-checksum"]
assert b[off - 8:off - 4] == bytes.fromhex("502a4d18"), "no skippable frame before the TOC"
assert b[-8:] == b"GnUlInUx", "no footer"
toc = json.loads(subprocess.run(["zstd", "-dcq"], input=frame, capture_output=True, check=True).stdout)
assert toc["version"] == 1
es = toc["entries"]
pieces, files = 0, 0
for i, e in enumerate(es):
    if e["type"] not in ("reg", "chunk") or "offset" not in e:
        continue
    end = next((x["offset"] for x in es[i + 1:] if x["type"] == "chunk" and x["name"] == e["name"]), None)
    reg = e if e["type"] == "reg" else next(x for x in es if x["type"] == "reg" and x["name"] == e["name"])
    end = end or reg["endOffset"]
    data = subprocess.run(["zstd", "-dcq"], input=b[e["offset"]:end], capture_output=True, check=True).stdout
    want = e.get("chunkDigest") or reg["digest"]
    assert "sha256:" + hashlib.sha256(data).hexdigest() == want, e["name"]
    pieces += 1
    files += e["type"] == "reg"
big = [e for e in es if e["name"].endswith("data/big")]
assert len(big) == 3 and big[1]["type"] == "chunk", big
kinds = {e["type"] for e in es}
assert {"reg", "chunk", "dir", "symlink", "hardlink"} <= kinds, kinds
print(f"ok {files} files in {pieces} frames")
PY
check "zstd:chunked: each file's data (each 4 MiB chunk) alone decompresses to its digest: $(tail -1 "$T/frames.out")" \
  grep -q '^ok' "$T/frames.out"

# cairn pulls A back (same id), then B partially: its TOC read by cairn's
# parser, only the two changed files fetched.
expect_exit 0 "zstd:chunked: cairn pull of A" \
  cairn --store "$T/back" pull -q --insecure "docker://$R/zc/a:1"
check "zstd:chunked: A pulled back has the image id pushed ($ida)" \
  test "$(tail -1 "$T/stdout")" = "$ida"
expect_exit 0 "zstd:chunked: cairn pull of B with A stored" \
  cairn --store "$T/back" pull --insecure "docker://$R/zc/b:1"
sed "s/^/# /" "$T/stderr" >&2
check "zstd:chunked: B is pulled partially (said, with the bytes fetched)" \
  grep -Eq 'partial pull: fetched [0-9]+ of [0-9]+ bytes in [0-9]+ requests' "$T/stderr"
stored=$(grep -Eo '\([0-9]+ of [0-9]+ files were stored' "$T/stderr" | grep -Eo '[0-9]+' | tr '\n' ' ')
read -r s_have s_all <<<"$stored"
check "zstd:chunked: $s_have of $s_all files were stored: all but the 2 changed" \
  test "$((s_all - s_have))" = 2
check "zstd:chunked: no fallback to the full pull" sh -c "! grep -q 'pulling it in full' '$T/stderr'"
check "zstd:chunked: B pulled back has the image id pushed ($idb)" \
  test "$(tail -1 "$T/stdout")" = "$idb"
expect_exit 0 "zstd:chunked: fsck after the pulls" cairn --store "$T/back" fsck

# podman 4.3, partial pulls on: its differ reads the TOC (the debug log
# says so), the image id is the pushed one, a command runs in it.
if command -v podman >/dev/null; then
  cat >"$T/storage.conf" <<EOF
[storage]
driver = "overlay"
graphroot = "$T/podman-root"
runroot = "$T/podman-runroot"
[storage.options]
pull_options = {enable_partial_images = "true", use_hard_links = "false"}
EOF
  export CONTAINERS_STORAGE_CONF=$T/storage.conf
  podman_cmd() {
    timeout 120 "${PRIVATE_NS[@]}" sh -c '
      umount /sys/fs/cgroup/unified 2>/dev/null
      exec podman --cgroup-manager=cgroupfs "$@"' sh "$@" </dev/null
  }
  podman_cleanup() {
    podman_cmd rmi -af >/dev/null 2>&1 || true
    awk -v t="$T/podman" 'index($5, t) == 1 { print $5 }' /proc/self/mountinfo | tac |
      while read -r m; do umount -l "$m" 2>/dev/null || true; done
  }
  on_exit podman_cleanup
  expect_exit 0 "podman 4.3 pulls the zstd:chunked image" \
    podman_cmd --log-level debug pull --tls-verify=false "docker://$R/zc/a:1"
  check "podman: through its partial pull (\"Retrieved partial blob\")" \
    grep -q 'Retrieved partial blob' "$T/stderr"
  check "podman: the image id pushed ($ida)" \
    sh -c "podman_id=\$(CONTAINERS_STORAGE_CONF='$T/storage.conf' podman images -q --no-trunc '$R/zc/a:1'); test \"\$podman_id\" = sha256:$ida"
  expect_exit 0 "podman: runs a command in it" \
    podman_cmd run --rm --cgroups=disabled --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 \
    --network=none "$R/zc/a:1" /bin/sh -c 'cat /data/hello /data/big'
  check "podman: the files are the image's" \
    sh -c "cat '$T/a/data/hello' '$T/a/data/big' | cmp -s - '$T/stdout'"
  podman_cleanup
else
  fail "podman is not installed (scripts/setup.sh installs it)"
fi

# ---- eStargz
expect_exit 0 "push --format estargz" cairn push --insecure --no-progress \
  --format estargz chk/a:1 "docker://$R/sg/a:1"
new_id=$(manifest sg/a | jq -r '.config.digest')
check "eStargz: the new image id is said" grep -q "the image pushed is ${new_id:7:12}" "$T/stderr"
check_json "eStargz: a gzip layer with the toc.digest annotation" \
  '.layers[0].mediaType == "application/vnd.oci.image.layer.v1.tar+gzip" and
   (.layers[0].annotations["containerd.io/snapshot/stargz/toc.digest"] | test("^sha256:[0-9a-f]{64}$"))' \
  manifest sg/a
sgblob=$(registry_blob_path "$(manifest sg/a | jq -r '.layers[0].digest')")
tocd=$(manifest sg/a | jq -r '.layers[0].annotations["containerd.io/snapshot/stargz/toc.digest"]')
if command -v go >/dev/null && [ -d /usr/share/gocode/src/github.com/containerd/stargz-snapshotter ]; then
  ref=$T/estargz_ref
  if (cd "$CAIRN_SRC/tests/helpers/estargz_ref" && GO111MODULE=off GOPATH=/usr/share/gocode \
    GOCACHE=$T/gocache go build -o "$ref" main.go) >"$T/go.log" 2>&1; then
    out=$("$ref" verify "$sgblob" "$tocd" 2>&1)
    check "eStargz: the reference verifies the blob (every chunk, the TOC digest): $out" \
      test "${out%% *}" = ok
  else
    fail "building the reference helper: $(tail -5 "$T/go.log")"
  fi
else
  fail "golang-go or golang-github-containerd-stargz-snapshotter-dev missing (scripts/setup.sh)"
fi
# cairn's own eStargz TOC parser: a pull --lazy (or a partial pull) would
# read the footer and the TOC the way the unit tests do: the TOC the
# footer points to is stargz.index.json, its digest the annotation's.
off=$((16#$(tail -c 51 "$sgblob" | dd bs=1 skip=16 count=16 2>/dev/null)))
check "eStargz: the footer points to the TOC entry, whose JSON has the annotation's digest" \
  test "sha256:$(tail -c +$((off + 1)) "$sgblob" | head -c -51 | gzip -dc |
    tar -xOf - stargz.index.json | sha256sum | cut -c1-64)" = "$tocd"
expect_exit 0 "eStargz: cairn pull of it" \
  cairn --store "$T/sgback" pull -q --insecure "docker://$R/sg/a:1"
check "eStargz: the id pulled is the config pushed (${new_id:7:12})" \
  test "sha256:$(tail -1 "$T/stdout")" = "$new_id"
cairn export -q "$ida" | tar -tvf - | sort >"$T/a.files"
cairn --store "$T/sgback" export -q "${new_id#sha256:}" | tar -tvf - |
  grep -v ' stargz.index.json$' | grep -v ' .prefetch.landmark$' | sort >"$T/sg.files"
check "eStargz: the same files (and stargz.index.json, .prefetch.landmark)" \
  cmp -s "$T/a.files" "$T/sg.files"
finish
