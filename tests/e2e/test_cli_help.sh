#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_cli_help.sh — every command and subcommand of cairn, cairn-pin and
# cairnfs answers -h and --help (cairn help COMMAND too): exit 0, the usage
# on stdout, nothing on stderr, one line per option with its meaning; the
# programs' help lists their commands, each with a whole sentence, and
# says where the store is.
source "$(dirname "$0")/../lib/test-lib.sh"

# helps NAME CMD...: CMD exits 0 with a help on stdout (usage first, an
# options section whose every line is "FLAG  MEANING", -h/--help among
# them) and nothing on stderr; the help is kept in $T/stdout.
helps() {
  local n=$1
  shift
  expect_exit 0 "$n: exit 0" "$@"
  if [ -s "$T/stderr" ]; then fail "$n: says something on stderr: $(head -c 200 "$T/stderr")"; fi
  check "$n: usage first, on stdout" grep -q "^usage: " <(head -1 "$T/stdout")
  check "$n: lists -h, --help" grep -qE '^  -h, --help +[a-z]' "$T/stdout"
  # Every line of the options section: a flag, two spaces, a meaning (or
  # a continued meaning, indented).
  check "$n: every option has a meaning" awk '
    /^options:/ { in_opts = 1; next }
    in_opts && /^$/ { in_opts = 0 }
    in_opts && !/^  (-[^ ]+( [^ ]+)*|   *) +[^ ]/ { bad = 1; print "bad line: " $0 }
    END { exit bad }' "$T/stdout"
  check "$n: no line past 100 columns" awk 'length > 100 { bad = 1; print "too long: " $0 }
    END { exit bad }' "$T/stdout"
}

cairn_commands="import images layers inspect rm gc export fsck pull mount umount mounts help version"
for cmd in $cairn_commands; do
  helps "cairn $cmd --help" cairn "$cmd" --help
  check "cairn $cmd --help: its usage" grep -q "^usage: cairn $cmd" "$T/stdout"
  cp "$T/stdout" "$T/help-long"
  helps "cairn $cmd -h" cairn "$cmd" -h
  check "cairn $cmd -h says the same" cmp -s "$T/stdout" "$T/help-long"
  helps "cairn help $cmd" cairn help "$cmd"
  check "cairn help $cmd says the same" cmp -s "$T/stdout" "$T/help-long"
done
# The options each command takes are in its help.
for pair in "import --quiet" "images --json" "layers --json" "rm --wait" "gc --dry-run" \
  "fsck --repair" "pull --platform" "pull --creds" "pull --insecure" "pull --cert-dir" \
  "pull --jobs" "pull --retries" "pull --quiet" "mount --suid" "mount --dev" "mounts --json"; do
  set -- $pair
  check "cairn $1 --help names $2" grep -qE "^  (-[a-z], )?$2\b" <(cairn "$1" --help)
done
# -q says what each listing prints: ids, a mount's directories.
check "cairn history --help: -q prints ids, no word of mounts" \
  grep -qE "^  -q, --quiet +print the ids only$" <(cairn history --help)
check "cairn mounts --help: -q prints the directories" \
  grep -qE "^  -q, --quiet +print the directories only$" <(cairn mounts --help)
# --help wins over whatever else is on the line: no store is opened.
helps "cairn inspect nosuch:1 --help" cairn --store "$T/no-store" inspect nosuch:1 --help
helps "cairn rm --wait=5 x --help" cairn --store "$T/no-store" rm --wait=5 x --help
helps "cairn import --help" cairn --store "$T/no-store" import --help x:1 nosuch.tar
check "no store was created" [ ! -e "$T/no-store" ]

