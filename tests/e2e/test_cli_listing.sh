#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_cli_listing.sh — listings show names next to ids (cairn mounts,
# cairn-pin ls: the names of the image a pin or mount is, or a layer is
# in), and take podman's habits: -q (the ids only), --no-trunc (ids in
# full), --format with a {{.Field}} template (a wrong field is a usage
# error naming the fields), --format json.
source "$(dirname "$0")/../lib/test-lib.sh"

mkdir -p "$T/m"
two_layers
base=$(cairn import base "$T/1.tar") || exit 1
app=$(cairn import app:1 "$T/1.tar" "$T/2.tar") || exit 1
shared=$(cairn inspect app:1 | jq -r '.layers[0].id')

# -q and --no-trunc.
expect_exit 0 "images -q" cairn images -q
check "images -q: the short ids" [ "$(sort "$T/stdout")" = "$(printf '%s\n' "${app:0:12}" "${base:0:12}" | sort)" ]
expect_exit 0 "images -q --no-trunc" cairn images -q --no-trunc
check "images -q --no-trunc: the full ids" [ "$(sort "$T/stdout")" = "$(printf '%s\n' "$app" "$base" | sort)" ]
check "images --no-trunc: the table has full ids" grep -qE "^localhost/app +1 +$app " <(cairn images --no-trunc)
check "layers --quiet: both layers' short ids" [ "$(cairn layers --quiet | sort)" = "$(cairn layers --json | jq -r '.[].id[:12]' | sort)" ]

# --format.
expect_exit 0 "images --format" cairn images --format '{{.ID}} {{ .Names }} {{.Layers}}'
check "one line per image, the fields filled" [ "$(sort "$T/stdout")" = "$(printf '%s\n' "${app:0:12} localhost/app:1 2" "${base:0:12} localhost/base:latest 1" | sort)" ]
check "\\t is a tab, case aside, --no-trunc applies" \
  grep -qxF "$app	localhost/app:1" <(cairn images --no-trunc --format '{{.id}}\t{{.names}}')
check "layers --format {{.ID}} {{.Images}}" grep -qx "${shared:0:12} 2" <(cairn layers --format '{{.ID}} {{.Images}}')
check "--format json is --json" [ "$(cairn images --format json | jq -c 'map(.id) | sort')" = "$(cairn images --json | jq -c 'map(.id) | sort')" ]
expect_exit 2 "a field that is not a column is a usage error" cairn images --format '{{.Digest}}'
check "naming it and the fields" grep -q "^cairn: images: --format: {{.Digest}}: not a field (fields: {{.Repository}} {{.Tag}} {{.ID}} " "$T/stderr"
check "and printing no row" [ ! -s "$T/stdout" ]
expect_exit 2 "an unclosed {{ is refused" cairn images --format '{{.ID'

# Names next to ids: mounts, pins.
on_exit "umount -l '$T/m'"
cairn mount -q app:1 "$T/m" || fail "mount"
expect_exit 0 "mounts" cairn mounts
check "mounts: a NAMES column with app:1" grep -qE "^$T/m +${app:0:12} +localhost/app:1 " "$T/stdout"
check "mounts --json: names" [ "$(cairn mounts --json | jq -c '.[0].names')" = '["localhost/app:1"]' ]
check "mounts -q: the directories" [ "$(cairn mounts -q)" = "$T/m" ]
check "mounts --format" [ "$(cairn mounts --format '{{.Dir}}={{.Names}}')" = "$T/m=localhost/app:1" ]
expect_exit 0 "cairn-pin ls" cairn-pin ls
check "cairn-pin ls: the image pin with its name" grep -qE "^image +${app:0:12} +localhost/app:1 " "$T/stdout"
check "cairn-pin ls: the shared layer with both images' names" \
  grep -qE "^layer +${shared:0:12} +localhost/app:1,localhost/base:latest " "$T/stdout"
check "cairn-pin ls --json: names" \
  [ "$(cairn-pin ls --json | jq -c "[.[] | select(.target == \"$shared\") | .names][0]")" = '["localhost/app:1","localhost/base:latest"]' ]
# --json is the array pretty-printed as jq prints it (two-space indent, an
# object per row, its lists nested): rows are printed an object at a time.
cairn-pin ls --json >"$T/pins.json"
check "cairn-pin ls --json: several rows, laid out as jq --indent 2 lays them out" \
  sh -c "[ \$(jq length '$T/pins.json') -ge 3 ] && jq --indent 2 . '$T/pins.json' | cmp -s - '$T/pins.json'"
check "images --json: laid out as jq --indent 2 lays it out" \
  sh -c "cairn images --json >'$T/images.json' && jq --indent 2 . '$T/images.json' | cmp -s - '$T/images.json'"
check "cairn-pin ls --format" grep -qx "image localhost/app:1" <(cairn-pin ls --format '{{.Kind}} {{.Names}}')
check "cairn-pin ls -q --no-trunc: full targets" grep -qx "$app" <(cairn-pin ls -q --no-trunc)
cairn umount -q "$T/m"

# A table's times come from one instant, the first time cell's: its
# widths and its rows are formatted in two passes, and a time cell that
# changed between them ("9 seconds ago", then "10 seconds ago") overran
# its padding (6cb97de). Here libfaketime's clock moves on a minute at
# each time() call, starting two and a half minutes after the pins were
# taken (a few seconds apart): read once per cell, as before 6cb97de,
# each row said another time.
FAKETIME_LIB=$(dpkg -L libfaketime 2>/dev/null | grep -m1 "/libfaketime\.so\.1$" || true)
if [ -n "$FAKETIME_LIB" ] && [ -e "$FAKETIME_LIB" ]; then
  hold_image app:1
  hold_image base
  wait_for 5 sh -c "[ \$(cairn-pin ls -q | wc -l) -ge 5 ]"
  since=$(cairn-pin ls --json | jq -r 'map(.since) | min | fromdateiso8601')
  start=$(TZ=UTC date -d "@$((since + 150))" '+%Y-%m-%d %H:%M:%S')
  TZ=UTC FAKETIME="@$start i60.0" LD_PRELOAD=$FAKETIME_LIB \
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" \
    cairn-pin ls >"$T/table" 2>"$T/stderr"
  check "cairn-pin ls under a clock that moves: every row's SINCE says the same" \
    [ "$(awk 'NR > 1 { print $(NF - 3), $(NF - 2), $(NF - 1) }' "$T/table" | sort -u | wc -l)" = 1 ]
  check "(the table had every pin)" [ "$(wc -l <"$T/table")" -ge 6 ]
else
  fail "libfaketime is not installed: scripts/setup.sh installs it"
fi

expect_exit 0 "images --help" cairn images --help
check "images --help names -q, --no-trunc, --format" \
  sh -c "grep -q -- '-q, --quiet' '$T/stdout' && grep -q -- --no-trunc '$T/stdout' && grep -q -- '--format TEMPLATE' '$T/stdout'"
finish
