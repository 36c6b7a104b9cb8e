#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# check-layers.sh [--table] [ROOT] — checks the layering of libcairn (the C
# sources of ROOT, default this checkout) and exits 1, printing each
# violation as "check-layers: FILE includes|calls WHAT: WHY", if there is
# one. --table prints the layers as doc/hacking.md's Markdown table instead
# (scripts/check-doc-tables.sh checks that the page has it).
#
# The layers are the rows of LAYERS, bottom first. A file may include
# cairn.h (the public headers: include/cairn.h and include/cairn/*.h), the
# core's header for store/remote/ (store/libcairn_core.h), the headers of
# its own row and of the rows below it, and call the functions defined in
# its own row and the rows below; never one above. A row marked "public"
# (remote) may include only those two and its own headers and call only
# its own functions and those they declare. A row's headers and
# libcairn_core.h are private to store/: fs/ and tools/ include only
# cairn.h and call only what it declares (the unit tests and fuzz targets
# may include and call anything). What both front ends use is in common/
# (a front end too, whose cleanup.h libcairn uses as well): fs/ includes
# nothing of tools/, nor tools/ of fs/; snapshotter/ (cairn-snapshotter,
# whose includes only are checked: its calls need headers generated at
# build time) nothing of either. Every global symbol libcairn
# defines is either public (cairn_, declared in a public header) or
# internal (cn_).
#
# Includes are read from the sources (resolved as the compiler does: beside
# the including file, then include/, store/ and store/remote/). Calls are read
# from the symbols of objects compiled here (nm): a function a file uses
# belongs to the row of the file that defines it.
set -euo pipefail
TABLE=false
if [ "${1:-}" = --table ]; then
  TABLE=true
  shift
fi
cd "${1:-$(dirname "$0")/..}"

# NAME | SOURCES (globs) | HEADERS (its own, private) | USES ("below" or
# "public") | WHAT (for the table of doc/hacking.md: --table)
LAYERS=(
  "store | store/error.c store/db.c store/lock.c store/store.c store/staging.c store/util.c store/proc.c store/progress.c store/config.c store/backoff.c store/tar_header.c | store/libcairn_store.h | below
    | the store handle and its progress hook, cairn.conf, SQLite (WAL, migrations, durable commits), errors, the store lock, import journals, backoff, tar headers by their named fields"
  "blobs | store/blob.c | store/libcairn_blob.h | below
    | content-addressed blobs"
  "pins | store/pin.c store/pin_list.c store/pin_locks.c store/mount.c | store/libcairn_pin.h | below
    | pins and their annotations, who holds them (/proc/locks), their listing; mount records and the mountpoint resolver"
  "upper | store/upper.c | store/libcairn_upper.h | below
    | writable mounts' upper layers"
  "tree | store/tree.c store/index.c | store/libcairn_tree.h | below
    | the merged-tree builder and the index files"
  "layers | store/layer.c store/layer_tar.c store/sweep.c store/tarsplit.c | store/libcairn_layer.h store/libcairn_sweep.h store/libcairn_tarsplit.h | below
    | a layer tar into blobs and entry rows; sweeping unused layers and blobs; exact layers"
  "images | store/image.c store/list.c store/name.c store/refs.c | store/libcairn_image.h | below
    | names, resolving, committing and pinning images; the listings; the refs file"
  "merge | store/merge.c store/export.c | - | below
    | an image's merged tree, and its export as a tar"
  "lazy | store/lazy.c store/lazy_lock.c | store/libcairn_lazy.h | below
    | partial layers (lazy pulls): recording one from its TOC, a fetched file into it, its fsck; the fetch lock (lazy_lock.c)"
  "als | store/als.c | - | below
    | what podman's Additional Layer Store needs"
  "porcelain | store/spec.c store/tag.c store/history.c store/access.c | - | below
    | a bundle's runtime config, tag, history, an image's recorded access list"
  "commit | store/commit.c | - | below
    | a writable mount's upper written as a layer and committed"
  "remote | store/remote/*.c | store/remote/libcairn_remote.h store/remote/libcairn_registry.h store/remote/libcairn_toc.h store/remote/libcairn_byteranges.h store/remote/libcairn_partial.h store/remote/libcairn_chunked_write.h store/remote/libcairn_remote_lazy.h store/remote/libcairn_fill.h | public
    | pull from OCI layouts, oci-archives, docker archives and registries; push (registries, layouts, archives; lazily-pullable layers: zstd:chunked, eStargz); login; the TOCs of eStargz and zstd:chunked layers (lazy pulls), the partial pull of zstd:chunked layers, lazy pulls' fetches and the fill (fill.c); built on cairn.h and libcairn_core.h alone"
  "snapshots | store/snapshot.c store/snapshot_chain.c | store/libcairn_snapshot.h store/libcairn_snapshot_chain.h | below
    | containerd's snapshots (cairn-snapshotter): their records, directories, mounts, filters and usage; remote snapshots of a registry's layers, recorded lazily by remote's pull: above remote for them; the chain mounts' bookkeeping and gc's sweep of them (snapshot_chain.c), none of remote"
  "rm-gc | store/rm.c store/gc.c | - | below
    | removal and gc; gc sweeps the chain images no snapshot uses: above snapshots for them"
  "fsck | store/fsck.c | - | below
    | verifying and repairing the store, partial layers' kept TOCs (parsed by remote's parser) included: above remote for them"
)
# Front ends: only cairn.h, only what it declares.
FRONTS="common/*.c common/*.h fs/*.c fs/*.h tools/*.c tools/*.h snapshotter/*.c"
# Files that may include any private header.
EXEMPT="tests/unit/* tests/fuzz/*"
# The public face: cairn.h and the headers it includes, one a subsystem.
PUBLIC_HEADERS="include/cairn.h $(find include/cairn -name '*.h' 2>/dev/null | sort | tr '\n' ' ')"
# What the core gives store/remote/ and no front end: every row may include
# it, and a public row may call what it declares besides cairn.h's.
CORE_HEADER=store/libcairn_core.h

