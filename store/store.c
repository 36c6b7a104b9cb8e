/*
 * store.c — opening and closing the store: where it lives (config.c), its
 * directories, its database (db.c), and the journals of imports that died
 * (staging.c), recovered by every opening; the top of the bottom layer,
 * which calls the files below it in that layer and none calls.
 */
#include "internal.h"

#include <fcntl.h>
#include <limits.h>
#include <malloc.h>
#include <string.h>
#include <sys/stat.h>

const char *cairn_store_dir(const cairn_store *st) { return st->dir; }

/* mkdir -p with mode for the last component and 0755 for parents. */
static int mkdir_parents(const char *path, mode_t mode) {
  char buf[PATH_MAX];
  if (snprintf(buf, sizeof(buf), "%s", path) >= (int)sizeof(buf)) return -ENAMETOOLONG;
  for (char *p = buf + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    if (mkdir(buf, 0755) < 0 && errno != EEXIST) return -errno;
    *p = '/';
  }
  if (mkdir(buf, mode) < 0 && errno != EEXIST) return -errno;
  return 0;
}

/* The store's directories, without the database. */
static int store_open_dirs(const char *dir, cairn_store **out) {
  cairn_store *st = calloc(1, sizeof(*st));
  *out = st;
  if (!st) return -ENOMEM;
  st->dirfd = st->blobs_fd = st->staging_fd = -1;
  char buf[PATH_MAX];
  int r;
  if (!dir) {
    if ((r = cn_store_default_dir(st, buf, sizeof(buf))) < 0) return r; /* config.c */
    dir = buf;
  }
  if ((r = mkdir_parents(dir, 0700)) < 0) return store_fail(st, r, "%s: %s", dir, strerror(-r));
  st->dir = realpath(dir, NULL);
  if (!st->dir) return store_fail(st, -errno, "%s: %s", dir, strerror(errno));
  st->dirfd = open(st->dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (st->dirfd < 0) return store_fail(st, -errno, "%s: %s", st->dir, strerror(errno));
  static const char *const subdirs[] = {"blobs", "pins", "pins/image", "pins/layer", "tmp"};
  for (size_t i = 0; i < sizeof(subdirs) / sizeof(subdirs[0]); i++)
    if (mkdirat(st->dirfd, subdirs[i], 0700) < 0 && errno != EEXIST)
      return store_fail(st, -errno, "%s/%s: %s", st->dir, subdirs[i], strerror(errno));
  st->blobs_fd = openat(st->dirfd, "blobs", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (st->blobs_fd < 0) return store_fail(st, -errno, "%s/blobs: %s", st->dir, strerror(errno));
  return 0;
}

int cairn_store_open(const char *dir, cairn_store **out) {
  int r = store_open_dirs(dir, out);
  if (r < 0) return r;
  if ((r = cn_db_open(*out)) < 0) return r;
  cn_staging_recover(*out);
  return 0;
}

int cairn_store_open_lazy(const char *dir, cairn_store **out) { return store_open_dirs(dir, out); }

void cairn_store_idle(cairn_store *st) {
  if (!st->db || !sqlite3_get_autocommit(st->db)) return;
  /* The last connection to close checkpoints the log into meta.db and
   * syncs both: not on a mount's way to answering. */
  sqlite3_db_config(st->db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, NULL);
  sqlite3_close(st->db);
  st->db = NULL;
  malloc_trim(0);
}

void cairn_store_close(cairn_store *st) {
  if (!st) return;
  cn_staging_end(st, true);
  if (st->on_close) st->on_close(st);
  if (st->db) sqlite3_close(st->db);
  if (st->blobs_fd >= 0) close(st->blobs_fd);
  if (st->dirfd >= 0) close(st->dirfd);
  free(st->dir);
  free(st);
}
