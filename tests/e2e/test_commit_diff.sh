#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_commit_diff.sh — the differential test of `cairn commit`:
# random sequences of operations (create, write, truncate, renames of files
# and directories from every layer, hardlinks, symlinks, chmod/chown,
# xattrs (of symlinks and fifos too, the image's hardlinked ones among
# them, through a name left after an unlink of another), utime, unlink,
# rmdir, removal of trees, opaque replacements) on a --rw mount of a
# three-layer image and on a plain copy of the image; after each round the
# rw view, the committed image (a fresh read-only mount) and the mount
# moved onto it must equal the copy (commit_diff.py). Fixed sequences
# (commit_diff.py's FIXED: cases a random one found once, some with the
# kernel's caches dropped between operations) run first, every time.
#
#   CAIRN_COMMIT_DIFF_SEQS   sequences to run (default 40: the CI slice;
#                            10 in a sanitizer build, where each costs 5
#                            times more; the long target is e.g. 5000)
#   CAIRN_COMMIT_DIFF_SEED   the seed (default: a new one each run, the CI
#                            slice's too, printed first: it replays them)
#   CAIRN_COMMIT_DIFF_ONLY   replay that one sequence of the seed
#   CAIRN_COMMIT_DIFF_KEEP_GOING=1  report every differing sequence, not the first
#   CAIRN_COMMIT_DIFF_DETACH=1  run in a mount namespace of its own (other
#                            users' FUSE mounts dropped from it) that a
#                            loop copies for 1 s every 2 s, as a container
#                            does: umounts then exit 4 and a sequence
#                            mounts the directory of a detached mount
if [ "${CAIRN_COMMIT_DIFF_DETACH:-}" = 1 ] && [ -z "${_CAIRN_COMMIT_DIFF_NS:-}" ]; then
  exec env _CAIRN_COMMIT_DIFF_NS=1 "$(dirname "$0")/../lib/private-ns" "" bash "$0" "$@"
fi
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib mount
set -e

if [ -n "${_CAIRN_COMMIT_DIFF_NS:-}" ]; then
  # The fstype follows the "-" field of a mountinfo line.
  awk '{ for (i = 7; i < NF; i++) if ($i == "-") { if ($(i + 1) ~ /^fuse/) print $5; break } }' \
    /proc/self/mountinfo | tac | while read -r d; do
    umount -l "$(printf '%b' "$d")" 2>/dev/null || true
  done
  bg_start bash -c 'while :; do "$1" "$2" sleep 1; sleep 1; done' sh "${PRIVATE_NS[@]}"
fi

seqs=${CAIRN_COMMIT_DIFF_SEQS:-$([ "${CAIRN_SANITIZE:-OFF}" = ON ] && echo 10 || echo 40)}
seed=${CAIRN_COMMIT_DIFF_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}
echo "seed $seed, ${CAIRN_COMMIT_DIFF_ONLY:+only sequence $CAIRN_COMMIT_DIFF_ONLY of }$seqs sequences (CAIRN_COMMIT_DIFF_SEED=$seed replays them)"
export CAIRN_STORE=$STORE
mkdir -p "$T/work"
python3 "$HELPERS/commit_diff.py" setup "$T/work" || fail "setting up the base image"
python3 "$HELPERS/commit_diff.py" run "$T/work" "$seed" "$seqs" \
  "${CAIRN_COMMIT_DIFF_ONLY:-}" || fail "a commit differs from the copy (seed $seed, above)"
ok "$seqs random sequences: the rw view, the commit and the moved mount equal a plain copy"
