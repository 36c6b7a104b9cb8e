#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_cli_completion.sh — bash completion for cairn and cairn-pin (and
# cairn-snapshotter's options and directories, when it is built), as
# cmake --install puts it: bash-completion finds it by the command's name
# (complete -p), and completing scripted lines (COMP_WORDS, COMP_LINE)
# gives the commands, each command's options (as its --help lists them),
# image names (whole, colons included), mount directories and directories
# for --store, podman's words (image ls, system df, rmi, --filter); a
# store that does not exist is not created by completing.
source "$(dirname "$0")/../lib/test-lib.sh"

BASH_COMPLETION=/usr/share/bash-completion/bash_completion
mkdir -p "$T/layer" "$T/mnt" "$T/dirs/sub-a" "$T/dirs/sub-b"
echo hello >"$T/layer/hello"
mktar "$T/layer" "$T/layer.tar"
cairn import app:1 "$T/layer.tar" >/dev/null || exit 1
cairn import docker.io/library/alpine:3.19 "$T/layer.tar" >/dev/null || exit 1
on_exit "umount -l '$T/mnt'"
cairn mount app:1 "$T/mnt" || exit 1

check "cmake --install works" sh -c "cmake --install '$CAIRN_BIN' --prefix '$T/inst' >'$T/install.log'"
comp_dir=$T/inst/share/bash-completion/completions
for prog in cairn cairn-pin; do
  check "installed: share/bash-completion/completions/$prog" [ -s "$comp_dir/$prog" ]
done

