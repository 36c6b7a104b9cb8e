/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store.c — opening and closing the store: where it lives (config.c), its
 * directories, its database (db.c), and the journals of imports that died
 * (staging.c), recovered by every opening; the top of the bottom layer,
 * which calls the files below it in that layer and none calls.
 */
#include "libcairn_store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <malloc.h>
#include <string.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

const char *cairn_store_dir(const cairn_store *st) { return st->dir; }

/* The names the store makes at its top (and below pins/): none may be a
 * symlink, whoever put it there. Checked at every opening, and each is
 * then opened without following one (cn_store_openat, the fds below),
 * so one put there later redirects nothing either. */
static const char *const store_names[] = {"blobs",
                                          "pins",
                                          "pins/image",
                                          "pins/layer",
                                          "tmp",
                                          "index",
                                          "compressed",
                                          "toc",
                                          "uppers",
                                          "snapshots",
                                          "access",
                                          "meta.db",
                                          "meta.db-wal",
                                          "meta.db-shm",
                                          "meta.db-journal",
                                          "refs",
                                          "refs.lock",
                                          "lock",
                                          "init.lock",
                                          "mounting.lock",
                                          "snapshot-mounts",
                                          "snapshot-mounts.lock"};

static int store_no_symlinks(cairn_store *st) {
  for (size_t i = 0; i < sizeof(store_names) / sizeof(store_names[0]); i++) {
    struct stat sb;
    if (fstatat(st->dirfd, store_names[i], &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(sb.st_mode))
      return cairn_fail(st, -ELOOP,
                        "%s/%s: a symlink: refused (nothing in a store is followed through one)",
                        st->dir, store_names[i]);
  }
  return 0;
}

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

/* The store's files are private whatever the mode of its directory (a
 * store made in an existing 0755 directory keeps that mode; everything
 * below it is in 0700 subdirectories, but meta.db, its -wal and -shm and
 * refs are at the top, and they name every path, mode and digest): when
 * the directory lets others in, meta.db is made 0600 before SQLite makes
 * it (its -wal and -shm take its mode) and each top-level file others may
 * read or write loses those bits. st->notice says which, for the person. */
static void store_private_files(cairn_store *st) {
  struct stat dir;
  if (fstat(st->dirfd, &dir) < 0 || !(dir.st_mode & 077)) return;
  /* O_EXCL|O_NOFOLLOW: made here only if absent, and never through a link. */
  int fd = openat(st->dirfd, "meta.db", O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd >= 0) {
    close(fd);
    snprintf(st->notice, sizeof(st->notice),
             "store %.400s: mode %04o lets other users in: its files are made private (0600)",
             st->dir, (unsigned)(dir.st_mode & 07777));
  }
  cairn_autoclosedir DIR *d = cn_opendirat(st->dirfd, ".");
  if (!d) return;
  char files[512];
  size_t off = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    struct stat sb;
    if (fstatat(st->dirfd, e->d_name, &sb, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(sb.st_mode) ||
        !(sb.st_mode & 077) || fchmodat(st->dirfd, e->d_name, sb.st_mode & 0700, 0) < 0)
      continue;
    int n = snprintf(files + off, sizeof(files) - off, "%s%s (was %04o)", off ? ", " : "",
                     e->d_name, (unsigned)(sb.st_mode & 07777));
    if (n > 0 && (size_t)n < sizeof(files) - off) off += (size_t)n;
  }
  if (off)
    snprintf(st->notice, sizeof(st->notice),
             "store %.400s: mode %04o lets other users in: made its files private: %s", st->dir,
             (unsigned)(dir.st_mode & 07777), files);
}

const char *cairn_store_notice(const cairn_store *st) {
  return st && st->notice[0] ? st->notice : NULL;
}

bool cairn_store_created(const cairn_store *st) { return st && st->created; }

/* Whether dir holds a store: its meta.db (a directory without one is no
 * store, nor is a missing directory). 0, -ENOENT, or another error. */
static int store_exists(cairn_store *st, const char *dir) {
  struct stat sb;
  char db[PATH_MAX];
  if (snprintf(db, sizeof(db), "%s/meta.db", dir) >= (int)sizeof(db)) return -ENAMETOOLONG;
  int r = stat(dir, &sb) < 0 ? -errno : !S_ISDIR(sb.st_mode) ? -ENOTDIR : 0;
  if (r == 0 && stat(db, &sb) < 0) r = -errno;
  if (r == -ENOENT)
    return cairn_fail(st, -ENOENT, "%s: no store here (cairn import or pull makes one)", dir);
  return r < 0 ? cairn_fail(st, r, "%s: %s", dir, strerror(-r)) : 0;
}

/* The store's directories, without the database; made if flags say
 * CAIRN_STORE_CREATE, else the store must exist. */
static int store_open_dirs(const char *dir, unsigned flags, cairn_store **out) {
  cairn_store *st = calloc(1, sizeof(*st));
  *out = st;
  if (!st) return -ENOMEM;
  st->dirfd = st->blobs_fd = st->staging_fd = st->tmp_fd = -1;
  st->pin_dir_fd[0] = st->pin_dir_fd[1] = -1;
  char buf[PATH_MAX];
  int r;
  if (!dir) {
    if ((r = cn_store_default_dir(st, buf, sizeof(buf))) < 0) return r; /* config.c */
    dir = buf;
  }
  if (!(flags & CAIRN_STORE_CREATE)) {
    if ((r = store_exists(st, dir)) < 0) return r;
  } else if (store_exists(st, dir) == -ENOENT) {
    st->created = true;
    st->err[0] = '\0';
  }
  if ((r = mkdir_parents(dir, 0700)) < 0) return cairn_fail(st, r, "%s: %s", dir, strerror(-r));
  st->dir = realpath(dir, NULL);
  if (!st->dir) return cairn_fail(st, -errno, "%s: %s", dir, strerror(errno));
  st->dirfd = open(st->dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (st->dirfd < 0) return cairn_fail(st, -errno, "%s: %s", st->dir, strerror(errno));
  struct stat sb;
  if ((flags & CAIRN_STORE_OWN) && geteuid() == 0 && fstat(st->dirfd, &sb) == 0 && sb.st_uid != 0)
    return cairn_fail(st, -EPERM,
                      "%s: owned by uid %u, not root: root does not use another user's store "
                      "(hint: --trust-store if you mean it)",
                      st->dir, (unsigned)sb.st_uid);
  if ((r = store_no_symlinks(st)) < 0) return r;
  store_private_files(st);
  static const char *const subdirs[] = {"blobs", "pins", "pins/image", "pins/layer", "tmp"};
  for (size_t i = 0; i < sizeof(subdirs) / sizeof(subdirs[0]); i++) {
    /* mkdirat makes no name through a symlink at its last one; "pins"
     * is opened first, without following one. */
    const char *slash = strchr(subdirs[i], '/');
    cairn_autoclose int parent =
        slash ? cn_store_openat(st, "pins", O_PATH | O_DIRECTORY, 0) : dup(st->dirfd);
    if (parent < 0 ||
        (mkdirat(parent, slash ? slash + 1 : subdirs[i], 0700) < 0 && errno != EEXIST))
      return cairn_fail(st, -errno, "%s/%s: %s", st->dir, subdirs[i],
                        errno == ELOOP ? "a symlink: refused" : strerror(errno));
  }
  st->blobs_fd = cn_store_openat(st, "blobs", O_RDONLY | O_DIRECTORY, 0);
  st->tmp_fd = st->blobs_fd < 0 ? -1 : cn_store_openat(st, "tmp", O_PATH | O_DIRECTORY, 0);
  for (int k = 0; k < 2 && st->tmp_fd >= 0; k++) {
    st->pin_dir_fd[k] = cn_store_openat(st, k == CAIRN_PIN_IMAGE ? "pins/image" : "pins/layer",
                                        O_PATH | O_DIRECTORY, 0);
    if (st->pin_dir_fd[k] < 0) break;
  }
  if (st->blobs_fd < 0 || st->tmp_fd < 0 || st->pin_dir_fd[0] < 0 || st->pin_dir_fd[1] < 0)
    return cairn_fail(st, -errno, "%s: %s", st->dir,
                      errno == ELOOP ? "a symlink in it: refused" : strerror(errno));
  return 0;
}

int cairn_store_open_flags(const char *dir, unsigned flags, cairn_store **out) {
  int r = store_open_dirs(dir, flags, out);
  if (r < 0 || (flags & CAIRN_STORE_LAZY)) return r;
  if ((r = cn_db_open(*out)) < 0) return r;
  cn_staging_recover(*out);
  return 0;
}

int cairn_store_creatable(const char *dir, char *blocker, size_t len) {
  char path[PATH_MAX];
  struct stat sb;
  snprintf(path, sizeof path, "%s", dir);
  for (;;) {
    if (stat(path, &sb) == 0) break;
    if (errno != ENOENT && errno != ENOTDIR) break; /* EACCES: the parent says why */
    char *slash = strrchr(path, '/');
    if (!slash)
      snprintf(path, sizeof path, ".");
    else if (slash == path)
      path[1] = '\0'; /* "/" */
    else
      *slash = '\0';
    if (!slash || strcmp(path, "/") == 0) {
      if (stat(path, &sb) < 0) return -errno;
      break;
    }
  }
  snprintf(blocker, len, "%s", path);
  if (stat(path, &sb) < 0) return -errno;
  if (!S_ISDIR(sb.st_mode)) return -ENOTDIR;
  return access(path, W_OK | X_OK) == 0 ? 0 : -EACCES;
}

int cairn_store_open(const char *dir, cairn_store **out) {
  return cairn_store_open_flags(dir, CAIRN_STORE_CREATE, out);
}

int cairn_store_open_lazy(const char *dir, cairn_store **out) {
  return store_open_dirs(dir, CAIRN_STORE_CREATE, out);
}

int cairn_store_open_lazy_flags(const char *dir, unsigned flags, cairn_store **out) {
  return store_open_dirs(dir, flags, out);
}

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
  if (st->tmp_fd >= 0) close(st->tmp_fd);
  for (int k = 0; k < 2; k++)
    if (st->pin_dir_fd[k] >= 0) close(st->pin_dir_fd[k]);
  if (st->dirfd >= 0) close(st->dirfd);
  free(st->dir);
  free(st);
}
