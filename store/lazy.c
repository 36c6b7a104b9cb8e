/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lazy.c — partial layers (doc/lazy-pulls.md): a layer recorded from its
 * table of contents alone by `cairn pull --lazy`, whose regular files
 * arrive one by one (store/remote/lazy.c fetches them) until it is complete.
 *
 * Invariants and why they hold:
 * - A partial layer's row has state 'partial', a layer_sources row (its
 *   registry source, blob digest and the digest of its kept TOC,
 *   STORE/toc/HEX of the blob digest) and one pending row per regular file
 *   not yet stored; that file's entry names no blob. cn_layer_foreach
 *   (layer.c) gives such an entry's blob as "sha256:HEX", which the index
 *   keeps where a blob name would be: a mount serves its metadata at once
 *   and fetches its content on first read. A complete layer has none of
 *   the three, so a completed lazy pull leaves no trace.
 * - A file is recorded only after its content was written as a blob and
 *   hashed again by the blob writer to the sha256 the TOC gives: one
 *   transaction names the blob in every entry pending on that sha256,
 *   deletes those pending rows and marks each layer left without any
 *   complete; a crash before it leaves an unreferenced blob (swept), never
 *   an entry naming a missing or unverified blob. The blob is made
 *   durable before that transaction; a reader may be served from it
 *   before either (cn_lazy_file_store_ready: verified is all a reader
 *   needs). The files of one request commit together (cn_lazy_group).
 * - The store lock is held shared from the sha256 lookup (a file the store
 *   has is linked, not fetched) or the blob write to the commit that names
 *   the blob, as an import holds it: gc, which takes it exclusive, cannot
 *   remove the blob in between.
 * - The kept TOC is written (fsync'd, then linked) before the rows that
 *   name it are committed; a TOC no layer_sources row names is swept
 *   (sweep.c).
 */
#include "libcairn_lazy.h"

#include "libcairn_blob.h"
#include "libcairn_image.h"
#include "libcairn_layer.h"
#include "libcairn_tree.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SHA_PREFIX "sha256:"

static bool pending_blob(const cairn_entry *e) {
  return e->type == CAIRN_REG && e->size > 0 && e->blob &&
         strncmp(e->blob, SHA_PREFIX, strlen(SHA_PREFIX)) == 0;
}

bool cairn_blob_is_pending(const char *blob) {
  return blob && strncmp(blob, SHA_PREFIX, strlen(SHA_PREFIX)) == 0;
}

/* STORE/toc/HEX of a "sha256:HEX" blob digest. */
static int toc_rel(cairn_store *st, const char *digest, char *rel, size_t len) {
  if (strncmp(digest, SHA_PREFIX, 7) != 0 || !cn_is_hex_id(digest + 7, CAIRN_ID_LEN))
    return cairn_fail(st, -EINVAL, "%s: not a sha256 digest", digest);
  snprintf(rel, len, "toc/%s", digest + 7);
  return 0;
}

static int toc_write(cairn_store *st, const char *digest, const void *toc, size_t len) {
  char rel[128];
  int r = toc_rel(st, digest, rel, sizeof rel);
  if (r < 0) return r;
  if (mkdirat(st->dirfd, "toc", 0700) < 0 && errno != EEXIST)
    return cairn_fail(st, -errno, "%s/toc: %s", st->dir, strerror(errno));
  cairn_autoclose int dfd = cn_store_openat(st, "toc", O_RDONLY | O_DIRECTORY, 0);
  cairn_autoclose int fd = dfd < 0 ? -1 : openat(dfd, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0444);
  r = fd < 0 ? -errno : cn_write_all(fd, toc, len);
  if (r == 0 && fsync(fd) < 0) r = -errno;
  char proc[64];
  snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
  if (r == 0 && linkat(AT_FDCWD, proc, st->dirfd, rel, AT_SYMLINK_FOLLOW) < 0 && errno != EEXIST)
    r = -errno;
  if (r == 0 && fsync(dfd) < 0) r = -errno;
  if (r == -ENOSPC) return cn_store_fail_nospace(st);
  return r < 0 ? cairn_fail(st, r, "%s/%s: %s", st->dir, rel, strerror(-r)) : 0;
}

int cn_lazy_toc_read(cairn_store *st, const char *digest, void **buf, size_t *len) {
  store_errclear(st);
  *buf = NULL;
  *len = 0;
  char rel[128];
  int r = toc_rel(st, digest, rel, sizeof rel);
  if (r < 0) return r;
  cairn_autoclose int fd = cn_store_openat(st, rel, O_RDONLY, 0);
  struct stat sb;
  if (fd < 0 || fstat(fd, &sb) < 0)
    return cairn_fail(st, -errno, "%s/%s: %s", st->dir, rel, strerror(errno));
  if (sb.st_size > (off_t)(64 << 20))
    return cairn_fail(st, -EBADMSG, "%s/%s: too large for a TOC", st->dir, rel);
  char *b = malloc((size_t)sb.st_size + 1);
  if (!b) return cairn_fail(st, -ENOMEM, "out of memory");
  size_t got = 0;
  while (got < (size_t)sb.st_size) {
    ssize_t k = pread(fd, b + got, (size_t)sb.st_size - got, (off_t)got);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      free(b);
      return cairn_fail(st, k < 0 ? -errno : -EIO, "%s/%s: short read", st->dir, rel);
    }
    got += (size_t)k;
  }
  *buf = b;
  *len = got;
  return 0;
}

static int path_cmp(const void *a, const void *b) {
  return strcmp((*(const cairn_entry *const *)a)->path, (*(const cairn_entry *const *)b)->path);
}

struct sorted_entries {
  const cairn_entry **v;
  size_t n;
};

static int sorted_foreach(void *src, cairn_entry_fn fn, void *arg) {
  struct sorted_entries *s = src;
  for (size_t i = 0; i < s->n; i++) {
    int r = fn(s->v[i], arg);
    if (r) return r;
  }
  return 0;
}

static int bind_text_or_null(sqlite3_stmt *s, int i, const char *v) {
  return v ? sqlite3_bind_text(s, i, v, -1, SQLITE_STATIC) : sqlite3_bind_null(s, i);
}