status=0
violation() {
  echo "check-layers: $1"
  status=1
}
# Each row's fields, trimmed, read once (the checks below look them up
# thousands of times: no process per lookup).
L_NAME=() L_GLOBS=() L_HEADERS=() L_USES=() L_WHAT=()
for i in "${!LAYERS[@]}"; do
  IFS='|' read -r -d '' name globs headers uses what <<<"${LAYERS[$i]}" || true
  read -r L_NAME[i] <<<"$name"
  read -r L_GLOBS[i] <<<"$globs"
  read -r L_HEADERS[i] <<<"$headers"
  read -r L_USES[i] <<<"$uses"
  L_WHAT[i]=$(tr -s ' \n' '  ' <<<"$what" | sed 's/^ //; s/ $//')
  [ "${L_HEADERS[i]}" != - ] || L_HEADERS[i]=""
done
# --table: the rows as doc/hacking.md's Markdown table (scripts/check-doc-tables.sh
# checks the page has it), bottom first.
if [ "$TABLE" = true ]; then
  set -f # the rows' globs as written
  code() { # code WORDS: `a`, `b` with store/ taken off each
    local w out=""
    for w in "$@"; do out="$out, \`${w#store/}\`"; done
    echo "${out#, }"
  }
  echo "| layer | files | what |"
  echo "|---|---|---|"
  for i in "${!LAYERS[@]}"; do
    # shellcheck disable=SC2086 # lists of words
    files=$(code ${L_GLOBS[i]})
    # shellcheck disable=SC2086
    [ -z "${L_HEADERS[i]}" ] || files="$files ($(code ${L_HEADERS[i]}))"
    echo "| ${L_NAME[i]} | $files | ${L_WHAT[i]} |"
  done
  exit 0
