#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_pull_retry.sh — transient failures are retried with backoff, with a
# bounded number of attempts and of log lines: a pull started while the
# registry is down succeeds once it comes up; a registry that never comes
# gives one line per retry, then one error line, in bounded time.
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib registry
pull_test_init

setup $OCI_IMAGE layer base.tar base 10 4000
setup $OCI_IMAGE add oci app linux/amd64 base.tar:gzip >/dev/null
setup registry_start "$T/reg"
setup registry_push "$T/oci" app team/app:1
port=$REGISTRY_PORT
registry_stop

# Down, then up: the pull is started first and retries until it answers.
cairn pull --insecure --retries 10 "docker://127.0.0.1:$port/team/app:1" \
  >"$T/late.out" 2>"$T/late.err" &
pull_pid=$!
on_exit "kill $pull_pid"
sleep 1.5
setup registry_start "$T/reg" "$port"
code=0
wait "$pull_pid" || code=$?
if [[ $code == 0 ]]; then ok "pull succeeds once the registry comes up"; else
  fail "pull while the registry was down: exit $code: $(cat "$T/late.err")"; fi
retries=$(grep -c "retry [0-9]*/9 in" "$T/late.err")
if ((retries >= 1 && retries <= 9)); then ok "one log line per retry ($retries)"; else
  fail "retry lines: $retries: $(cat "$T/late.err")"; fi
[[ $(cat "$T/late.out") == $($OCI_IMAGE config-digest oci app) ]] || fail "wrong image id after retries"
registry_stop

# Never up: --retries 3 is 3 attempts, 2 retry lines, 1 error line.
start=$SECONDS
expect_exit 1 "unreachable registry gives up" cairn pull --insecure --retries 3 \
  "docker://127.0.0.1:$port/team/app:2"
(( SECONDS - start < 30 )) || fail "giving up took $((SECONDS - start)) s"
[[ $(grep -c "retry [12]/2 in" "$T/stderr") == 2 ]] || fail "expected 2 retry lines: $(cat "$T/stderr")"
[[ $(grep -c "gave up after 3 attempts" "$T/stderr") == 1 ]] ||
  fail "expected one final error line: $(cat "$T/stderr")"
[[ $(wc -l <"$T/stderr") == 3 ]] || fail "unexpected output: $(cat "$T/stderr")"

# Permanent failures are not retried: a 404 answers at once, one line.
setup registry_start "$T/reg" "$port"
expect_exit 3 "404 is not retried" cairn pull --insecure --retries 5 \
  "docker://127.0.0.1:$port/team/app:missing"
[[ $(wc -l <"$T/stderr") == 1 ]] || fail "404 was retried or chatty: $(cat "$T/stderr")"
finish
