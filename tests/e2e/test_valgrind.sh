#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_valgrind.sh — the pull (oci: found and missing ref, an index,
# docker-archive:, docker:// from a real registry, a corrupt blob) and every
# unit test under valgrind's memcheck: no invalid read, write or free, no
# use of uninitialised memory, no definite leak. Reads of uninitialised
# memory are what ASan does not see. Runs in the release build only (a
# sanitizer build cannot run under valgrind): skipped when CAIRN_SANITIZE.
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib registry
pull_test_init
release_build_only "a sanitizer build does not run under valgrind"

# vg_expect CODE NAME CMD...: CMD, under memcheck (children too: Criterion
# forks each test; not the system's programs a test runs, such as tar and
# python3 making test layers; logs in $T/vg/NAME/), exits CODE and valgrind reports
# nothing (it would exit 99; a forked test's report shows only in its log).
vg_expect() {
  local want=$1 n=$2 logs=$T/vg/${2//[^A-Za-z0-9_-]/_} got f bad=
  shift 2
  mkdir -p "$logs"
  valgrind --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite \
    --show-leak-kinds=definite --trace-children=yes --trace-children-skip='/usr/*,/bin/*' \
    --log-file="$logs/%p.log" \
    "$@" >"$logs/stdout" 2>"$logs/stderr"
  got=$?
  for f in "$logs"/*.log; do
    grep -qE "ERROR SUMMARY: [1-9]" "$f" && bad+=$(grep -vE "^==[0-9]+== *($|Memcheck|Copyright|Using Valgrind|Command|Parent PID)" "$f" | head -40)$'\n'
  done
  if [ -n "$bad" ]; then
    fail "$n: valgrind reports (exit $got)"
    echo "$bad"
  elif [ "$got" = "$want" ]; then
    ok "$n"
  else
    fail "$n (exit $got, want $want: $(head -c 300 "$logs/stderr"))"
  fi
}

setup $OCI_IMAGE layer base.tar base 20 4000
setup $OCI_IMAGE layer top.tar top 3 500
setup $OCI_IMAGE add oci app linux/amd64 base.tar:gzip top.tar:zstd >/dev/null
amd=$($OCI_IMAGE add oci m-amd linux/amd64 base.tar:raw top.tar:gzip)
arm=$($OCI_IMAGE add oci m-arm linux/arm64/v8 top.tar:gzip)
setup $OCI_IMAGE index oci multi "$amd" "$arm" >/dev/null
setup $OCI_IMAGE docker-archive "$T/app.docker.tar" saved/app:7 base.tar top.tar

# oci: with a ref the layout lacks freed an uninitialised descriptor.
vg_expect 3 "oci: missing ref" cairn pull "oci:$T/oci:nope"
vg_expect 3 "oci: no layout" cairn pull "oci:$T/none:app"
vg_expect 0 "oci: pull" cairn pull "oci:$T/oci:app"
vg_expect 0 "oci: index, another platform" cairn pull --platform linux/arm64 \
  "oci:$T/oci:multi" multi:1
vg_expect 0 "docker-archive: pull" cairn --store "$T/st-archive" pull "docker-archive:$T/app.docker.tar"
vg_expect 3 "docker-archive: missing file" cairn pull "docker-archive:$T/none.tar"

# A layer blob whose bytes do not match its digest: refused (exit 5).
setup cp -r "$T/oci" "$T/bad"
layer=$(jq -r '.layers[0].digest' "$T/bad/blobs/sha256/$(jq -r \
  '.manifests[] | select(.annotations["org.opencontainers.image.ref.name"] == "app") | .digest' \
  "$T/bad/index.json" | cut -c8-)" | cut -c8-)
setup chmod u+w "$T/bad/blobs/sha256/$layer"
printf 'x' | dd of="$T/bad/blobs/sha256/$layer" bs=1 seek=100 conv=notrunc status=none
vg_expect 5 "oci: corrupt layer" cairn --store "$T/st-bad" pull "oci:$T/bad:app"

setup registry_start "$T/reg"
setup registry_push "$T/oci" app team/app:1
vg_expect 0 "docker:// pull" cairn --store "$T/st-reg" pull --insecure "docker://$REGISTRY/team/app:1"
vg_expect 3 "docker:// missing tag" cairn --store "$T/st-reg" pull --insecure \
  "docker://$REGISTRY/team/app:nope"
registry_stop

# Every unit test (Criterion runs each in a child process), nproc at a
# time; each writes its ok / not ok line to its own file.
units=()
for t in "$CAIRN_BIN"/test_*; do
  [ -x "$t" ] || continue
  units+=("$t")
  (vg_expect 0 "unit $(basename "$t")" "$t" --jobs 1 >"$T/vg-$(basename "$t").out") &
  while [ "$(jobs -rp | wc -l)" -ge "$(nproc)" ]; do wait -n; done
done
wait
for t in "${units[@]}"; do
  cat "$T/vg-$(basename "$t").out"
  if grep -q "^ok - " "$T/vg-$(basename "$t").out"; then PASSED=$((PASSED + 1)); else FAILED=$((FAILED + 1)); fi
done
[ "${#units[@]}" -gt 0 ] || fail "no unit test executables in $CAIRN_BIN"
finish