static int xattrs_blob(const cairn_entry *e, unsigned char **out, size_t *len) {
  /* as layer.c encodes them: name NUL, 4-byte little-endian length, value */
  size_t n = 0;
  for (size_t i = 0; i < e->n_xattrs; i++) n += strlen(e->xattrs[i].name) + 5 + e->xattrs[i].len;
  *out = NULL;
  *len = n;
  if (n == 0) return 0;
  unsigned char *p = malloc(n);
  if (!p) return -ENOMEM;
  size_t at = 0;
  for (size_t i = 0; i < e->n_xattrs; i++) {
    size_t nl = strlen(e->xattrs[i].name) + 1, vl = e->xattrs[i].len;
    memcpy(p + at, e->xattrs[i].name, nl);
    at += nl;
    for (int k = 0; k < 4; k++) p[at++] = (unsigned char)(vl >> (8 * k));
    memcpy(p + at, e->xattrs[i].value, vl);
    at += vl;
  }
  *out = p;
  return 0;
}

static int record_locked(cairn_store *st, const char *diff_id, struct sorted_entries *se,
                         const cairn_lazy_source *src, size_t *pending) {
  int r;
  if ((r = cn_db_begin(st)) < 0) return r;
  /* stored meanwhile (the pull looked before): reused if proven or of
   * this very blob and TOC, else 2 (an unproven claim from another blob:
   * the caller pulls this one in full, which proves it) */
  if ((r = cn_layer_reusable(st, diff_id, src->digest, src->annotations)) != 0) {
    cn_db_rollback(st);
    return r < 0 ? r : r == 1 ? 0 : 2;
  }
  cn_autostmt sqlite3_stmt *ins = NULL, *pend = NULL, *lay = NULL, *srcrow = NULL, *upd = NULL;
  if ((r = cn_db_prepare(st, &ins,
                         "INSERT INTO entries(layer_id, path, type, mode, uid, gid, size, mtime,"
                         " mtime_nsec, rdev, target, blob, xattrs)"
                         " VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?)")) < 0 ||
      (r = cn_db_prepare(
           st, &pend, "INSERT INTO pending(layer_id, path, sha256, size) VALUES(?,?,?,?)")) < 0 ||
      (r = cn_db_prepare(st, &lay,
                         "INSERT INTO layers(id, size, entries, created, state)"
                         " VALUES(?, ?, ?, ?, 'partial')")) < 0 ||
      (r = cn_db_prepare(st, &srcrow,
                         "INSERT INTO layer_sources(layer_id, source, insecure, digest,"
                         " media_type, size, annotations, toc_digest) VALUES(?,?,?,?,?,?,?,?)")) <
          0 ||
      (r = cn_db_prepare(st, &upd,
                         "UPDATE layers SET state = 'complete' WHERE id = ?1 AND NOT EXISTS"
                         " (SELECT 1 FROM pending WHERE layer_id = ?1)")) < 0)
    goto fail;
  uint64_t size = 0;
  for (size_t i = 0; i < se->n; i++) size += se->v[i]->type == CAIRN_REG ? se->v[i]->size : 0;
  sqlite3_bind_text(lay, 1, diff_id, -1, SQLITE_STATIC);
  sqlite3_bind_int64(lay, 2, (sqlite3_int64)size);
  sqlite3_bind_int64(lay, 3, (sqlite3_int64)se->n);
  sqlite3_bind_int64(lay, 4, cn_now_seconds());
  if (sqlite3_step(lay) != SQLITE_DONE) {
    r = cn_store_fail_db(st, "layer");
    goto fail;
  }
  *pending = 0;
  for (size_t i = 0; i < se->n; i++) {
    const cairn_entry *e = se->v[i];
    char blob[48] = "";
    bool pend_it = false;
    if (pending_blob(e)) {
      uint64_t have = 0;
      r = cn_blob_by_sha256(st, e->blob, blob, &have);
      if (r < 0) goto fail;
      if (r == 0 || have != e->size) {
        blob[0] = '\0';
        pend_it = true;
      }
    } else if (e->type == CAIRN_REG && e->size > 0) {
      r = cairn_fail(st, -EINVAL, "%s: a file of a partial layer without its sha256", e->path);
      goto fail;
    }
    cairn_autofree unsigned char *xb = NULL;
    size_t xlen = 0;
    if (xattrs_blob(e, &xb, &xlen) < 0) {
      r = cairn_fail(st, -ENOMEM, "out of memory");
      goto fail;
    }
    sqlite3_reset(ins);
    sqlite3_bind_text(ins, 1, diff_id, -1, SQLITE_STATIC);
    sqlite3_bind_text(ins, 2, e->path, -1, SQLITE_STATIC);
    sqlite3_bind_int(ins, 3, e->type);
    sqlite3_bind_int(ins, 4, (int)(e->mode & 07777));
    sqlite3_bind_int64(ins, 5, e->uid);
    sqlite3_bind_int64(ins, 6, e->gid);
    sqlite3_bind_int64(ins, 7, e->type == CAIRN_REG ? (sqlite3_int64)e->size : 0);
    sqlite3_bind_int64(ins, 8, e->mtime_sec);
    sqlite3_bind_int64(ins, 9, e->mtime_nsec);
    sqlite3_bind_int64(ins, 10, (sqlite3_int64)e->rdev);
    bind_text_or_null(ins, 11, e->target);
    bind_text_or_null(ins, 12, blob[0] ? blob : NULL);
    if (xb)
      sqlite3_bind_blob(ins, 13, xb, (int)xlen, SQLITE_STATIC);
    else
      sqlite3_bind_null(ins, 13);
    if (sqlite3_step(ins) != SQLITE_DONE) {
      r = cn_store_fail_db(st, "entries");
      goto fail;
    }
    if (!pend_it) continue;
    sqlite3_reset(pend);
    sqlite3_bind_text(pend, 1, diff_id, -1, SQLITE_STATIC);
    sqlite3_bind_text(pend, 2, e->path, -1, SQLITE_STATIC);
    sqlite3_bind_text(pend, 3, e->blob + 7, -1, SQLITE_STATIC);
    sqlite3_bind_int64(pend, 4, (sqlite3_int64)e->size);
    if (sqlite3_step(pend) != SQLITE_DONE) {
      r = cn_store_fail_db(st, "pending files");
      goto fail;
    }
    (*pending)++;
  }
  { /* kept once complete too, until the layer is finished (its exact tar) */
    sqlite3_bind_text(srcrow, 1, diff_id, -1, SQLITE_STATIC);
    sqlite3_bind_text(srcrow, 2, src->source, -1, SQLITE_STATIC);
    sqlite3_bind_int(srcrow, 3, src->insecure);
    sqlite3_bind_text(srcrow, 4, src->digest, -1, SQLITE_STATIC);
    sqlite3_bind_text(srcrow, 5, src->media_type, -1, SQLITE_STATIC);
    sqlite3_bind_int64(srcrow, 6, (sqlite3_int64)src->size);
    sqlite3_bind_text(srcrow, 7, src->annotations, -1, SQLITE_STATIC);
    sqlite3_bind_text(srcrow, 8, src->toc_digest, -1, SQLITE_STATIC);
    if (sqlite3_step(srcrow) != SQLITE_DONE) {
      r = cn_store_fail_db(st, "layer source");
      goto fail;
    }
  }
  sqlite3_bind_text(upd, 1, diff_id, -1, SQLITE_STATIC);
  if (sqlite3_step(upd) != SQLITE_DONE) {
    r = cn_store_fail_db(st, "layer state");
    goto fail;
  }
  return cn_db_commit_durable(st);
fail:
  cn_db_rollback(st);
  return r;
}

