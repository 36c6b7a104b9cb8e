#!/bin/bash
# check-layers.sh [ROOT] — checks the layering of libcairn (the C sources of
# ROOT, default this checkout) and exits 1, printing each violation as
# "check-layers: FILE includes|calls WHAT: WHY", if there is one.
#
# The layers are the rows of LAYERS, bottom first. A file may include
# cairn.h, the headers of its own row and of the rows below it, and call
# the functions defined in its own row and the rows below; never one above.
# A row marked "public" (pull) may include only cairn.h and its own headers
# and call only its own functions and those cairn.h declares. A row's
# headers are private to store/: fs/ and tools/ include only cairn.h and
# call only what it declares (the unit tests and fuzz targets may include
# and call anything). Every global symbol libcairn defines is either
# public (cairn_, declared in cairn.h) or internal (cn_).
#
# Includes are read from the sources (resolved as the compiler does: beside
# the including file, then include/, store/ and store/pull/). Calls are read
# from the symbols of objects compiled here (nm): a function a file uses
# belongs to the row of the file that defines it.
set -euo pipefail
cd "${1:-$(dirname "$0")/..}"

# NAME | SOURCES (globs) | HEADERS (its own, private) | USES ("below" or "public")
LAYERS=(
  "store  | store/store.c store/staging.c store/util.c store/proc.c store/progress.c store/config.c store/backoff.c | store/internal.h | below"
  "blobs  | store/blob.c                 | store/blob.h                           | below"
  "pins   | store/pin.c store/mount.c    | store/pin.h                            | below"
  "upper  | store/upper.c                | -                                      | below"
  "tree   | store/tree.c store/index.c   | store/tree.h                           | below"
  "layers | store/layer.c store/sweep.c store/tarsplit.c | store/layer.h store/sweep.h store/tarsplit.h | below"
  "images | store/image.c store/list.c store/refs.c | store/image.h           | below"
  "merge  | store/merge.c store/export.c | -                                      | below"
  "als    | store/als.c                  | -                                      | below"
  "rm-gc  | store/rm.c store/gc.c        | -                                      | below"
  "porcelain | store/spec.c store/tag.c store/history.c | -                     | below"
  "commit | store/commit.c               | -                                      | below"
  "pull   | store/pull/*.c               | store/pull/pull.h store/pull/registry.h | public"
)
# Front ends: only cairn.h, only what it declares.
FRONTS="fs/*.c fs/*.h tools/*.c tools/*.h"
# Files that may include any private header.
EXEMPT="tests/unit/* tests/fuzz/*"
PUBLIC_HEADER=include/cairn.h

status=0
violation() {
  echo "check-layers: $1"
  status=1
}
field() { # field ROW N: the Nth |-separated field, trimmed
  awk -F'|' -v n="$2" '{ gsub(/^ +| +$/, "", $n); print $n }' <<<"$1"
}
matches() { # matches FILE GLOBS
  local g
  for g in $2; do
    # shellcheck disable=SC2053 # $g is a glob on purpose
    [[ $1 == $g ]] && return 0
  done
  return 1
}
in_list() { case " $2 " in *" $1 "*) return 0 ;; esac; return 1; }

# row_of FILE: the index of its row in LAYERS, or nothing.
row_of() {
  local i
  for i in "${!LAYERS[@]}"; do
    if matches "$1" "$(field "${LAYERS[$i]}" 2) $(field "${LAYERS[$i]}" 3)"; then
      echo "$i"
      return
    fi
  done
}
# The headers a row may include: cairn.h, its own, and (below) the lower rows'.
allowed_headers() {
  local i=$1 j out
  out="$PUBLIC_HEADER $(field "${LAYERS[$i]}" 3)"
  if [ "$(field "${LAYERS[$i]}" 4)" = below ]; then
    for ((j = 0; j < i; j++)); do out="$out $(field "${LAYERS[$j]}" 3)"; done
  fi
  echo "$out"
}
ALL_PRIVATE=""
for row in "${LAYERS[@]}"; do ALL_PRIVATE="$ALL_PRIVATE $(field "$row" 3)"; done

