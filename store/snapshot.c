/* SPDX-License-Identifier: Apache-2.0 */
/*
 * snapshot.c — containerd snapshots (cairn/snapshot.h), as containerd's
 * overlayfs snapshotter keeps them: a row of the table snapshots (its key,
 * parent, kind, times and, once committed, its usage) and its labels in
 * snapshot_labels, in the store's meta.db; its files in
 * STORE/snapshots/ID/fs (ID the row's, never reused), with
 * STORE/snapshots/ID/work for an active one's overlay. Committing renames
 * the row and keeps its ID and files, and makes the snapshot a layer of
 * the store (the one its chain id names, else its directory written as
 * one: cn_dir_layer), recorded with its parent's in snapshot_layers, by
 * which every snapshot holds its chain's layers against rm and gc
 * (libcairn_pin.h's cn_snapshot_holders).
 *
 * A view's or an active snapshot's lower is one read-only cairnfs mount
 * of its parent's chain (cairn_snapshot_mounts_chain: the chain image,
 * an unnamed image of the chain's layers, at STORE/snapshot-mounts/ID),
 * shared through snapshot_mounts and ended with its last snapshot
 * (snapshot_chain.c: the chain lock, a chain's users, the end of its
 * mount and gc's sweep, apart so that gc's link takes none of this file).
 * Over 1,000 lines: the rows, their transactions and the mounts they
 * answer are one subsystem sharing the row and step helpers; the
 * filters could go to a file of their own.
 *
 * The tables are made on first use (CREATE TABLE IF NOT EXISTS): a store
 * no snapshotter used has none, and a cairn that knows nothing of them
 * opens a store that has them.
 */
#include "libcairn_image.h"
#include "libcairn_layer.h"
#include "libcairn_pin.h"
#include "libcairn_snapshot_chain.h"
#include "remote/libcairn_remote_lazy.h"

#include <openssl/evp.h>

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <poll.h>
#include <regex.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cleanup.h"

#define LABEL_MAX 4096 /* a label's key and value together, as containerd */
/* the chain id containerd's unpack will commit a prepared snapshot as */
#define LABEL_REF "containerd.io/snapshot.ref"

static int tables(cairn_store *st) {
  return cn_db_exec(st,
                    "CREATE TABLE IF NOT EXISTS snapshots(id INTEGER PRIMARY KEY AUTOINCREMENT,"
                    "  name TEXT NOT NULL UNIQUE, parent TEXT NOT NULL, kind INTEGER NOT NULL,"
                    "  created INTEGER NOT NULL, updated INTEGER NOT NULL,"
                    "  size INTEGER NOT NULL DEFAULT 0, inodes INTEGER NOT NULL DEFAULT 0);"
                    "CREATE INDEX IF NOT EXISTS snapshots_parent ON snapshots(parent);"
                    "CREATE TABLE IF NOT EXISTS snapshot_labels(snapshot_id INTEGER NOT NULL"
                    "  REFERENCES snapshots(id) ON DELETE CASCADE,"
                    "  key TEXT NOT NULL, value TEXT NOT NULL, PRIMARY KEY(snapshot_id, key));"
                    "CREATE TABLE IF NOT EXISTS snapshot_layers(snapshot_id INTEGER NOT NULL"
                    "  REFERENCES snapshots(id) ON DELETE CASCADE, position INTEGER NOT NULL,"
                    "  layer TEXT NOT NULL, PRIMARY KEY(snapshot_id, position));"
                    "CREATE INDEX IF NOT EXISTS snapshot_layers_layer ON snapshot_layers(layer);");
}

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void cairn_snapshot_free(cairn_snapshot *s) {
  if (!s) return;
  free(s->name);
  free(s->parent);
  for (size_t i = 0; i < s->n_labels; i++) {
    free(s->labels[i].key);
    free(s->labels[i].value);
  }
  free(s->labels);
  memset(s, 0, sizeof(*s));
}

void cairn_snapshot_mount_free(cairn_snapshot_mount *m) {
  if (!m) return;
  free(m->type);
  free(m->source);
  for (size_t i = 0; i < m->n_options; i++) free(m->options[i]);
  free(m->options);
  memset(m, 0, sizeof(*m));
}

/* Binds what an insert and a commit write of a snapshot's row, as s's
 * parameters 1 to 6: name, kind, created and updated (now), size and
 * inodes. */
static void row_bind(sqlite3_stmt *s, const char *name, int kind, int64_t size, int64_t inodes) {
  int64_t t = now_ns();
  sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
  sqlite3_bind_int(s, 2, kind);
  sqlite3_bind_int64(s, 3, t);
  sqlite3_bind_int64(s, 4, t);
  sqlite3_bind_int64(s, 5, size);
  sqlite3_bind_int64(s, 6, inodes);
}

/* Adds the row of snapshot name (kind, on parent, "" for none; its usage,
 * 0 until it is committed), created and updated now; its id in *id.
 * -EEXIST if the name is taken. Inside the caller's transaction. */
static int row_insert(cairn_store *st, const char *name, const char *parent, int kind, int64_t size,
                      int64_t inodes, int64_t *id) {
  cn_autostmt sqlite3_stmt *s = NULL;
  int r = cn_db_prepare(st, &s,
                        "INSERT INTO snapshots(name, kind, created, updated, size, inodes, parent)"
                        " VALUES(?, ?, ?, ?, ?, ?, ?)");
  if (r < 0) return r;
  row_bind(s, name, kind, size, inodes);
  sqlite3_bind_text(s, 7, parent, -1, SQLITE_STATIC);
  int rc = sqlite3_step(s);
  if (rc == SQLITE_CONSTRAINT) return cairn_fail(st, -EEXIST, "snapshot %s: already exists", name);
  if (rc != SQLITE_DONE) return cn_snapshot_fail_step(st, rc, "snapshot");
  *id = sqlite3_last_insert_rowid(cn_db(st));
  return 0;
}

/* A snapshot's row: its id, kind and parent (parent_out may be NULL). */
static int row(cairn_store *st, const char *key, int64_t *id, int *kind, char **parent_out) {
  cn_autostmt sqlite3_stmt *s = NULL;
  int r = cn_db_prepare(st, &s, "SELECT id, kind, parent FROM snapshots WHERE name=?");
  if (r < 0) return r;
  sqlite3_bind_text(s, 1, key, -1, SQLITE_STATIC);
  int rc = sqlite3_step(s);
  if (rc == SQLITE_DONE) return cairn_fail(st, -ENOENT, "snapshot %s: not found", key);
  if (rc != SQLITE_ROW) return cn_snapshot_fail_step(st, rc, "snapshot");
  *id = sqlite3_column_int64(s, 0);
  *kind = sqlite3_column_int(s, 1);
  if (parent_out && !(*parent_out = strdup((const char *)sqlite3_column_text(s, 2))))
    return -ENOMEM;
  return 0;
}

static int labels_check(cairn_store *st, const cairn_snapshot_label *labels, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (strlen(labels[i].key) + strlen(labels[i].value) > LABEL_MAX)
      return cairn_fail(st, -EINVAL, "label %.64s: longer than %d bytes", labels[i].key, LABEL_MAX);
  return 0;
}

/* Sets one label of snapshot id (an empty value removes it). */
static int label_put(cairn_store *st, int64_t id, const char *key, const char *value) {
  cn_autostmt sqlite3_stmt *s = NULL;
  int r = cn_db_prepare(st, &s,
                        *value ? "INSERT OR REPLACE INTO snapshot_labels VALUES(?, ?, ?)"
                               : "DELETE FROM snapshot_labels WHERE snapshot_id=? AND key=?");
  if (r < 0) return r;
  sqlite3_bind_int64(s, 1, id);
  sqlite3_bind_text(s, 2, key, -1, SQLITE_STATIC);
  if (*value) sqlite3_bind_text(s, 3, value, -1, SQLITE_STATIC);
  int rc = sqlite3_step(s);
  return rc == SQLITE_DONE ? 0 : cn_snapshot_fail_step(st, rc, "snapshot label");
}

static int labels_clear(cairn_store *st, int64_t id) {
  cn_autostmt sqlite3_stmt *s = NULL;
  int r = cn_db_prepare(st, &s, "DELETE FROM snapshot_labels WHERE snapshot_id=?");
  if (r < 0) return r;
  sqlite3_bind_int64(s, 1, id);
  int rc = sqlite3_step(s);
  return rc == SQLITE_DONE ? 0 : cn_snapshot_fail_step(st, rc, "snapshot labels");
}

