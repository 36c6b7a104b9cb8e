/* SPDX-License-Identifier: Apache-2.0 */
/*
 * db.c — the store's SQLite database, meta.db: opening it (WAL, foreign
 * keys, busy timeout) and the schema migrations, again after
 * cairn_store_idle closed it; preparing and running statements,
 * transactions, a commit that is on disk; looking an id up by its prefix.
 *
 * The schema carries a version in `meta`; each migration runs once, in one
 * transaction, so a store written by an older cairn opens in a newer one.
 */
#include "libcairn_store.h"

#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <sys/file.h>

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
    /* 6: a blob by the sha256 of its content (cn_blob_by_sha256), as a
     * TOC names a file: the column is there since 1, filled by every
     * blob writer, so the index is all a store written before needs */
    "CREATE INDEX blobs_sha256 ON blobs(sha256);",
    /* 7: lazy pulls (lazy.c, doc/lazy-pulls.md): a layer is complete or
     * partial; a partial one's registry source and kept TOC
     * (STORE/toc/HEX of its blob's digest), and its files not yet
     * fetched, whose entries name no blob until they are */
    ("ALTER TABLE layers ADD COLUMN state TEXT NOT NULL DEFAULT 'complete'"
     "  CHECK(state IN ('complete', 'partial'));"
     "CREATE TABLE layer_sources(layer_id TEXT PRIMARY KEY"
     "  REFERENCES layers(id) ON DELETE CASCADE,"
     "  source TEXT NOT NULL, insecure INTEGER NOT NULL, digest TEXT NOT NULL,"
     "  media_type TEXT NOT NULL, size INTEGER NOT NULL, annotations TEXT NOT NULL,"
     "  toc_digest TEXT NOT NULL);"
     "CREATE TABLE pending(layer_id TEXT NOT NULL REFERENCES layers(id) ON DELETE CASCADE,"
     "  path TEXT NOT NULL, sha256 TEXT NOT NULL, size INTEGER NOT NULL,"
     "  PRIMARY KEY(layer_id, path)) WITHOUT ROWID;"
     "CREATE INDEX pending_sha256 ON pending(sha256);"),
    /* 8: a lazily pulled layer whose diff_id its rebuilt tar refuted,
     * out of service (lazy.c, cn_layer_refute) until removed */
    ("CREATE TABLE layer_refuted(layer_id TEXT PRIMARY KEY"
     "  REFERENCES layers(id) ON DELETE CASCADE,"
     "  reason TEXT NOT NULL, since INTEGER NOT NULL);"),
    /* 9: where a pull got a layer from (layer.c, cn_layer_origin_add):
     * the registry (the endpoint that answered, and whether it was talked
     * to as --insecure), the repository and the compressed blob's digest,
     * media type and size; one row a registry, repository and blob, so
     * that fsck --repair fetches the blob again when the store lost a
     * file of the layer and kept no compressed copy */
    ("CREATE TABLE layer_origins(layer_id TEXT NOT NULL"
     "  REFERENCES layers(id) ON DELETE CASCADE,"
     "  registry TEXT NOT NULL, repository TEXT NOT NULL, insecure INTEGER NOT NULL,"
     "  digest TEXT NOT NULL, media_type TEXT NOT NULL, size INTEGER NOT NULL,"
     "  since INTEGER NOT NULL,"
     "  PRIMARY KEY(layer_id, registry, repository, digest)) WITHOUT ROWID;"),
    /* 10: the directory a mount was made on, as it was before the mount
     * covered it (its device, inode and owner): mount --restore mounts
     * again only on that directory; NULL in a record written before */
    ("ALTER TABLE mounts ADD COLUMN dir_dev INTEGER;"
     "ALTER TABLE mounts ADD COLUMN dir_ino INTEGER;"
     "ALTER TABLE mounts ADD COLUMN dir_uid INTEGER;"),
};
#define SCHEMA_VERSION ((int)(sizeof(migrations) / sizeof(migrations[0])))

