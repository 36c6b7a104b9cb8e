/*
 * upper.c — the upper layers of writable (--rw) mounts: private directories
 * of the store, STORE/uppers/ID/, that a cairnfs daemon writes a mount's
 * changes to (fs/upper.c says how they are laid out inside).
 *
 * Invariants:
 * - An upper is created 0700 with its subdirectories root/ (the changes,
 *   overlayfs-style) and work/ (copy-up staging and the hardlink index),
 *   and a file "info" naming its image and mountpoint, written before the
 *   directory is renamed to its final name: a listed upper is complete.
 * - The daemon that serves an upper holds an exclusive flock(2) on the
 *   upper's directory for as long as it runs (the kernel drops it when the
 *   daemon dies): a lock that can be taken means no live mount owns it.
 * - The image's layers and blobs are never written through an upper.
 */
#include "internal.h"

#include <dirent.h>
#include <fcntl.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>

#define UPPERS "uppers"

/* Opens (creating it) STORE/uppers, O_PATH|O_DIRECTORY. */
static int uppers_dir(cairn_store *st) {
  if (mkdirat(st->dirfd, UPPERS, 0700) < 0 && errno != EEXIST)
    return cairn_fail(st, -errno, "%s/" UPPERS ": %s", st->dir, strerror(errno));
  int fd = openat(st->dirfd, UPPERS, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return cairn_fail(st, -errno, "%s/" UPPERS ": %s", st->dir, strerror(errno));
  return fd;
}

static int write_info(int dirfd, const char *image_id, const char *mountpoint) {
  _cleanup_close_ int fd = openat(dirfd, "info", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return -errno;
  _cleanup_free_ char *text =
      cn_xasprintf("image %s\ndir %s\ncreated %lld\n", image_id, mountpoint,
                   (long long)cn_now_seconds());
  if (!text) return -ENOMEM;
  size_t len = strlen(text);
  if (write(fd, text, len) != (ssize_t)len) return errno ? -errno : -EIO;
  return fsync(fd) < 0 ? -errno : 0;
}

int cairn_upper_create(cairn_store *st, const char *image_id, const char *mountpoint,
                       cairn_id id_out, char *path, size_t len, int *lock_fd) {
  _cleanup_close_ int ufd = uppers_dir(st);
  if (ufd < 0) return ufd;
  unsigned char rnd[32];
  if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
    return cairn_fail(st, -EIO, "getrandom: %s", strerror(errno));
  cn_hex_encode(rnd, sizeof(rnd), id_out);
  char tmp[CAIRN_ID_LEN + 8];
  snprintf(tmp, sizeof(tmp), ".tmp-%.16s", id_out);
  if (mkdirat(ufd, tmp, 0700) < 0)
    return cairn_fail(st, -errno, "%s/" UPPERS "/%s: %s", st->dir, tmp, strerror(errno));
  _cleanup_close_ int dfd = openat(ufd, tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  int r = dfd < 0 ? -errno : 0;
  if (r == 0 && (mkdirat(dfd, "root", 0755) < 0 || mkdirat(dfd, "work", 0700) < 0)) r = -errno;
  if (r == 0 && mkdirat(dfd, "work/index", 0700) < 0) r = -errno;
  if (r == 0) r = write_info(dfd, image_id, mountpoint);
  if (r == 0 && flock(dfd, LOCK_EX | LOCK_NB) < 0) r = -errno;
  if (r == 0 && renameat(ufd, tmp, ufd, id_out) < 0) r = -errno;
  if (r == 0) r = snprintf(path, len, "%s/" UPPERS "/%s", st->dir, id_out) < (int)len ? 0 : -ENAMETOOLONG;
  if (r < 0) {
    /* Best effort: an incomplete .tmp- upper is nobody's and gc may remove it. */
    return cairn_fail(st, r, "%s/" UPPERS "/%s: %s", st->dir, tmp, strerror(-r));
  }
  *lock_fd = dfd;
  dfd = -1;
  return 0;
}