static int labels_set(cairn_store *st, int64_t id, const cairn_snapshot_label *labels, size_t n) {
  int r = labels_clear(st, id);
  for (size_t i = 0; r == 0 && i < n; i++) r = label_put(st, id, labels[i].key, labels[i].value);
  return r;
}

/* STORE/snapshots/ID[/sub] into buf. */
static void snap_path(cairn_store *st, int64_t id, const char *sub, char *buf, size_t len) {
  snprintf(buf, len, "%s/snapshots/%lld%s%s", st->dir, (long long)id, sub ? "/" : "",
           sub ? sub : "");
}

static int rm_one(const char *path, const struct stat *sb, int type, struct FTW *ftw) {
  (void)sb, (void)ftw;
  int r = type == FTW_DP ? rmdir(path) : unlink(path);
  return r < 0 && errno != ENOENT ? -1 : 0;
}

static int rm_tree(const char *path) {
  if (nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT) < 0 && errno != ENOENT)
    return -errno;
  return 0;
}

static int remote_prepare(cairn_store *st, const char *key, const char *parent, const char *target,
                          const cairn_snapshot_label *labels, size_t n_labels, const char *cairn);

int cairn_snapshot_prepare(cairn_store *st, enum cairn_snapshot_kind kind, const char *key,
                           const char *parent, const cairn_snapshot_label *labels,
                           size_t n_labels) {
  return cairn_snapshot_prepare_fill(st, kind, key, parent, labels, n_labels, NULL);
}

int cairn_snapshot_prepare_fill(cairn_store *st, enum cairn_snapshot_kind kind, const char *key,
                                const char *parent, const cairn_snapshot_label *labels,
                                size_t n_labels, const char *cairn) {
  store_errclear(st);
  if (!parent) parent = "";
  if (!*key) return cairn_fail(st, -EINVAL, "a snapshot needs a key");
  if (kind != CAIRN_SNAPSHOT_ACTIVE && kind != CAIRN_SNAPSHOT_VIEW)
    return cairn_fail(st, -EINVAL, "snapshot %s: prepared active or as a view", key);
  int r = labels_check(st, labels, n_labels);
  if (r < 0 || (r = tables(st)) < 0) return r;
  for (size_t i = 0; kind == CAIRN_SNAPSHOT_ACTIVE && i < n_labels; i++)
    if (strcmp(labels[i].key, LABEL_REF) == 0) {
      if ((r = remote_prepare(st, key, parent, labels[i].value, labels, n_labels, cairn)) <= 0)
        return r;
      break; /* the store has no such layer: prepared as usual */
    }
  if ((r = cn_db_begin(st)) < 0) return r;
  int64_t parent_id = 0, id;
  if (*parent) {
    int pkind;
    if ((r = row(st, parent, &parent_id, &pkind, NULL)) < 0) {
      if (r == -ENOENT) r = cairn_fail(st, -ENOENT, "parent snapshot %s: not found", parent);
      goto fail;
    }
    if (pkind != CAIRN_SNAPSHOT_COMMITTED) {
      r = cairn_fail(st, -EINVAL, "parent snapshot %s: not committed", parent);
      goto fail;
    }
  }
  if ((r = row_insert(st, key, parent, kind, 0, 0, &id)) < 0) goto fail;
  if ((r = labels_set(st, id, labels, n_labels)) < 0) goto fail;
  /* The directories, before the row is committed: a failure leaves at
   * most directories no row owns, which cleanup removes. */
  char dir[PATH_MAX], fs[PATH_MAX], work[PATH_MAX];
  snap_path(st, 0, NULL, dir, sizeof(dir));
  *strrchr(dir, '/') = '\0';
  if (mkdir(dir, 0700) < 0 && errno != EEXIST) goto fail_errno;
  snap_path(st, id, NULL, dir, sizeof(dir));
  snap_path(st, id, "fs", fs, sizeof(fs));
  snap_path(st, id, "work", work, sizeof(work));
  if (mkdir(dir, 0700) < 0 || mkdir(fs, 0755) < 0 || chmod(fs, 0755) < 0) goto fail_errno;
  if (kind == CAIRN_SNAPSHOT_ACTIVE && mkdir(work, 0711) < 0) goto fail_errno;
  if (parent_id) { /* the new root is owned as its parent's */
    char pfs[PATH_MAX];
    struct stat sb;
    snap_path(st, parent_id, "fs", pfs, sizeof(pfs));
    if (stat(pfs, &sb) < 0 || lchown(fs, sb.st_uid, sb.st_gid) < 0) goto fail_errno;
  }
  if ((r = cn_db_commit(st)) < 0) {
    rm_tree(dir);
    return r;
  }
  return 0;
fail_errno:
  r = cairn_fail(st, -errno, "snapshot %s: %s", key, strerror(errno));
  snap_path(st, id, NULL, dir, sizeof(dir));
  rm_tree(dir);
fail:
  cn_db_rollback(st);
  return r;
}

/* What the files under path use: allocated bytes and inodes (each once). */
struct du {
  int64_t size, inodes;
  ino_t *seen;
  size_t n, cap;
};
static __thread struct du *du_cur; /* the thread's disk_usage */
static int du_one(const char *path, const struct stat *sb, int type, struct FTW *ftw) {
  (void)path, (void)type, (void)ftw;
  struct du *d = du_cur;
  if (sb->st_nlink > 1 && !S_ISDIR(sb->st_mode)) {
    for (size_t i = 0; i < d->n; i++)
      if (d->seen[i] == sb->st_ino) return 0;
    ino_t *g = cn_array_grow(d->seen, d->n + 1, &d->cap, sizeof(*g));
    if (!g) return -1;
    d->seen = g;
    d->seen[d->n++] = sb->st_ino;
  }
  d->size += (int64_t)sb->st_blocks * 512;
  d->inodes++;
  return 0;
}

static int disk_usage(const char *path, int64_t *size, int64_t *inodes) {
  struct du d = {0};
  du_cur = &d;
  int r = nftw(path, du_one, 16, FTW_PHYS | FTW_MOUNT) < 0 ? -errno : 0;
  free(d.seen);
  *size = d.size;
  *inodes = d.inodes;
  return r;
}

/* The stored layer (not refuted) whose chain id on parent is name: containerd names a
 * snapshot it unpacks by its chain id (the layer's diff_id at the bottom,
 * else the sha256 of "PARENT sha256:DIFF_ID"; its proxy keys prefixed by
 * "NAMESPACE/N/"), after it checked the
 * diff_id of the tar it applied. 1 and its id into out, 0 if none. */
static int layer_of_chain_id(cairn_store *st, const char *name, const char *parent, cairn_id out) {
  /* containerd's metadata store gives its keys as NAMESPACE/N/KEY */
  const char *slash = strrchr(name, '/');
  if (slash) name = slash + 1;
  if (*parent && (slash = strrchr(parent, '/'))) parent = slash + 1;
  if (strncmp(name, "sha256:", 7) != 0 || strlen(name) != 7 + 64 ||
      strspn(name + 7, "0123456789abcdef") != 64)
    return 0;
  cn_autostmt sqlite3_stmt *s = NULL;
  /* not a lazy pull's layer taken out of service: its files are not to be
   * served, as its diff_id is not theirs */
  int r = cn_db_prepare(st, &s,
                        *parent ? "SELECT id FROM layers"
                                  " WHERE id NOT IN (SELECT layer_id FROM layer_refuted)"
                                : "SELECT id FROM layers WHERE id=?"
                                  " AND id NOT IN (SELECT layer_id FROM layer_refuted)");
  if (r < 0) return r;
  if (!*parent) sqlite3_bind_text(s, 1, name + 7, -1, SQLITE_STATIC);
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    const char *id = (const char *)sqlite3_column_text(s, 0);
    if (*parent) {
      char buf[256];
      unsigned char md[32];
      int n = snprintf(buf, sizeof(buf), "%s sha256:%s", parent, id);
      cairn_id hex;
      if (n < 0 || (size_t)n >= sizeof(buf) ||
          !EVP_Digest(buf, (size_t)n, md, NULL, EVP_sha256(), NULL))
        continue;
      cn_sha256_hex(md, hex);
      if (strcmp(hex, name + 7) != 0) continue;
    }
    snprintf(out, sizeof(cairn_id), "%s", id);
    return 1;
  }
  return rc == SQLITE_DONE ? 0 : cn_snapshot_fail_step(st, rc, "layers");
}

