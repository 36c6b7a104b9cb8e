# SPDX-License-Identifier: Apache-2.0
# cairn.bash — bash completion for cairn, cairn-pin, cairnfs and
# cairn-snapshotter, installed by
# `cmake --install` as share/bash-completion/completions/cairn,
# .../cairn-pin and .../cairn-snapshotter (each copy registers all).
#
# Commands and options come from the programs' own --help, so completion
# never disagrees with them; image names from `cairn images`, mount
# directories from `cairn mounts`, both in the store the line names with
# --store, if any. Words are split on blanks only (COMP_LINE), so names
# with ':' (app:1, docker.io/library/alpine:3.19) complete whole. A store
# that does not exist yet is not asked (asking would create it).
#
# The listings are split on newlines (IFS) on purpose:
# shellcheck disable=SC2046

# _cairn_flags PROG [CMD]: one line "FLAG ARG" per option of PROG's (or
# CMD's) help; ARG is 0 (no value), 1 (a value) or 2 (an optional value).
_cairn_flags() {
  "$@" --help 2>/dev/null | awk '
    /^options:/ { in_opts = 1; next }
    in_opts && /^$/ { in_opts = 0 }
    in_opts && /^  -/ {
      col = substr($0, 3); sub(/  .*/, "", col)   # the flag column
      n = split(col, f, ", ")
      arg = 0
      if (f[n] ~ / /) { arg = f[n] ~ / \[/ ? 2 : 1; sub(/ .*/, "", f[n]) }
      sub(/\[?=.*/, "", f[n])   # --tls-verify[=BOOL]: its value only after =
      for (i = 1; i <= n; i++) print f[i], arg
    }'
}

# _cairn_commands PROG: the commands its help lists.
_cairn_commands() {
  "$1" --help 2>/dev/null | awk '/^commands:/ { c = 1; next } c && /^$/ { exit } c { print $1 }'
}

# _cairn_store_exists STORE_ARGS...: true if the store they name (or the
# default one, as cairn --help says it) exists.
_cairn_store_exists() {
  local dir
  case $1 in
  --store) dir=$2 ;;
  --store=*) dir=${1#--store=} ;;
  *) dir=$(cairn --help 2>/dev/null | sed -n 's/^Default here: //p') ;;
  esac
  [[ -n $dir && -e $dir/meta.db ]]
}

# _cairn_images STORE_ARGS...: every image name of the store, and the
# short form a podman user types of a localhost/ one (app:1).
_cairn_images() {
  _cairn_store_exists "$@" || return
  cairn "$@" images --format '{{.Repository}}:{{.Tag}}' 2>/dev/null |
    awk '!/<none>/ { print; if ($0 ~ /^localhost\//) print substr($0, 11) }'
}

# _cairn_mount_dirs STORE_ARGS...: every directory the store has a mount on.
_cairn_mount_dirs() {
  _cairn_store_exists "$@" || return
  cairn "$@" mounts 2>/dev/null | awk 'NR > 1 { print $1 }'
}

# _cairn_reply CUR WORD...: COMPREPLY = the words starting with CUR, less
# what readline keeps of CUR before its last ':' or '=' (word breaks).
_cairn_reply() {
  local cur=$1 keep w
  shift
  keep=${cur%"${cur##*[:=]}"}
  COMPREPLY=()
  for w in "$@"; do
    [[ $w == "$cur"* ]] && COMPREPLY+=("${w#"$keep"}")
  done
}

# _cairn_files CUR [-d]: files (or directories) named CUR*.
_cairn_files() {
  compopt -o filenames 2>/dev/null
  local IFS=$'\n'
  # shellcheck disable=SC2207
  COMPREPLY=($(compgen "${2:--f}" -- "$1"))
}

