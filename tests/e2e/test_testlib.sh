#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_testlib.sh — tests/lib/test-lib.sh, the library every e2e test
# stands on: a failed check is reported `not ok - …`, stops the test and
# makes it exit non-zero, and the cleanup stack still runs (background
# processes killed, on_exit commands run, mounts under $T detached, $T
# removed); a failure in a subshell or an unchecked failure under set -e
# fails the test too, and so does a sanitizer report; wait_for runs its
# command anew each try and is bounded; PRIVATE_NS gives a mount
# namespace without other tests' mounts. Each case is a small test script
# run as a child, as ctest runs a test.
source "$(dirname "$0")/../lib/test-lib.sh"

# child NAME BODY: runs a test script that sources the library and then
# BODY; its output in $T/NAME.out, its exit code in $T/NAME.rc. The child
# records its $T in $T/NAME.t.
child() {
  local name=$1
  {
    echo "source '$TESTLIB/test-lib.sh'"
    echo "echo \"\$T\" >'$T/$name.t'"
    echo "$2"
  } >"$T/$name.sh"
  local rc=0
  timeout 60 bash "$T/$name.sh" >"$T/$name.out" 2>&1 || rc=$?
  echo "$rc" >"$T/$name.rc"
}
rc_is() { [ "$(cat "$T/$1.rc")" = "$2" ]; }
out_has() { grep -qxF -- "$2" "$T/$1.out"; }
gone() { [ ! -e "$(cat "$T/$1.t")" ]; }

# ---- a planted failure: reported, stops the test, exit 1, cleanups run
child planted "
bg_start sleep 300
echo \$! >'$T/planted.bg'
sleep 300 &
echo \$! >'$T/planted.job'
on_exit 'echo ran >\"$T/planted.on_exit\"'
mkdir \"\$T/mnt\"
mount -t tmpfs tmpfs \"\$T/mnt\"
echo \"\$T/mnt\" >'$T/planted.mnt'
check 'before' true
check 'planted' false
check 'after' true
finish"
check "a failed check exits 1" rc_is planted 1
check "it is reported as not ok" out_has planted "not ok - planted"
check "the check before it is reported ok" out_has planted "ok - before"
check "the test stops at the failure" sh -c "! grep -q 'after' '$T/planted.out'"
check "the on_exit command ran" test -e "$T/planted.on_exit"
check "the bg_start process was killed" wait_for 5 pid_gone "$(cat "$T/planted.bg")"
check "a background job left running was killed" wait_for 5 pid_gone "$(cat "$T/planted.job")"
check "the mount under \$T was detached" not_mounted "$(cat "$T/planted.mnt")"
check "the scratch directory was removed" gone planted

# ---- the other ways a test fails
child fail_msg "fail 'a step could not go on'; ok 'unreached'"
check "fail reports not ok and exits 1" rc_is fail_msg 1
check "fail's message" out_has fail_msg "not ok - a step could not go on"
check "nothing after fail runs" sh -c "! grep -q unreached '$T/fail_msg.out'"

child expect "expect_exit 3 'wants 3' sh -c 'exit 4'; ok 'unreached'"
check "expect_exit with another code fails" rc_is expect 1
check "it says what it got" grep -q "^not ok - wants 3 (exit 4, want 3" "$T/expect.out"

child subshell "( check 'in a subshell' false ); x=\$(fail 'in a command substitution'); ok 'goes on'; finish"
check "a check failed in a subshell fails the test" rc_is subshell 1
check "the main shell went on to the end" out_has subshell "ok - goes on"
check "finish counts it" out_has subshell "1 passed, 1 failed"
check "its scratch directory was removed" gone subshell

child set_e "set -e
ok 'first'
grep -q nothing /dev/null
ok 'unreached'"
check "an unchecked failure under set -e fails the test" rc_is set_e 1
check "it is reported with the command" out_has set_e "not ok - exit 1 after: grep -q nothing /dev/null"

child asan "echo '==1==ERROR: AddressSanitizer: planted' >\"\$T/sanitizer.1\"; ok 'x'; finish"
check "a sanitizer report fails the test" rc_is asan 1
check "and is shown" grep -q "AddressSanitizer: planted" "$T/asan.out"
child lsan_note "echo '==7==Unable to get registers from thread 8.' >\"\$T/sanitizer.7\"; ok 'x'; finish"
check "LeakSanitizer's note of a thread it could not read is no report" rc_is lsan_note 0

child setup_step "setup false; ok 'unreached'"
check "a failed setup step stops the test" rc_is setup_step 1

# ---- what passes, passes; a skip stays a skip
child passes "ok 'one'; check 'two' true; expect_exit 2 'three' sh -c 'exit 2'
check_json 'four' '.a == 1' echo '{\"a\": 1}'
finish"
check "a test whose checks pass exits 0" rc_is passes 0
check "it counts them" out_has passes "4 passed, 0 failed"
check "its scratch directory was removed" gone passes

child skip "echo 'skip: planted'; exit 77"
check "exit 77 (skip) is kept" rc_is skip 77

# ---- wait_for
n=0
counter() {
  n=$((n + 1))
  [ "$n" -ge 3 ]
}
check "wait_for runs its command anew each try" wait_for 5 counter
start=$SECONDS
expect_exit 1 "wait_for gives up" wait_for 0.5 false
check "wait_for 0.5 gives up within 3 s" test $((SECONDS - start)) -le 3
child wait_nan "wait_for pid_gone 1"
check "wait_for refuses a count that is not seconds" rc_is wait_nan 1
check "and says so" out_has wait_nan "not ok - wait_for: not a number of seconds: pid_gone"

# ---- helpers on demand
child use_mount "use_lib mount; use_lib mount; [ \"\$(type -t cairn)\" = function ] && ok 'cairn'; finish"
check "use_lib mount gives the cairn wrapper (twice is once)" rc_is use_mount 0
child use_none "use_lib nosuch"
check "use_lib of no such helper fails" rc_is use_none 1

# ---- PRIVATE_NS: a namespace of the test's own, without other tests' mounts
other=$(mktemp -d /tmp/cairn-e2e.XXXXXX)
on_exit "umount -l '$other/m' 2>/dev/null; rm -rf '$other'"
mkdir "$other/m" "$T/own"
mount -t tmpfs tmpfs "$other/m" || fail "mount a tmpfs"
mount -t tmpfs tmpfs "$T/own" || fail "mount a tmpfs"
seen=$(timeout 20 "${PRIVATE_NS[@]}" awk '{ print $5 }' /proc/self/mountinfo) ||
  fail "PRIVATE_NS runs its command"
check "PRIVATE_NS keeps the test's own mounts" grep -qxF "$T/own" <<<"$seen"
expect_exit 1 "and has no other test's mount" grep -qxF "$other/m" <<<"$seen"
check "which stays mounted outside it" mountpoint -q "$other/m"
seen=$(timeout 20 "$TESTLIB/private-ns" "" awk '{ print $5 }' /proc/self/mountinfo)
expect_exit 1 "private-ns with no KEEP keeps no test's mount" grep -q "^/tmp/cairn-e2e\\." <<<"$seen"

finish