int cn_layer_record_partial(cairn_store *st, const char *diff_id, const cairn_entry *entries,
                               size_t n, const cairn_lazy_source *src, const void *toc,
                               size_t toc_len, size_t *pending) {
  store_errclear(st);
  *pending = 0;
  if (!cn_is_hex_id(diff_id, CAIRN_ID_LEN))
    return cairn_fail(st, -EINVAL, "%s: not a diff_id", diff_id);
  struct sorted_entries se = {calloc(n ? n : 1, sizeof(*se.v)), n};
  if (!se.v) return cairn_fail(st, -ENOMEM, "out of memory");
  for (size_t i = 0; i < n; i++) se.v[i] = &entries[i];
  qsort(se.v, n, sizeof(*se.v), path_cmp);
  int r = 0;
  for (size_t i = 1; r == 0 && i < n; i++)
    if (strcmp(se.v[i - 1]->path, se.v[i]->path) == 0)
      r = cairn_fail(st, -EBADMSG, "%s: listed twice", se.v[i]->path);
  /* The layer alone must merge as a mount merges it (as an import checks). */
  merge_builder *b = NULL;
  if (r == 0 && (r = cn_merge_builder_new(st, &b)) == 0) {
    r = cn_merge_builder_add_layer(b, sorted_foreach, &se);
    cn_merge_builder_free(b);
  }
  if (r == 0) r = toc_write(st, src->digest, toc, toc_len);
  int lock = r < 0 ? r : cn_store_lock(st, STORE_LOCK_SHARED);
  if (lock >= 0) {
    r = record_locked(st, diff_id, &se, src, pending);
    close(lock);
  } else {
    r = lock;
  }
  free(se.v);
  return r;
}

void cn_lazy_file_clear(cairn_lazy_file *f) {
  free(f->layer_id);
  free(f->path);
  free(f->source);
  free(f->digest);
  free(f->media_type);
  free(f->annotations);
  free(f->toc_digest);
  memset(f, 0, sizeof *f);
}

static const char *sha_hex(const char *sha256) {
  return strncmp(sha256, SHA_PREFIX, 7) == 0 ? sha256 + 7 : sha256;
}

/* f from the row at q: layer_id, path, size, then the source's
 * columns (LAZY_FILE_COLS); 1, or -ENOMEM. */
#define LAZY_FILE_COLS                                                                             \
  "s.source, s.insecure, s.digest, s.media_type, s.size, s.annotations, s.toc_digest"
static int lazy_file_row(cairn_store *st, sqlite3_stmt *q, cairn_lazy_file *f) {
#define COL(i) strdup((const char *)sqlite3_column_text(q, i))
  f->layer_id = COL(0);
  f->path = COL(1);
  f->size = (uint64_t)sqlite3_column_int64(q, 2);
  f->source = COL(3);
  f->insecure = sqlite3_column_int(q, 4) != 0;
  f->digest = COL(5);
  f->media_type = COL(6);
  f->blob_size = (uint64_t)sqlite3_column_int64(q, 7);
  f->annotations = COL(8);
  f->toc_digest = COL(9);
#undef COL
  if (!f->layer_id || !f->path || !f->source || !f->digest || !f->media_type || !f->annotations ||
      !f->toc_digest) {
    cn_lazy_file_clear(f);
    return cairn_fail(st, -ENOMEM, "out of memory");
  }
  return 1;
}

/* The first column of every row of the bound query q, each after prefix,
 * into *out (*n of them). */
static int strv_of_rows(cairn_store *st, sqlite3_stmt *q, const char *prefix, const char *what,
                        char ***out, size_t *n) {
  cn_autostrv struct strv v = {0};
  int r;
  while ((r = sqlite3_step(q)) == SQLITE_ROW) {
    char s[160];
    snprintf(s, sizeof s, "%s%s", prefix, (const char *)sqlite3_column_text(q, 0));
    if (cn_strv_push(&v, s) < 0) return cairn_fail(st, -ENOMEM, "out of memory");
  }
  if (r != SQLITE_DONE) return cn_store_fail_db(st, what);
  *out = v.v;
  *n = v.n;
  v = (struct strv){0};
  return 0;
}

int cn_lazy_file_find(cairn_store *st, const char *sha256, cairn_lazy_file *f) {
  store_errclear(st);
  memset(f, 0, sizeof *f);
  cn_autostmt sqlite3_stmt *q = NULL;
  int r = cn_db_prepare(st, &q,
                        "SELECT p.layer_id, p.path, p.size, " LAZY_FILE_COLS " FROM pending p"
                        " JOIN layer_sources s ON s.layer_id = p.layer_id WHERE p.sha256 = ?"
                        " AND NOT EXISTS (SELECT 1 FROM layer_refuted f"
                        " WHERE f.layer_id = p.layer_id) LIMIT 1");
  if (r < 0) return r;
  sqlite3_bind_text(q, 1, sha_hex(sha256), -1, SQLITE_STATIC);
  r = sqlite3_step(q);
  if (r == SQLITE_DONE) return 0;
  if (r != SQLITE_ROW) return cn_store_fail_db(st, "pending files");
  return lazy_file_row(st, q, f);
}

