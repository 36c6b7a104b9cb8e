/* SPDX-License-Identifier: Apache-2.0 */
/*
 * options.c — the mount options as libfuse takes them, a comma-separated
 * list: appending to one (main.c passes the user's -o options it does not
 * take itself on), and the options every session is created with
 * (supervisor.c); and where the mount goes: a DIR of /proc/self/fd/N is
 * mounted through the fd (cairn bundle's race-free mount, cairnfs.h).
 */
#include "cairnfs.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FD_DIR "/proc/self/fd/"

bool cairnfs_dir_is_fd(const char *dir) {
  if (strncmp(dir, FD_DIR, strlen(FD_DIR)) != 0) return false;
  const char *n = dir + strlen(FD_DIR);
  if (!*n) return false;
  for (; *n; n++)
    if (*n < '0' || *n > '9') return false;
  return true;
}

int cairnfs_mountpoint_resolve(const char *dir, char *out, size_t len) {
  if (!cairnfs_dir_is_fd(dir)) return cairn_mountpoint_resolve(dir, out, len);
  ssize_t n = readlink(dir, out, len - 1);
  if (n < 0) return -errno;
  if ((size_t)n >= len - 1) return -ENAMETOOLONG;
  out[n] = '\0';
  return out[0] == '/' ? 0 : -ENOTDIR; /* not a directory's fd */
}

const char *cairnfs_mount_target(const struct cairnfs_options *o, const char *resolved) {
  return cairnfs_dir_is_fd(o->dir) ? o->dir : resolved;
}

int cairnfs_opts_append(char **opts, const char *opt, size_t len) {
  size_t old = *opts ? strlen(*opts) : 0;
  char *p = realloc(*opts, old + len + 2);
  if (!p) return -ENOMEM;
  if (old) p[old++] = ',';
  memcpy(p + old, opt, len);
  p[old + len] = '\0';
  *opts = p;
  return 0;
}

/* Root's mounts allow other users (runtimes need it), with the kernel
 * checking permissions as for any file system. */
char *cairnfs_fuse_opts(const struct cairnfs_options *o) {
  char *opts = NULL;
  /* fsname is shown as the mount's source; commas would split it. */
  char fixed[512];
  snprintf(fixed, sizeof(fixed), "subtype=cairnfs,%s,default_permissions%s,%s,%s,fsname=%s",
           o->writable ? "rw" : "ro", geteuid() == 0 ? ",allow_other" : "",
           o->suid ? "suid" : "nosuid", o->dev ? "dev" : "nodev", o->image);
  for (char *p = strstr(fixed, "fsname=") + 7; *p; p++)
    if (*p == ',') *p = '_';
  if (cairnfs_opts_append(&opts, fixed, strlen(fixed)) < 0 ||
      (o->fuse_opts && cairnfs_opts_append(&opts, o->fuse_opts, strlen(o->fuse_opts)) < 0)) {
    free(opts);
    return NULL;
  }
  return opts;
}
