/*
 * version.c — the programs' version: see version.h.
 */
#include "version.h"
#include "report.h"

#include <stdio.h>

/* CMakeLists.txt defines CAIRN_VERSION; a compile outside it (as
 * tools/check-layers.sh's) may not. */
#ifndef CAIRN_VERSION
#define CAIRN_VERSION "unknown"
#endif
#ifndef CAIRN_GIT_DESCRIBE
#define CAIRN_GIT_DESCRIBE "" /* not built from a git checkout */
#endif

void version_print(void) {
  const char *git = CAIRN_GIT_DESCRIBE;
  printf("%s %s%s%s%s\n", report_prog, CAIRN_VERSION, *git ? " (git " : "", git, *git ? ")" : "");
}