fi
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
# The headers a row may include: cairn.h, its own, and (below) the lower
# rows'; into ALLOWED (memoized per row).
declare -A ALLOWED_OF
allowed_headers() {
  local i=$1 j
  if [[ ! -v ALLOWED_OF[$i] ]]; then
    ALLOWED_OF[$i]="$PUBLIC_HEADERS $CORE_HEADER ${L_HEADERS[$i]}"
    if [ "${L_USES[$i]}" = below ]; then
      for ((j = 0; j < i; j++)); do ALLOWED_OF[$i]+=" ${L_HEADERS[$j]}"; done
    fi
  fi
  ALLOWED=${ALLOWED_OF[$i]}
}
ALL_PRIVATE="${L_HEADERS[*]} $CORE_HEADER"

# resolve FILE NAME: into RESOLVED, the repo path #include "NAME" in FILE
# reads, or nothing.
resolve() {
  local c
  RESOLVED=""
  for c in "${1%/*}/$2" "include/$2" "common/$2" "store/$2" "store/remote/$2"; do
    if [ -f "$c" ]; then
      case $c in
      *..*) RESOLVED=$(realpath -m --relative-to=. "$c") ;; # a path to normalize
      *) RESOLVED=$c ;;
      esac
      return
    fi
  done
}

# ---- includes ------------------------------------------------------------
# One grep reads the quoted includes of every file ("FILE:NAME", in the
# files' order): a process per file cost most of this check's time.
check_include() { # FILE HEADER
  local f=$1 h=$2
  row_of "$f"
  if [ -n "$ROW" ]; then
    allowed_headers "$ROW"
    case $h in
    store/* | include/*)
      in_list "$h" "$ALLOWED" || violation "$f includes $h: layer ${L_NAME[$ROW]} may include only $ALLOWED"
      ;;
    esac
  elif in_list "$h" "$ALL_PRIVATE" && ! matches "$f" "$EXEMPT"; then
    violation "$f includes $h: a private header of libcairn"
  elif [[ $f == fs/* && $h == tools/* ]] || [[ $f == tools/* && $h == fs/* ]] ||
    [[ $f == snapshotter/* && ($h == fs/* || $h == tools/*) ]]; then
    violation "$f includes $h: the front ends share only common/"
  fi
}
mapfile -t ALL_FILES < <(find store common fs tools snapshotter tests -name '*.[ch]' 2>/dev/null | sort)
while IFS= read -r line; do
  f=${line%%:*}
  resolve "$f" "${line#*:}"
  [ -z "$RESOLVED" ] || check_include "$f" "$RESOLVED"
done < <([ ${#ALL_FILES[@]} = 0 ] || grep -H '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "${ALL_FILES[@]}" |
  sed -n 's/^\([^:]*\):[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1:\2/p')

# ---- calls ---------------------------------------------------------------
# Every source of store/, common/, fs/ and tools/ compiled to an object (no link).
OBJ=$(mktemp -d)
trap 'rm -rf "$OBJ"' EXIT
CFLAGS="-c -O0 -w -std=gnu11 -D_GNU_SOURCE -D_FILE_OFFSET_BITS=64 -Iinclude -Istore -Istore/remote -Icommon"
CFLAGS="$CFLAGS $(pkg-config --cflags sqlite3 libxxhash libarchive libcrypto jansson libcurl fuse3)"
# what CMake defines for a file (common/CMakeLists.txt: self.c's install
# paths), as words the compile's shell reads
CFLAGS="$CFLAGS -DCAIRN_LIBEXECDIR='\"/usr/libexec\"' -DCAIRN_LIBEXECDIR_REL='\"libexec\"'"
SOURCES=$(find store common fs tools -name '*.c' | sort)
# With CHECK_LAYERS_CACHE=DIR (test_layers.sh checks many copies of one
# tree), an object is kept there under the hash of its source, and of every
# header and the flags, and taken from there when they are the same again.
CACHE=${CHECK_LAYERS_CACHE:-}
KEYS=()
if [ -n "$CACHE" ]; then
  mkdir -p "$CACHE"
  # shellcheck disable=SC2046 # the headers' paths are words
  HEADERS_KEY=$({ echo "$CFLAGS" && sha1sum $(find include store common fs tools -name '*.h' | sort); } |
    sha1sum)
  # shellcheck disable=SC2086 # SOURCES is a list of words
  while read -r sum _; do KEYS+=("$CACHE/${HEADERS_KEY%% *}-$sum.o"); done < <(sha1sum $SOURCES)
fi
# OBJ_OF[FILE]: its object, the cache's when it has it (taken from there
# without a process: that cost most of a cached run); SRC_OF[OBJECT]: its file.
declare -A OBJ_OF SRC_OF
TO_COMPILE=()
i=0
for f in $SOURCES; do
  key=${KEYS[i++]:--}
  if [ "$key" != - ] && [ -f "$key" ] && [[ ! -v SRC_OF[$key] ]]; then # (two files of the
    OBJ_OF[$f]=$key                                                     # same bytes: one object each)
    SRC_OF[$key]=$f
  else
    OBJ_OF[$f]=$OBJ/$f.o
    TO_COMPILE+=("$f" "$key")
  fi
done
[ ${#TO_COMPILE[@]} = 0 ] || printf '%s\n' "${TO_COMPILE[@]}" | xargs -d '\n' -n 2 -P "$(nproc)" sh -c '
  o="$1/$2.o"
  mkdir -p "${o%/*}"
  cc '"$CFLAGS"' -o "$o" "$2" || exit 1
  [ "$3" = - ] || { cp "$o" "$3.$$" && mv "$3.$$" "$3"; }' _ "$OBJ"

# Which file defines each function or variable, and what cairn.h declares.
# One nm for every object (nm -A: each line starts "OBJECT:"): a
# process per file cost most of this check's time.
OBJS=() STORE_OBJS=()
for f in $SOURCES; do
  OBJS+=("${OBJ_OF[$f]}")
  SRC_OF[${OBJ_OF[$f]}]=$f
  case $f in store/*) STORE_OBJS+=("${OBJ_OF[$f]}") ;; esac
done
source_of() { # source_of "OBJECT:...": sets SRC to its file
  SRC=${SRC_OF[${1%.o:*}.o]}
}
STORE_DEFINED=$(nm -A --defined-only -g "${STORE_OBJS[@]}")
UNDEFINED=$(nm -A -u "${OBJS[@]}")
declare -A DEFINED_IN
while read -r loc _ s; do
  source_of "$loc"
  DEFINED_IN[$s]=$SRC
done <<<"$STORE_DEFINED"
# Every word of the public headers: what they declare (a name in one, as
# grep -w would find); and of the core's header for store/remote/.
declare -A PUBLIC_WORDS CORE_WORDS
# shellcheck disable=SC2086 # a list of paths
for w in $(cat $PUBLIC_HEADERS | grep -oE '[A-Za-z_][A-Za-z0-9_]*' | sort -u); do PUBLIC_WORDS[$w]=1; done
if [ -f "$CORE_HEADER" ]; then
  for w in $(grep -oE '[A-Za-z_][A-Za-z0-9_]*' "$CORE_HEADER" | sort -u); do CORE_WORDS[$w]=1; done
fi
declared_public() { [[ -v PUBLIC_WORDS[$1] ]]; }
declared_core() { [[ -v CORE_WORDS[$1] ]]; }

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
    [ "$drow" = "$row" ] || declared_public "$s" || declared_core "$s" ||
      violation "$f calls $s ($def): layer $name uses only cairn.h and libcairn_core.h"
  elif [ -z "$drow" ] || [ "$drow" -gt "$row" ]; then
    violation "$f calls $s ($def): layer ${drow:+${L_NAME[$drow]} is above }$name"
  fi
done <<<"$UNDEFINED"
# Every global symbol of libcairn is public (cairn_, declared in a public header)
# or internal (cn_): no unprefixed name to clash with a program's own.
while read -r loc _ s; do
  source_of "$loc"
  case $s in
  cn_*) ;;
  cairn_*) declared_public "$s" || violation "$SRC defines $s: cairn_ is for what cairn.h declares; internal names start with cn_" ;;
  *) violation "$SRC defines $s: internal names of libcairn start with cn_" ;;
  esac
done <<<"$STORE_DEFINED"
# No program replaces a function of a library libcairn calls (SQLite's,
# libc's ...): libcairn is tested with the library's own, and a program's
# copy would be what its store code runs (as fs/sqlite_lazy.c's were,
# until measured not to pay: doc/performance.md, "Tried and dropped").
ALL_DEFINED=$(nm -A --defined-only -g "${OBJS[@]}")
declare -A STORE_CALLS_LIB
while read -r loc _ s; do
  source_of "$loc" # (an object may be the cache's, named by its hash)
  if [[ $SRC == store/* ]] && [[ ! -v DEFINED_IN[$s] ]]; then STORE_CALLS_LIB[$s]=1; fi
done <<<"$UNDEFINED"
while read -r loc _ s; do
  source_of "$loc"
  case $SRC in store/*) continue ;; esac
  if [[ -v STORE_CALLS_LIB[$s] ]]; then
    violation "$SRC defines $s: a function of a library libcairn calls (no program replaces it)"
  fi
done <<<"$ALL_DEFINED"
# ---- cycles --------------------------------------------------------------
# No two files call each other, directly or round a longer loop, in a layer
# or in a front end: each file calls only files below it, so it can be read
# (and changed) knowing only those. The graph: file A -> file B when A uses
# a symbol B defines; a file of store/ uses only what store/ defines, a
# front end what its own folder, common/ or store/ defines. Each strongly connected
# set of files (Tarjan's algorithm) is one cycle, reported with the symbols
# that make it.
CYCLES=$(
  {
    while read -r loc _ s; do
      source_of "$loc"
      echo "D $SRC $s"
    done <<<"$ALL_DEFINED"
    while read -r loc _ s; do
      source_of "$loc"
      echo "U $SRC $s"
    done <<<"$UNDEFINED"
  } | awk '
    function top(f) { return substr(f, 1, index(f, "/") - 1) }
    function visible(caller, def) {
      return top(def) == "store" || top(def) == top(caller) ||
        (top(def) == "common" && top(caller) != "store")
    }
    $1 == "D" { defs[$3] = defs[$3] " " $2; next }
    {
      n = split(defs[$3], ds, " ")
      for (i = 1; i <= n; i++) {
        d = ds[i]
        if (d == $2 || !visible($2, d)) continue
        k = $2 SUBSEP d
        if (!(k in syms)) { syms[k] = $3; out[$2, ++nout[$2]] = d; node[$2]; node[d] }
        else if (index(" " syms[k] " ", " " $3 " ") == 0) syms[k] = syms[k] " " $3
      }
    }
    function strong(v,   i, w) {
      num[v] = low[v] = ++count; stack[++sp] = v; on[v] = 1
      for (i = 1; i <= nout[v]; i++) {
        w = out[v, i]
        if (!(w in num)) { strong(w); if (low[w] < low[v]) low[v] = low[w] }
        else if (on[w] && num[w] < low[v]) low[v] = num[w]
      }
      if (low[v] == num[v]) {
        ncomp++
        do { w = stack[sp--]; on[w] = 0; comp[w] = ncomp; size[ncomp]++ } while (w != v)
      }
    }
    END {
      for (v in node) if (!(v in num)) strong(v)
      for (k in syms) {
        split(k, e, SUBSEP)
        c = comp[e[1]]
        if (c == comp[e[2]] && size[c] > 1) print c "\t" e[1] " calls " e[2] "\x27s " syms[k]
      }
    }' | sort | awk -F '\t' '
    $1 != c { if (c != "") print line; c = $1; line = "a call cycle: " $2; next }
    { line = line "; " $2 }
    END { if (c != "") print line }'
)
while read -r line; do
  [ -z "$line" ] || violation "$line"
done <<<"$CYCLES"

# Every file of store/ belongs to a row.
for f in $(find store -name '*.[ch]' | sort); do
  row_of "$f"
  [ -n "$ROW" ] || [ "$f" = "$CORE_HEADER" ] ||
    violation "$f is in no layer: add it to a row of scripts/check-layers.sh"
done
exit $status
