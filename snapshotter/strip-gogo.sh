#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# strip-gogo.sh IN OUT — a copy of containerd's .proto file IN without its
# gogoproto import and options (they steer Go's code generator only, and
# protoc-c would need gogo.proto for them), for protoc-c.
set -eu
mkdir -p "$(dirname "$2")"
sed -e '/^import weak "gogoproto\/gogo.proto";/d' \
  -e '/^[[:space:]]*option (gogoproto\./d' \
  -e 's/[[:space:]]*\[(gogoproto[^]]*\]//g' "$1" >"$2.tmp"
mv "$2.tmp" "$2"
