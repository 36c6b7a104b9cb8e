/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lock.c — flock(2)ed files of the store: any one of them (cn_lock_file),
 * and the store-wide lock that imports hold shared and blob sweeping holds
 * exclusive (cn_store_lock, libcairn_store.h).
 */
#include "libcairn_store.h"

#include <fcntl.h>
#include <string.h>
#include <sys/file.h>

int cn_lock_file(cairn_store *st, const char *name, int op) {
  int fd = openat(st->dirfd, name, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return -errno;
  while (flock(fd, op) < 0) {
    int e = errno;
    if (e == EINTR) continue;
    close(fd);
    return -e;
  }
  return fd;
}

int cn_store_lock(cairn_store *st, enum store_lock_mode mode) {
  int op = mode == STORE_LOCK_SHARED      ? LOCK_SH
           : mode == STORE_LOCK_EXCLUSIVE ? LOCK_EX
                                          : LOCK_EX | LOCK_NB;
  int fd = cn_lock_file(st, "lock", op);
  if (fd == -EWOULDBLOCK) return -EBUSY;
  return fd < 0 ? cairn_fail(st, fd, "%s/lock: %s", st->dir, strerror(-fd)) : fd;
}
