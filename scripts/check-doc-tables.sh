#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# check-doc-tables.sh [--write] [ROOT] — the tables of doc/hacking.md and
# README.md that the sources hold, generated from them so that they cannot
# drift: each sits between "<!-- BEGIN NAME ... -->" and "<!-- END NAME
# -->", and this exits 1, printing "check-doc-tables: FILE: NAME differs
# from the sources" and the diff, when one is not what the sources give.
# --write puts the generated tables in their pages instead (after a new
# command, FUSE operation, layer or moved function).
#
#   layers  libcairn's layers: scripts/check-layers.sh --table, which holds
#           them.
#   map     every command of cairn and cairn-pin (each `struct cli_command`
#           of tools/) and every FUSE operation of each table of operations
#           (`struct fuse_lowlevel_ops` of fs/), with the file and function
#           that does it.
#   files   (README.md) the same map by file: which commands each file of
#           tools/ runs, which FUSE operations each file of fs/ serves.
#   podman  (doc/podman.md) podman's commands cairn takes as aliases, or
#           answers with the cairn way: tools/cairn.c's habits[].
# shellcheck disable=SC2016 # backquotes are Markdown here, not commands
set -euo pipefail
write=false
if [ "${1:-}" = --write ]; then
  write=true
  shift
fi
cd "${1:-$(dirname "$0")/..}"

# defined_in FN FILE...: the first FILE whose line starts a definition of
# the function FN (not a declaration), or "?".
defined_in() {
  local fn=$1 f
  shift
  for f in "$@"; do
    if grep -qE "^[A-Za-z_][A-Za-z0-9_ *]*[ *]$fn\([^;]*(\{|,)?\$" "$f"; then
      echo "$f"
      return
    fi
  done
  echo "?"
}

# What a table of operations serves, by its variable's name.
ops_label() {
  case $1 in
  cairnfs_ops) echo "read-only" ;;
  cairnfs_rw_ops) echo '`--rw`' ;;
  als_ops) echo '`--als`' ;;
  *) echo "\`$1\`" ;;
  esac
}

