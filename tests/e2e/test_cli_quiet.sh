#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_cli_quiet.sh — -q prints only the ids, as podman's does, for every
# command that makes something (import, pull, commit's id; push's digest):
# id=$(cairn import -q ...) is the image's id, and nothing goes to stderr;
# --no-progress shows no progress but prints what the command prints.
source "$(dirname "$0")/../lib/test-lib.sh"
two_layers
hex64='^[0-9a-f]{64}$'

# only_id NAME: $T/stdout holds one line, a 64-hex id, and stderr nothing.
only_id() {
  check "$1: one id on stdout" [ "$(wc -l <"$T/stdout")" = 1 ]
  check "$1: it is an id" grep -qE "$hex64" "$T/stdout"
  check "$1: nothing on stderr" [ ! -s "$T/stderr" ]
}

expect_exit 0 "import -q" cairn import -q app:1 "$T/1.tar" "$T/2.tar"
only_id "import -q"
id=$(cat "$T/stdout")
check "import -q: the id is the image's" [ "$(cairn images -q --no-trunc)" = "$id" ]
expect_exit 0 "import --no-progress" cairn import --no-progress app:2 "$T/1.tar"
only_id "import --no-progress"
expect_exit 0 "import --quiet" cairn import --quiet app:3 "$T/2.tar"
only_id "import --quiet"

# pull and push, through an OCI layout (no registry needed)
expect_exit 0 "push -q to oci:" cairn push -q app:1 "oci:$T/layout:v1"
check "push -q: the manifest's digest alone" grep -qxE "sha256:[0-9a-f]{64}" "$T/stdout"
check "push -q: nothing on stderr" [ ! -s "$T/stderr" ]
expect_exit 0 "push --no-progress" cairn push --no-progress app:2 "oci:$T/layout:v2"
check "push --no-progress: the digest" grep -qxE "sha256:[0-9a-f]{64}" "$T/stdout"
check "push --no-progress: nothing on stderr" [ ! -s "$T/stderr" ]
expect_exit 0 "pull -q" cairn --store "$T/st2" pull -q "oci:$T/layout:v1" p:1
only_id "pull -q"
check "pull -q: the same image" [ "$(cat "$T/stdout")" = "$id" ]
expect_exit 0 "pull --no-progress" cairn --store "$T/st2" pull --no-progress "oci:$T/layout:v2" p:2
only_id "pull --no-progress"

expect_exit 0 "export --no-progress" sh -c "cairn export --no-progress app:1 >'$T/out.tar'"
check "export --no-progress: nothing on stderr" [ ! -s "$T/stderr" ]
check "export --no-progress: the tar" tar -tf "$T/out.tar"

finish
