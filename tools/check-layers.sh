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
# Each row's fields, trimmed, read once (the checks below look them up
# thousands of times: no process per lookup).
L_NAME=() L_GLOBS=() L_HEADERS=() L_USES=()
for i in "${!LAYERS[@]}"; do
  IFS='|' read -r name globs headers uses <<<"${LAYERS[$i]}"
  read -r L_NAME[i] <<<"$name"
  read -r L_GLOBS[i] <<<"$globs"
  read -r L_HEADERS[i] <<<"$headers"
  read -r L_USES[i] <<<"$uses"
done
matches() { # matches FILE GLOBS
  local g
  for g in $2; do
    # shellcheck disable=SC2053 # $g is a glob on purpose
    [[ $1 == $g ]] && return 0
  done
  return 1
}
in_list() { case " $2 " in *" $1 "*) return 0 ;; esac; return 1; }

# row_of FILE: sets ROW to the index of its row in LAYERS, or "" (memoized).
declare -A ROW_OF
row_of() {
  if [[ -v ROW_OF[$1] ]]; then
    ROW=${ROW_OF[$1]}
    return
  fi
  local i
  ROW=""
  for i in "${!LAYERS[@]}"; do
    if matches "$1" "${L_GLOBS[$i]} ${L_HEADERS[$i]}"; then
      ROW=$i
      break
    fi
  done
  ROW_OF[$1]=$ROW
}
# The headers a row may include: cairn.h, its own, and (below) the lower rows'.
allowed_headers() {
  local i=$1 j out
  out="$PUBLIC_HEADER ${L_HEADERS[$i]}"
  if [ "${L_USES[$i]}" = below ]; then
    for ((j = 0; j < i; j++)); do out="$out ${L_HEADERS[$j]}"; done
  fi
  echo "$out"
}
ALL_PRIVATE="${L_HEADERS[*]}"

# resolve FILE NAME: the repo path #include "NAME" in FILE reads, or nothing.
resolve() {
  local c
  for c in "${1%/*}/$2" "include/$2" "store/$2" "store/pull/$2"; do
    if [ -f "$c" ]; then
      case $c in
      *..*) realpath -m --relative-to=. "$c" ;; # a path to normalize
      *) echo "$c" ;;
      esac
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
  row_of "$f"
  row=$ROW
  if [ -n "$row" ]; then
    allowed=$(allowed_headers "$row")
    why="layer ${L_NAME[$row]} may include only $allowed"
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
# One nm for every object (nm -A: each line starts "OBJ/FILE.o:"): a
# process per file cost most of this check's time.
OBJS=() STORE_OBJS=()
for f in $SOURCES; do
  OBJS+=("$OBJ/$f.o")
  case $f in store/*) STORE_OBJS+=("$OBJ/$f.o") ;; esac
done
source_of() { # source_of "OBJ/FILE.o:...": sets SRC to FILE
  SRC=${1%%.o:*}
  SRC=${SRC#"$OBJ/"}
}
STORE_DEFINED=$(nm -A --defined-only -g "${STORE_OBJS[@]}")
declare -A DEFINED_IN
while read -r loc _ s; do
  source_of "$loc"
  DEFINED_IN[$s]=$SRC
done <<<"$STORE_DEFINED"
# Every word of cairn.h: what it declares (a name in it, as grep -w would find).
declare -A PUBLIC_WORDS
for w in $(grep -oE '[A-Za-z_][A-Za-z0-9_]*' "$PUBLIC_HEADER" | sort -u); do PUBLIC_WORDS[$w]=1; done
declared_public() { [[ -v PUBLIC_WORDS[$1] ]]; }

while read -r loc _ s; do
  source_of "$loc"
  f=$SRC
  row_of "$f"
  row=$ROW
  def=${DEFINED_IN[$s]:-}
  [ -n "$def" ] && [ "$def" != "$f" ] || continue
  if [ -z "$row" ]; then # a front end
    declared_public "$s" || violation "$f calls $s ($def): front ends use only cairn.h"
    continue
  fi
  row_of "$def"
  drow=$ROW
  name=${L_NAME[$row]}
  if [ "${L_USES[$row]}" = public ]; then
    [ "$drow" = "$row" ] || declared_public "$s" ||
      violation "$f calls $s ($def): layer $name uses only cairn.h"
  elif [ -z "$drow" ] || [ "$drow" -gt "$row" ]; then
    violation "$f calls $s ($def): layer ${drow:+${L_NAME[$drow]} is above }$name"
  fi
done < <(nm -A -u "${OBJS[@]}")
# Every global symbol of libcairn is public (cairn_, declared in cairn.h)
# or internal (cn_): no unprefixed name to clash with a program's own.
while read -r loc _ s; do
  source_of "$loc"
  case $s in
  cn_*) ;;
  cairn_*) declared_public "$s" || violation "$SRC defines $s: cairn_ is for what cairn.h declares; internal names start with cn_" ;;
  *) violation "$SRC defines $s: internal names of libcairn start with cn_" ;;
  esac
done <<<"$STORE_DEFINED"
# Every file of store/ belongs to a row.
for f in $(find store -name '*.[ch]' | sort); do
  row_of "$f"
  [ -n "$ROW" ] || [ "$f" = "$PUBLIC_HEADER" ] ||
    violation "$f is in no layer: add it to a row of tools/check-layers.sh"
done
exit $status