gen_map() {
  local f var name fn program light def binary
  # The commands the light cairn runs itself (tools/cairn.c's list under
  # CAIRN_CLI_LIGHT); it execs the full cairn for the others.
  light=" $(sed -n '/^#ifdef CAIRN_CLI_LIGHT/,/^#else/p' tools/cairn.c | grep -oE '&cmd_[a-z_]+' |
    tr -d '&' | tr '\n' ' ') "
  echo "| command | file | function | program |"
  echo "|---|---|---|---|"
  for f in tools/*.c; do
    # "VAR NAME RUN" for each `struct cli_command VAR = { .name = ..., .run = ... }`.
    awk '
      match($0, /struct cli_command [a-z_]+ = \{/) {
        v = substr($0, RSTART, RLENGTH); sub(/struct cli_command /, "", v); sub(/ = \{/, "", v)
        name = run = ""; inside = 1; next
      }
      inside && /\.name = "/ { name = $0; sub(/.*\.name = "/, "", name); sub(/".*/, "", name) }
      inside && /\.run = / { run = $0; sub(/.*\.run = /, "", run); sub(/,.*/, "", run) }
      inside && /^\};/ { print v, name, run; inside = 0 }' "$f" |
      while read -r var name fn; do
        if [ "$f" = tools/cairn-pin.c ]; then
          program=cairn-pin
        else
          program=cairn
        fi
        def=$(defined_in "$fn" "$f" tools/*.c common/*.c)
        binary=$program
        if [ "$program" = cairn ] && [[ $light != *" $var "* ]]; then
          binary=libexec/cairn/cairn
        fi
        printf '%s\t| `%s %s` | `%s` | `%s` | `%s` |\n' "$program $name" "$program" "$name" "$def" \
          "$fn" "$binary"
      done
  done | sort -t $'\t' -k1,1 | cut -f2-
  echo
  # The operations, in the order of libfuse's struct.
  local header order tables=() cells
  header=$(pkg-config --variable=includedir fuse3 2>/dev/null || echo /usr/include)/fuse3/fuse_lowlevel.h
  order=$(sed -nE 's/^[[:space:]]*void \(\*([a-z_]+)\).*/\1/p' "$header" 2>/dev/null || true)
  cells=$(for f in fs/*.c; do
    awk '
      match($0, /struct fuse_lowlevel_ops [a-z_]+ = \{/) {
        v = substr($0, RSTART, RLENGTH); sub(/struct fuse_lowlevel_ops /, "", v); sub(/ = \{/, "", v)
        inside = 1; next
      }
      inside && /^\};/ { inside = 0 }
      inside && match($0, /\.[a-z_]+ = [a-z_0-9]+/) {
        s = substr($0, RSTART + 1, RLENGTH - 1); split(s, w, " = "); print v, w[1], w[2]
      }' "$f" | while read -r var op fn; do
      echo "$var $op $fn $(defined_in "$fn" "$f" fs/*.c)"
    done
  done)
  # The read-only mount's, the writable one's, the ALS's, then any other.
  mapfile -t tables < <({
    printf '%s\n' cairnfs_ops cairnfs_rw_ops als_ops
    awk '{ print $1 }' <<<"$cells"
  } | awk -v have=" $(awk '{ printf "%s ", $1 }' <<<"$cells")" '
    !seen[$1]++ && index(have, " " $1 " ")')
  local line="| operation |" rule="|---|" t
  for t in "${tables[@]}"; do
    line="$line $(ops_label "$t") |"
    rule="$rule---|"
  done
  echo "$line"
  echo "$rule"
  local ops
  ops=$( {
    echo "$order"
    awk '{ print $2 }' <<<"$cells"
  } | awk 'NF && !seen[$1]++')
  local op row cell
  for op in $ops; do
    grep -q " $op " <<<"$cells" || continue
    row="| \`$op\` |"
    for t in "${tables[@]}"; do
      cell=$(awk -v t="$t" -v o="$op" '$1 == t && $2 == o { printf "`%s` (`%s`)", $3, $4 }' <<<"$cells")
      row="$row ${cell:--} |"
    done
    echo "$row"
  done
}

# The map again, a row per file: what a newcomer looks for in the README.
gen_files() {
  local map
  map=$(gen_map)
  echo "| file | what it runs or serves |"
  echo "|---|---|"
  # Commands: "| `cairn mount` | `tools/cmd-mount.c` | ..." rows.
  awk -F' [|] ' '/^[|] `cairn/ {
      cmd = $1; sub(/^[|] /, "", cmd); f = $2
      if (f in cmds) cmds[f] = cmds[f] ", " cmd
      else { order[n++] = f; cmds[f] = cmd }
    }
    END { for (i = 0; i < n; i++) print "| " order[i] " | " cmds[order[i]] " |" }' <<<"$map" |
    sort
  # Operations: each cell "`fn` (`file`)" under its table's column.
  awk -F' [|] ' '
    /^[|] operation / { for (i = 2; i <= NF; i++) { k = $i; sub(/ [|]$/, "", k); kind[i] = k }; next }
    /^[|] `[a-z_]+` [|]/ {
      op = $1; sub(/^[|] /, "", op)
      for (i = 2; i <= NF; i++) {
        c = $i; sub(/ [|]$/, "", c)
        if (c == "-") continue
        f = c; sub(/^.*\(/, "", f); sub(/\)$/, "", f)
        key = f " " kind[i]
        if (key in ops) ops[key] = ops[key] ", " op
        else { order[n++] = key; ops[key] = op }
      }
    }
    END {
      for (i = 0; i < n; i++) {
        split(order[i], w, " "); k = order[i]; sub(/^[^ ]+ /, "", k)
        what = (k == "`--als`") ? "podman\047s Additional Layer Store (`cairnfs --als`)" : "a " k " mount"
        print "| " w[1] " | FUSE operations of " what ": " ops[order[i]] " |"
      }
    }' <<<"$map" | sort
}

# podman's words and cairn's: a row per entry of tools/cairn.c's habits[]
# ({WORD, SUB, CMD, OPT, HINT}, each a "string" or NULL).
gen_podman() {
  echo "| podman | cairn |"
  echo "|---|---|"
  sed -n '/^} habits\[\] = {/,/^};/p' tools/cairn.c | perl -ne '
    next unless /^\s*\{((?:"[^"]*"|NULL)(?:,\s*(?:"[^"]*"|NULL)){4})\},/;
    my @f = map { $_ eq "NULL" ? undef : substr($_, 1, -1) } ($1 =~ /("[^"]*"|NULL)/g);
    my ($word, $sub, $cmd, $opt, $hint) = @f;
    my $p = "podman $word" . (defined $sub ? " " . ($sub eq "*" ? "COMMAND" : $sub) : "");
    my $c = !defined $cmd ? "none (exit 2, saying the cairn way: `$hint`)"
          : $cmd eq "*" ? "`cairn COMMAND`, for any cairn command"
          : "`cairn $cmd" . (defined $opt ? " $opt" : "") . "`";
    print "| `$p` | $c |\n";'
}

generate() { # generate NAME
  case $1 in
  layers) bash scripts/check-layers.sh --table ;;
  map) gen_map ;;
  files) gen_files ;;
  podman) gen_podman ;;
  esac
}

page_of() { # page_of NAME: the page that holds the table
  case $1 in
  files) echo README.md ;;
  podman) echo doc/podman.md ;;
  *) echo doc/hacking.md ;;
  esac
}

# The text of DOC between NAME's markers.
current() { sed -n "/^<!-- BEGIN $1 /,/^<!-- END $1 -->/p" "$DOC" | sed '1d;$d'; }

status=0
for name in layers map files podman; do
  DOC=$(page_of "$name")
  if ! grep -q "^<!-- BEGIN $name " "$DOC" || ! grep -q "^<!-- END $name -->" "$DOC"; then
    echo "check-doc-tables: $DOC: no <!-- BEGIN $name ... --> and <!-- END $name --> lines"
    status=1
    continue
  fi
  want=$(generate "$name")
  if $write; then
    tmp=$(mktemp "$DOC.XXXXXX")
    awk -v name="$name" -v file=<(printf '%s\n' "$want") '
      $0 ~ "^<!-- BEGIN " name " " { print; while ((getline l < file) > 0) print l; skip = 1; next }
      $0 ~ "^<!-- END " name " -->" { skip = 0 }
      !skip' "$DOC" >"$tmp"
    chmod --reference="$DOC" "$tmp"
    mv "$tmp" "$DOC"
  elif [ "$(current "$name")" != "$want" ]; then
    echo "check-doc-tables: $DOC: $name differs from the sources (scripts/check-doc-tables.sh --write):"
    diff <(current "$name") <(printf '%s\n' "$want") || true
    status=1
  fi
done
exit $status
