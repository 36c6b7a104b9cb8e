/* SPDX-License-Identifier: Apache-2.0 */
/*
 * access.c — an image's recorded access list (doc/lazy-pulls.md, "The
 * access list"): the paths of the files a mount of the image read first,
 * in the order of their first reads, as cairnfs recorded them (a mount
 * with -o record_access). `cairn push --format estargz|zstd:chunked`
 * puts those files first (the prefetch set a lazy pull fetches first).
 *
 * STORE/access/ID holds the paths, each ended by a NUL byte, written
 * whole (O_TMPFILE, fsync'd, then renamed over the earlier list): a later
 * recording replaces it, a crash leaves the old list or the new one. A
 * list whose image went is swept (sweep.c) like the kept TOCs.
 */
#include "libcairn_store.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ACCESS_DIR "access"
#define ACCESS_MAX_BYTES (64u << 20)

static int access_rel(cairn_store *st, const char *image_id, char *rel, size_t len) {
  if (!cn_is_hex_id(image_id, CAIRN_ID_LEN))
    return cairn_fail(st, -EINVAL, "%s: not an image id", image_id);
  snprintf(rel, len, ACCESS_DIR "/%s", image_id);
  return 0;
}

int cairn_access_list_write(cairn_store *st, const char *image_id, const char *const *paths,
                            size_t n) {
  store_errclear(st);
  char rel[128], tmp[160];
  int r = access_rel(st, image_id, rel, sizeof rel);
  if (r < 0) return r;
  if (mkdirat(st->dirfd, ACCESS_DIR, 0700) < 0 && errno != EEXIST)
    return cairn_fail(st, -errno, "%s/" ACCESS_DIR ": %s", st->dir, strerror(errno));
  cairn_autoclose int dfd = cn_store_openat(st, ACCESS_DIR, O_RDONLY | O_DIRECTORY, 0);
  if (dfd < 0) return cairn_fail(st, -errno, "%s/" ACCESS_DIR ": %s", st->dir, strerror(errno));
  /* a name of its own, then renamed over the list: a reader sees one whole */
  snprintf(tmp, sizeof tmp, ".%s.%ld", image_id, (long)getpid());
  cairn_autoclose int fd =
      openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return cairn_fail(st, -errno, "%s/%s: %s", st->dir, rel, strerror(errno));
  r = 0;
  for (size_t i = 0; r == 0 && i < n; i++) r = cn_write_all(fd, paths[i], strlen(paths[i]) + 1);
  if (r == 0 && fsync(fd) < 0) r = -errno;
  if (r == 0 && renameat(dfd, tmp, dfd, image_id) < 0) r = -errno;
  if (r < 0) unlinkat(dfd, tmp, 0);
  if (r == 0 && fsync(dfd) < 0) r = -errno;
  if (r == -ENOSPC) return cn_store_fail_nospace(st);
  return r < 0 ? cairn_fail(st, r, "%s/%s: %s", st->dir, rel, strerror(-r)) : 0;
}

int cn_access_list_read(cairn_store *st, const char *image_id, char ***paths, size_t *n) {
  store_errclear(st);
  *paths = NULL;
  *n = 0;
  char rel[128];
  int r = access_rel(st, image_id, rel, sizeof rel);
  if (r < 0) return r;
  cairn_autoclose int fd = cn_store_openat(st, rel, O_RDONLY, 0);
  if (fd < 0 && errno == ENOENT) return 0;
  struct stat sb;
  if (fd < 0 || fstat(fd, &sb) < 0)
    return cairn_fail(st, -errno, "%s/%s: %s", st->dir, rel, strerror(errno));
  if (sb.st_size > (off_t)ACCESS_MAX_BYTES)
    return cairn_fail(st, -EBADMSG, "%s/%s: too large for an access list", st->dir, rel);
  size_t len = (size_t)sb.st_size;
  char *b = malloc(len + 1);
  if (!b) return cairn_fail(st, -ENOMEM, "out of memory");
  size_t got = 0;
  while (got < len) {
    ssize_t k = pread(fd, b + got, len - got, (off_t)got);
    if (k <= 0) {
      free(b);
      return cairn_fail(st, k < 0 ? -errno : -EIO, "%s/%s: cannot read it", st->dir, rel);
    }
    got += (size_t)k;
  }
  b[len] = '\0';
  size_t count = 0;
  for (size_t i = 0; i < len; i++) count += b[i] == '\0';
  char **v = calloc(count + 1, sizeof *v);
  if (!v) {
    free(b);
    return cairn_fail(st, -ENOMEM, "out of memory");
  }
  size_t k = 0;
  for (size_t i = 0; i < len && k < count;) {
    size_t l = strlen(b + i);
    if (l && !(v[k++] = strdup(b + i))) {
      free(b);
      cn_strv_free(v, k - 1);
      return cairn_fail(st, -ENOMEM, "out of memory");
    }
    i += l + 1;
  }
  free(b);
  *paths = v;
  *n = k;
  return 1;
}

int cairn_access_list_count(cairn_store *st, const char *image_id) {
  char **v;
  size_t n;
  int r = cn_access_list_read(st, image_id, &v, &n);
  if (r <= 0) return r;
  cn_strv_free(v, n);
  return n > INT32_MAX ? INT32_MAX : (int)n;
}