int cn_lazy_pending_list(cairn_store *st, const char *image_id, char ***sha256s, size_t *n) {
  store_errclear(st);
  *sha256s = NULL;
  *n = 0;
  cn_autostmt sqlite3_stmt *q = NULL;
  int r = cn_db_prepare(st, &q,
                        "SELECT p.sha256, min(l.position) AS pos, min(p.path) AS first"
                        " FROM pending p JOIN image_layers l ON l.layer_id = p.layer_id"
                        " WHERE l.image_id = ? GROUP BY p.sha256 ORDER BY pos, first");
  if (r < 0) return r;
  sqlite3_bind_text(q, 1, image_id, -1, SQLITE_STATIC);
  return strv_of_rows(st, q, "sha256:", "pending files", sha256s, n);
}

int cn_lazy_pending_foreach(cairn_store *st, cairn_lazy_pending_fn fn, void *arg) {
  store_errclear(st);
  cn_autostmt sqlite3_stmt *q = NULL;
  int r = cn_db_prepare(st, &q,
                        "SELECT p.layer_id, p.path, p.size, s.source, s.insecure, s.digest,"
                        " s.media_type, s.size, s.annotations, s.toc_digest, p.sha256"
                        " FROM pending p JOIN layer_sources s ON s.layer_id = p.layer_id"
                        " ORDER BY p.layer_id, p.path");
  if (r < 0) return r;
  while ((r = sqlite3_step(q)) == SQLITE_ROW) {
#define COL(i) ((char *)sqlite3_column_text(q, i))
    cairn_lazy_file f = {.layer_id = COL(0),
                         .path = COL(1),
                         .size = (uint64_t)sqlite3_column_int64(q, 2),
                         .source = COL(3),
                         .insecure = sqlite3_column_int(q, 4) != 0,
                         .digest = COL(5),
                         .media_type = COL(6),
                         .blob_size = (uint64_t)sqlite3_column_int64(q, 7),
                         .annotations = COL(8),
                         .toc_digest = COL(9)};
    char sha[80];
    snprintf(sha, sizeof sha, "sha256:%s", COL(10));
#undef COL
    int stop = fn(&f, sha, arg);
    if (stop) return stop;
  }
  return r == SQLITE_DONE ? 0 : cn_store_fail_db(st, "pending files");
}

int cairn_image_pending(cairn_store *st, const char *image_id, uint64_t *files, uint64_t *bytes) {
  store_errclear(st);
  cn_autostmt sqlite3_stmt *q = NULL;
  int r = cn_db_prepare(st, &q,
                        "SELECT count(*), coalesce(sum(p.size), 0) FROM pending p"
                        " JOIN image_layers l ON l.layer_id = p.layer_id WHERE l.image_id = ?");
  if (r < 0) return r;
  sqlite3_bind_text(q, 1, image_id, -1, SQLITE_STATIC);
  if (sqlite3_step(q) != SQLITE_ROW) return cn_store_fail_db(st, "pending files");
  if (files) *files = (uint64_t)sqlite3_column_int64(q, 0);
  if (bytes) *bytes = (uint64_t)sqlite3_column_int64(q, 1);
  return 0;
}

int cn_lazy_tidy(cairn_store *st) {
  store_errclear(st);
  /* (exclusive: a lazy pull links its TOC before it commits the row that
   * names it, under the lock shared; taken, or left to gc) */
  cairn_autoclose int lock = cn_store_lock(st, STORE_LOCK_EXCLUSIVE_NB);
  if (lock < 0) return 0;
  cairn_autoclose int dirfd = cn_store_openat(st, "toc", O_RDONLY | O_DIRECTORY, 0);
  if (dirfd < 0) return 0; /* none kept yet */
  cairn_autoclosedir DIR *d = fdopendir(dup(dirfd));
  cn_autostmt sqlite3_stmt *q = NULL;
  int r =
      d ? cn_db_prepare(st, &q, "SELECT 1 FROM layer_sources WHERE digest = 'sha256:' || ?") : 0;
  if (r < 0 || !d) return r;
  for (struct dirent *de; (de = readdir(d));) {
    if (de->d_name[0] == '.') continue;
    sqlite3_reset(q);
    sqlite3_bind_text(q, 1, de->d_name, -1, SQLITE_TRANSIENT);
    if (sqlite3_step(q) == SQLITE_DONE) unlinkat(dirfd, de->d_name, 0);
  }
  return 0;
}

/* Writes fd's content (from its start) as a blob: its name, and its sha256
 * hex, which the caller compares. */
static int blob_from_fd(cairn_store *st, int fd, char name[48], uint64_t *size, char sha[65]) {
  blob_writer *w;
  int r = cn_blob_writer_new(st, &w);
  if (r < 0) return r;
  static __thread char buf[1 << 16];
  for (off_t at = 0;;) {
    ssize_t k = pread(fd, buf, sizeof buf, at);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) {
      r = cairn_fail(st, -errno, "reading the fetched file: %s", strerror(errno));
      break;
    }
    if (k == 0) break;
    if ((r = cn_blob_writer_write(w, buf, (size_t)k)) < 0) break;
    at += k;
  }
  if (r == 0) r = cn_blob_writer_finish(w, name, size, sha);
  cn_blob_writer_free(w);
  return r;
}

/* The images whose layers are all complete and that use one of layers. */
static int completed_images(cairn_store *st, const struct strv *layers, struct strv *images) {
  cn_autostmt sqlite3_stmt *q = NULL;
  int r = cn_db_prepare(st, &q,
                        "SELECT DISTINCT i.image_id FROM image_layers i WHERE i.layer_id = ?"
                        " AND NOT EXISTS (SELECT 1 FROM image_layers o JOIN layers l"
                        " ON l.id = o.layer_id WHERE o.image_id = i.image_id"
                        " AND l.state = 'partial')");
  if (r < 0) return r;
  for (size_t i = 0; i < layers->n; i++) {
    sqlite3_reset(q);
    sqlite3_bind_text(q, 1, layers->v[i], -1, SQLITE_STATIC);
    while ((r = sqlite3_step(q)) == SQLITE_ROW)
      if (cn_strv_push(images, (const char *)sqlite3_column_text(q, 0)) < 0)
        return cairn_fail(st, -ENOMEM, "out of memory");
    if (r != SQLITE_DONE) return cn_store_fail_db(st, "images");
  }
  return 0;
}