# _cairn_complete PROG: fills COMPREPLY for the line being completed.
_cairn_complete() {
  local prog=$1 line=${COMP_LINE:0:COMP_POINT}
  local -a words store=() operands=()
  read -ra words <<<"$line"
  if [[ ${#words[@]} -eq 0 || $line =~ [[:space:]]$ ]]; then words+=(""); fi
  local n=$((${#words[@]} - 1)) cur=${words[-1]} cmd="" flags="" prev_arg="" after_dashdash=""
  flags=$(_cairn_flags "$prog")
  local i w kind
  for ((i = 1; i < n; i++)); do
    w=${words[i]}
    if [[ -n $after_dashdash ]]; then
      operands+=("$w")
      continue
    fi
    case $w in
    --store)
      store=(--store "${words[i + 1]}")
      if ((i + 1 == n)); then prev_arg=--store; fi
      ((i++))
      continue
      ;;
    --store=*) store=("$w"); continue ;;
    --trust-store) store+=(--trust-store); continue ;;
    --) after_dashdash=1; operands+=("$w"); continue ;;
    -*)
      kind=$(awk -v f="${w%%=*}" '$1 == f { print $2 }' <<<"$flags")
      if [[ $w != *=* && $kind == 1 ]] ||
        [[ $w != *=* && $kind == 2 && ${words[i + 1]} =~ ^[0-9.]+$|^inf$ ]]; then
        if ((i + 1 == n)); then prev_arg=$w; fi
        ((i++))
      fi
      continue
      ;;
    esac
    if [[ -z $cmd ]]; then
      cmd=$w
      flags=$(_cairn_flags "$prog" "$cmd")
    else
      operands+=("$w")
    fi
  done

  # The value of an option.
  case $prev_arg in
  --store | --cert-dir) _cairn_files "$cur" -d; return ;;
  --compress) _cairn_reply "$cur" gzip zstd none; return ;;
  --format) _cairn_reply "$cur" zstd:chunked estargz; return ;;
  --authfile) _cairn_files "$cur"; return ;;
  --filter)
    _cairn_reply "$cur" dangling=true dangling=false reference=
    compopt -o nospace 2>/dev/null
    return
    ;;
  --change | -c)
    _cairn_reply "$cur" CMD= ENTRYPOINT= ENV= WORKDIR= USER= LABEL= EXPOSE= STOPSIGNAL=
    compopt -o nospace 2>/dev/null
    return
    ;;
  ?*) COMPREPLY=(); return ;;
  esac
  case $cur in
  --store=* | --cert-dir=*) _cairn_files "${cur#*=}" -d; return ;;
  -*)
    if [[ -z $after_dashdash ]]; then
      _cairn_reply "$cur" $(awk '{ print $1 }' <<<"$flags")
      return
    fi
    ;;
  esac
  if [[ -z $cmd ]]; then
    _cairn_reply "$cur" $(_cairn_commands "$prog")
    return
  fi

  local IFS=$'\n' nth=${#operands[@]}
  case $prog:$cmd in
  cairn:help | cairn-pin:help)
    ((nth == 0)) && _cairn_reply "$cur" $(_cairn_commands "$prog")
    ;;
  cairn:image) # podman's words (cairn image ls is cairn images...)
    ((nth == 0)) && _cairn_reply "$cur" ls list rm prune $(_cairn_commands "$prog")
    ((nth >= 1)) && [[ ${operands[0]} == @(rm|inspect|history|export|tag|push) ]] &&
      _cairn_reply "$cur" $(_cairn_images "${store[@]}")
    ;;
  cairn:system)
    ((nth == 0)) && _cairn_reply "$cur" df info
    ;;
  cairn:inspect | cairn:rm | cairn:rmi | cairn:export | cairn:fill | cairn:history | cairn-pin:ls | cairn-pin:wait)
    _cairn_reply "$cur" $(_cairn_images "${store[@]}")
    ;;
  cairn:mount | cairn:bundle)
    if [[ $cmd == bundle && " ${words[*]} " == *" --rm "* ]]; then
      _cairn_files "$cur" -d
    elif [[ $cmd == mount && " ${words[*]} " == *" --upgrade "* ]]; then
      ((nth == 0)) && _cairn_reply "$cur" $(_cairn_mount_dirs "${store[@]}")
    elif [[ $cmd == mount && " ${words[*]} " == *" --restore "* ]]; then
      :
    elif ((nth == 0)); then
      _cairn_reply "$cur" $(_cairn_images "${store[@]}")
    elif ((nth == 1)); then
      _cairn_files "$cur" -d
    fi
    ;;
  cairn:umount)
    _cairn_reply "$cur" $(_cairn_mount_dirs "${store[@]}")
    [[ ${#COMPREPLY[@]} -gt 0 ]] || _cairn_files "$cur" -d
    ;;
  cairn:tag)
    ((nth == 0)) && _cairn_reply "$cur" $(_cairn_images "${store[@]}")
    ;;
  cairn:commit)
    if ((nth == 0)); then
      _cairn_reply "$cur" $(_cairn_mount_dirs "${store[@]}")
      [[ ${#COMPREPLY[@]} -gt 0 ]] || _cairn_files "$cur" -d
    elif ((nth == 1)); then
      _cairn_reply "$cur" $(_cairn_images "${store[@]}")
    fi
    ;;
  cairn:import)
    ((nth >= 1)) && _cairn_files "$cur"
    ;;
  cairn:pull)
    if ((nth == 0)); then
      _cairn_reply "$cur" oci: oci-archive: docker-archive: docker://
      [[ ${#COMPREPLY[@]} -gt 0 ]] && compopt -o nospace 2>/dev/null
    fi
    ;;
  cairn:push)
    if ((nth == 0)); then
      _cairn_reply "$cur" $(_cairn_images "${store[@]}")
    elif ((nth == 1)); then
      _cairn_reply "$cur" oci: oci-archive: docker-archive: docker://
      [[ ${#COMPREPLY[@]} -gt 0 ]] && compopt -o nospace 2>/dev/null
    fi
    ;;
  cairn-pin:hold)
    if [[ -z $after_dashdash ]]; then
      _cairn_reply "$cur" $(_cairn_images "${store[@]}") $( ((nth >= 1)) && echo --)
    elif [[ -n $after_dashdash && ${operands[-1]} == -- ]]; then
      # shellcheck disable=SC2207
      COMPREPLY=($(compgen -c -- "$cur"))
    else
      _cairn_files "$cur"
    fi
    ;;
  *) COMPREPLY=() ;;
  esac
}

_cairn() { _cairn_complete cairn; }
_cairn_pin() { _cairn_complete cairn-pin; }
complete -F _cairn cairn
complete -F _cairn_pin cairn-pin

# cairnfs: its options; directories for its operands (IMAGE DIR, or --als
# PATH, podman's Additional Layer Store).
_cairnfs() {
  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD - 1]}
  case $prev in
  --store | --podman-root) _cairn_files "$cur" -d; return ;;
  -o) COMPREPLY=(); return ;;
  esac
  if [[ $cur == -* ]]; then
    _cairn_reply "$cur" --als --podman-root -f -d -o --store --trust-store --help --version
    return
  fi
  _cairn_files "$cur" -d
}
complete -F _cairnfs cairnfs

# cairn-snapshotter: its options; a directory for --store, a path for
# --address (its socket), seconds for --idle.
_cairn_snapshotter() {
  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD - 1]}
  case $prev in
  --store) _cairn_files "$cur" -d; return ;;
  --address) _cairn_files "$cur"; return ;;
  --idle) _cairn_reply "$cur" 0 5 60 300; return ;;
  esac
  _cairn_reply "$cur" --store --address --no-fill --idle --help --version
}
complete -F _cairn_snapshotter cairn-snapshotter
