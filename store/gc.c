/*
 * gc.c — reclaiming what nothing uses, and verifying what is stored.
 *
 * store_sweep runs in one transaction: unreferenced layers whose pin file
 * this process can lock exclusively lose their rows, then blob rows nothing
 * references; only after the commit are files unlinked, so a crash leaves
 * files without rows (orphans, swept next time), never rows without files.
 * A dry run does the same work and rolls it back.
 */
#include "sweep.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <openssl/evp.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>

#define TMP_MAX_AGE_SECONDS 600

void cairn_report_free(cairn_report *r) {
  json_decref(r->lines);
  r->lines = NULL;
}

static void report_line(cairn_report *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void report_line(cairn_report *r, const char *fmt, ...) {
  if (!r->lines) r->lines = json_array();
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  json_array_append_new(r->lines, json_string(buf));
}

struct held {
  char id[CAIRN_ID_LEN + 1];
  int fd;
};

/* Locks and deletes the rows of unreferenced layers; their locks are kept
 * in *held until the transaction ends. */
static int sweep_layers(cairn_store *st, bool dry_run, cairn_report *r, struct held **held,
                        size_t *n_held) {
  _cleanup_stmt_ sqlite3_stmt *q = NULL;
  int rc = db_prepare(st, &q,
                      "SELECT id, size FROM layers WHERE NOT EXISTS"
                      " (SELECT 1 FROM image_layers WHERE layer_id = layers.id)");
  if (rc < 0) return rc;
  json_t *ids = json_array();
  while (sqlite3_step(q) == SQLITE_ROW)
    json_array_append_new(ids, json_pack("{s:s,s:I}", "id", (const char *)sqlite3_column_text(q, 0),
                                         "size", (json_int_t)sqlite3_column_int64(q, 1)));
  *held = calloc(json_array_size(ids) + 1, sizeof(**held));
  size_t i;
  json_t *row;
  json_array_foreach(ids, i, row) {
    const char *id = json_string_value(json_object_get(row, "id"));
    int fd = pin_lock_exclusive(st, CAIRN_PIN_LAYER, id);
    if (fd == -EBUSY) {
      _cleanup_free_ char *who = cairn_pin_holders(st, CAIRN_PIN_LAYER, id);
      report_line(r, "kept layer sha256:%s: pinned by %s", id, who && *who ? who : "a process");
      continue;
    }
    if (fd < 0 || (rc = layer_delete_rows(st, id)) < 0) {
      if (fd >= 0) pin_unlock(fd);
      json_decref(ids);
      return fd < 0 ? fd : rc;
    }
    snprintf((*held)[*n_held].id, sizeof((*held)[0].id), "%s", id);
    (*held)[(*n_held)++].fd = fd;
    r->layers++;
    report_line(r, "%s layer sha256:%s (%lld bytes)", dry_run ? "would remove" : "removed", id,
                (long long)json_integer_value(json_object_get(row, "size")));
  }
  json_decref(ids);
  return 0;
}

/* Pin files whose target no longer exists (a pull that died, say). */
static void sweep_pin_files(cairn_store *st, bool dry_run, cairn_report *r) {
  static const char *const dirs[] = {"image", "layer"};
  static const char *const tables[] = {"SELECT 1 FROM images WHERE id = ?",
                                       "SELECT 1 FROM layers WHERE id = ?"};
  for (int kind = 0; kind < 2; kind++) {
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/pins/%s", st->dir, dirs[kind]);
    _cleanup_stmt_ sqlite3_stmt *q = NULL;
    DIR *d = opendir(path);
    if (!d) continue;
    if (db_prepare(st, &q, tables[kind]) < 0) {
      closedir(d);
      continue;
    }
    struct dirent *de;
    while ((de = readdir(d))) {
      if (!is_hex_id(de->d_name, CAIRN_ID_LEN)) continue;
      sqlite3_bind_text(q, 1, de->d_name, -1, SQLITE_STATIC);
      bool exists = sqlite3_step(q) == SQLITE_ROW;
      sqlite3_reset(q);
      if (exists) continue;
      int fd = pin_lock_exclusive(st, (enum cairn_pin_kind)kind, de->d_name);
      if (fd < 0) continue; /* pinned: a pull about to store it */
      r->pins++;
      if (dry_run)
        pin_unlock(fd);
      else
        pin_delete_unlock(st, (enum cairn_pin_kind)kind, de->d_name, fd);
    }
    closedir(d);
  }
}

/* Temporary files older than a few minutes belong to no running process. */
static void sweep_tmp(cairn_store *st, bool dry_run) {
  int dfd = openat(st->dirfd, "tmp", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return;
  DIR *d = fdopendir(dfd);
  if (!d) {
    close(dfd);
    return;
  }
  struct dirent *de;
  struct stat sb;
  while ((de = readdir(d)))
    if (de->d_name[0] != '.' && fstatat(dfd, de->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0 &&
        S_ISREG(sb.st_mode) && sb.st_mtime < now_seconds() - TMP_MAX_AGE_SECONDS && !dry_run)
      unlinkat(dfd, de->d_name, 0);
  closedir(d);
}

/* Unreferenced, unpinned layers; with the store lock (have_lock) also blob
 * rows nothing references, and their files once the rows are gone. */
static int sweep_unused(cairn_store *st, bool dry_run, bool have_lock, cairn_report *r) {
  struct held *held = NULL;
  size_t n_held = 0;
  _cleanup_json_ json_t *blobs = json_array();
  int rc = db_begin(st);
  if (rc == 0) rc = sweep_layers(st, dry_run, r, &held, &n_held);
  if (rc == 0 && have_lock) rc = blob_rows_unreferenced(st, dry_run, blobs, r);
  if (rc == 0 && !dry_run)
    rc = db_commit(st);
  else
    db_rollback(st);
  for (size_t i = 0; i < n_held; i++) {
    if (rc == 0 && !dry_run)
      pin_delete_unlock(st, CAIRN_PIN_LAYER, held[i].id, held[i].fd);
    else
      pin_unlock(held[i].fd);
  }
  free(held);
  if (rc < 0 || dry_run || !have_lock) return rc;
  return blob_files_remove(st, blobs);
}

/* Stale pin annotations and mount records go whenever anything is swept. */
static void clean_stale_records(cairn_store *st) {
  mount_clean_stale(st);
  pin_clean_stale(st);
}

int store_sweep(cairn_store *st, bool dry_run, enum store_lock_mode mode, cairn_report *r) {
  _cleanup_close_ int lock = store_lock(st, mode);
  if (lock < 0 && lock != -EBUSY) return lock;
  if (!dry_run) clean_stale_records(st);
  return sweep_unused(st, dry_run, lock >= 0, r);
}

int cairn_gc(cairn_store *st, bool dry_run, cairn_report *r) {
  _cleanup_close_ int lock =
      store_lock(st, dry_run ? STORE_LOCK_EXCLUSIVE_NB : STORE_LOCK_EXCLUSIVE);
  if (lock < 0 && lock != -EBUSY) return lock;
  if (!dry_run) clean_stale_records(st);
  int rc = sweep_unused(st, dry_run, lock >= 0, r);
  /* The whole-store scans: files no row names, pin files of gone targets,
   * old temporary files. Only gc does them, not every rm. */
  if (rc == 0 && lock >= 0) rc = blob_orphans_sweep(st, dry_run, r);
  if (rc == 0 && lock >= 0) {
    sweep_pin_files(st, dry_run, r);
    sweep_tmp(st, dry_run);
  }
  if (rc == 0)
    report_line(r, "%s %llu layers, %llu blobs, %llu bytes", dry_run ? "would free" : "freed",
                (unsigned long long)r->layers, (unsigned long long)r->blobs,
                (unsigned long long)r->bytes);
  return rc;
}

/* ---- fsck --------------------------------------------------------------- */

static void problem(cairn_report *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void problem(cairn_report *r, const char *fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  report_line(r, "problem: %s", buf);
  r->problems++;
}

/* Reads a blob through and checks its size and XXH3-128 name. */
static const char *blob_verify(cairn_store *st, const char *name, uint64_t size) {
  char rel[128];
  blob_name_path(name, rel, sizeof(rel));
  _cleanup_close_ int fd = openat(st->blobs_fd, rel, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return "missing";
  XXH3_state_t *x = XXH3_createState();
  XXH3_128bits_reset(x);
  static char buf[1 << 17];
  uint64_t got = 0;
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) {
    XXH3_128bits_update(x, buf, (size_t)n);
    got += (uint64_t)n;
  }
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, XXH3_128bits_digest(x));
  XXH3_freeState(x);
  if (n < 0) return "unreadable";
  if (got != size) return "wrong size";
  char key[33];
  hex_encode(c.digest, sizeof(c.digest), key);
  return strncmp(name, key, 32) == 0 ? NULL : "content does not match its name";
}

/* Removes the images and layers that use a broken blob, then its row. */
static int repair_blob(cairn_store *st, const char *name, cairn_report *r) {
  int rc = db_begin(st);
  if (rc < 0) return rc;
  static const char *const sql[] = {
      ("DELETE FROM images WHERE id IN (SELECT image_id FROM image_layers WHERE layer_id IN"
       " (SELECT DISTINCT layer_id FROM entries WHERE blob = ?1))"),
      "DELETE FROM layers WHERE id IN (SELECT DISTINCT layer_id FROM entries WHERE blob = ?1)",
      "DELETE FROM blobs WHERE name = ?1",
  };
  for (size_t i = 0; i < 3 && rc == 0; i++) {
    _cleanup_stmt_ sqlite3_stmt *s = NULL;
    if ((rc = db_prepare(st, &s, sql[i])) < 0) break;
    sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
    if (sqlite3_step(s) != SQLITE_DONE) rc = store_fail_db(st, "repair");
  }
  if (rc == 0)
    rc = db_commit(st);
  else
    db_rollback(st);
  if (rc == 0) report_line(r, "repaired: removed blob %s and the layers and images using it", name);
  return rc;
}

static void fsck_database(cairn_store *st, cairn_report *r) {
  _cleanup_stmt_ sqlite3_stmt *q = NULL;
  if (db_prepare(st, &q, "PRAGMA integrity_check") == 0)
    while (sqlite3_step(q) == SQLITE_ROW)
      if (strcmp((const char *)sqlite3_column_text(q, 0), "ok") != 0)
        problem(r, "database: %s", (const char *)sqlite3_column_text(q, 0));
  _cleanup_stmt_ sqlite3_stmt *f = NULL;
  if (db_prepare(st, &f, "PRAGMA foreign_key_check") == 0)
    while (sqlite3_step(f) == SQLITE_ROW)
      problem(r, "database: a row of %s points at a missing %s",
              (const char *)sqlite3_column_text(f, 0), (const char *)sqlite3_column_text(f, 2));
  _cleanup_stmt_ sqlite3_stmt *i = NULL;
  if (db_prepare(st, &i, "SELECT id, config FROM images") == 0)
    while (sqlite3_step(i) == SQLITE_ROW) {
      unsigned char d[32];
      char hex[65];
      const void *cfg = sqlite3_column_blob(i, 1);
      EVP_Digest(cfg, (size_t)sqlite3_column_bytes(i, 1), d, NULL, EVP_sha256(), NULL);
      sha256_hex(d, hex);
      if (strcmp(hex, (const char *)sqlite3_column_text(i, 0)) != 0)
        problem(r, "image %s: config does not match its id",
                (const char *)sqlite3_column_text(i, 0));
    }
}

/* Incomplete work: blob files of imports that died before committing (only
 * when no import runs), stale pin annotations and mount records. Complete
 * layers that no image uses are kept: a re-run of a killed pull reuses
 * them; gc removes them. */
static int fsck_discard_incomplete(cairn_store *st, cairn_report *r) {
  clean_stale_records(st);
  _cleanup_close_ int lock = store_lock(st, STORE_LOCK_EXCLUSIVE_NB);
  if (lock == -EBUSY) {
    report_line(r, "an import is running: its blobs were not examined");
    return 0;
  }
  if (lock < 0) return lock;
  int rc = blob_orphans_sweep(st, false, r);
  if (rc == 0 && r->blobs)
    report_line(r, "discarded incomplete work: %llu blob files no row refers to",
                (unsigned long long)r->blobs);
  return rc;
}

static void fsck_report_unused(cairn_store *st, cairn_report *r) {
  _cleanup_stmt_ sqlite3_stmt *q = NULL;
  if (db_prepare(st, &q,
                 "SELECT count(*) FROM layers WHERE NOT EXISTS"
                 " (SELECT 1 FROM image_layers WHERE layer_id = layers.id)") < 0)
    return;
  if (sqlite3_step(q) == SQLITE_ROW && sqlite3_column_int(q, 0) > 0)
    report_line(r, "%d layers no image uses (kept for a pull to reuse; cairn gc removes them)",
                sqlite3_column_int(q, 0));
}

int cairn_fsck(cairn_store *st, bool repair, cairn_report *r) {
  int rc = fsck_discard_incomplete(st, r);
  if (rc < 0) return rc;
  fsck_database(st, r);
  fsck_report_unused(st, r);
  _cleanup_json_ json_t *bad = json_array();
  {
    _cleanup_stmt_ sqlite3_stmt *q = NULL;
    if ((rc = db_prepare(st, &q, "SELECT name, size FROM blobs ORDER BY name")) < 0) return rc;
    uint64_t checked = 0;
    while (sqlite3_step(q) == SQLITE_ROW) {
      const char *name = (const char *)sqlite3_column_text(q, 0);
      const char *why = blob_verify(st, name, (uint64_t)sqlite3_column_int64(q, 1));
      checked++;
      if (!why) continue;
      problem(r, "blob %s: %s", name, why);
      json_array_append_new(bad, json_string(name));
    }
    report_line(r, "checked %llu blobs", (unsigned long long)checked);
  }
  if (repair) {
    size_t i;
    json_t *name;
    json_array_foreach(bad, i,
                       name) if ((rc = repair_blob(st, json_string_value(name), r)) < 0) return rc;
    cairn_report ignored = {0};
    store_sweep(st, false, STORE_LOCK_EXCLUSIVE_NB, &ignored);
    cairn_report_free(&ignored);
    if (json_array_size(bad) > 0) return 0;
  }
  return r->problems
             ? store_fail(st, -EBADMSG, "%llu problems found", (unsigned long long)r->problems)
             : 0;
}