# resolve FILE NAME: the repo path #include "NAME" in FILE reads, or nothing.
resolve() {
  local c
  for c in "$(dirname "$1")/$2" "include/$2" "store/$2" "store/pull/$2"; do
    if [ -f "$c" ]; then
      realpath -m --relative-to=. "$c"
      return
    fi
  done
}
includes() { # includes FILE: the repo paths of its quoted includes that exist
  local name
  sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$1" |
    while read -r name; do resolve "$1" "$name"; done
}

# ---- includes ------------------------------------------------------------
for f in $(find store fs tools tests -name '*.[ch]' 2>/dev/null | sort); do
  row=$(row_of "$f")
  if [ -n "$row" ]; then
    allowed=$(allowed_headers "$row")
    why="layer $(field "${LAYERS[$row]}" 1) may include only $allowed"
  fi
  for h in $(includes "$f"); do
    if [ -n "$row" ]; then
      case $h in
      store/* | include/*) in_list "$h" "$allowed" || violation "$f includes $h: $why" ;;
      esac
    elif in_list "$h" "$ALL_PRIVATE" && ! matches "$f" "$EXEMPT"; then
      violation "$f includes $h: a private header of libcairn"
    fi
  done
done

# ---- calls ---------------------------------------------------------------
# Every source of store/, fs/ and tools/ compiled to an object (no link).
OBJ=$(mktemp -d)
trap 'rm -rf "$OBJ"' EXIT
CFLAGS="-c -O0 -w -std=gnu11 -D_GNU_SOURCE -D_FILE_OFFSET_BITS=64 -Iinclude -Istore -Istore/pull -Itools -Ifs"
CFLAGS="$CFLAGS $(pkg-config --cflags sqlite3 libxxhash libarchive libcrypto jansson libcurl fuse3)"
SOURCES=$(find store fs tools -name '*.c' | sort)
# shellcheck disable=SC2086 # CFLAGS is a list of words
printf '%s\n' $SOURCES | xargs -P "$(nproc)" -I{} sh -c \
  'mkdir -p "$1/$(dirname "$2")" && cc '"$CFLAGS"' -o "$1/$2.o" "$2"' _ "$OBJ" {}

# Which file defines each function or variable, and what cairn.h declares.
declare -A DEFINED_IN
for f in $SOURCES; do
  case $f in store/*) ;; *) continue ;; esac
  for s in $(nm --defined-only -g "$OBJ/$f.o" | awk '{ print $3 }'); do DEFINED_IN[$s]=$f; done
done
declared_public() { grep -Eq "\b$1\b" "$PUBLIC_HEADER"; }

for f in $SOURCES; do
  row=$(row_of "$f")
  for s in $(nm -u "$OBJ/$f.o" | awk '{ print $2 }'); do
    def=${DEFINED_IN[$s]:-}
    [ -n "$def" ] && [ "$def" != "$f" ] || continue
    if [ -z "$row" ]; then # a front end
      declared_public "$s" || violation "$f calls $s ($def): front ends use only cairn.h"
      continue
    fi
    drow=$(row_of "$def")
    name=$(field "${LAYERS[$row]}" 1)
    if [ "$(field "${LAYERS[$row]}" 4)" = public ]; then
      [ "$drow" = "$row" ] || declared_public "$s" ||
        violation "$f calls $s ($def): layer $name uses only cairn.h"
    elif [ -z "$drow" ] || [ "$drow" -gt "$row" ]; then
      violation "$f calls $s ($def): layer ${drow:+$(field "${LAYERS[$drow]}" 1) is above }$name"
    fi
  done
done
# Every global symbol of libcairn is public (cairn_, declared in cairn.h)
# or internal (cn_): no unprefixed name to clash with a program's own.
for f in $SOURCES; do
  case $f in store/*) ;; *) continue ;; esac
  for s in $(nm --defined-only -g "$OBJ/$f.o" | awk '{ print $3 }'); do
    case $s in
    cn_*) ;;
    cairn_*) declared_public "$s" || violation "$f defines $s: cairn_ is for what cairn.h declares; internal names start with cn_" ;;
    *) violation "$f defines $s: internal names of libcairn start with cn_" ;;
    esac
  done
done
# Every file of store/ belongs to a row.
for f in $(find store -name '*.[ch]' | sort); do
  [ -n "$(row_of "$f")" ] || [ "$f" = "$PUBLIC_HEADER" ] ||
    violation "$f is in no layer: add it to a row of tools/check-layers.sh"
done
exit $status