/* The layer of the active snapshot id (named name once committed, on
 * parent), pinned in ps: the stored layer its chain id names, or its
 * directory written as one (cn_dir_layer; the same files, the same
 * layer). */
static int snapshot_layer(cairn_store *st, int64_t id, const char *name, const char *parent,
                          cairn_pinset *ps, cairn_id layer) {
  int r = layer_of_chain_id(st, name, parent, layer);
  if (r == 1) {
    if ((r = cn_pin_lock(st, ps, CAIRN_PIN_LAYER, layer)) < 0) return r;
    if ((r = layer_of_chain_id(st, name, parent, layer)) == 1) return 0; /* still there */
  }
  if (r < 0) return r;
  char dir[PATH_MAX];
  snap_path(st, id, NULL, dir, sizeof(dir));
  cairn_autoclose int dfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return cairn_fail(st, -errno, "%s: %s", dir, strerror(errno));
  return cn_dir_layer(st, dfd, "fs", ps, layer);
}

/* Within the transaction: the chain of committed snapshot id, its parent's
 * layers and then layer, as its rows of snapshot_layers. */
static int chain_record(cairn_store *st, int64_t id, const char *parent, const char *layer) {
  cn_autostmt sqlite3_stmt *s = NULL;
  int r = cn_db_prepare(st, &s,
                        "INSERT INTO snapshot_layers(snapshot_id, position, layer)"
                        " SELECT ?1, l.position, l.layer FROM snapshot_layers l"
                        " JOIN snapshots p ON p.id = l.snapshot_id WHERE p.name = ?2"
                        " UNION ALL SELECT ?1, (SELECT count(*) FROM snapshot_layers l"
                        " JOIN snapshots p ON p.id = l.snapshot_id WHERE p.name = ?2), ?3");
  if (r < 0) return r;
  sqlite3_bind_int64(s, 1, id);
  sqlite3_bind_text(s, 2, parent, -1, SQLITE_STATIC);
  sqlite3_bind_text(s, 3, layer, -1, SQLITE_STATIC);
  int rc = sqlite3_step(s);
  return rc == SQLITE_DONE ? 0 : cn_snapshot_fail_step(st, rc, "snapshot layers");
}

/* ---- one cairnfs mount per chain ---------------------------------------- */

/* The chain image's config: cn_config_for_layers's with a key of its own
 * first, so that its id is no image's a user stored, and cairn images (and
 * this file) know it by it. */
#define CHAIN_KEY CN_CHAIN_IMAGE_KEY

/* The layers of the committed snapshot key's chain, bottom first, as its
 * rows of snapshot_layers (none for a snapshot committed before chains
 * were recorded). */
static int chain_of(cairn_store *st, const char *key, char ***ids, size_t *n) {
  *ids = NULL;
  *n = 0;
  cn_autostmt sqlite3_stmt *q = NULL;
  int r = cn_db_prepare(st, &q,
                        "SELECT l.layer FROM snapshot_layers l JOIN snapshots s"
                        " ON s.id = l.snapshot_id WHERE s.name = ? ORDER BY l.position");
  if (r < 0) return r;
  sqlite3_bind_text(q, 1, key, -1, SQLITE_STATIC);
  size_t cap = 0;
  int rc;
  while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
    char **g = cn_array_grow(*ids, *n + 1, &cap, sizeof(*g));
    char *s = g ? strdup((const char *)sqlite3_column_text(q, 0)) : NULL;
    if (g) *ids = g;
    if (!s) {
      cn_strv_free(*ids, *n);
      *ids = NULL;
      *n = 0;
      return -ENOMEM;
    }
    (*ids)[(*n)++] = s;
  }
  if (rc != SQLITE_DONE) {
    cn_strv_free(*ids, *n);
    *ids = NULL;
    *n = 0;
    return cn_snapshot_fail_step(st, rc, "snapshot");
  }
  return 0;
}

/* Whether the committed snapshot key's chain is all cairn layers: a row
 * of snapshot_layers per snapshot from it down to the bottom one. */
static bool chain_complete(cairn_store *st, const char *key) {
  char **ids = NULL;
  size_t n = 0, depth = 0;
  if (chain_of(st, key, &ids, &n) < 0) {
    store_errclear(st);
    return false;
  }
  cn_strv_free(ids, n);
  cairn_autofree char *k = strdup(key);
  while (k && *k && depth <= n) {
    int64_t id;
    int kind;
    char *next = NULL;
    if (row(st, k, &id, &kind, &next) < 0) {
      store_errclear(st);
      return false;
    }
    free(k);
    k = next;
    depth++;
  }
  return k && depth == n;
}

/* The chain image of parent's chain of want layers (made if need be: no name, not listed
 * by cairn images, its layers those the snapshots hold), in image_id. */
static int chain_image(cairn_store *st, const char *parent, size_t want, cairn_id image_id) {
  char **ids = NULL;
  size_t n = 0;
  int r = chain_of(st, parent, &ids, &n);
  if (r < 0) return r;
  if (n != want) {
    cn_strv_free(ids, n);
    return -ENOENT;
  }
  cairn_autofree char *base = cn_config_for_layers((const char *const *)ids, n);
  cairn_autofree char *cfg =
      base && base[0] == '{' ? cn_xasprintf("{" CHAIN_KEY ":true,%s", base + 1) : NULL;
  if (!cfg)
    r = -ENOMEM;
  else
    r = cn_image_commit(st, cfg, strlen(cfg), (const char *const *)ids, n, NULL, image_id);
  cn_strv_free(ids, n);
  return r;
}

/* Starts cairnfs (the program cairnfs, a path or a name on PATH) on the
 * chain image image_id at its mount point, unless it is mounted and answers. */
