#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_cli_import.sh — what cairn import takes: a layer from the standard
# input ("-", as tar), and layers compressed with xz and bzip2 besides gzip
# and zstd, found from their bytes whatever the file is called; the same
# layer gives the same image however it came; the config says the host's
# architecture and takes podman import's --change, so that a bundle of the
# image runs (crun) without a command.
source "$(dirname "$0")/../lib/test-lib.sh"

mkdir -p "$T/l/etc" && echo "hello" >"$T/l/etc/greeting" && mktar "$T/l" "$T/l.tar"
expect_exit 0 "import a plain tar" cairn import plain:1 "$T/l.tar"
id=$(cat "$T/stdout")
expect_exit 0 "import - reads the standard input" sh -c "cairn import stdin:1 - <'$T/l.tar'"
check "the same image" [ "$(cat "$T/stdout")" = "$id" ]
for z in xz bzip2 gzip zstd; do
  $z -c "$T/l.tar" >"$T/l.tar.$z"
  expect_exit 0 "import a $z layer" cairn import "$z:1" "$T/l.tar.$z"
  check "the same image ($z)" [ "$(cat "$T/stdout")" = "$id" ]
done
cp "$T/l.tar.xz" "$T/misnamed.tar.gz"
expect_exit 0 "an xz layer named .gz" cairn import misnamed:1 "$T/misnamed.tar.gz"
check "the same image (misnamed)" [ "$(cat "$T/stdout")" = "$id" ]
expect_exit 0 "xz from the standard input" sh -c "cairn import stdinxz:1 - <'$T/l.tar.xz'"
check "the same image (xz on stdin)" [ "$(cat "$T/stdout")" = "$id" ]
check "help says -" sh -c "cairn import --help | grep -q 'reads one from the standard input'"

# The config: the host's architecture, podman's --change.
case $(uname -m) in x86_64) arch=amd64 ;; aarch64) arch=arm64 ;; *) arch=$(uname -m) ;; esac
check "the host's architecture ($arch)" [ "$(cairn inspect -f '{{.Config.architecture}}' plain:1)" = "$arch" ]
expect_exit 0 "import --change" cairn import -q -c 'CMD=["/bin/sh","-c","echo hi"]' \
  --change 'ENV=A=1' --change 'ENV A=2' --change 'WORKDIR=/srv' --change 'USER=0' \
  --change 'LABEL=team=cairn' --change 'EXPOSE=80 53/udp' --change 'ENTRYPOINT=/bin/env' changed:1 "$T/l.tar"
check_json "the changes are in the config" '.config.config == {"Cmd": ["/bin/sh", "-c", "echo hi"],
  "Env": ["A=2"], "WorkingDir": "/srv", "User": "0", "Labels": {"team": "cairn"},
  "ExposedPorts": {"80/tcp": {}, "53/udp": {}}, "Entrypoint": ["/bin/sh", "-c", "/bin/env"]}' \
  cairn inspect changed:1
expect_exit 2 "a change import does not take: exit 2" cairn import -c 'FROM=x' bad:1 "$T/l.tar"
check "says what it takes" grep -q "^cairn: import: --change FROM=x: not an instruction import takes (CMD=" "$T/stderr"
expect_exit 2 "CMD=[ not a JSON array: exit 2" cairn import -c 'CMD=[1,2]' bad:1 "$T/l.tar"
check "no image made" [ -z "$(cairn images -q bad)" ]

# An imported image with CMD runs from its bundle with no command (crun).
if command -v crun >/dev/null; then
  mkdir -p "$T/r/proc" "$T/r/dev" "$T/r/sys" "$T/r/tmp"
  for prog in /bin/sh /usr/bin/env; do
    real=$(readlink -f "$prog")
    mkdir -p "$T/r$(dirname "$prog")" && cp "$real" "$T/r$prog"
    for lib in $(ldd "$real" | grep -o '/[^ ]*'); do mkdir -p "$T/r$(dirname "$lib")" && cp -L "$lib" "$T/r$lib"; done
  done
  mktar "$T/r" "$T/r.tar"
  expect_exit 0 "import a runnable image with --change" cairn import -q -c 'CMD=echo "cmd ran in $PWD as $GREETING"' \
    -c 'ENV=GREETING=hello' -c 'WORKDIR=/tmp' run:1 "$T/r.tar"
  on_exit "umount -l '$T/b/rootfs'"
  expect_exit 0 "bundle with no command" cairn bundle -q run:1 "$T/b"
  timeout 60 "${PRIVATE_NS[@]}" sh -c '
    umount /sys/fs/cgroup/unified 2>/dev/null
    exec crun --cgroup-manager=disabled run --bundle "$1" "$2"' sh "$T/b" "cairn-import-$$" \
    </dev/null >"$T/run.out" 2>"$T/run.err"
  check "crun ran the image's CMD, with its ENV and WORKDIR" grep -qx "cmd ran in /tmp as hello" "$T/run.out"
  expect_exit 0 "bundle --rm" cairn bundle --rm "$T/b"
else
  fail "crun is not installed"
fi

finish
