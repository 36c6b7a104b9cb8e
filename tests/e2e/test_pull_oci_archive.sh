#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_pull_oci_archive.sh — cairn pull oci-archive:FILE[:REF]: an archive
# skopeo wrote gives the image id of its source and podman's name (the
# entry's ref.name annotation); a tar of a layout holding two images
# ("./"-prefixed names) needs REF and gives the one it names; the private
# copy in STORE/tmp is gone after the pull; an archive whose entries are
# a symlink named blobs, ../ names and absolute names writes nothing
# outside its private directory (and is refused: no index.json).
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib registry
pull_test_init
setup $OCI_IMAGE layer base.tar base 20 4000
setup $OCI_IMAGE layer top.tar top 3 500
setup $OCI_IMAGE add oci gz linux/amd64 base.tar:gzip top.tar:gzip >/dev/null
setup $OCI_IMAGE add oci raw linux/amd64 base.tar:raw >/dev/null
gz_id=$($OCI_IMAGE config-digest oci gz)
raw_id=$($OCI_IMAGE config-digest oci raw)
setup skopeo copy -q "oci:$T/oci:gz" "oci-archive:$T/app.tar:app:1"

expect_exit 0 "pull oci-archive:FILE" cairn pull -q "oci-archive:$T/app.tar"
[[ $(cat "$T/stdout") == "$gz_id" ]] && ok "same image id as the source" ||
  fail "pulled $(cat "$T/stdout"), want $gz_id"
cairn images --json | jq -e --arg id "$gz_id" \
  '.[] | select(.id == $id) | .names | index("localhost/app:1")' >/dev/null &&
  ok "named after the entry's ref.name, as podman" ||
  fail "names: $(cairn images --json)"
[[ -z $(find "$ST/tmp" -name 'oci-archive-*') ]] && ok "the unpacked copy is removed" ||
  fail "left in STORE/tmp: $(ls "$ST/tmp")"

tar -C "$T/oci" -cf "$T/two.tar" .
expect_exit 2 "two images and no REF" cairn pull "oci-archive:$T/two.tar"
grep -q "holds 2 images" "$T/stderr" || fail "no REF: $(cat "$T/stderr")"
expect_exit 0 "pull oci-archive:FILE:REF" cairn pull -q "oci-archive:$T/two.tar:raw"
[[ $(cat "$T/stdout") == "$raw_id" ]] && ok "REF picks its image" || fail "REF gave $(cat "$T/stdout")"
expect_exit 3 "a missing archive" cairn pull "oci-archive:$T/none.tar"

mkdir "$T/outside"
python3 - "$T/evil.tar" "$T" <<'PY'
import io, sys, tarfile
with tarfile.open(sys.argv[1], "w") as t:
    def reg(name, data=b"x"):
        i = tarfile.TarInfo(name); i.size = len(data); t.addfile(i, io.BytesIO(data))
    l = tarfile.TarInfo("blobs"); l.type = tarfile.SYMTYPE; l.linkname = sys.argv[2] + "/outside"
    t.addfile(l)
    reg("blobs/sha256/" + "a" * 64)
    reg("../evil")
    reg(sys.argv[2] + "/outside/abs")
    reg("oci-layout")
PY
expect_exit 3 "an archive with no index.json" cairn pull "oci-archive:$T/evil.tar"
[[ -z $(ls -A "$T/outside") && ! -e $T/evil && ! -e $ST/evil ]] &&
  ok "nothing written outside the private directory" || fail "written: $(ls -A "$T/outside")"
[[ -z $(find "$ST/tmp" -name 'oci-archive-*') ]] || fail "a failed pull left its copy"
finish
