#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_cli_man.sh — the man pages cairn(1), cairn-pin(1), cairnfs(8) and
# cairn-snapshotter(8) (when it is built),
# built from doc/*.scd with scdoc, render with man -l, name every command,
# subcommand and option that the programs' --help lists, document the mount
# options, mount -t fuse.cairnfs and an fstab line, and are installed by
# cmake --install to share/man/man1 and man8, where man finds them by name.
source "$(dirname "$0")/../lib/test-lib.sh"

MAN=$CAIRN_BIN/man
if [ ! -d "$MAN" ]; then
  fail "no $MAN: scdoc was not found when $CAIRN_BIN was configured (scripts/setup.sh installs it)"
  finish
  exit
fi

# render PAGE: the page as man -l shows it, plain text.
render() { MANWIDTH=100 man -l "$MAN/$1" 2>"$T/man.err" | col -bx; }

pages="cairn.1 cairn-pin.1 cairnfs.8"
[ ! -x "$CAIRN_BIN/cairn-snapshotter" ] || pages="$pages cairn-snapshotter.8"
for page in $pages; do
  check "$page: built" [ -s "$MAN/$page" ]
  render "$page" >"$T/$page.txt"
  check "$page: man -l renders it without a warning" [ ! -s "$T/man.err" ]
  check "$page: has NAME, SYNOPSIS, DESCRIPTION, EXIT STATUS, SEE ALSO" sh -c \
    "for s in NAME SYNOPSIS DESCRIPTION 'EXIT STATUS' 'SEE ALSO'; do grep -qx \"\$s\" '$T/$page.txt' || exit 1; done"
done

# Every command that cairn --help lists is a heading of cairn(1), and every
# long option its help names is in the page.
commands=$(cairn --help | awk '/^commands:/ { c = 1; next } c && /^$/ { exit } c { print $1 }')
check "cairn --help lists commands" [ "$(echo "$commands" | wc -w)" -ge 12 ]
for cmd in $commands; do
  check "cairn(1) documents $cmd" grep -qE "^       $cmd( |$)" "$T/cairn.1.txt"
  for opt in $(cairn "$cmd" --help | grep -oE -- '--[a-z][a-z-]*' | sort -u); do
    [ "$opt" = --help ] && continue
    check "cairn(1) names $cmd's $opt" grep -q -- "$opt" "$T/cairn.1.txt"
  done
done
for opt in --store --help --version CAIRN_STORE /var/lib/cairn XDG_DATA_HOME; do
  check "cairn(1) names $opt" grep -q -- "$opt" "$T/cairn.1.txt"
done

subs=$(cairn-pin --help | awk '/^commands:/ { c = 1; next } c && /^$/ { exit } c { print $1 }')
for sub in $subs; do
  check "cairn-pin(1) documents $sub" grep -qE "^       $sub( |$)" "$T/cairn-pin.1.txt"
  for opt in $(cairn-pin "$sub" --help | grep -oE -- '--[a-z][a-z-]*' | sort -u); do
    [ "$opt" = --help ] && continue
    check "cairn-pin(1) names $sub's $opt" grep -q -- "$opt" "$T/cairn-pin.1.txt"
  done
done

for want in "MOUNT OPTIONS" "store=DIR" "suid, nosuid" "dev, nodev" "mount -t fuse.cairnfs" \
  "/etc/fstab" "fuse.cairnfs  store=" --store --version; do
  check "cairnfs(8) has '$want'" grep -qF -- "$want" "$T/cairnfs.8.txt"
done
for opt in $(cairnfs --help | grep -oE -- '^  -[a-zA-Z]' | sort -u) \
  $(cairnfs --help | sed -nE 's/^  -o ([a-z_]+).*/\1/p'); do
  check "cairnfs(8) names $opt" grep -qE -- "^       \\*?$opt\\b|^       .*, $opt\\b" "$T/cairnfs.8.txt"
done
if [ -x "$CAIRN_BIN/cairn-snapshotter" ]; then
  for opt in $("$CAIRN_BIN/cairn-snapshotter" --help | grep -oE -- '--[a-z][a-z-]*' | sort -u); do
    check "cairn-snapshotter(8) names $opt" grep -qE -- "^       $opt\b" "$T/cairn-snapshotter.8.txt"
  done
  check "cairn-snapshotter(8) shows containerd's proxy_plugins" \
    grep -qF '[proxy_plugins.cairn]' "$T/cairn-snapshotter.8.txt"
fi

# cmake --install puts them in share/man/manSECTION, where man finds them.
check "cmake --install works" sh -c "cmake --install '$CAIRN_BIN' --prefix '$T/inst' >'$T/install.log'"
installed="man1/cairn.1 man1/cairn-pin.1 man8/cairnfs.8"
[ ! -x "$CAIRN_BIN/cairn-snapshotter" ] || installed="$installed man8/cairn-snapshotter.8"
for page in $installed; do
  check "installed: share/man/$page" cmp -s "$MAN/${page#*/}" "$T/inst/share/man/$page"
done
check "man -M finds cairn by name" sh -c "man -M '$T/inst/share/man' cairn | grep -q 'cairn-pin(1)'"
check "man -M finds cairnfs(8) by name" sh -c "man -M '$T/inst/share/man' 8 cairnfs | grep -q 'fuse.cairnfs'"

finish
