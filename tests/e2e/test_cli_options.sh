#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_cli_options.sh — options as getopt_long takes them everywhere: a
# value as --opt=V or --opt V alike (`cairn rm --wait 10 IMG` waits 10 s for
# IMG, it does not remove an image "10"), and a refused option named in
# the error, with why: unknown, needs a value, takes no value.
source "$(dirname "$0")/../lib/test-lib.sh"

mkdir -p "$T/layer" "$T/mnt"
echo hello >"$T/layer/hello"
mktar "$T/layer" "$T/layer.tar"
cairn import app:1 "$T/layer.tar" >/dev/null || exit 1

# refused LINE CMD...: CMD is a usage error (exit 2) whose first line is LINE.
refused() {
  local line=$1
  shift
  expect_exit 2 "$* is a usage error" "$@"
  check "$*: says '$line'" grep -qxF -- "$line" <(head -1 "$T/stderr")
}
refused "cairn: export: -x: unknown option" cairn export -x x.tar app:1
refused "cairn: umount: -x: unknown option" cairn umount -x "$T/mnt"
refused "cairn: inspect: --bogus: unknown option" cairn inspect --bogus app:1
refused "cairn: images: --json: takes no value" cairn images --json=yes
refused "cairn: gc: --dry-run: takes no value" cairn gc --dry-run=1
refused "cairn: pull: --jobs: needs a value" cairn pull --jobs
refused "cairn: pull: -j: needs a value" cairn pull -j
refused "cairn: pull: -x: unknown option" cairn pull -qx "oci:$T/none"
refused "cairn: import: -z: unknown option" cairn import -qz x:1 "$T/layer.tar"
refused "cairn: rm: --bogus: unknown option" cairn rm --bogus=3 app:1
refused "cairn: mount: --bogus: unknown option" cairn mount --bogus app:1 "$T/mnt"
refused "cairn-pin: hold: -x: unknown option" cairn-pin hold -x app:1 -- true
refused "cairn-pin: wait: --timeout: needs a value" cairn-pin wait app:1 --timeout
refused "cairn-pin: ls: --bogus: unknown option" cairn-pin ls --bogus
refused "cairnfs: --bogus: unknown option" cairnfs --bogus app:1 "$T/mnt"
refused "cairnfs: -o: needs a value" cairnfs app:1 "$T/mnt" -o
refused "cairnfs: --store: needs a value" cairnfs app:1 "$T/mnt" --store

# Values: --opt=V and --opt V are the same.
for form in "--jobs=0" "--jobs 0" "-j0" "-j 0"; do
  # shellcheck disable=SC2086
  refused "cairn: pull: --jobs: needs a number from 1 to 64" cairn pull $form "oci:$T/none"
done
for form in "--retries=0" "--retries 0"; do
  # shellcheck disable=SC2086
  refused "cairn: pull: --retries: needs a number from 1 to 100 (attempts)" cairn pull $form "oci:$T/none"
done
# (push reads --retries as pull does: one parser)
for form in "--retries=101" "--retries x"; do
  # shellcheck disable=SC2086
  refused "cairn: push: --retries: needs a number from 1 to 100 (attempts)" cairn push $form app:1 \
    "oci:$T/none"
done
for form in "--store=$T/s2" "--store $T/s2"; do
  # shellcheck disable=SC2086
  check "cairn $form import uses that store" sh -c "cairn $form import -q app:1 '$T/layer.tar' >/dev/null"
done
check "which it created" [ -e "$T/s2/meta.db" ]

hold_image app:1
for form in "--timeout=0.3" "--timeout 0.3"; do
  # shellcheck disable=SC2086
  expect_exit 4 "cairn-pin wait $form times out" timeout 10 cairn-pin wait $form app:1
done
for form in "--wait=0.3" "--wait 0.3"; do
  start=$(date +%s%N)
  # shellcheck disable=SC2086
  expect_exit 4 "cairn rm $form app:1 times out (pinned)" timeout 10 cairn rm $form app:1
  elapsed=$((($(date +%s%N) - start) / 1000000))
  check "cairn rm $form waited about 0.3 s ($elapsed ms)" [ "$elapsed" -ge 300 -a "$elapsed" -lt 5000 ]
  check "cairn rm $form: the error is about app:1 only (after saying it waits)" \
    sh -c "[ \$(wc -l <'$T/stderr') = 2 ] && grep -q '^cairn: rm: app:1: waiting: ' '$T/stderr' &&
           tail -1 '$T/stderr' | grep -q '^cairn: app:1: '"
done
# A bare --wait before an image waits for ever; `--wait -- 10` is an image 10.
expect_exit 124 "cairn rm --wait app:1 still waits after 1 s" timeout 1 cairn rm --wait app:1
expect_exit 124 "cairn rm --wait -- app:1 still waits after 1 s" timeout 1 cairn rm --wait -- app:1
(sleep 1 && kill -9 "$sleeper" "$holder") &
on_exit "kill -9 $!"
expect_exit 0 "cairn rm --wait 10 app:1 removes app:1 once the hold ends" \
  timeout 20 cairn rm --wait 10 app:1
check "and says nothing of an image '10' (only that it waits for app:1)" \
  sh -c "[ \$(wc -l <'$T/stderr') = 1 ] && grep -q '^cairn: rm: app:1: waiting: ' '$T/stderr'"
check "app:1 is gone" sh -c "! cairn inspect app:1 >/dev/null 2>&1"

finish