static int chain_mount(cairn_store *st, const char *cairnfs, const char *image_id) {
  char dir[PATH_MAX];
  cn_snapshot_chain_dir(st, image_id, dir, sizeof(dir));
  int state = cairn_mountpoint_state(dir);
  if (state == CAIRN_MP_LIVE) return 0;
  if (state == CAIRN_MP_STALE) cairn_mountpoint_unmount(dir, true);
  char top[PATH_MAX];
  snprintf(top, sizeof(top), "%s/snapshot-mounts", st->dir);
  if ((mkdir(top, 0700) < 0 && errno != EEXIST) || (mkdir(dir, 0700) < 0 && errno != EEXIST))
    return cairn_fail(st, -errno, "%s: %s", dir, strerror(errno));
  char *argv[] = {(char *)"cairnfs",  (char *)"--store", st->dir, (char *)"-o",
                  (char *)"suid,dev", (char *)image_id,  dir,     NULL};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid;
  int r = posix_spawnp(&pid, cairnfs, &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (r != 0) return cairn_fail(st, -r, "%s: cannot start: %s", cairnfs, strerror(r));
  int status;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return cairn_fail(st, -errno, "%s: %s", cairnfs, strerror(errno));
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return cairn_fail(st, -EIO, "%s: cairnfs of %s failed", dir, image_id);
  return 0;
}

/* The table of the snapshots that use a chain image. */
static int mounts_table(cairn_store *st) {
  return cn_db_exec(st, "CREATE TABLE IF NOT EXISTS snapshot_mounts(snapshot_id INTEGER"
                        " PRIMARY KEY REFERENCES snapshots(id) ON DELETE CASCADE,"
                        " image_id TEXT NOT NULL)");
}

/* Records that the snapshot id uses the chain image image_id. */
static int chain_use(cairn_store *st, int64_t id, const char *image_id) {
  int r = mounts_table(st);
  if (r < 0) return r;
  cn_autostmt sqlite3_stmt *s = NULL;
  if ((r = cn_db_prepare(st, &s,
                         "INSERT OR REPLACE INTO snapshot_mounts(snapshot_id, image_id)"
                         " VALUES(?, ?)")) < 0)
    return r;
  sqlite3_bind_int64(s, 1, id);
  sqlite3_bind_text(s, 2, image_id, -1, SQLITE_STATIC);
  int rc = sqlite3_step(s);
  return rc == SQLITE_DONE ? 0 : cn_snapshot_fail_step(st, rc, "snapshot");
}

/* Within a remove's or a commit's transaction: the chain image the
 * snapshot id used, in image_id ("" if none or others use it still), its
 * use dropped. */
static int chain_unuse(cairn_store *st, int64_t id, cairn_id image_id) {
  image_id[0] = '\0';
  int r = mounts_table(st);
  if (r < 0) return r;
  cn_autostmt sqlite3_stmt *q = NULL;
  if ((r = cn_db_prepare(st, &q,
                         "SELECT image_id, (SELECT count(*) FROM snapshot_mounts o"
                         " WHERE o.image_id = m.image_id AND o.snapshot_id != m.snapshot_id)"
                         " FROM snapshot_mounts m WHERE snapshot_id = ?")) < 0)
    return r;
  sqlite3_bind_int64(q, 1, id);
  int rc = sqlite3_step(q);
  if (rc == SQLITE_DONE) return 0;
  if (rc != SQLITE_ROW) return cn_snapshot_fail_step(st, rc, "snapshot");
  if (sqlite3_column_int64(q, 1) == 0)
    snprintf(image_id, CAIRN_ID_LEN + 1, "%s", (const char *)sqlite3_column_text(q, 0));
  cn_autostmt sqlite3_stmt *d = NULL;
  if ((r = cn_db_prepare(st, &d, "DELETE FROM snapshot_mounts WHERE snapshot_id = ?")) < 0)
    return r;
  sqlite3_bind_int64(d, 1, id);
  rc = sqlite3_step(d);
  return rc == SQLITE_DONE ? 0 : cn_snapshot_fail_step(st, rc, "snapshot");
}

/* ---- the background fill of a chain's lazy layers ----------------------- */

/* How long a Mounts call waits for the fill it started to hold its pins. */
#define CHAIN_FILL_READY_MS 10000

/* The program name (a path, or a name looked up on PATH) as a path in buf:
 * looked up here, since the fill's process may call nothing that allocates
 * between its fork and its exec. */
static bool program_path(const char *name, char *buf, size_t len) {
  if (strchr(name, '/')) return (size_t)snprintf(buf, len, "%s", name) < len;
  const char *path = getenv("PATH");
  for (const char *p = path ? path : "/usr/local/bin:/usr/bin:/bin"; *p;) {
    size_t n = strcspn(p, ":");
    if ((size_t)snprintf(buf, len, "%.*s/%s", (int)n, p, name) < len && access(buf, X_OK) == 0)
      return true;
    p += n + (p[n] == ':');
  }
  return false;
}

/* When the chain image image_id has files a lazy pull or a lazy Prepare
 * left to fetch: starts `cairn fill` of it (the program cairn, a path or a
 * name on PATH), unless a fill of it runs, and returns once it holds the
 * image's pins (CHAIN_FILL_READY_MS at most), which keep the image and its
 * layers while it runs (cn_snapshot_chain_end leaves a pinned image to
 * gc). It runs in a session of its own and is not this process's child
 * (a double fork): a kill of the snapshotter leaves it running, and
 * nothing has to reap it.
 * Its stderr is STORE/tmp/fill-ID12.log, locked (flock) for as long as it
 * runs: a snapshotter started again finds the lock taken and starts no
 * second fill. The fill yields the link to the mount's first reads. Best
 * effort: a fill that does not start leaves the files to first reads. */
static void chain_fill(cairn_store *st, const char *cairn, const char *image_id) {
  uint64_t files = 0, bytes = 0;
  char exe[PATH_MAX], log[PATH_MAX];
  cairn_autofree char **env = NULL;
  if (cairn_image_pending(st, image_id, &files, &bytes) < 0 || files == 0 ||
      !program_path(cairn, exe, sizeof(exe))) {
    store_errclear(st);
    return;
  }
  snprintf(log, sizeof(log), "%s/tmp/fill-%.12s.log", st->dir, image_id);
  int logfd = open(log, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (logfd < 0) return;
  int p[2] = {-1, -1};
  /* the lock taken: a fill of it runs */
  if (flock(logfd, LOCK_EX | LOCK_NB) < 0 || ftruncate(logfd, 0) < 0 || pipe2(p, O_CLOEXEC) < 0)
    goto out;
  /* its environment: this one's, and the fd it tells its pins are held on */
  size_t n = 0;
  while (environ[n]) n++;
  if (!(env = calloc(n + 2, sizeof(*env)))) goto out;
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (strncmp(environ[i], "CAIRN_FILL_READY_FD=", 20) != 0) env[k++] = environ[i];
  env[k] = (char *)"CAIRN_FILL_READY_FD=3";
  char *argv[] = {
      exe, (char *)"--store", st->dir, (char *)"fill", (char *)"--no-progress", (char *)image_id,
      NULL};
  pid_t pid = fork();
  if (pid == 0) { /* async-signal-safe calls only, to its exec */
    setsid();
    if (fork() != 0) _exit(0);
    int nul = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (nul < 0 || dup2(nul, 0) < 0 || dup2(nul, 1) < 0 || dup2(logfd, 2) < 0 ||
        (p[1] == 3 ? fcntl(3, F_SETFD, 0) : dup2(p[1], 3)) < 0)
      _exit(127);
    execve(exe, argv, env);
    _exit(127);
  }
  close(p[1]);
  p[1] = -1;
  if (pid > 0) {
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
    }
    struct pollfd pf = {.fd = p[0], .events = POLLIN};
    char b;
    if (poll(&pf, 1, CHAIN_FILL_READY_MS) > 0)
      while (read(p[0], &b, 1) < 0 && errno == EINTR) {
      }
  }
out:
  if (p[0] >= 0) close(p[0]);
  if (p[1] >= 0) close(p[1]);
  close(logfd);
}

int cairn_snapshot_commit(cairn_store *st, const char *name, const char *key,
                          const cairn_snapshot_label *labels, size_t n_labels) {
  store_errclear(st);
  int r = labels_check(st, labels, n_labels);
  if (r < 0 || (r = tables(st)) < 0) return r;
  int64_t id, other;
  int kind;
  /* The layer first (its ingest is a transaction of its own), pinned until
   * the snapshot's rows record it; checked again below. */
  cairn_autofree char *parent = NULL;
  if ((r = row(st, name, &other, &kind, NULL)) == 0)
    return cairn_fail(st, -EEXIST, "snapshot %s: already exists", name);
  if (r != -ENOENT) return r;
  if ((r = row(st, key, &id, &kind, &parent)) < 0) return r;
  if (kind != CAIRN_SNAPSHOT_ACTIVE) return cairn_fail(st, -EBUSY, "snapshot %s: not active", key);
  cairn_autofree char *purpose = cn_xasprintf("containerd commit %s", name);
  cairn_pinset *ps = purpose ? cairn_pinset_new(purpose, true) : NULL;
  if (!ps) return cairn_fail(st, -ENOMEM, "out of memory");
  cairn_id layer;
  if ((r = snapshot_layer(st, id, name, parent, ps, layer)) < 0 || (r = cn_db_begin(st)) < 0) {
    cairn_pinset_release(st, ps);
    return r;
  }
  if ((r = row(st, name, &other, &kind, NULL)) == 0) {
    r = cairn_fail(st, -EEXIST, "snapshot %s: already exists", name);
    goto fail;
  }
  if (r != -ENOENT) goto fail;
  if ((r = row(st, key, &id, &kind, NULL)) < 0) goto fail;
  if (kind != CAIRN_SNAPSHOT_ACTIVE) {
    r = cairn_fail(st, -EBUSY, "snapshot %s: not active", key);
    goto fail;
  }
  char fs[PATH_MAX];
  int64_t size, inodes;
  snap_path(st, id, "fs", fs, sizeof(fs));
  if ((r = disk_usage(fs, &size, &inodes)) < 0) {
    r = cairn_fail(st, r, "%s: %s", fs, strerror(-r));
    goto fail;
  }
  {
    cn_autostmt sqlite3_stmt *s = NULL;
    if ((r = cn_db_prepare(st, &s,
                           "UPDATE snapshots SET name=?, kind=?, created=?, updated=?,"
                           " size=?, inodes=? WHERE id=?")) < 0)
      goto fail;
    row_bind(s, name, CAIRN_SNAPSHOT_COMMITTED, size, inodes);
    sqlite3_bind_int64(s, 7, id);
    int rc = sqlite3_step(s);
    if (rc != SQLITE_DONE) {
      r = cn_snapshot_fail_step(st, rc, "snapshot");
      goto fail;
    }
  }
  cairn_id chain;
  if ((r = labels_set(st, id, labels, n_labels)) < 0 ||
      (r = chain_record(st, id, parent, layer)) < 0 || (r = chain_unuse(st, id, chain)) < 0)
    goto fail;
  /* the work directory is an active snapshot's only */
  char work[PATH_MAX];
  snap_path(st, id, "work", work, sizeof(work));
  r = cn_db_commit(st);
  cairn_pinset_release(st, ps);
  if (r < 0) return r;
  rm_tree(work);
  if (chain[0]) cn_snapshot_chain_end(st, chain);
  /* Its files are its layer's now, which the mounts of its children
   * serve: the directory is emptied (what it took is recorded above). */
  if (chain_complete(st, name) && rm_tree(fs) == 0) mkdir(fs, 0755);
  return 0;
fail:
  cn_db_rollback(st);
  cairn_pinset_release(st, ps);
  return r;
}

/* The labels containerd's handlers give a layer's Prepare: the image's
 * reference and the layer's blob digest (ctr-remote's and
 * stargz-snapshotter's handler, then the CRI plugin's). */
static const char *const REMOTE_LABELS[][2] = {
    {"containerd.io/snapshot/remote/stargz.reference",
     "containerd.io/snapshot/remote/stargz.digest"},
    {"containerd.io/snapshot/cri.image-ref", "containerd.io/snapshot/cri.layer-digest"},
};
#define CRI_REMOTE_LABELS 1 /* REMOTE_LABELS[1] */

/* The label the CRI plugin gives a layer's Prepare with the digest of the
 * manifest it resolved (the platform's, not an index). */
#define CRI_MANIFEST_LABEL "containerd.io/snapshot/cri.manifest-digest"

/* ref (REPO, REPO:TAG, REPO@DIGEST) as REPO@manifest in out: the manifest
 * containerd resolved, whatever the tag names now and whatever platform
 * this host would pick from an index. False (out unset) when manifest is
 * no sha256 digest or it does not fit. */
static bool ref_at_manifest(const char *ref, const char *manifest, char *out, size_t len) {
  static const char hex[] = "0123456789abcdef";
  if (strncmp(manifest, "sha256:", 7) != 0 || strlen(manifest) != 7 + 64 ||
      strspn(manifest + 7, hex) != 64)
    return false;
  size_t n = strcspn(ref, "@");             /* REPO[:TAG] */
  const char *slash = memrchr(ref, '/', n); /* a port's colon is before it */
  const char *colon = memchr(slash ? slash : ref, ':', n - (size_t)((slash ? slash : ref) - ref));
  if (colon) n = (size_t)(colon - ref);
  return (size_t)snprintf(out, len, "%.*s@%s", (int)n, ref, manifest) < len;
}

/* The labels containerd's handlers give a layer's Prepare that list the
 * blob digests of that layer and the image's layers after it, comma
 * separated (as many as a label holds: the CRI plugin's, then
 * ctr-remote's and stargz-snapshotter's). */
static const char *const LAYERS_LABELS[] = {
    "containerd.io/snapshot/cri.image-layers",
    "containerd.io/snapshot/remote/stargz.layers",
};

/* Whether the labels say the Prepare is of the image's last layer: a
 * list of the layers from it on that holds one digest. */
static bool last_layer(const cairn_snapshot_label *labels, size_t n_labels) {
  for (size_t k = 0; k < sizeof(LAYERS_LABELS) / sizeof(*LAYERS_LABELS); k++)
    for (size_t i = 0; i < n_labels; i++)
      if (strcmp(labels[i].key, LAYERS_LABELS[k]) == 0 && labels[i].value[0])
        return !strchr(labels[i].value, ',');
  return false;
}

/* Whether a layer of the chain (n layers ids) has files to fetch. */
static bool layers_pending(cairn_store *st, char **ids, size_t n) {
  cn_autostmt sqlite3_stmt *q = NULL;
  if (cn_db_prepare(st, &q, "SELECT 1 FROM pending WHERE layer_id = ? LIMIT 1") < 0) return false;
  for (size_t i = 0; i < n; i++) {
    sqlite3_reset(q);
    sqlite3_bind_text(q, 1, ids[i], -1, SQLITE_STATIC);
    if (sqlite3_step(q) == SQLITE_ROW) return true;
  }
  return false;
}

/* After a remote Prepare of an image's last layer (its committed
 * snapshot name): the background fill of name's chain, as the first
 * Mounts of the chain would start it (chain_fill: one fill a chain, the
 * chain image's pins), when its layers have files to fetch; so that an
 * image pulled and not run yet is fetched meanwhile, not when it first
 * runs. The chain image is made and pinned in ps under the chain lock,
 * so that gc's sweep of unused chain images leaves it until the fill
 * holds its own pins. Best effort, as chain_fill. */
static void prepared_fill(cairn_store *st, const char *cairn, const char *name, cairn_pinset *ps) {
  char **ids = NULL;
  size_t n = 0;
  if (chain_of(st, name, &ids, &n) < 0 || !layers_pending(st, ids, n)) {
    cn_strv_free(ids, n);
    store_errclear(st);
    return;
  }
  cn_strv_free(ids, n);
  cairn_id img;
  int lock = cn_snapshot_chain_lock(st);
  int r = lock < 0 ? lock : chain_image(st, name, n, img);
  if (r == 0) r = cn_pin_lock(st, ps, CAIRN_PIN_IMAGE, img);
  if (lock >= 0) close(lock);
  if (r >= 0) chain_fill(st, cairn, img);
  store_errclear(st);
}

/* The layer the chain id target names on parent, pinned in ps, in layer:
 * the stored one, else (labels naming the image and the layer's blob) the
 * registry's layer recorded lazily from its TOC (cn_pull_lazy_layer). 1
 * and layer, 0 when neither (the registry's failure too: containerd, with
 * credentials of its own, downloads it). */
static int remote_layer(cairn_store *st, const char *target, const char *parent,
                        const cairn_snapshot_label *labels, size_t n_labels, cairn_pinset *ps,
                        cairn_id layer) {
  int r = layer_of_chain_id(st, target, parent, layer);
  if (r == 1) {
    if ((r = cn_pin_lock(st, ps, CAIRN_PIN_LAYER, layer)) < 0) return r;
    return layer_of_chain_id(st, target, parent, layer); /* still there, pinned */
  }
  if (r < 0) return r;
  const char *ref = NULL, *digest = NULL;
  size_t k = 0;
  for (; k < sizeof(REMOTE_LABELS) / sizeof(*REMOTE_LABELS); k++) {
    ref = digest = NULL;
    for (size_t i = 0; i < n_labels; i++)
      if (strcmp(labels[i].key, REMOTE_LABELS[k][0]) == 0)
        ref = labels[i].value;
      else if (strcmp(labels[i].key, REMOTE_LABELS[k][1]) == 0)
        digest = labels[i].value;
    if (!ref || !*ref) digest = NULL;
    if (digest) break;
  }
  if (!digest) return 0;
  /* the CRI plugin's reference: the manifest it resolved, by its digest */
  char pinned[1024];
  for (size_t i = 0; k == CRI_REMOTE_LABELS && i < n_labels; i++)
    if (strcmp(labels[i].key, CRI_MANIFEST_LABEL) == 0 &&
        ref_at_manifest(ref, labels[i].value, pinned, sizeof(pinned)))
      ref = pinned;
  cairn_config cfg = {0};
  /* a lazy fetch's retries, not a pull's: containerd's other calls wait
   * meanwhile, and a failure leaves the layer to containerd's download */
  cairn_pull_opts o = {.attempts = 3, .backoff_base_ms = 100, .backoff_cap_ms = 1000};
  if (cairn_config_load(&cfg) == 0) o.config = &cfg; /* mirrors, insecure registries */
  cairn_id diff_id;
  r = cn_pull_lazy_layer(st, ref, digest, &o, ps, diff_id);
  cairn_config_free(&cfg);
  if (r != 0) {
    store_errclear(st);
    return 0;
  }
  return layer_of_chain_id(st, target, parent, layer); /* the config's diff_id, containerd's */
}

/* A Prepare that containerd's unpack labels with the chain id it will
 * commit the snapshot as (target, on parent): if the store holds the layer
 * that chain id names, or records it lazily from the registry
 * (remote_layer), the committed snapshot NAMESPACE/N/TARGET (the key's
 * prefix, so that each namespace has its own) is made of it, its chain
 * recorded, and -EEXIST tells containerd so, as a remote snapshotter
 * answers: it finds that snapshot by its labels and parent, and fetches
 * nothing. Its directory stays empty: the one cairnfs mount of its
 * children's chain serves its files (a lazy layer's fetched on first
 * read). Returns 1 when there is no such layer, or the parent's chain is
 * not all cairn layers (a chain recorded before chains were: its mounts
 * are directories): the caller prepares as usual. */
static int remote_prepare(cairn_store *st, const char *key, const char *parent, const char *target,
                          const cairn_snapshot_label *labels, size_t n_labels, const char *cairn) {
  const char *slash = strrchr(key, '/');
  cairn_autofree char *name =
      cn_xasprintf("%.*s%s", slash ? (int)(slash - key + 1) : 0, key, target);
  if (!name) return cairn_fail(st, -ENOMEM, "out of memory");
  int64_t id, pid;
  int kind;
  int r = row(st, name, &id, &kind, NULL);
  if (r == 0) return cairn_fail(st, -EEXIST, "snapshot %s: already exists", name);
  if (r != -ENOENT) return r;
  if (*parent && ((r = row(st, parent, &pid, &kind, NULL)) < 0 || kind != CAIRN_SNAPSHOT_COMMITTED))
    return r == -ENOENT || r == 0 ? (store_errclear(st), 1) : r; /* said by the usual path */
  if (*parent && !chain_complete(st, parent)) return 1;
  cairn_autofree char *purpose = cn_xasprintf("containerd prepare %s", name);
  cairn_pinset *ps = purpose ? cairn_pinset_new(purpose, true) : NULL;
  if (!ps) return cairn_fail(st, -ENOMEM, "out of memory");
  cairn_id layer;
  if ((r = remote_layer(st, target, parent, labels, n_labels, ps, layer)) <= 0) {
    cairn_pinset_release(st, ps);
    return r < 0 ? r : 1;
  }
  char dir[PATH_MAX], fs[PATH_MAX];
  bool made = false;
  if ((r = cn_db_begin(st)) < 0) goto out;
  if ((r = row_insert(st, name, parent, CAIRN_SNAPSHOT_COMMITTED, 0, 0, &id)) < 0 ||
      (r = labels_set(st, id, labels, n_labels)) < 0 ||
      (r = chain_record(st, id, parent, layer)) < 0)
    goto fail;
  /* The directories, before the row is committed, as a prepare's. */
  snap_path(st, 0, NULL, dir, sizeof(dir));
  *strrchr(dir, '/') = '\0';
  if (mkdir(dir, 0700) < 0 && errno != EEXIST) goto fail_errno;
  snap_path(st, id, NULL, dir, sizeof(dir));
  snap_path(st, id, "fs", fs, sizeof(fs));
  if (mkdir(dir, 0700) < 0) goto fail_errno;
  made = true;
  if (mkdir(fs, 0755) < 0 || chmod(fs, 0755) < 0) goto fail_errno;
  if ((r = cn_db_commit(st)) < 0) goto out;
  if (cairn && last_layer(labels, n_labels)) prepared_fill(st, cairn, name, ps);
  r = cairn_fail(st, -EEXIST, "snapshot %s: already exists (layer sha256:%s of the store)", name,
                 layer);
  goto out;
fail_errno:
  r = cairn_fail(st, -errno, "%s: %s", dir, strerror(errno));
fail:
  cn_db_rollback(st);
out:
  if (r != -EEXIST && made) rm_tree(dir);
  cairn_pinset_release(st, ps);
  return r;
}

int cairn_snapshot_remove(cairn_store *st, const char *key) {
  store_errclear(st);
  int r;
  if ((r = tables(st)) < 0 || (r = cn_db_begin(st)) < 0) return r;
  int64_t id;
  int kind;
  cairn_id chain;
  if ((r = row(st, key, &id, &kind, NULL)) < 0) goto fail;
  {
    cn_autostmt sqlite3_stmt *s = NULL;
    if ((r = cn_db_prepare(st, &s, "SELECT 1 FROM snapshots WHERE parent=? LIMIT 1")) < 0)
      goto fail;
    sqlite3_bind_text(s, 1, key, -1, SQLITE_STATIC);
    int rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
      r = cairn_fail(st, -EBUSY, "snapshot %s: cannot remove snapshot with child", key);
      goto fail;
    }
    if (rc != SQLITE_DONE) {
      r = cn_snapshot_fail_step(st, rc, "snapshot");
      goto fail;
    }
  }
  if ((r = chain_unuse(st, id, chain)) < 0) goto fail;
  {
    cn_autostmt sqlite3_stmt *s = NULL;
    if ((r = cn_db_prepare(st, &s, "DELETE FROM snapshots WHERE id=?")) < 0) goto fail;
    sqlite3_bind_int64(s, 1, id);
    int rc = sqlite3_step(s);
    if (rc != SQLITE_DONE) {
      r = cn_snapshot_fail_step(st, rc, "snapshot");
      goto fail;
    }
  }
  if ((r = cn_db_commit(st)) < 0) return r;
  if (chain[0]) cn_snapshot_chain_end(st, chain);
  char dir[PATH_MAX];
  snap_path(st, id, NULL, dir, sizeof(dir));
  if ((r = rm_tree(dir)) < 0) return cairn_fail(st, r, "%s: %s", dir, strerror(-r));
  return 0;
fail:
  cn_db_rollback(st);
  return r;
}

