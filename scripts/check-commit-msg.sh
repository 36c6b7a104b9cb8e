#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# check-commit-msg.sh — the shape of a commit message, as git's
# Documentation/SubmittingPatches and erofs-utils keep it:
#
#   area: what changed          (the subject: at most 72 characters)
#                               (a blank line)
#   Why, in a body of one or more lines.
#
# The area is one or more words before the first ": " (`store`, `cairnfs`,
# `tests, bench`, `pull --lazy`); a merge's subject says what it brings in
# the same form, never just a branch ("Merge h25", "Merge branch 'x'").
#
#   check-commit-msg.sh FILE        a message in FILE: git's commit-msg hook
#                                   (ln -s ../../scripts/check-commit-msg.sh
#                                   .git/hooks/commit-msg)
#   check-commit-msg.sh --range R   every commit of the git range R
#                                   (scripts/test.sh: the commits since the
#                                   rule was made)
#
# Prints one line per broken rule (COMMIT or FILE: what); exit 1 if any.
set -euo pipefail

# check_message WHERE IS_MERGE < MESSAGE: the rules, on a message read
# from stdin with git's comment lines already gone.
check_message() {
  local where=$1 merge=$2 subject blank body bad=0
  IFS= read -r subject || subject=
  IFS= read -r blank || blank=
  body=$(cat)
  if [ "${#subject}" -gt 72 ]; then
    echo "$where: subject is ${#subject} characters (at most 72): $subject"
    bad=1
  fi
  if ! [[ $subject =~ ^[A-Za-z0-9._/+-][^:]{0,48}:\ [^[:space:]] ]]; then
    echo "$where: subject is not \"area: what changed\": $subject"
    bad=1
  fi
  if [[ $subject =~ ^Merge\ (branch\ |remote-tracking\ branch\ )?[\'\"]?[A-Za-z0-9_/.-]+[\'\"]?(\ into\ .*)?$ ||
    $subject =~ ^Merge\ h[0-9]+ ]]; then
    echo "$where: a merge names its branch, not what it brings: $subject"
    bad=1
  fi
  if [ -n "$blank" ]; then
    echo "$where: the subject is not followed by a blank line"
    bad=1
  fi
  if [ "$merge" = no ] && [ -z "$(printf '%s' "$body" | tr -d '[:space:]')" ]; then
    echo "$where: no body: say why the change is made"
    bad=1
  fi
  return $bad
}

# strip_comments: drops git's "# ..." lines and the diff `commit -v` adds.
strip_comments() { sed -e '/^# ------------------------ >8 ------------------------$/,$d' -e '/^#/d'; }

if [ "${1:-}" = --range ]; then
  [ $# -eq 2 ] || { echo "usage: check-commit-msg.sh --range A..B" >&2; exit 2; }
  status=0
  for c in $(git rev-list "$2"); do
    merge=no
    [ "$(git rev-list --parents -n 1 "$c" | wc -w)" -gt 2 ] && merge=yes
    git log -1 --format=%B "$c" | check_message "$(git log -1 --format=%h "$c")" $merge || status=1
  done
  exit $status
fi
[ $# -eq 1 ] || { echo "usage: check-commit-msg.sh FILE | --range A..B" >&2; exit 2; }
merge=no
[ -f "$(git rev-parse --git-dir 2>/dev/null)/MERGE_HEAD" ] && merge=yes
strip_comments <"$1" | check_message "$1" $merge
