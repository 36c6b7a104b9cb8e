/*
 * store.c — opening the store: where it lives, its directories, the SQLite
 * database (WAL, foreign keys, busy timeout) and the schema migrations.
 *
 * The schema carries a version in `meta`; each migration runs once, in one
 * transaction, so a store written by an older cairn opens in a newer one.
 */
#include "internal.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <malloc.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>

static const char *const migrations[] = {
    /* 1: the first schema */
    "CREATE TABLE blobs(name TEXT PRIMARY KEY, size INTEGER NOT NULL,"
    "  sha256 TEXT NOT NULL);"
    "CREATE TABLE layers(id TEXT PRIMARY KEY, size INTEGER NOT NULL,"
    "  entries INTEGER NOT NULL, created INTEGER NOT NULL);"
    "CREATE TABLE entries(layer_id TEXT NOT NULL REFERENCES layers(id) ON DELETE CASCADE,"
    "  path TEXT NOT NULL, type INTEGER NOT NULL, mode INTEGER NOT NULL,"
    "  uid INTEGER NOT NULL, gid INTEGER NOT NULL, size INTEGER NOT NULL,"
    "  mtime INTEGER NOT NULL, mtime_nsec INTEGER NOT NULL, rdev INTEGER NOT NULL,"
    "  target TEXT, blob TEXT REFERENCES blobs(name), xattrs BLOB,"
    "  PRIMARY KEY(layer_id, path)) WITHOUT ROWID;"
    "CREATE INDEX entries_blob ON entries(blob) WHERE blob IS NOT NULL;"
    "CREATE TABLE images(id TEXT PRIMARY KEY, config TEXT NOT NULL,"
    "  size INTEGER NOT NULL, created INTEGER NOT NULL);"
    "CREATE TABLE image_layers(image_id TEXT NOT NULL REFERENCES images(id) ON DELETE CASCADE,"
    "  position INTEGER NOT NULL, layer_id TEXT NOT NULL REFERENCES layers(id),"
    "  PRIMARY KEY(image_id, position));"
    "CREATE INDEX image_layers_layer ON image_layers(layer_id);"
    "CREATE TABLE names(name TEXT PRIMARY KEY,"
    "  image_id TEXT NOT NULL REFERENCES images(id) ON DELETE CASCADE);"
    "CREATE INDEX names_image ON names(image_id);"
    "CREATE TABLE pins(kind INTEGER NOT NULL, target TEXT NOT NULL, pid INTEGER NOT NULL,"
    "  pid_start INTEGER NOT NULL, purpose TEXT NOT NULL, since INTEGER NOT NULL,"
    "  PRIMARY KEY(kind, target, pid));"
    "CREATE TABLE mounts(dir TEXT PRIMARY KEY, image_id TEXT NOT NULL,"
    "  pid INTEGER NOT NULL, pid_start INTEGER NOT NULL, rw INTEGER NOT NULL,"
    "  since INTEGER NOT NULL);",
    /* 2: the device (maj:min) of a mount, to find it in other mount namespaces */
    "ALTER TABLE mounts ADD COLUMN dev TEXT NOT NULL DEFAULT '';",
    /* 3: a layer's tar-split data (tarsplit.c): its tar minus file contents */
    ("CREATE TABLE layer_tars(layer_id TEXT PRIMARY KEY REFERENCES layers(id) ON DELETE CASCADE,"
     "  size INTEGER NOT NULL, data BLOB NOT NULL);"),
    /* 4: a pulled layer's manifest (compressed) digest, media type and size,
     * its compressed bytes kept as STORE/compressed/HEX (als.c) */
    ("CREATE TABLE layer_blobs(digest TEXT PRIMARY KEY,"
     "  layer_id TEXT NOT NULL REFERENCES layers(id) ON DELETE CASCADE,"
     "  media_type TEXT NOT NULL, size INTEGER NOT NULL);"
     "CREATE INDEX layer_blobs_layer ON layer_blobs(layer_id);"),
    /* 5: no table: from here on every writer of images and names keeps
     * STORE/refs (refs.c), which read-only mounts trust; the version keeps
     * a cairn from before it, which would not, out of the store */
    "SELECT 1",
};
#define SCHEMA_VERSION ((int)(sizeof(migrations) / sizeof(migrations[0])))

int cairn_fail(cairn_store *st, int err, const char *fmt, ...) {
  if (!st) return err;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(st->err, sizeof(st->err), fmt, ap);
  va_end(ap);
  return err;
}