/* Names blob (of sha256 hex) in every entry pending on it, within the
 * caller's transaction; the layers left with no pending file become
 * complete (their names to done). Their source rows and TOCs stay until
 * they are finished (cn_lazy_layer_finished). */
static int name_blob(cairn_store *st, const char *hex, const char *blob, struct strv *done) {
  cn_autostrv struct strv layers = {0};
  cn_autostmt sqlite3_stmt *q = NULL, *upd = NULL, *del = NULL, *left = NULL, *fin = NULL;
  int r;
  if ((r = cn_db_prepare(st, &q, "SELECT DISTINCT layer_id FROM pending WHERE sha256 = ?")) < 0 ||
      (r = cn_db_prepare(st, &upd,
                         "UPDATE entries SET blob = ?1 WHERE (layer_id, path) IN"
                         " (SELECT layer_id, path FROM pending WHERE sha256 = ?2)")) < 0 ||
      (r = cn_db_prepare(st, &del, "DELETE FROM pending WHERE sha256 = ?")) < 0 ||
      (r = cn_db_prepare(st, &left, "SELECT 1 FROM pending WHERE layer_id = ? LIMIT 1")) < 0 ||
      (r = cn_db_prepare(st, &fin, "UPDATE layers SET state = 'complete' WHERE id = ?")) < 0)
    return r;
  sqlite3_bind_text(q, 1, hex, -1, SQLITE_STATIC);
  while ((r = sqlite3_step(q)) == SQLITE_ROW)
    if (cn_strv_push(&layers, (const char *)sqlite3_column_text(q, 0)) < 0)
      return cairn_fail(st, -ENOMEM, "out of memory");
  if (r != SQLITE_DONE) return cn_store_fail_db(st, "pending files");
  sqlite3_bind_text(upd, 1, blob, -1, SQLITE_STATIC);
  sqlite3_bind_text(upd, 2, hex, -1, SQLITE_STATIC);
  sqlite3_bind_text(del, 1, hex, -1, SQLITE_STATIC);
  if (sqlite3_step(upd) != SQLITE_DONE || sqlite3_step(del) != SQLITE_DONE)
    return cn_store_fail_db(st, "pending files");
  for (size_t i = 0; i < layers.n; i++) {
    sqlite3_reset(left);
    sqlite3_bind_text(left, 1, layers.v[i], -1, SQLITE_STATIC);
    if ((r = sqlite3_step(left)) == SQLITE_ROW) continue;
    if (r != SQLITE_DONE) return cn_store_fail_db(st, "pending files");
    sqlite3_reset(fin);
    sqlite3_bind_text(fin, 1, layers.v[i], -1, SQLITE_STATIC);
    if (sqlite3_step(fin) != SQLITE_DONE) return cn_store_fail_db(st, "layer state");
    if (cn_strv_push(done, layers.v[i]) < 0) return cairn_fail(st, -ENOMEM, "out of memory");
  }
  return 0;
}

/* The blob of sha256 hex (size bytes): found stored, or written from fd
 * and hashed again (-EBADMSG unless it is hex); p gets its name, and its
 * sha256 when it was written. Not durable yet. Under the group's lock. */
static int put_locked(cairn_store *st, const char *hex, int fd, uint64_t size, cn_lazy_put *p) {
  uint64_t have = 0;
  int r = cn_blob_by_sha256(st, hex, p->blob, &have);
  if (r < 0) return r;
  p->size = have;
  p->sha[0] = '\0';
  if (r == 1 && have == size) return 0;
  if (fd < 0) return cairn_fail(st, -ENOENT, "sha256:%s: not stored", hex);
  if ((r = blob_from_fd(st, fd, p->blob, &p->size, p->sha)) < 0) return r;
  if (strcmp(p->sha, hex) != 0 || p->size != size)
    return cairn_fail(st, -EBADMSG, "the fetched file is not sha256:%s of %llu bytes", hex,
                      (unsigned long long)size);
  return 0;
}

int cn_lazy_group_begin(cairn_store *st, cn_lazy_group *g) {
  store_errclear(st);
  *g = (cn_lazy_group){.lock = -1};
  int lock = cn_store_lock(st, STORE_LOCK_SHARED);
  if (lock < 0) return lock;
  int r = cn_staging_begin(st);
  if (r < 0) {
    close(lock);
    return r;
  }
  g->lock = lock;
  return 0;
}

int cn_lazy_group_put(cairn_store *st, cn_lazy_group *g, const char *sha256, int fd,
                      uint64_t size, char blob[48]) {
  const char *hex = sha_hex(sha256);
  if (!cn_is_hex_id(hex, CAIRN_ID_LEN))
    return cairn_fail(st, -EINVAL, "%s: not a sha256 digest", sha256);
  if (g->n == CN_LAZY_GROUP_MAX) return cairn_fail(st, -E2BIG, "too many files in one commit");
  cn_lazy_put *p = &g->v[g->n];
  int r = put_locked(st, hex, fd, size, p);
  if (r < 0) {
    g->failed = r; /* a blob this linked may hold other bytes: the group's files go */
    return r;
  }
  snprintf(p->hex, sizeof p->hex, "%s", hex);
  snprintf(blob, 48, "%s", p->blob);
  g->n++;
  return 0;
}

/* The group's written blobs made durable: each one's data, each blobs/XX
 * directory once, blobs/ once. */
static int group_sync(cairn_store *st, cn_lazy_group *g) {
  bool any = false;
  for (size_t i = 0; i < g->n; i++) {
    const cn_lazy_put *p = &g->v[i];
    if (!p->sha[0]) continue;
    char rel[128];
    cn_blob_name_path(p->blob, rel, sizeof rel);
    cairn_autoclose int fd = openat(st->blobs_fd, rel, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0 || fdatasync(fd) < 0)
      return cairn_fail(st, -errno, "%s/blobs/%s: syncing: %s", st->dir, rel, strerror(errno));
    any = true;
  }
  for (size_t i = 0; i < g->n; i++) {
    const cn_lazy_put *p = &g->v[i];
    bool seen = !p->sha[0];
    for (size_t j = 0; j < i && !seen; j++)
      seen = g->v[j].sha[0] && memcmp(g->v[j].blob, p->blob, 2) == 0;
    if (seen) continue;
    char sub[3] = {p->blob[0], p->blob[1], 0};
    cairn_autoclose int dfd = openat(st->blobs_fd, sub, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0 || fsync(dfd) < 0)
      return cairn_fail(st, -errno, "%s/blobs/%s: syncing: %s", st->dir, sub, strerror(errno));
  }
  if (any && fsync(st->blobs_fd) < 0)
    return cairn_fail(st, -errno, "%s/blobs: syncing: %s", st->dir, strerror(errno));
  if (any) store_test_point(st, "lazy: blob written");
  return 0;
}

