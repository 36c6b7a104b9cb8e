#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_estargz_interop.sh — the eStargz the tests write is eStargz as the
# reference reads it: a helper built from containerd's estargz package
# (Debian's golang-github-containerd-stargz-snapshotter-dev, with
# golang-go; tests/helpers/estargz_ref/main.go) opens blobs written by
# tests/helpers/estargz_gen.py (prefetch landmark, chunks), checks their TOC
# digest and reads every file back against its digest; and the fixtures
# test_toc.c parses (tests/fuzz/corpus/toc_estargz/) pass the same check,
# the one the reference itself wrote included. Skips (77) without Go or
# the package.
source "$(dirname "$0")/../lib/test-lib.sh"
if ! command -v go >/dev/null || [ ! -d /usr/share/gocode/src/github.com/containerd/stargz-snapshotter ]; then
  echo "skip: golang-go or golang-github-containerd-stargz-snapshotter-dev missing"
  exit 77
fi

ref=$T/estargz_ref
(cd "$CAIRN_SRC/tests/helpers/estargz_ref" && GO111MODULE=off GOPATH=/usr/share/gocode \
  GOCACHE=$T/gocache go build -o "$ref" main.go) >"$T/go.log" 2>&1 ||
  { fail "building the reference helper: $(tail -5 "$T/go.log")"; finish; exit 1; }

# A tree with what the generator's options exercise.
mkdir -p "$T/t/etc" "$T/t/usr/bin" "$T/t/d"
echo hello >"$T/t/etc/hostname"
for i in 1 2 3; do echo "$i" >"$T/t/d/f$i"; done
head -c 300000 /dev/urandom >"$T/t/usr/bin/big"
ln -s ../etc/hostname "$T/t/usr/bin/link"
ln "$T/t/etc/hostname" "$T/t/d/hard"
gen() { python3 "$CAIRN_SRC/tests/helpers/estargz_gen.py" "$@" | jq -r .toc_digest; }

# (--inner, eStargz's "innerOffset", came after 0.12, the version Debian
# packages: its reader refuses two files at one offset. The unit tests
# check those blobs chunk by chunk; here only that they are gzip tars.)
for opts in "--chunk-size 65536 --prefetch etc/hostname" "--no-prefetch" "" "--inner"; do
  # shellcheck disable=SC2086 # the options are words
  d=$(gen "$T/blob.gz" "$T/t" $opts)
  check "the blob ($opts) is a gzip tar (gunzip | tar t)" \
    sh -c "gzip -dc '$T/blob.gz' | tar -t >/dev/null"
  [[ $opts == --inner ]] && continue
  out=$("$ref" verify "$T/blob.gz" "$d" 2>&1)
  check "the reference reads estargz_gen.py's blob ($opts): $out" test "${out%% *}" = ok
done

# The committed fixtures: each verified against the digest of its TOC JSON.
for f in "$CAIRN_SRC"/tests/fuzz/corpus/toc_estargz/*.gz; do
  [[ $f == *inner* ]] && continue
  off=$((16#$(tail -c 51 "$f" | dd bs=1 skip=16 count=16 2>/dev/null)))
  d=sha256:$(tail -c +$((off + 1)) "$f" | head -c -51 | gzip -dc | tar -xOf - stargz.index.json |
    sha256sum | cut -c1-64)
  out=$("$ref" verify "$f" "$d" 2>&1)
  check "the reference reads ${f##*/}: $out" test "${out%% *}" = ok
done
finish
