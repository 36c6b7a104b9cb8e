/* SPDX-License-Identifier: Apache-2.0 */
/*
 * self.c — this program's own binary and the programs beside it: see self.h.
 */
#include "self.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

void self_exe_undeleted(char *path) {
  static const char deleted[] = " (deleted)";
  size_t len = strlen(path), dl = sizeof deleted - 1;
  if (len > dl && strcmp(path + len - dl, deleted) == 0) path[len - dl] = '\0';
}

int self_exe(char *out, size_t len) {
  if (len == 0) return -ENAMETOOLONG;
  ssize_t n = readlink("/proc/self/exe", out, len - 1);
  if (n <= 0) {
    int e = n < 0 ? -errno : -ENOENT;
    out[0] = '\0';
    return e;
  }
  if ((size_t)n >= len - 1) { /* perhaps cut short */
    out[0] = '\0';
    return -ENAMETOOLONG;
  }
  out[n] = '\0';
  self_exe_undeleted(out);
  return 0;
}

bool self_libexec(const char *prog, char *out, size_t len) {
  static const char *const near[] = {"libexec/cairn/", "../" CAIRN_LIBEXECDIR_REL "/cairn/"};
  char name[PATH_MAX], last[PATH_MAX];
  snprintf(last, sizeof(last), "%s/cairn/%s", CAIRN_LIBEXECDIR, prog);
  for (size_t i = 0; i < sizeof(near) / sizeof(near[0]); i++) {
    snprintf(name, sizeof(name), "%s%s", near[i], prog);
    if (self_sibling(name, last, out, len)) return true;
  }
  return false;
}

bool self_sibling(const char *name, const char *fallback, char *out, size_t len) {
  char self[PATH_MAX];
  if (self_exe(self, sizeof(self)) == 0) {
    char *slash = strrchr(self, '/');
    if (slash) {
      *slash = '\0';
      if ((size_t)snprintf(out, len, "%s/%s", self, name) < len && access(out, X_OK) == 0)
        return true;
    }
  }
  snprintf(out, len, "%s", fallback);
  return false;
}