/* Reads a row of "SELECT id, name, parent, kind, created, updated" and its labels. */
static int read_info(cairn_store *st, sqlite3_stmt *s, cairn_snapshot *out) {
  memset(out, 0, sizeof(*out));
  int64_t id = sqlite3_column_int64(s, 0);
  out->name = strdup((const char *)sqlite3_column_text(s, 1));
  out->parent = strdup((const char *)sqlite3_column_text(s, 2));
  out->kind = sqlite3_column_int(s, 3);
  out->created_ns = sqlite3_column_int64(s, 4);
  out->updated_ns = sqlite3_column_int64(s, 5);
  if (!out->name || !out->parent) return -ENOMEM;
  cn_autostmt sqlite3_stmt *l = NULL;
  int r = cn_db_prepare(st, &l, "SELECT key, value FROM snapshot_labels WHERE snapshot_id=?");
  if (r < 0) return r;
  sqlite3_bind_int64(l, 1, id);
  size_t cap = 0;
  int rc;
  while ((rc = sqlite3_step(l)) == SQLITE_ROW) {
    cairn_snapshot_label *g = cn_array_grow(out->labels, out->n_labels + 1, &cap, sizeof(*g));
    if (!g) return -ENOMEM;
    out->labels = g;
    cairn_snapshot_label *lb = &out->labels[out->n_labels++];
    lb->key = strdup((const char *)sqlite3_column_text(l, 0));
    lb->value = strdup((const char *)sqlite3_column_text(l, 1));
    if (!lb->key || !lb->value) return -ENOMEM;
  }
  return rc == SQLITE_DONE ? 0 : cn_snapshot_fail_step(st, rc, "snapshot labels");
}