# completes PROG LINE: the completions bash-completion's loader gives for
# LINE (cursor at its end), one per line, in a fresh bash that knows only
# the installed tree (XDG_DATA_DIRS, as /usr/local/share is by default).
completes() {
  local prog=$1 line=$2
  env -i PATH="$T/inst/bin:/usr/sbin:/usr/bin:/sbin:/bin" HOME="$T" CAIRN_STORE="$STORE" \
    XDG_DATA_DIRS="$T/inst/share" LINE="$line" PROG="$prog" bash --norc --noprofile -c '
    source '"$BASH_COMPLETION"'
    __load_completion "$PROG" || { echo "no completion for $PROG"; exit 1; }
    spec=$(complete -p "$PROG") || exit 1
    fn=$(sed -n "s/.* -F \([^ ]*\) .*/\1/p" <<<"$spec")
    COMP_LINE=$LINE COMP_POINT=${#LINE}
    read -ra COMP_WORDS <<<"$LINE"
    [[ $LINE == *" " ]] && COMP_WORDS+=("")
    COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
    COMPREPLY=()
    "$fn" "$PROG" "${COMP_WORDS[-1]}" "${COMP_WORDS[-2]}" 2>/dev/null
    printf "%s\n" "${COMPREPLY[@]}"'
}

# expect NAME PROG LINE WORD...: completing LINE offers exactly WORD...
expect() {
  local n=$1 prog=$2 line=$3
  shift 3
  local got want
  got=$(completes "$prog" "$line" | sort | tr '\n' ' ')
  want=$(printf '%s\n' "$@" | sort | tr '\n' ' ')
  if [ "$got" = "$want" ]; then ok "$n"; else fail "$n: '$line' gives '$got', want '$want'"; fi
}
# offers NAME PROG LINE WORD...: completing LINE offers at least WORD...
offers() {
  local n=$1 prog=$2 line=$3 w
  shift 3
  completes "$prog" "$line" >"$T/got"
  for w in "$@"; do
    grep -qxF -- "$w" "$T/got" || { fail "$n: '$line' lacks '$w' (got: $(tr '\n' ' ' <"$T/got"))"; return; }
  done
  ok "$n"
}

for prog in cairn cairn-pin; do
  check "complete -p $prog after bash-completion loads it" sh -c "env -i PATH='$T/inst/bin:/usr/bin:/bin' \
    XDG_DATA_DIRS='$T/inst/share' bash --norc -c 'source $BASH_COMPLETION; __load_completion $prog; \
    complete -p $prog' | grep -q -- '-F _'"
done

commands=$(cairn --help | awk '/^commands:/ { c = 1; next } c && /^$/ { exit } c { print $1 }')
# shellcheck disable=SC2086
expect "cairn <TAB>: every command" cairn "cairn " $commands
expect "cairn i<TAB>: import images info inspect" cairn "cairn i" import images info inspect
expect "cairn --st<TAB>" cairn "cairn --st" --store
expect "cairn --ver<TAB>" cairn "cairn --ver" --version
# shellcheck disable=SC2046
expect "cairn pull -<TAB>: pull's options, as its --help lists them" cairn "cairn pull -" \
  $(cairn pull --help | sed -nE '/^options:/,/^$/ s/^  (-[-a-zA-Z]+)[^ ,]*(, (--[-a-z]+))?.*/\1 \3/p')
offers "cairn pull --<TAB> has --jobs and --cert-dir" cairn "cairn pull --" --jobs --cert-dir
expect "cairn rm --w<TAB>" cairn "cairn rm --w" --wait
expect "cairn rm <TAB>: the image names" cairn "cairn rm " app:1 localhost/app:1 docker.io/library/alpine:3.19
expect "cairn rm d<TAB>" cairn "cairn rm d" docker.io/library/alpine:3.19
# bash breaks words at ':'; what is offered is what follows the typed colon.
expect "cairn rm app:<TAB>: the tag" cairn "cairn rm app:" 1
expect "cairn rm --wait <TAB>: images (a bare --wait)" cairn "cairn rm --wait " app:1 localhost/app:1 \
  docker.io/library/alpine:3.19
expect "cairn rm --wait 10 a<TAB>: 10 is --wait's" cairn "cairn rm --wait 10 a" app:1
expect "cairn inspect a<TAB>" cairn "cairn inspect a" app:1
expect "cairn export a<TAB>" cairn "cairn export a" app:1
expect "cairn mount a<TAB>: an image first" cairn "cairn mount a" app:1
expect "cairn mount app:1 DIR<TAB>: then directories" cairn "cairn mount app:1 $T/dirs/sub" \
  "$T/dirs/sub-a" "$T/dirs/sub-b"
expect "cairn umount <TAB>: the mount directories" cairn "cairn umount " "$T/mnt"
expect "cairn --store DIR<TAB>: directories" cairn "cairn --store $T/dirs/s" "$T/dirs/sub-a" \
  "$T/dirs/sub-b"
expect "cairn --store STORE rm a<TAB>: that store's images" cairn "cairn --store $STORE rm a" app:1
expect "cairn --store=STORE rm a<TAB>" cairn "cairn --store=$STORE rm a" app:1
expect "cairn system <TAB>: podman's df and info" cairn "cairn system " df info
offers "cairn image <TAB>: ls, prune, and cairn's commands" cairn "cairn image " ls list prune inspect tag
expect "cairn image inspect a<TAB>: images" cairn "cairn image inspect a" app:1
expect "cairn rmi a<TAB>: images, as rm" cairn "cairn rmi a" app:1
expect "cairn images --filter <TAB>" cairn "cairn images --filter " dangling=true dangling=false reference=
expect "cairn --store NEW rm <TAB>: nothing" cairn "cairn --store $T/new rm " 
check "and NEW was not created" [ ! -e "$T/new" ]
expect "cairn help m<TAB>" cairn "cairn help m" mount mounts
expect "cairn pull --jobs <TAB>: a value, nothing offered" cairn "cairn pull --jobs "
expect "cairn pull d<TAB>: the transports" cairn "cairn pull d" docker-archive: docker://
expect "cairn pull oci-<TAB>: oci-archive:" cairn "cairn pull oci-" oci-archive:
expect "cairn push IMAGE oci-<TAB>: oci-archive:" cairn "cairn push app:1 oci-" oci-archive:
offers "cairn import NAME FILE<TAB>: files" cairn "cairn import x:1 $T/lay" "$T/layer.tar"

expect "cairn-pin <TAB>: the subcommands" cairn-pin "cairn-pin " ls hold wait help version
expect "cairn-pin wait --<TAB>" cairn-pin "cairn-pin wait --" --timeout --help
expect "cairn-pin wait a<TAB>" cairn-pin "cairn-pin wait a" app:1
expect "cairn-pin hold a<TAB>" cairn-pin "cairn-pin hold a" app:1
expect "cairn-pin hold IMAGE <TAB>: another image or --" cairn-pin "cairn-pin hold app:1 " app:1 localhost/app:1 docker.io/library/alpine:3.19 --
offers "cairn-pin hold IMAGE -- sle<TAB>: commands" cairn-pin "cairn-pin hold app:1 -- slee" sleep
expect "cairn-pin ls a<TAB>" cairn-pin "cairn-pin ls a" app:1

# cairn-snapshotter, when built (gRPC and protobuf-c there).
if [ -x "$CAIRN_BIN/cairn-snapshotter" ]; then
  expect "cairn-snapshotter -<TAB>: its options" cairn-snapshotter "cairn-snapshotter -" \
    --store --address --no-fill --idle --help --version
  expect "cairn-snapshotter --store <TAB>: directories" cairn-snapshotter \
    "cairn-snapshotter --store $T/dirs/" "$T/dirs/sub-a" "$T/dirs/sub-b"
fi

finish
