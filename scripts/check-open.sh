#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# check-open.sh [-v] [ROOT] — checks that no C source of store/, fs/, tools/ or
# snapshotter/ (under ROOT, default this checkout) creates a file by a name that
# another user could have made first, and exits 1, printing each offence as
# "check-open: FILE:LINE: WHAT", if one does.
#
# cairn runs as root and writes into directories others may control (a
# bundle's DIR, an OCI layout, an auth.json's directory): a file opened
# there with O_CREAT alone is written through a symlink or a file someone
# planted. So each place that may create a file must say how it cannot be
# redirected:
#   - an open/openat whose flags hold O_CREAT also holds O_EXCL (a planted
#     name fails it), O_NOFOLLOW (a planted symlink fails it) or O_TMPFILE
#     (there is no name), or
#   - its statement carries the comment "check-open: private: WHY", WHY
#     saying why the directory is the store's own (0700, nobody else's).
# creat() and fopen()/freopen() that may create ("w", "a" modes) have no
# such flags: only the comment lets them pass.
# A statement is read whole (from the line after the previous ';', '{' or
# '}' to its ';', within a few lines), so flags split over lines count.
# -v lists every site with its verdict.
set -euo pipefail
verbose=0
if [ "${1:-}" = -v ]; then
  verbose=1
  shift
fi
cd "${1:-$(dirname "$0")/..}"

shopt -s nullglob
files=(store/*.c store/remote/*.c fs/*.c tools/*.c snapshotter/*.c)
[ ${#files[@]} -gt 0 ] || { echo "check-open: no C sources under $(pwd)" >&2; exit 1; }

awk -v verbose="$verbose" '
  FNR == 1 && NR > 1 { check_file(); n = 0 }
  { line[++n] = $0; file = FILENAME }
  # The text of a line without its comments (roughly: enough to know
  # whether a line is code and how a statement ends).
  function code(s) {
    gsub(/\/\*.*\*\//, "", s)
    sub(/\/\/.*/, "", s)
    sub(/\/\*.*/, "", s)
    if (s ~ /^[ \t]*\*/) s = ""
    return s
  }
  function statement(i,    a, b, s, k) {
    a = i
    while (a > 1 && i - a < 6 && code(line[a - 1]) !~ /[;{}][ \t]*$/) a--
    b = i
    while (b < n && b - i < 6 && code(line[b]) !~ /;/) b++
    s = ""
    for (k = a; k <= b; k++) s = s " " line[k]
    return s
  }
  function site(i, what, ok_flags,    s, why) {
    s = statement(i)
    why = ""
    if (match(s, /check-open: private: [^*]*[A-Za-z][^*]*\*\//)) why = "annotated private"
    else if (ok_flags && s ~ /O_EXCL|O_NOFOLLOW|O_TMPFILE/) why = "safe flags"
    if (why != "") {
      if (verbose) printf "check-open: %s:%d: %s: ok (%s)\n", file, i, what, why
      return
    }
    printf "check-open: %s:%d: %s without O_EXCL, O_NOFOLLOW or O_TMPFILE (or a \"check-open: private: WHY\" comment)\n", file, i, what
    bad = 1
  }
  function check_file(    i, c) {
    for (i = 1; i <= n; i++) {
      c = code(line[i])
      if (c ~ /O_CREAT/) site(i, "O_CREAT", 1)
      if (c ~ /(^|[^A-Za-z0-9_])creat[ \t]*\(/) site(i, "creat()", 0)
      if (c ~ /(^|[^A-Za-z0-9_])(fopen|freopen)[ \t]*\(.*,[ \t]*"[^"]*[wa][^"]*"[ \t]*[,)]/)
        site(i, "fopen() for writing", 0)
    }
  }
  END { check_file(); exit bad }
' "${files[@]}"