#define INFO_SQL "SELECT id, name, parent, kind, created, updated FROM snapshots"

int cairn_snapshot_stat(cairn_store *st, const char *key, cairn_snapshot *out) {
  store_errclear(st);
  memset(out, 0, sizeof(*out));
  int r = tables(st);
  if (r < 0) return r;
  cn_autostmt sqlite3_stmt *s = NULL;
  if ((r = cn_db_prepare(st, &s, INFO_SQL " WHERE name=?")) < 0) return r;
  sqlite3_bind_text(s, 1, key, -1, SQLITE_STATIC);
  int rc = sqlite3_step(s);
  if (rc == SQLITE_DONE) return cairn_fail(st, -ENOENT, "snapshot %s: not found", key);
  if (rc != SQLITE_ROW) return cn_snapshot_fail_step(st, rc, "snapshot");
  if ((r = read_info(st, s, out)) < 0) cairn_snapshot_free(out);
  return r;
}

static const char *label_of(const cairn_snapshot *info, const char *key) {
  for (size_t i = 0; i < info->n_labels; i++)
    if (strcmp(info->labels[i].key, key) == 0) return info->labels[i].value;
  return NULL;
}

int cairn_snapshot_update(cairn_store *st, const cairn_snapshot *info, const char *const *paths,
                          size_t n_paths, cairn_snapshot *out) {
  store_errclear(st);
  memset(out, 0, sizeof(*out));
  for (size_t i = 0; i < n_paths; i++)
    if (strcmp(paths[i], "labels") != 0 && strncmp(paths[i], "labels.", 7) != 0)
      return cairn_fail(st, -EINVAL, "cannot update %s of snapshot %s", paths[i], info->name);
  int r = labels_check(st, info->labels, info->n_labels);
  if (r < 0 || (r = tables(st)) < 0 || (r = cn_db_begin(st)) < 0) return r;
  int64_t id;
  int kind;
  if ((r = row(st, info->name, &id, &kind, NULL)) < 0) goto fail;
  if (n_paths == 0) r = labels_set(st, id, info->labels, info->n_labels);
  for (size_t i = 0; r == 0 && i < n_paths; i++) {
    if (strcmp(paths[i], "labels") == 0) {
      r = labels_set(st, id, info->labels, info->n_labels);
    } else {
      const char *v = label_of(info, paths[i] + 7);
      r = label_put(st, id, paths[i] + 7, v ? v : "");
    }
  }
  if (r < 0) goto fail;
  {
    cn_autostmt sqlite3_stmt *s = NULL;
    if ((r = cn_db_prepare(st, &s, "UPDATE snapshots SET updated=? WHERE id=?")) < 0) goto fail;
    sqlite3_bind_int64(s, 1, now_ns());
    sqlite3_bind_int64(s, 2, id);
    int rc = sqlite3_step(s);
    if (rc != SQLITE_DONE) {
      r = cn_snapshot_fail_step(st, rc, "snapshot");
      goto fail;
    }
  }
  if ((r = cn_db_commit(st)) < 0) return r;
  return cairn_snapshot_stat(st, info->name, out);
fail:
  cn_db_rollback(st);
  return r;
}

