/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_self.c — common/self.c: the path of this program's binary is the one
 * to exec after an upgrade replaced it ("/x/cairn (deleted)" is
 * "/x/cairn"), and self_exe gives /proc/self/exe's path.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <limits.h>
#include <string.h>
#include <unistd.h>

#include "self.h"

static void expect_undeleted(const char *in, const char *want) {
  char buf[PATH_MAX];
  snprintf(buf, sizeof buf, "%s", in);
  self_exe_undeleted(buf);
  cr_expect_str_eq(buf, want, "\"%s\": \"%s\", not \"%s\"", in, buf, want);
}

Test(self, a_replaced_binary_is_its_path) {
  expect_undeleted("/x/cairn (deleted)", "/x/cairn");
  expect_undeleted("/usr/libexec/cairn/cairn (deleted)", "/usr/libexec/cairn/cairn");
  /* a name with a space, replaced */
  expect_undeleted("/opt/my dir/cairn (deleted)", "/opt/my dir/cairn");
}

Test(self, other_paths_are_left_alone) {
  expect_undeleted("/x/cairn", "/x/cairn");
  expect_undeleted("", "");
  expect_undeleted(" (deleted)", " (deleted)"); /* no name before it */
  expect_undeleted("/x/cairn (deleted) ", "/x/cairn (deleted) ");
  expect_undeleted("/x/cairn (deleted)/y", "/x/cairn (deleted)/y");
  expect_undeleted("/x/cairn(deleted)", "/x/cairn(deleted)");
}

Test(self, self_exe_is_the_running_binary) {
  char got[PATH_MAX], want[PATH_MAX];
  cr_assert_eq(self_exe(got, sizeof got), 0);
  ssize_t n = readlink("/proc/self/exe", want, sizeof want - 1);
  cr_assert_gt(n, 0);
  want[n] = '\0';
  cr_expect_str_eq(got, want);
  char small[4];
  cr_expect_eq(self_exe(small, sizeof small), -ENAMETOOLONG);
  cr_expect_str_eq(small, "");
}
