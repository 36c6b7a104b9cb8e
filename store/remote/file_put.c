/* SPDX-License-Identifier: Apache-2.0 */
/*
 * file_put.c — writes a file whole into a directory that someone else may
 * control (a bundle's DIR, an OCI layout, the auth.json of login), for
 * bundle, push and login alike.
 *
 * Invariant: no name is ever opened for writing that another user could
 * have made first. The bytes go to a new file under a random name, made
 * with O_CREAT|O_EXCL|O_NOFOLLOW (a file, a symlink or a FIFO planted at
 * that name fails the open instead of being written through), fsynced,
 * then renamed to NAME: rename replaces whatever NAME was, a symlink
 * included, and never follows it. So a planted name can make the write
 * fail, never redirect it, and nobody else can open the new file before
 * it is complete (it is the caller's, of the mode asked, less the umask).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cairn.h"

/* Writes len bytes of mem, or of src_fd from offset 0, to fd. */
static int put_bytes(int fd, int src_fd, const void *mem, uint64_t len) {
  char buf[64 * 1024];
  uint64_t off = 0;
  while (off < len) {
    size_t want = len - off < sizeof buf ? (size_t)(len - off) : sizeof buf;
    const char *p = buf;
    if (src_fd < 0) {
      p = (const char *)mem + off;
    } else {
      ssize_t k = pread(src_fd, buf, want, (off_t)off);
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) return k < 0 ? -errno : -EIO;
      want = (size_t)k;
    }
    ssize_t n = write(fd, p, want);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -errno;
    off += (uint64_t)n;
  }
  return 0;
}

/* Moves dirfd/tmp to dirfd/name; with noreplace, fails -EEXIST if name is
 * there (a file system without RENAME_NOREPLACE: link, then unlink). */
static int put_rename(int dirfd, const char *tmp, const char *name, bool noreplace) {
  if (!noreplace) return renameat(dirfd, tmp, dirfd, name) < 0 ? -errno : 0;
  if (renameat2(dirfd, tmp, dirfd, name, RENAME_NOREPLACE) == 0) return 0;
  if (errno != EINVAL) return -errno;
  if (linkat(dirfd, tmp, dirfd, name, 0) < 0) return -errno;
  unlinkat(dirfd, tmp, 0);
  return 0;
}

int cairn_file_put_at(int dirfd, const char *name, int src_fd, const void *mem, uint64_t len,
                      mode_t mode, unsigned flags) {
  char tmp[NAME_MAX + 1];
  int fd = -1;
  for (int tries = 0; fd < 0 && tries < 16; tries++) {
    unsigned long long rnd;
    if (getrandom(&rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) return errno ? -errno : -EIO;
    if (snprintf(tmp, sizeof tmp, ".%.200s.%016llx.tmp", name, rnd) >= (int)sizeof tmp)
      return -ENAMETOOLONG;
    fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd < 0 && errno != EEXIST) return -errno;
  }
  if (fd < 0) return -EEXIST;
  int r = put_bytes(fd, src_fd, mem, len);
  if (r == 0 && fsync(fd) < 0) r = -errno;
  if (close(fd) < 0 && r == 0) r = -errno;
  if (r == 0) r = put_rename(dirfd, tmp, name, flags & CAIRN_PUT_NOREPLACE);
  if (r < 0) unlinkat(dirfd, tmp, 0);
  return r;
}