/* ---- filters: containerd's syntax (filters.Parse), on a snapshot's fields */

struct term {
  char *field[2]; /* "name", "parent", "kind" or "labels" and its key */
  int op;         /* 0 present, '=' ==, '!' !=, '~' ~= */
  char *value;
  regex_t re;
};

/* A quoted string ("..." with \-escapes) or a bare word up to a stop
 * character, at *p: a copy, *p past it. */
static char *token(const char **p, const char *stops) {
  const char *s = *p;
  size_t len = strlen(s);
  char *out = malloc(len + 1), *o = out;
  if (!out) return NULL;
  if (*s == '"' || *s == '`') {
    char q = *s++;
    while (*s && *s != q) {
      if (*s == '\\' && s[1] && q == '"') s++;
      *o++ = *s++;
    }
    if (*s != q) {
      free(out);
      return NULL;
    }
    s++;
  } else {
    while (*s && !strchr(stops, *s)) *o++ = *s++;
  }
  *o = '\0';
  *p = s;
  return out;
}

static void terms_free(struct term *t, size_t n) {
  for (size_t i = 0; i < n; i++) {
    free(t[i].field[0]);
    free(t[i].field[1]);
    free(t[i].value);
    if (t[i].op == '~') regfree(&t[i].re);
  }
  free(t);
}

/* Parses one filter (terms joined by ",") into *out. */
static int filter_parse(cairn_store *st, const char *f, struct term **out, size_t *n) {
  struct term *t = NULL;
  size_t cap = 0, k = 0;
  const char *p = f;
  for (;;) {
    struct term *g = cn_array_grow(t, k + 1, &cap, sizeof(*g));
    if (!g) goto nomem;
    t = g;
    struct term *c = &t[k++];
    memset(c, 0, sizeof(*c));
    while (*p == ' ') p++;
    if (!(c->field[0] = token(&p, ".=!~, ")) || !*c->field[0]) goto bad;
    if (*p == '.') {
      p++;
      if (!(c->field[1] = token(&p, "=!~, ")) || !*c->field[1]) goto bad;
    }
    while (*p == ' ') p++;
    if ((p[0] == '=' || p[0] == '!' || p[0] == '~') && p[1] == '=') {
      c->op = p[0];
      p += 2;
      while (*p == ' ') p++;
      if (!(c->value = token(&p, ", "))) goto bad;
      if (c->op == '~' && regcomp(&c->re, c->value, REG_EXTENDED | REG_NOSUB) != 0) {
        c->op = 0;
        goto bad;
      }
    }
    while (*p == ' ') p++;
    if (!*p) break;
    if (*p++ != ',') goto bad;
  }
  *out = t;
  *n = k;
  return 0;
nomem:
  terms_free(t, k);
  return -ENOMEM;
bad:
  terms_free(t, k);
  return cairn_fail(st, -EINVAL, "filter %s: not understood", f);
}

static const char *kind_name(int kind) {
  return kind == CAIRN_SNAPSHOT_VIEW        ? "view"
         : kind == CAIRN_SNAPSHOT_ACTIVE    ? "active"
         : kind == CAIRN_SNAPSHOT_COMMITTED ? "committed"
                                            : "unknown";
}

static bool term_match(const struct term *t, const cairn_snapshot *s) {
  const char *v = NULL;
  if (strcmp(t->field[0], "name") == 0 && !t->field[1])
    v = s->name;
  else if (strcmp(t->field[0], "parent") == 0 && !t->field[1])
    v = s->parent;
  else if (strcmp(t->field[0], "kind") == 0 && !t->field[1])
    v = kind_name(s->kind);
  else if (strcmp(t->field[0], "labels") == 0 && t->field[1])
    v = label_of(s, t->field[1]);
  /* as containerd's adaptor: name, parent and kind are always present
   * (parent=="" is a snapshot with none), a label when the snapshot has it */
  bool present = v != NULL;
  switch (t->op) {
  case 0: return present;
  case '=': return present && strcmp(v, t->value) == 0;
  case '!': return strcmp(present ? v : "", t->value) != 0;
  default: return regexec(&t->re, present ? v : "", 0, NULL, 0) == 0;
  }
}

int cairn_snapshot_walk(cairn_store *st, const char *const *filters, size_t n_filters,
                        cairn_snapshot_walk_fn fn, void *arg) {
  store_errclear(st);
  int r = tables(st);
  if (r < 0) return r;
  struct term **terms = calloc(n_filters + 1, sizeof(*terms));
  size_t *n_terms = calloc(n_filters + 1, sizeof(*n_terms));
  if (!terms || !n_terms) {
    r = -ENOMEM;
    goto out;
  }
  for (size_t i = 0; i < n_filters; i++)
    if ((r = filter_parse(st, filters[i], &terms[i], &n_terms[i])) < 0) goto out;
  {
    cn_autostmt sqlite3_stmt *s = NULL;
    if ((r = cn_db_prepare(st, &s, INFO_SQL " ORDER BY name")) < 0) goto out;
    int rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
      cairn_snapshot info;
      if ((r = read_info(st, s, &info)) < 0) {
        cairn_snapshot_free(&info);
        goto out;
      }
      bool match = n_filters == 0;
      for (size_t i = 0; !match && i < n_filters; i++) {
        match = true;
        for (size_t j = 0; match && j < n_terms[i]; j++) match = term_match(&terms[i][j], &info);
      }
      r = match ? fn(&info, arg) : 0;
      cairn_snapshot_free(&info);
      if (r) goto out;
    }
    r = rc == SQLITE_DONE ? 0 : cn_snapshot_fail_step(st, rc, "snapshots");
  }
out:
  for (size_t i = 0; terms && i < n_filters; i++)
    if (terms[i]) terms_free(terms[i], n_terms[i]);
  free(terms);
  free(n_terms);
  return r;
}

int cairn_snapshot_usage(cairn_store *st, const char *key, int64_t *size, int64_t *inodes) {
  store_errclear(st);
  int r = tables(st);
  if (r < 0) return r;
  cn_autostmt sqlite3_stmt *s = NULL;
  if ((r = cn_db_prepare(st, &s, "SELECT id, kind, size, inodes FROM snapshots WHERE name=?")) < 0)
    return r;
  sqlite3_bind_text(s, 1, key, -1, SQLITE_STATIC);
  int rc = sqlite3_step(s);
  if (rc == SQLITE_DONE) return cairn_fail(st, -ENOENT, "snapshot %s: not found", key);
  if (rc != SQLITE_ROW) return cn_snapshot_fail_step(st, rc, "snapshot");
  if (sqlite3_column_int(s, 1) != CAIRN_SNAPSHOT_ACTIVE) {
    *size = sqlite3_column_int64(s, 2);
    *inodes = sqlite3_column_int64(s, 3);
    return 0;
  }
  char fs[PATH_MAX];
  snap_path(st, sqlite3_column_int64(s, 0), "fs", fs, sizeof(fs));
  if ((r = disk_usage(fs, size, inodes)) < 0) return cairn_fail(st, r, "%s: %s", fs, strerror(-r));
  return 0;
}

