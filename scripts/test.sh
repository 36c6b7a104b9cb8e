#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test.sh — sets up (scripts/setup.sh) and runs every test twice: in the
# release build and under AddressSanitizer + UndefinedBehaviorSanitizer.
# First it checks libcairn's layering (scripts/check-layers.sh), that the
# documentation has no dead link (scripts/check-links.sh), that no file is
# created through a name another user could plant (scripts/check-open.sh)
# that each folder's CMakeLists.txt names its source and test files, and that
# doc/hacking.md's generated tables match the sources, that the commit
# messages keep their shape (scripts/check-commit-msg.sh), then that the builds
# packagers make (Release with gcc and with clang, Debian's dpkg-buildflags
# with all hardening and without the tests or Criterion) have no warning;
# after the tests, runs the fuzz targets for a short slice each.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
status=0
echo "== layers: scripts/check-layers.sh"
# Its objects, kept for test_layers.sh's runs of it on copies of the tree.
export CHECK_LAYERS_CACHE=$PWD/build/check-layers-objects
bash scripts/check-layers.sh || status=1
echo "== links: scripts/check-links.sh (README.md, doc/*.md, the man pages)"
bash scripts/check-links.sh || status=1
echo "== licence: every source file names its licence (SPDX)"
unlicensed=$(git ls-files '*.c' '*.h' '*.sh' '*.py' '*.bash' 'CMakeLists.txt' '*/CMakeLists.txt' 2>/dev/null |
  xargs -r grep -L 'SPDX-License-Identifier: Apache-2.0' || true)
if [ -n "$unlicensed" ]; then
  echo "no SPDX-License-Identifier line: $unlicensed"
  status=1
fi
echo "== creates: scripts/check-open.sh"
bash scripts/check-open.sh || status=1
# Each folder's CMakeLists.txt lists its files by hand: a test file it does
# not name would never run, a source file it does not name would not be built.
echo "== sources: every C source and test is named in its folder's CMakeLists.txt"
bash scripts/check-cmake.sh || status=1
echo "== doc tables: scripts/check-doc-tables.sh (doc/hacking.md, README.md)"
bash scripts/check-doc-tables.sh || status=1
# Commit messages since the rule was made (015ea5f): "area: what changed"
# in at most 72 characters, a body, merges that say what they bring.
echo "== history: scripts/check-commit-msg.sh (the commits after 015ea5f)"
if git cat-file -e 015ea5f^{commit} 2>/dev/null; then
  bash scripts/check-commit-msg.sh --range 015ea5f..HEAD || status=1
else
  echo "skipped: 015ea5f is not in this clone's history"
fi

# warning_free_build DIR CC BUILD_TYPE CFLAGS LDFLAGS [CMAKE_ARG...]: builds
# with -Werror.
warning_free_build() {
  echo "== build: $1 (CC=$2, $3${6:+, ${*:6}})"
  if ! CC=$2 CFLAGS=$4 LDFLAGS=$5 cmake -S . -B "$1" -DCMAKE_BUILD_TYPE="$3" -DCAIRN_WERROR=ON \
    "${@:6}" >/dev/null; then
    echo "configuring $1 failed"
    status=1
  elif ! cmake --build "$1" -j"$(nproc)" >"$1/build.log" 2>&1; then
    grep -E "error|warning" "$1/build.log" || tail -20 "$1/build.log"
    echo "build $1 failed (full log: $1/build.log)"
    status=1
  fi
}
warning_free_build build-release-gcc gcc Release "" ""
warning_free_build build-release-clang clang Release "" ""
# As debhelper does: CPPFLAGS go with CFLAGS, build type None; and as a
# package's product build does, from a clean tree without the tests
# (CAIRN_TESTS=OFF), with Criterion hidden from pkg-config (PKG_CONFIG_LIBDIR
# names a copy of its search path without criterion.pc): the product must
# not need it, and the tree must hold the four programs (cairn-snapshotter:
# setup.sh installs gRPC and protobuf-c) and no test one.
pcdir=$(mktemp -d /tmp/cairn-pc.XXXXXX)
for d in $(pkg-config --variable pc_path pkg-config | tr : ' '); do
  cp -sn "$d"/*.pc "$pcdir"/ 2>/dev/null || true
done
rm -f "$pcdir/criterion.pc"
rm -rf build-dpkg
export DEB_BUILD_MAINT_OPTIONS=hardening=+all PKG_CONFIG_LIBDIR=$pcdir
warning_free_build build-dpkg gcc None "$(dpkg-buildflags --get CFLAGS) $(dpkg-buildflags --get CPPFLAGS)" \
  "$(dpkg-buildflags --get LDFLAGS)" -DCAIRN_TESTS=OFF
unset DEB_BUILD_MAINT_OPTIONS PKG_CONFIG_LIBDIR
rm -rf "$pcdir"
programs=$(find build-dpkg -maxdepth 1 -type f \( -perm -u+x -o -name '*.so' \) -printf '%f\n' | sort |
  tr '\n' ' ')
if [ "$programs" != "cairn cairn-pin cairn-snapshotter cairnfs " ]; then
  echo "build-dpkg (CAIRN_TESTS=OFF) has: $programs(expected" \
    "cairn cairn-pin cairn-snapshotter cairnfs only)"
  status=1
fi

# Two tests at a time (one per CPU): most wait on daemons, registries and
# containers more than they compute. tests/CMakeLists.txt marks those that must
# run alone (RUN_SERIAL) or one at a time (RESOURCE_LOCK), and what the
# crash-point sweep takes (PROCESSORS); COST starts the long ones first.
for b in build build-asan; do
  echo "== tests: $b"
  ctest --test-dir "$b" -j"$(nproc)" --output-on-failure --timeout 1200 --repeat until-pass:2 \
    --output-log "$b/ctest.log" || status=1
done
# Criterion runs each test in a child whose sanitizer report does not fail
# the test: any report in the full log fails the run.
if grep -nE "ERROR: (Leak|Address)Sanitizer|runtime error:" build-asan/ctest.log; then
  echo "sanitizer reports above (full log: build-asan/ctest.log)"
  status=1
fi
echo "== fuzz: every target of tests/fuzz, 20 s each"
bash scripts/fuzz.sh 20 || status=1
# Last, where a reader of the run's tail sees them, the checks that failed
# (a test stops at its first: tests/lib/test-lib.sh), with the test and
# the build: those of a test that failed twice failed the run; a test
# that passed when run again (--repeat until-pass:2) did not, and its
# failed check is still shown, for whoever mends the test or the race.
failed=$(for b in build build-asan; do
  [ -f "$b/ctest.log" ] || continue
  awk -v b="$b" '/^ *([0-9]+\/[0-9]+ )?Test +#[0-9]+: / {
      for (i = 1; i < NF; i++) if ($i ~ /^#/) t = $(i + 1) }
    /^not ok - / { print b ": " t ": " substr($0, 1, 300) }' "$b/ctest.log"
done)
if [ -n "$failed" ]; then
  echo "== checks that failed (runs of the tests above; a test that passed on its second run did not fail this)"
  echo "$failed"
fi
exit $status
