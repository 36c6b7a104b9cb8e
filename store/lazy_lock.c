/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lazy_lock.c — the lock of one pending file's fetch across processes
 * (doc/lazy-pulls.md, "What is fetched when", items 2 and 3): a lock file
 * per content sha256 in the store's private STORE/tmp, flock(2)'d around
 * the fetch and store of that file, so that a mount's first read (cairnfs
 * runs `cairn fill --file`), a background fill and a second fill fetch it
 * once: whoever takes the lock next finds it stored. The holder unlinks
 * the file before it lets go; a taker checks that the file it locked is
 * still the one the name gives, and takes the new one otherwise.
 */
#include "libcairn_store.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* "tmp/fetch-HEX.lock" for "sha256:HEX" or HEX; false for anything else. */
static bool lock_name(const char *sha256, char out[128]) {
  const char *hex = strncmp(sha256, "sha256:", 7) == 0 ? sha256 + 7 : sha256;
  if (strlen(hex) != 64 || strspn(hex, "0123456789abcdef") != 64) return false;
  snprintf(out, 128, "tmp/fetch-%s.lock", hex);
  return true;
}

int cn_lazy_lock(cairn_store *st, const char *sha256, bool wait) {
  char name[128];
  if (!lock_name(sha256, name)) return cairn_fail(st, -EINVAL, "%s: not a sha256", sha256);
  for (int tries = 0; tries < 1000; tries++) {
    int fd = cn_store_openat(st, name, O_RDWR | O_CREAT | O_NOFOLLOW, 0600);
    if (fd < 0) return cairn_fail(st, -errno, "%s/%s: %s", st->dir, name, strerror(errno));
    int r;
    while ((r = flock(fd, wait ? LOCK_EX : LOCK_EX | LOCK_NB)) < 0 && errno == EINTR) {
    }
    if (r < 0) {
      int e = errno;
      close(fd);
      if (e == EWOULDBLOCK) return -EWOULDBLOCK;
      return cairn_fail(st, -e, "locking %s/%s: %s", st->dir, name, strerror(e));
    }
    struct stat a, b;
    if (fstat(fd, &a) == 0 && fstatat(st->dirfd, name, &b, AT_SYMLINK_NOFOLLOW) == 0 &&
        a.st_dev == b.st_dev && a.st_ino == b.st_ino) {
      futimens(fd, NULL); /* a file a killed holder left is not old to gc's sweep of tmp */
      return fd;
    }
    close(fd); /* its holder unlinked it meanwhile: take the new one */
  }
  return cairn_fail(st, -EAGAIN, "locking the fetch of %s: the lock file keeps changing", sha256);
}

void cn_lazy_unlock(cairn_store *st, const char *sha256, int fd) {
  if (fd < 0) return;
  char name[128];
  if (lock_name(sha256, name)) unlinkat(st->dirfd, name, 0);
  close(fd);
}
