/* SPDX-License-Identifier: Apache-2.0 */
/*
 * version.c — the programs' version: see version.h (in common/, which
 * report.c says why).
 */
#include "version.h"
#include "report.h"

#include <stdio.h>

/* CMakeLists.txt defines CAIRN_VERSION; a compile outside it (as
 * scripts/check-layers.sh's) may not. */
#ifndef CAIRN_VERSION
#define CAIRN_VERSION "unknown"
#endif
#ifndef CAIRN_GIT_DESCRIBE
#define CAIRN_GIT_DESCRIBE "" /* not built from a git checkout */
#endif

const char *version_number(void) { return CAIRN_VERSION; }
const char *version_git(void) { return CAIRN_GIT_DESCRIBE; }

void version_print(void) {
  const char *git = version_git();
  printf("%s %s%s%s%s\n", report_prog, version_number(), *git ? " (git " : "", git,
         *git ? ")" : "");
}