static int group_commit_locked(cairn_store *st, cn_lazy_group *g, struct strv *images) {
  int r = group_sync(st, g);
  if (r < 0) return r;
  cn_autostrv struct strv done = {0};
  if ((r = cn_db_begin(st)) < 0) return r;
  cn_autostmt sqlite3_stmt *b = NULL;
  if ((r = cn_db_prepare(st, &b,
                         "INSERT OR IGNORE INTO blobs(name, size, sha256) VALUES(?, ?, ?)")) < 0)
    goto fail;
  for (size_t i = 0; i < g->n; i++) {
    const cn_lazy_put *p = &g->v[i];
    if (p->sha[0]) {
      sqlite3_reset(b);
      sqlite3_bind_text(b, 1, p->blob, -1, SQLITE_STATIC);
      sqlite3_bind_int64(b, 2, (sqlite3_int64)p->size);
      sqlite3_bind_text(b, 3, p->sha, -1, SQLITE_STATIC);
      if (sqlite3_step(b) != SQLITE_DONE) {
        r = cn_store_fail_db(st, "blob");
        goto fail;
      }
    }
    if ((r = name_blob(st, p->hex, p->blob, &done)) < 0) goto fail;
  }
  if ((r = completed_images(st, &done, images)) < 0) goto fail;
  /* Their indexes (with pending nodes) go before the commit: a crash
   * after it leaves none, which the next use builds anew, never one
   * still saying "pending" of a complete image (test_fill_crash.sh). */
  for (size_t i = 0; i < images->n; i++) cn_index_remove(st, images->v[i]);
  store_test_point(st, "lazy: in the transaction");
  return cn_db_commit_durable(st);
fail:
  cn_db_rollback(st);
  return r;
}

int cn_lazy_group_commit(cairn_store *st, cn_lazy_group *g) {
  cn_autostrv struct strv images = {0};
  int r = g->failed;
  if (r == 0 && g->n) r = group_commit_locked(st, g, &images);
  if (g->lock >= 0) close(g->lock);
  g->lock = -1;
  if (r == -ENOSPC) cn_store_fail_nospace(st);
  /* a failure keeps the blobs a reader was served from (verified bytes,
   * no row: linked again by the next fetch, or swept) */
  cn_staging_end(st, r < 0 && !g->served);
  if (r < 0) return r;
  if (!g->n) return 0;
  store_test_point(st, "lazy: committed");
  /* The completed images' indexes, again without pending nodes (a mount
   * keeps the old file it mapped: its pending nodes find the blob by
   * sha256). Best effort: an index not written is written by the next
   * use. */
  for (size_t i = 0; i < images.n; i++) {
    cn_index_remove(st, images.v[i]);
    cairn_tree *t = NULL;
    if (cn_image_tree_build(st, images.v[i], &t) == 0) cn_index_write(st, images.v[i], t);
    cairn_tree_free(t);
    store_errclear(st);
  }
  if (images.n) store_test_point(st, "lazy: indexes rewritten");
  store_errclear(st);
  return 0;
}

int cn_lazy_file_store_ready(cairn_store *st, const char *sha256, int fd, uint64_t size,
                             char blob[48], void (*ready)(const char *blob, void *arg),
                             void *arg) {
  cn_lazy_group g;
  int r = cn_lazy_group_begin(st, &g);
  if (r < 0) return r;
  if ((r = cn_lazy_group_put(st, &g, sha256, fd, size, blob)) == 0 && ready) {
    g.served = true;
    ready(blob, arg);
  }
  int k = cn_lazy_group_commit(st, &g);
  return r < 0 ? r : k;
}

int cn_lazy_file_store(cairn_store *st, const char *sha256, int fd, uint64_t size,
                       char blob[48]) {
  return cn_lazy_file_store_ready(st, sha256, fd, size, blob, NULL, NULL);
}

/* ---- finishing a complete layer --------------------------------------------
 * A lazily pulled layer whose files are all stored is complete (served,
 * mounted, exported as any) but keeps its source row and TOC until it is
 * finished: its exact tar record (layer_tars) recorded by an ingest of the
 * layer's tar rebuilt from the registry's headers and the stored files
 * (store/remote/partial.c, cn_lazy_finish_layer), which checks the
 * diff_id; then this drops the source row and the TOC. A crash between
 * leaves a complete layer with its record and its source row: the next
 * finish only drops the row. */

int cn_lazy_unfinished(cairn_store *st, const char *image_id, char ***diff_ids, size_t *n) {
  store_errclear(st);
  *diff_ids = NULL;
  *n = 0;
  cn_autostmt sqlite3_stmt *q = NULL;
  int r = cn_db_prepare(st, &q,
                        "SELECT l.layer_id, min(l.position) AS pos FROM image_layers l"
                        " JOIN layers y ON y.id = l.layer_id"
                        " JOIN layer_sources s ON s.layer_id = l.layer_id"
                        " WHERE l.image_id = ? AND y.state = 'complete'"
                        " GROUP BY l.layer_id ORDER BY pos");
  if (r < 0) return r;
  sqlite3_bind_text(q, 1, image_id, -1, SQLITE_STATIC);
  return strv_of_rows(st, q, "", "layer sources", diff_ids, n);
}

int cn_lazy_source_get(cairn_store *st, const char *diff_id, cairn_lazy_file *f) {
  store_errclear(st);
  memset(f, 0, sizeof *f);
  cn_autostmt sqlite3_stmt *q = NULL;
  int r = cn_db_prepare(st, &q,
                        "SELECT s.layer_id, '', 0, " LAZY_FILE_COLS ", l.state = 'complete',"
                        " (SELECT reason FROM layer_refuted f WHERE f.layer_id = l.id)"
                        " FROM layer_sources s JOIN layers l ON l.id = s.layer_id"
                        " WHERE s.layer_id = ?");
  if (r < 0) return r;
  sqlite3_bind_text(q, 1, diff_id, -1, SQLITE_STATIC);
  r = sqlite3_step(q);
  if (r == SQLITE_DONE) return 0;
  if (r != SQLITE_ROW) return cn_store_fail_db(st, "layer sources");
  if (sqlite3_column_type(q, 11) != SQLITE_NULL)
    return cairn_fail(st, -EBADMSG, "layer sha256:%.12s is out of service (%s)", diff_id,
                      (const char *)sqlite3_column_text(q, 11));
  int complete = sqlite3_column_int(q, 10);
  if ((r = lazy_file_row(st, q, f)) < 0) return r;
  return complete ? 2 : 1;
}