for top in "--help" "-h" "help"; do
  helps "cairn $top" cairn "$top"
  for cmd in $cairn_commands; do
    check "cairn $top lists $cmd" grep -qE "^  $cmd +[A-Z]" "$T/stdout"
  done
  check "cairn $top names --store" grep -q -- "--store DIR" "$T/stdout"
  check "cairn $top says the store defaults" \
    grep -qF 'else $CAIRN_STORE, else the store of cairn.conf' "$T/stdout"
  check "cairn $top names the user's default" grep -qF '${XDG_DATA_HOME:-~/.local/share}/cairn' \
    "$T/stdout"
  check "cairn $top names the default here" grep -qxF "Default here: $STORE" "$T/stdout"
  check "cairn $top: each command's summary a whole sentence" awk '
    /^commands:/ { c = 1; next }
    c && /^$/ { exit }
    c && !/[.)]$/ { bad = 1; print "cut: " $0 }
    END { exit bad }' "$T/stdout"
done
expect_exit 2 "cairn help of an unknown command is exit 2" cairn help frobnicate
check "and names it" grep -q '^cairn: help: frobnicate: unknown command$' "$T/stderr"

for sub in ls hold wait help version; do
  helps "cairn-pin $sub --help" cairn-pin "$sub" --help
  check "cairn-pin $sub --help: its usage" grep -qE "^usage: cairn-pin.* \\[?$sub\\b" "$T/stdout"
  cp "$T/stdout" "$T/help-long"
  helps "cairn-pin $sub -h" cairn-pin "$sub" -h
  check "cairn-pin $sub -h says the same" cmp -s "$T/stdout" "$T/help-long"
  helps "cairn-pin help $sub" cairn-pin help "$sub"
  check "cairn-pin help $sub says the same" cmp -s "$T/stdout" "$T/help-long"
done
check "cairn-pin wait --help names --timeout" grep -q -- "--timeout SECONDS" <(cairn-pin wait --help)
check "cairn-pin ls --help names --json" grep -q -- "--json" <(cairn-pin ls --help)
for top in "--help" "-h" "help"; do
  helps "cairn-pin $top" cairn-pin "$top"
  for sub in ls hold wait help version; do
    check "cairn-pin $top lists $sub" grep -qE "^  $sub +[A-Z]" "$T/stdout"
  done
  check "cairn-pin $top says the store defaults" \
    grep -qF 'else $CAIRN_STORE, else the store of cairn.conf' "$T/stdout"
done
# hold's COMMAND keeps its own --help.
mkdir -p "$T/layer" && echo hi >"$T/layer/f" && mktar "$T/layer" "$T/layer.tar"
cairn import app:1 "$T/layer.tar" >/dev/null
expect_exit 0 "cairn-pin hold IMAGE -- CMD --help runs CMD with --help" \
  cairn-pin hold app:1 -- sh -c 'echo "$1"' sh --help
check "and CMD got it" grep -qx -- "--help" "$T/stdout"

for h in --help -h; do
  expect_exit 0 "cairnfs $h: exit 0" cairnfs "$h"
  check "cairnfs $h: usage on stdout" grep -q "^usage: cairnfs" "$T/stdout"
  for o in -f -d "-o store=DIR" "-o suid" "-o dev" "-h, --help"; do
    check "cairnfs $h names $o" grep -qE -- "^  $o +[a-z]" "$T/stdout"
  done
  check "cairnfs $h says the store defaults" grep -qF '/var/lib/cairn for root' "$T/stdout"
done

# Every command cairn --help lists, and cairn --help itself, fit in 100
# columns (a terminal's help should not wrap mid-word).
for cmd in $(cairn --help | awk '/^  [a-z][a-z-]* /{ print $1 }' | sort -u); do
  cairn "$cmd" --help >"$T/stdout" 2>/dev/null
  check "cairn $cmd --help: no line past 100 columns" awk 'length > 100 { bad = 1; print "too long: " $0 }
    END { exit bad }' "$T/stdout"
done
check "cairn --help: no line past 100 columns" awk 'length > 100 { bad = 1; print "too long: " $0 }
  END { exit bad }' <(cairn --help)

finish