int cairn_fail_context(cairn_store *st, int err, const char *fmt, ...) {
  if (!st) return err;
  char context[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(context, sizeof(context), fmt, ap);
  va_end(ap);
  if (!st->err[0]) snprintf(st->err, sizeof(st->err), "%s", strerror(-err));
  /* prepend in place: "CONTEXT: " then as much of the WHY as fits */
  size_t clen = strlen(context), wlen = strlen(st->err);
  size_t room = sizeof(st->err) - 1 - (clen + 2);
  if (wlen > room) wlen = room;
  memmove(st->err + clen + 2, st->err, wlen);
  memcpy(st->err, context, clen);
  memcpy(st->err + clen, ": ", 2);
  st->err[clen + 2 + wlen] = '\0';
  return err;
}

int cn_store_fail_db(cairn_store *st, const char *what) {
  int code = st->db ? sqlite3_errcode(st->db) : SQLITE_ERROR;
  /* a full disk is SQLITE_FULL, or an I/O error (growing the -shm file) */
  if (code == SQLITE_FULL || (code == SQLITE_IOERR && sqlite3_system_errno(st->db) == ENOSPC))
    return store_fail(st, -ENOSPC, "%s: %s: no space left on device", what, st->dir);
  int err = (code == SQLITE_BUSY || code == SQLITE_LOCKED)    ? -EBUSY
            : code == SQLITE_CORRUPT || code == SQLITE_NOTADB ? -EBADMSG
                                                              : -EIO;
  return store_fail(st, err, "%s: %s", what, st->db ? sqlite3_errmsg(st->db) : "no database");
}

static int store_open_db(cairn_store *st);

/* Opens the connection again if cairn_store_idle closed it: 0, or the
 * failure (recorded) of opening it. */
static int db_ready(cairn_store *st) {
  if (st->db) return 0;
  int r = store_open_db(st);
  if (r < 0 && st->db) {
    sqlite3_close(st->db);
    st->db = NULL;
  }
  return r;
}

sqlite3 *cn_db(cairn_store *st) { return db_ready(st) < 0 ? NULL : st->db; }

int cn_db_prepare(cairn_store *st, sqlite3_stmt **stmt, const char *sql) {
  int r = db_ready(st);
  if (r < 0) {
    *stmt = NULL;
    return r;
  }
  if (sqlite3_prepare_v2(st->db, sql, -1, stmt, NULL) != SQLITE_OK) {
    *stmt = NULL;
    return cn_store_fail_db(st, "database");
  }
  return 0;
}

int cn_db_exec(cairn_store *st, const char *sql) {
  int r = db_ready(st);
  if (r < 0) return r;
  if (sqlite3_exec(st->db, sql, NULL, NULL, NULL) != SQLITE_OK)
    return cn_store_fail_db(st, "database");
  return 0;
}

int cn_db_begin(cairn_store *st) { return cn_db_exec(st, "BEGIN IMMEDIATE"); }
int cn_db_commit(cairn_store *st) {
  int r = cn_db_exec(st, "COMMIT");
  if (r < 0) cn_db_rollback(st);
  return r;
}
/* SQLite refuses to change PRAGMA synchronous inside a transaction ("Safety
 * level may not be changed inside a transaction"), so the commit cannot be
 * switched to FULL once the caller's transaction is open. It does what FULL
 * does for a WAL commit instead: commit, then sync the write-ahead log
 * through SQLite's own handle of it (the WAL holds the commit until a
 * checkpoint, which syncs on its own). If that sync fails, the commit may
 * be lost at a power cut: the caller gets the error and unlinks nothing. */
int cn_db_commit_durable(cairn_store *st) {
  int r = cn_db_commit(st);
  if (r < 0) return r;
  sqlite3_file *wal = NULL;
  if (sqlite3_file_control(st->db, "main", SQLITE_FCNTL_JOURNAL_POINTER, &wal) != SQLITE_OK ||
      !wal || !wal->pMethods)
    return store_fail(st, -EIO, "database: no write-ahead log to sync");
  int rc = wal->pMethods->xSync(wal, SQLITE_SYNC_NORMAL);
  if (rc != SQLITE_OK)
    return store_fail(st, (rc & 0xff) == SQLITE_FULL ? -ENOSPC : -EIO,
                      "database: syncing the write-ahead log: %s", sqlite3_errstr(rc));
  return 0;
}
void cn_db_rollback(cairn_store *st) {
  if (st->db && !sqlite3_get_autocommit(st->db)) sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
}

const char *cairn_errmsg(const cairn_store *st) { return st ? st->err : "out of memory"; }
const char *cairn_store_dir(const cairn_store *st) { return st->dir; }

int cn_store_fail_nospace(cairn_store *st) {
  return store_fail(st, -ENOSPC, "%s: no space left on device", st->dir);
}

int cairn_exit_code(int err) {
  switch (err) {
  case 0: return CAIRN_EXIT_OK;
  case -ENOENT: return CAIRN_EXIT_NOT_FOUND;
  case -EBUSY: return CAIRN_EXIT_BUSY;
  case -EBADMSG: return CAIRN_EXIT_INTEGRITY;
  case -EINVAL: return CAIRN_EXIT_USAGE;
  default: return CAIRN_EXIT_FAILURE;
  }
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

/* The schema version recorded in the store, 0 for a new one. */
static int schema_version(cairn_store *st) {
  _cleanup_stmt_ sqlite3_stmt *s = NULL;
  if (sqlite3_prepare_v2(st->db, "SELECT value FROM meta WHERE key='schema_version'", -1, &s,
                         NULL) != SQLITE_OK)
    return 0; /* no meta table yet */
  return sqlite3_step(s) == SQLITE_ROW ? sqlite3_column_int(s, 0) : 0;
}

/* Runs the migrations the store lacks, in one transaction. */
static int store_migrate(cairn_store *st) {
  int r;
  if ((r = cn_db_begin(st)) < 0) return r;
  if ((r = cn_db_exec(st, "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT)")) < 0)
    goto fail;
  int version = schema_version(st);
  for (int v = version; v < SCHEMA_VERSION; v++)
    if ((r = cn_db_exec(st, migrations[v])) < 0) goto fail;
  if (version != SCHEMA_VERSION) {
    char sql[128];
    snprintf(sql, sizeof(sql),
             "INSERT OR REPLACE INTO meta(key, value) VALUES('schema_version', %d)",
             SCHEMA_VERSION);
    if ((r = cn_db_exec(st, sql)) < 0) goto fail;
  }
  return cn_db_commit(st);
fail:
  cn_db_rollback(st);
  return r;
}

/* First use of a store, or an older schema: switching to WAL and migrating
 * are done by one process at a time, under STORE/init.lock, since SQLite
 * answers a journal-mode change that races another "locked" at once. */
static int store_init(cairn_store *st) {
  int fd = openat(st->dirfd, "init.lock", O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return store_fail(st, -errno, "%s/init.lock: %s", st->dir, strerror(errno));
  while (flock(fd, LOCK_EX) < 0 && errno == EINTR) {
  }
  int r = cn_db_exec(st, "PRAGMA journal_mode=WAL");
  if (r == 0 && schema_version(st) < SCHEMA_VERSION) r = store_migrate(st);
  close(fd);
  return r;
}

static int store_open_db(cairn_store *st) {
  char path[PATH_MAX];
  snprintf(path, sizeof(path), "%s/meta.db", st->dir);
  if (sqlite3_open_v2(path, &st->db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                      NULL) != SQLITE_OK)
    return cn_store_fail_db(st, path);
  sqlite3_busy_timeout(st->db, 60000);
  int r;
  if ((r = cn_db_exec(st, "PRAGMA synchronous=NORMAL")) < 0) return r;
  if ((r = cn_db_exec(st, "PRAGMA foreign_keys=ON")) < 0) return r;
  int version = schema_version(st);
  if (version > SCHEMA_VERSION)
    return store_fail(st, -EPROTO, "store schema version %d is newer than this cairn (%d)", version,
                      SCHEMA_VERSION);
  _cleanup_stmt_ sqlite3_stmt *mode = NULL;
  if ((r = cn_db_prepare(st, &mode, "PRAGMA journal_mode")) < 0) return r;
  bool wal = sqlite3_step(mode) == SQLITE_ROW &&
             strcmp((const char *)sqlite3_column_text(mode, 0), "wal") == 0;
  sqlite3_finalize(mode);
  mode = NULL;
  return wal && version == SCHEMA_VERSION ? 0 : store_init(st);
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
  _cleanup_closedir_ DIR *d = cn_opendirat(st->dirfd, ".");
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
  store_private_files(st);
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
  if ((r = store_open_db(*out)) < 0) return r;
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
  return fd < 0 ? store_fail(st, fd, "%s/lock: %s", st->dir, strerror(-fd)) : fd;
}

int cn_id_lookup(cairn_store *st, const char *table, const char *ref, cairn_id id) {
  const char *hex = strncmp(ref, "sha256:", 7) == 0 ? ref + 7 : ref;
  size_t n = strlen(hex);
  if (n < CAIRN_ID_PREFIX_MIN || n > CAIRN_ID_LEN || !cn_is_hex_id(hex, n)) return 0;
  char sql[128];
  snprintf(sql, sizeof(sql), "SELECT id FROM %s WHERE substr(id, 1, ?) = ? LIMIT 2", table);
  _cleanup_stmt_ sqlite3_stmt *q = NULL;
  int r = cn_db_prepare(st, &q, sql);
  if (r < 0) return r;
  sqlite3_bind_int(q, 1, (int)n);
  sqlite3_bind_text(q, 2, hex, -1, SQLITE_STATIC);
  int found = 0;
  while ((r = sqlite3_step(q)) == SQLITE_ROW)
    if (found++ == 0) snprintf(id, sizeof(cairn_id), "%s", (const char *)sqlite3_column_text(q, 0));
  if (r != SQLITE_DONE && found < 2) return cn_store_fail_db(st, "id lookup");
  if (found > 1) return store_fail(st, -EINVAL, "id prefix is ambiguous; give more digits");
  return found;
}