/* Opens the connection again if cairn_store_idle closed it: 0, or the
 * failure (recorded) of opening it. */
static int db_ready(cairn_store *st) {
  if (st->db) return 0;
  int r = cn_db_open(st);
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
    return cairn_fail(st, -EIO, "database: no write-ahead log to sync");
  int rc = wal->pMethods->xSync(wal, SQLITE_SYNC_NORMAL);
  if (rc != SQLITE_OK)
    return cairn_fail(st, (rc & 0xff) == SQLITE_FULL ? -ENOSPC : -EIO,
                      "database: syncing the write-ahead log: %s", sqlite3_errstr(rc));
  return 0;
}
void cn_db_rollback(cairn_store *st) {
  if (st->db && !sqlite3_get_autocommit(st->db)) sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
}

/* The schema version recorded in the store, 0 for a new one. */
static int schema_version(cairn_store *st) {
  cn_autostmt sqlite3_stmt *s = NULL;
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
  if (fd < 0) return cairn_fail(st, -errno, "%s/init.lock: %s", st->dir, strerror(errno));
  while (flock(fd, LOCK_EX) < 0 && errno == EINTR) {
  }
  int r = cn_db_exec(st, "PRAGMA journal_mode=WAL");
  if (r == 0 && schema_version(st) < SCHEMA_VERSION) r = store_migrate(st);
  close(fd);
  return r;
}

int cn_db_open(cairn_store *st) {
  char path[PATH_MAX];
  snprintf(path, sizeof(path), "%s/meta.db", st->dir);
  if (sqlite3_open_v2(path, &st->db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX |
                          SQLITE_OPEN_NOFOLLOW,
                      NULL) != SQLITE_OK)
    return cn_store_fail_db(st, path);
  sqlite3_busy_timeout(st->db, 60000);
  int r;
  if ((r = cn_db_exec(st, "PRAGMA synchronous=NORMAL")) < 0) return r;
  if ((r = cn_db_exec(st, "PRAGMA foreign_keys=ON")) < 0) return r;
  int version = schema_version(st);
  if (version > SCHEMA_VERSION)
    return cairn_fail(st, -EPROTO, "store schema version %d is newer than this cairn (%d)", version,
                      SCHEMA_VERSION);
  cn_autostmt sqlite3_stmt *mode = NULL;
  if ((r = cn_db_prepare(st, &mode, "PRAGMA journal_mode")) < 0) return r;
  bool wal = sqlite3_step(mode) == SQLITE_ROW &&
             strcmp((const char *)sqlite3_column_text(mode, 0), "wal") == 0;
  sqlite3_finalize(mode);
  mode = NULL;
  return wal && version == SCHEMA_VERSION ? 0 : store_init(st);
}

int cn_id_lookup(cairn_store *st, const char *table, const char *ref, cairn_id id) {
  const char *hex = strncmp(ref, "sha256:", 7) == 0 ? ref + 7 : ref;
  size_t n = strlen(hex);
  if (n < CAIRN_ID_PREFIX_MIN || n > CAIRN_ID_LEN || !cn_is_hex_id(hex, n)) return 0;
  char sql[128];
  snprintf(sql, sizeof(sql), "SELECT id FROM %s WHERE substr(id, 1, ?) = ? LIMIT 2", table);
  cn_autostmt sqlite3_stmt *q = NULL;
  int r = cn_db_prepare(st, &q, sql);
  if (r < 0) return r;
  sqlite3_bind_int(q, 1, (int)n);
  sqlite3_bind_text(q, 2, hex, -1, SQLITE_STATIC);
  int found = 0;
  while ((r = sqlite3_step(q)) == SQLITE_ROW)
    if (found++ == 0) snprintf(id, sizeof(cairn_id), "%s", (const char *)sqlite3_column_text(q, 0));
  if (r != SQLITE_DONE && found < 2) return cn_store_fail_db(st, "id lookup");
  if (found > 1) return cairn_fail(st, -EINVAL, "id prefix is ambiguous; give more digits");
  return found;
}
