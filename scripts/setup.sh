#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# setup.sh — installs the Debian packages cairn builds and tests with, and
# builds it (release in build/, ASan+UBSan in build-asan/), warnings as
# errors (CAIRN_WERROR). Idempotent.
# Run as root on Debian 12.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES="build-essential cmake pkg-config libfuse3-dev fuse3 libsqlite3-dev libxxhash-dev libcriterion-dev libarchive-dev libssl-dev libcurl4-openssl-dev libjansson-dev zlib1g-dev libzstd-dev zstd gzip tar python3 sqlite3 jq util-linux procps psmisc curl docker-registry skopeo crun runc podman fuse-overlayfs hyperfine debootstrap time openssl clang lld libclang-rt-14-dev dpkg-dev valgrind strace scdoc man-db bsdextrautils bash-completion autoconf automake libfaketime golang-go golang-github-containerd-stargz-snapshotter-dev libgrpc-dev libprotobuf-c-dev protobuf-c-compiler golang-github-containerd-containerd-dev containerd containernetworking-plugins iproute2 python3-grpcio python3-protobuf protobuf-compiler"

missing=""
for p in $PACKAGES; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "setup: installing:$missing"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # shellcheck disable=SC2086
  apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi
# The docker-registry package may start its own daemon (auth, all
# addresses); the tests start their own on 127.0.0.1.
if command -v service >/dev/null 2>&1; then service docker-registry stop >/dev/null 2>&1 || true; fi
pkill -x docker-registry 2>/dev/null || true
# So may containerd's (a system containerd on /run/containerd): the tests
# start their own, with a private config and socket.
if command -v service >/dev/null 2>&1; then service containerd stop >/dev/null 2>&1 || true; fi
# A real Debian package for test_rw_dpkg.sh (dpkg -i in a container, no
# network in the tests): fetched once into the tests' cache.
debs=${CAIRN_TEST_CACHE:-/var/cache/cairn-test}/debs
if ! compgen -G "$debs/hello_*_amd64.deb" >/dev/null; then
  mkdir -p "$debs"
  (cd "$debs" && apt-get download -qq hello >/dev/null 2>&1) || echo "setup: apt-get download hello failed (test_rw_dpkg.sh then installs only the package it builds)"
fi
# fuse.conf: let root mounts be seen by other users (crun, tests).
grep -q '^user_allow_other' /etc/fuse.conf 2>/dev/null || echo user_allow_other >> /etc/fuse.conf

jobs=$(nproc)
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCAIRN_WERROR=ON >/dev/null
cmake --build build -j"$jobs"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DCAIRN_SANITIZE=ON -DCAIRN_WERROR=ON >/dev/null
cmake --build build-asan -j"$jobs"
echo "setup: built build/ and build-asan/"