static int opt_push(cairn_snapshot_mount *m, char *o) {
  if (!o) return -ENOMEM;
  char **g = realloc(m->options, (m->n_options + 1) * sizeof(*g));
  if (!g) {
    free(o);
    return -ENOMEM;
  }
  m->options = g;
  m->options[m->n_options++] = o;
  return 0;
}

int cairn_snapshot_mounts(cairn_store *st, const char *key, cairn_snapshot_mount *out) {
  return cairn_snapshot_mounts_fill(st, key, "cairnfs", NULL, out);
}

int cairn_snapshot_mounts_chain(cairn_store *st, const char *key, const char *cairnfs,
                                cairn_snapshot_mount *out) {
  return cairn_snapshot_mounts_fill(st, key, cairnfs, NULL, out);
}

int cairn_snapshot_mounts_fill(cairn_store *st, const char *key, const char *cairnfs,
                               const char *cairn, cairn_snapshot_mount *out) {
  store_errclear(st);
  memset(out, 0, sizeof(*out));
  int r = tables(st);
  if (r < 0) return r;
  int64_t id;
  int kind;
  cairn_autofree char *parent = NULL;
  if ((r = row(st, key, &id, &kind, &parent)) < 0) return r;
  if (kind != CAIRN_SNAPSHOT_ACTIVE && kind != CAIRN_SNAPSHOT_VIEW)
    return cairn_fail(st, -EBUSY, "snapshot %s: not active or a view", key);
  cairn_autofree char *first = strdup(parent);
  if (!first) return cairn_fail(st, -ENOMEM, "snapshot %s: out of memory", key);
  /* the ancestors' ids, nearest first */
  int64_t *ids = NULL;
  size_t n = 0, cap = 0;
  while (*parent) {
    int64_t pid;
    int pkind;
    char *next = NULL;
    if ((r = row(st, parent, &pid, &pkind, &next)) < 0) goto out;
    free(parent);
    parent = next;
    int64_t *g = cn_array_grow(ids, n + 1, &cap, sizeof(*g));
    if (!g) {
      r = -ENOMEM;
      goto out;
    }
    ids = g;
    ids[n++] = pid;
  }
  char path[PATH_MAX];
  /* The parent's chain as one read-only cairnfs mount, if it is all cairn
   * layers (one per ancestor) and cairnfs mounts it; else its directories. */
  char lower_one[PATH_MAX] = "";
  if (n > 0) {
    cairn_id img;
    cairn_autoclose int lock = cn_snapshot_chain_lock(st);
    int c = lock < 0 ? lock : chain_image(st, first, n, img);
    if (c == 0) store_test_point(st, "snapshot: chain mount");
    if (c == 0) c = chain_mount(st, cairnfs ? cairnfs : "cairnfs", img);
    if (c == 0) c = chain_use(st, id, img);
    if (lock >= 0) { /* used now: no other call ends it; the fill's start waits for no lock */
      close(lock);
      lock = -1;
    }
    if (c == 0 && cairn) chain_fill(st, cairn, img);
    if (c == 0) cn_snapshot_chain_dir(st, img, lower_one, sizeof(lower_one));
    if (c == -ENOENT)
      store_errclear(st); /* a chain recorded before: the directories */
    else if (c < 0) {
      r = c;
      goto out;
    }
  }
  if (lower_one[0] && kind != CAIRN_SNAPSHOT_ACTIVE) {
    out->type = strdup("bind");
    out->source = strdup(lower_one);
    r = (!out->type || !out->source) ? -ENOMEM : 0;
    if (!r) r = opt_push(out, strdup("ro"));
    if (!r) r = opt_push(out, strdup("rbind"));
    goto out;
  }
  if (n == 0 || (kind != CAIRN_SNAPSHOT_ACTIVE && n == 1)) {
    snap_path(st, n ? ids[0] : id, "fs", path, sizeof(path));
    out->type = strdup("bind");
    out->source = strdup(path);
    r = (!out->type || !out->source) ? -ENOMEM : 0;
    if (!r) r = opt_push(out, strdup(kind == CAIRN_SNAPSHOT_ACTIVE ? "rw" : "ro"));
    if (!r) r = opt_push(out, strdup("rbind"));
    goto out;
  }
  out->type = strdup("overlay");
  out->source = strdup("overlay");
  r = (!out->type || !out->source) ? -ENOMEM : 0;
  if (!r && kind == CAIRN_SNAPSHOT_ACTIVE) {
    snap_path(st, id, "work", path, sizeof(path));
    r = opt_push(out, cn_xasprintf("workdir=%s", path));
    snap_path(st, id, "fs", path, sizeof(path));
    if (!r) r = opt_push(out, cn_xasprintf("upperdir=%s", path));
  }
  if (!r) {
    size_t len = 10 + strlen(lower_one) + n * (strlen(st->dir) + 40);
    char *lower = malloc(len);
    if (!lower) {
      r = -ENOMEM;
      goto out;
    }
    strcpy(lower, "lowerdir=");
    if (lower_one[0]) {
      strcat(lower, lower_one);
      n = 0;
    }
    for (size_t i = 0; i < n; i++) {
      snap_path(st, ids[i], "fs", path, sizeof(path));
      if (i) strcat(lower, ":");
      strcat(lower, path);
    }
    r = opt_push(out, lower);
  }
out:
  free(ids);
  if (r < 0) {
    cairn_snapshot_mount_free(out);
    if (r == -ENOMEM) r = cairn_fail(st, r, "snapshot %s: out of memory", key);
  }
  return r;
}

/* Removes what no row owns in STORE/snapshots (dir, open as d): a
 * directory a crash left, and an older cairn's remote prepare's
 * tmp-PID-N whose process is gone. Within a write transaction: a prepare
 * makes its directories in its own, which is then either committed (its
 * row seen here) or not begun. */
static int dirs_sweep(cairn_store *st, DIR *d, const char *dir) {
  int r;
  struct dirent *e;
  while ((e = readdir(d))) {
    char *end;
    if (strncmp(e->d_name, "tmp-", 4) == 0) { /* an older cairn's remote prepare's */
      long pid = strtol(e->d_name + 4, &end, 10);
      char path[PATH_MAX];
      int n = snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
      if (n > 0 && (size_t)n < sizeof(path) && *end == '-' && pid > 0 &&
          (pid == getpid() || (kill((pid_t)pid, 0) < 0 && errno == ESRCH)) &&
          (r = rm_tree(path)) < 0)
        return cairn_fail(st, r, "%s: %s", path, strerror(-r));
      continue;
    }
    long long id = strtoll(e->d_name, &end, 10);
    if (e->d_name[0] == '.' || *end || id <= 0) continue;
    cn_autostmt sqlite3_stmt *s = NULL;
    if ((r = cn_db_prepare(st, &s, "SELECT 1 FROM snapshots WHERE id=?")) < 0) return r;
    sqlite3_bind_int64(s, 1, id);
    int rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) continue;
    if (rc != SQLITE_DONE) return cn_snapshot_fail_step(st, rc, "snapshots");
    char path[PATH_MAX];
    snap_path(st, id, NULL, path, sizeof(path));
    if ((r = rm_tree(path)) < 0) return cairn_fail(st, r, "%s: %s", path, strerror(-r));
  }
  return 0;
}

int cairn_snapshot_cleanup(cairn_store *st) {
  store_errclear(st);
  int r = tables(st);
  if (r < 0 || (r = mounts_table(st)) < 0 || (r = cn_snapshot_chain_sweep(st, 0)) < 0) return r;
  char dir[PATH_MAX];
  snprintf(dir, sizeof(dir), "%s/snapshots", st->dir);
  cairn_autoclosedir DIR *d = opendir(dir);
  if (!d) return errno == ENOENT ? 0 : cairn_fail(st, -errno, "%s: %s", dir, strerror(errno));
  if ((r = cn_db_begin(st)) < 0) return r;
  if ((r = dirs_sweep(st, d, dir)) < 0) {
    cn_db_rollback(st);
    return r;
  }
  return cn_db_commit(st);
}