int cn_lazy_layer_finished(cairn_store *st, const char *diff_id) {
  store_errclear(st);
  int lock = cn_store_lock(st, STORE_LOCK_SHARED);
  if (lock < 0) return lock;
  char digest[80] = "";
  int r = cn_db_begin(st);
  if (r == 0) {
    cn_autostmt sqlite3_stmt *q = NULL, *d = NULL, *z = NULL;
    if ((r = cn_db_prepare(st, &q,
                           "SELECT s.digest, l.state = 'complete' AND NOT EXISTS (SELECT 1"
                           " FROM pending p WHERE p.layer_id = ?1) FROM layer_sources s"
                           " JOIN layers l ON l.id = s.layer_id WHERE s.layer_id = ?1")) == 0 &&
        (r = cn_db_prepare(st, &d, "DELETE FROM layer_sources WHERE layer_id = ?")) == 0 &&
        /* its size a full pull's: the tar's, not only its files' */
        (r = cn_db_prepare(st, &z,
                           "UPDATE layers SET size = coalesce((SELECT size FROM layer_tars"
                           " WHERE layer_id = ?1), size) WHERE id = ?1")) == 0) {
      sqlite3_bind_text(q, 1, diff_id, -1, SQLITE_STATIC);
      int k = sqlite3_step(q);
      if (k == SQLITE_ROW && sqlite3_column_int(q, 1)) {
        snprintf(digest, sizeof digest, "%s", (const char *)sqlite3_column_text(q, 0));
        sqlite3_bind_text(d, 1, diff_id, -1, SQLITE_STATIC);
        sqlite3_bind_text(z, 1, diff_id, -1, SQLITE_STATIC);
        if (sqlite3_step(d) != SQLITE_DONE || sqlite3_step(z) != SQLITE_DONE)
          r = cn_store_fail_db(st, "layer sources");
      } else if (k == SQLITE_ROW) {
        r = cairn_fail(st, -EINVAL, "layer %.12s: files not fetched yet (a lazy pull)", diff_id);
      } else if (k != SQLITE_DONE) { /* DONE: finished already (another fill) */
        r = cn_store_fail_db(st, "layer sources");
      }
    }
    if (r == 0 && digest[0]) {
      store_test_point(st, "lazy: finish, in the transaction");
      r = cn_db_commit_durable(st);
    } else {
      cn_db_rollback(st);
    }
  }
  close(lock);
  if (r < 0 || !digest[0]) return r;
  /* its TOC, unless another source names the same blob (the sweep takes
   * what is left behind) */
  cn_autostmt sqlite3_stmt *o = NULL;
  if (cn_db_prepare(st, &o, "SELECT 1 FROM layer_sources WHERE digest = ?") == 0) {
    sqlite3_bind_text(o, 1, digest, -1, SQLITE_STATIC);
    char rel[128];
    if (sqlite3_step(o) == SQLITE_DONE && toc_rel(st, digest, rel, sizeof rel) == 0)
      unlinkat(st->dirfd, rel, 0);
  }
  store_test_point(st, "lazy: TOCs unlinked");
  store_errclear(st);
  return 0;
}

/* ---- the proof of a lazily pulled layer's diff_id --------------------------
 * A layer recorded from its TOC names the diff_id its image's config
 * claims; nothing has hashed its tar yet. Until a fill or a pull rebuilds
 * and hashes it (cn_layer_unproven_drop, layer.c, within that ingest's commit), it
 * keeps its layer_sources row, and only a pull of the same blob (digest
 * and the annotations that locate and vouch for its TOC) may reuse it
 * (cn_layer_reusable). A tar that hashes to something else refutes
 * it: a layer_refuted row takes it out of service (cn_layer_refute). */

int cn_layer_reusable(cairn_store *st, const char *diff_id, const char *digest,
                         const char *annotations) {
  store_errclear(st);
  cn_autostmt sqlite3_stmt *q = NULL;
  int r = cn_db_prepare(st, &q,
                        "SELECT s.digest, s.annotations,"
                        " EXISTS (SELECT 1 FROM layer_refuted f WHERE f.layer_id = l.id)"
                        " FROM layers l LEFT JOIN layer_sources s ON s.layer_id = l.id"
                        " WHERE l.id = ?");
  if (r < 0) return r;
  sqlite3_bind_text(q, 1, diff_id, -1, SQLITE_STATIC);
  r = sqlite3_step(q);
  if (r == SQLITE_DONE) return 0;
  if (r != SQLITE_ROW) return cn_store_fail_db(st, "layer lookup");
  if (sqlite3_column_int(q, 2)) return 2;
  const char *d = (const char *)sqlite3_column_text(q, 0);
  const char *a = (const char *)sqlite3_column_text(q, 1);
  if (!d) return 1; /* proven */
  return digest && annotations && strcmp(d, digest) == 0 && strcmp(a, annotations) == 0 ? 1 : 2;
}

int cairn_image_unverified(cairn_store *st, const char *image_id, char ***diff_ids, size_t *n) {
  store_errclear(st);
  *diff_ids = NULL;
  *n = 0;
  cn_autostmt sqlite3_stmt *q = NULL;
  int r = cn_db_prepare(st, &q,
                        "SELECT l.layer_id, min(l.position) AS pos FROM image_layers l"
                        " JOIN layer_sources s ON s.layer_id = l.layer_id"
                        " WHERE l.image_id = ? GROUP BY l.layer_id ORDER BY pos");
  if (r < 0) return r;
  sqlite3_bind_text(q, 1, image_id, -1, SQLITE_STATIC);
  return strv_of_rows(st, q, "", "layer sources", diff_ids, n);
}

/* "NAME, NAME2" (or the short id of an image without a name) of every
 * image that uses layer diff_id; malloc'd, "" when none. */
