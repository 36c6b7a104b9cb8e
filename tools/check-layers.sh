#!/bin/bash
# check-layers.sh [ROOT] — checks the layering of libcairn by the #include
# lines of the C sources of ROOT (default: this checkout). Prints each
# violation as "FILE includes HEADER: WHY" and exits 1 if there is one.
#
# The layers are the table below. A layer's files may include cairn.h, the
# layer's own headers and the headers of the layers it uses, and no other
# header of store/. A layer's headers are private: no file outside the layer
# includes them (the unit tests and fuzz targets may). Includes are
# resolved as the compiler does: beside the including file, then store/ (the
# library's include folder) and store/pull/ (the fuzz targets').
#
# Only pull is a layer so far; the rest of store/ is one unchecked block
# until it is split (issue 8): database and store handle -> blobs -> pins ->
# layers -> images -> merge/export -> rm/gc/fsck -> pull, each a row here
# that uses only the rows below it.
set -euo pipefail
cd "${1:-$(dirname "$0")/..}"

# NAME | FILES (globs) | HEADERS (its own, private) | USES (layer names, "-")
LAYERS=(
  "pull | store/pull/*.c store/pull/*.h | store/pull/pull.h store/pull/registry.h | -"
)
# Files that may include any layer's private headers.
EXEMPT="tests/unit/* tests/fuzz/*"
# Everything checked: whoever includes a private header.
SOURCES=$(find store fs tools tests -name '*.[ch]' | sort)

field() { # field ROW N: the Nth |-separated field, trimmed
  awk -F'|' -v n="$2" '{ gsub(/^ +| +$/, "", $n); print $n }' <<<"$1"
}
# resolve FILE NAME: the repo path #include "NAME" in FILE reads, or nothing.
resolve() {
  local c
  for c in "$(dirname "$1")/$2" "store/$2" "store/pull/$2"; do
    if [ -f "$c" ]; then
      realpath -m --relative-to=. "$c"
      return
    fi
  done
}
# includes FILE: the repo paths of its quoted includes that exist.
includes() {
  local name
  sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$1" |
    while read -r name; do resolve "$1" "$name"; done
}
# in_list WORD LIST / matches FILE GLOBS
in_list() { case " $2 " in *" $1 "*) return 0 ;; esac; return 1; }
matches() {
  local g
  for g in $2; do
    # shellcheck disable=SC2053 # $g is a glob on purpose
    [[ $1 == $g ]] && return 0
  done
  return 1
}
layer_headers() { # layer_headers NAME
  local row
  for row in "${LAYERS[@]}"; do
    [ "$(field "$row" 1)" = "$1" ] && field "$row" 3
  done
}

status=0
violation() {
  echo "check-layers: $1 includes $2: $3"
  status=1
}

for row in "${LAYERS[@]}"; do
  name=$(field "$row" 1)
  files=$(field "$row" 2)
  own=$(field "$row" 3)
  allowed="store/cairn.h $own"
  for used in $(field "$row" 4); do
    [ "$used" = - ] || allowed="$allowed $(layer_headers "$used")"
  done
  for f in $SOURCES; do
    inc_layer=false
    matches "$f" "$files" && inc_layer=true
    for h in $(includes "$f"); do
      if $inc_layer; then
        case $h in
        store/*) in_list "$h" "$allowed" ||
          violation "$f" "$h" "layer $name may include only $allowed" ;;
        esac
      elif in_list "$h" "$own" && ! matches "$f" "$EXEMPT"; then
        violation "$f" "$h" "a private header of layer $name"
      fi
    done
  done
done
exit $status