static char *layer_image_names(cairn_store *st, const char *diff_id) {
  cn_autostmt sqlite3_stmt *q = NULL;
  if (cn_db_prepare(st, &q,
                    "SELECT coalesce((SELECT group_concat(n.name, ', ') FROM names n"
                    " WHERE n.image_id = i.image_id), substr(i.image_id, 1, 12))"
                    " FROM (SELECT DISTINCT image_id FROM image_layers WHERE layer_id = ?) i"
                    " ORDER BY 1") < 0)
    return NULL;
  sqlite3_bind_text(q, 1, diff_id, -1, SQLITE_STATIC);
  size_t len = 0;
  char *s = NULL;
  FILE *f = open_memstream(&s, &len);
  if (!f) return NULL;
  for (int n = 0; sqlite3_step(q) == SQLITE_ROW; n++)
    fprintf(f, "%s%s", n ? ", " : "", (const char *)sqlite3_column_text(q, 0));
  fclose(f);
  return s;
}

int cn_layer_refute(cairn_store *st, const char *diff_id, const char *reason, char **images) {
  *images = NULL;
  int lock = cn_store_lock(st, STORE_LOCK_SHARED);
  if (lock < 0) return lock;
  int r = cn_db_begin(st);
  if (r == 0) {
    cn_autostmt sqlite3_stmt *s = NULL;
    if ((r = cn_db_prepare(st, &s,
                           "INSERT OR REPLACE INTO layer_refuted(layer_id, reason, since)"
                           " SELECT id, ?2, ?3 FROM layers WHERE id = ?1")) == 0) {
      sqlite3_bind_text(s, 1, diff_id, -1, SQLITE_STATIC);
      sqlite3_bind_text(s, 2, reason, -1, SQLITE_STATIC);
      sqlite3_bind_int64(s, 3, cn_now_seconds());
      if (sqlite3_step(s) != SQLITE_DONE) r = cn_store_fail_db(st, "refuted layer");
    }
    if (r == 0) {
      *images = layer_image_names(st, diff_id);
      cn_layer_indexes_remove(st, diff_id);
      r = cn_db_commit_durable(st);
    } else {
      cn_db_rollback(st);
    }
  }
  close(lock);
  if (r == 0 && !*images) *images = strdup("");
  return r;
}

/* ---- fsck --------------------------------------------------------- */

int cn_lazy_fsck(cairn_store *st, cairn_report *r) {
  uint64_t layers = 0, files = 0, unfinished = 0;
  {
    cn_autostmt sqlite3_stmt *q = NULL;
    int rc =
        cn_db_prepare(st, &q,
                      "SELECT l.id, l.state, s.digest, s.toc_digest,"
                      " (SELECT count(*) FROM pending p WHERE p.layer_id = l.id) FROM layers l"
                      " LEFT JOIN layer_sources s ON s.layer_id = l.id"
                      " WHERE l.state != 'complete' OR s.layer_id IS NOT NULL OR"
                      " EXISTS (SELECT 1 FROM pending p WHERE p.layer_id = l.id) ORDER BY l.id");
    if (rc < 0) return rc;
    while (sqlite3_step(q) == SQLITE_ROW) {
      const char *id = (const char *)sqlite3_column_text(q, 0);
      const char *state = (const char *)sqlite3_column_text(q, 1);
      const char *digest = (const char *)sqlite3_column_text(q, 2);
      const char *toc_digest = (const char *)sqlite3_column_text(q, 3);
      int64_t n = sqlite3_column_int64(q, 4);
      /* complete, no file pending, its source kept: not finished yet
       * (cn_lazy_layer_finished), a state as valid as partial */
      bool done = strcmp(state, "complete") == 0 && n == 0 && digest;
      done ? unfinished++ : layers++;
      files += (uint64_t)n;
      if (!done && (strcmp(state, "partial") != 0 || n == 0 || !digest)) {
        cn_report_problem(r, "layer %s: %s, with %lld pending files and %s source", id, state,
                          (long long)n, digest ? "a" : "no");
        continue;
      }
      void *toc = NULL;
      size_t len = 0;
      if (cn_lazy_toc_read(st, digest, &toc, &len) < 0) {
        cn_report_problem(r, "layer %s: its kept TOC: %s", id, st->err);
        store_errclear(st);
        continue;
      }
      char got[80];
      unsigned char d[32];
      EVP_Digest(toc, len, d, NULL, EVP_sha256(), NULL);
      cairn_id hex;
      cn_sha256_hex(d, hex);
      snprintf(got, sizeof got, "sha256:%s", hex);
      free(toc);
      if (strcmp(got, toc_digest) != 0)
        cn_report_problem(r, "layer %s: its kept TOC is not the one the pull verified", id);
    }
  }
  cn_autostmt sqlite3_stmt *e = NULL;
  int rc = cn_db_prepare(st, &e,
                         "SELECT p.layer_id, p.path FROM pending p LEFT JOIN entries e"
                         " ON e.layer_id = p.layer_id AND e.path = p.path WHERE e.path IS NULL"
                         " OR e.type != 0 OR e.blob IS NOT NULL OR e.size != p.size"
                         " OR length(p.sha256) != 64");
  if (rc < 0) return rc;
  while (sqlite3_step(e) == SQLITE_ROW)
    cn_report_problem(r, "layer %s: pending file %s does not match its entry",
                      (const char *)sqlite3_column_text(e, 0),
                      (const char *)sqlite3_column_text(e, 1));
  {
    cn_autostmt sqlite3_stmt *f = NULL;
    if ((rc = cn_db_prepare(st, &f, "SELECT layer_id, reason FROM layer_refuted ORDER BY 1")) < 0)
      return rc;
    while (sqlite3_step(f) == SQLITE_ROW) {
      const char *id = (const char *)sqlite3_column_text(f, 0);
      char *images = layer_image_names(st, id);
      cn_report_problem(r, "layer %s: out of service, its diff_id refuted (%s); images: %s", id,
                        (const char *)sqlite3_column_text(f, 1),
                        images && *images ? images : "none");
      free(images);
    }
  }
  if (layers)
    cn_report_line(r, "checked %llu partial layers (%llu files not fetched yet)",
                   (unsigned long long)layers, (unsigned long long)files);
  if (unfinished)
    cn_report_line(r,
                   "%llu lazily pulled layers have all their files but not their exact tar"
                   " record yet (cairn fill records it)",
                   (unsigned long long)unfinished);
  return 0;
}
