/* SPDX-License-Identifier: Apache-2.0 */
/*
 * als.c — what a containers/storage Additional Layer Store needs of the
 * store (cairnfs --als serves it; fs/als_serve.c): the records a pull keeps of
 * each layer it downloaded (table layer_blobs: the manifest's compressed
 * digest, media type and size against the diff_id), the compressed bytes
 * (STORE/compressed/HEX, HEX the digest's), the `info` JSON podman reads,
 * and a one-layer tree in overlayfs's encoding for `diff`.
 *
 * Invariants:
 *  - a row exists only once its file is linked and on disk: the file is
 *    linked (or copied, fsync'd, renamed) and its directory fsync'd before
 *    the row is inserted, under the shared store lock, so that a sweep
 *    (exclusive lock) never removes a file a row is about to name;
 *  - a file is named by its content's digest, which the pull checked, so a
 *    file already there is the same bytes and is kept;
 *  - rows go with their layer (ON DELETE CASCADE); files no row names go
 *    with the next sweep (sweep.c, cn_kept_blobs_sweep), after the commit.
 */
#include "libcairn_store.h"
#include "libcairn_tree.h"

#include <dirent.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>

#define KEPT_DIR "compressed"

static bool digest_valid(const char *d) {
  return d && strncmp(d, "sha256:", 7) == 0 && cairn_id_valid(d + 7);
}

/* The directory STORE/compressed, made if absent. */
static int kept_dir(cairn_store *st) {
  if (mkdirat(st->dirfd, KEPT_DIR, 0700) < 0 && errno != EEXIST)
    return cairn_fail(st, -errno, "%s/%s: %s", st->dir, KEPT_DIR, strerror(errno));
  int fd = cn_store_openat(st, KEPT_DIR, O_RDONLY | O_DIRECTORY, 0);
  return fd >= 0 ? fd : cairn_fail(st, -errno, "%s/%s: %s", st->dir, KEPT_DIR, strerror(errno));
}

/* Copies fd (from offset 0) to dirfd/name by a temporary file of STORE/tmp,
 * fsync'd, then renamed. */
static int kept_copy(cairn_store *st, int fd, int dirfd, const char *name) {
  char tmp[64];
  cairn_autoclose int out = cn_store_tmp_create(st, "kept-", tmp, sizeof tmp, 0);
  if (out < 0) return out;
  char buf[1 << 16];
  off_t off = 0;
  int r = 0;
  for (;;) {
    ssize_t n = pread(fd, buf, sizeof buf, off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      r = n < 0 ? -errno : 0;
      break;
    }
    off += n;
    for (ssize_t done = 0; done < n && r == 0;) {
      ssize_t w = write(out, buf + done, (size_t)(n - done));
      if (w < 0 && errno != EINTR) r = -errno;
      if (w > 0) done += w;
    }
    if (r < 0) break;
  }
  if (r == 0 && (fchmod(out, 0444) < 0 || fsync(out) < 0)) r = -errno;
  if (r == 0 && renameat(st->tmp_fd, tmp, dirfd, name) < 0) r = -errno;
  if (r < 0) {
    unlinkat(st->tmp_fd, tmp, 0);
    if (r == -ENOSPC) return cn_store_fail_nospace(st);
    return cairn_fail(st, r, "keeping the compressed layer %s: %s", name, strerror(-r));
  }
  return 0;
}

int cn_layer_blob_keep(cairn_store *st, const char *diff_id, const char *digest,
                          const char *media_type, uint64_t size, int fd) {
  store_errclear(st);
  if (!cairn_id_valid(diff_id) || !digest_valid(digest))
    return cairn_fail(st, -EINVAL, "bad layer record %s for %s", digest, diff_id);
  cairn_autoclose int lock = cn_store_lock(st, STORE_LOCK_SHARED);
  if (lock < 0) return lock;
  cairn_autoclose int dirfd = kept_dir(st);
  if (dirfd < 0) return dirfd;
  const char *name = digest + 7;
  struct stat sb;
  if (fstatat(dirfd, name, &sb, 0) < 0 || (uint64_t)sb.st_size != size) {
    if (fsync(fd) < 0) return cairn_fail(st, -errno, "keeping %s: %s", digest, strerror(errno));
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    unlinkat(dirfd, name, 0); /* a short one, left by a crash of an older cairn */
    int r = 0;
    if (linkat(AT_FDCWD, proc, dirfd, name, AT_SYMLINK_FOLLOW) < 0 && errno != EEXIST)
      r = kept_copy(st, fd, dirfd, name); /* not an anonymous file of this file system */
    if (r < 0) return r;
    if (fsync(dirfd) < 0) return cairn_fail(st, -errno, "keeping %s: %s", digest, strerror(errno));
  }
  cn_autostmt sqlite3_stmt *q = NULL;
  int r = cn_db_prepare(st, &q,
                        "INSERT OR REPLACE INTO layer_blobs(digest, layer_id, media_type, size)"
                        " VALUES(?, ?, ?, ?)");
  if (r < 0) return r;
  sqlite3_bind_text(q, 1, digest, -1, SQLITE_STATIC);
  sqlite3_bind_text(q, 2, diff_id, -1, SQLITE_STATIC);
  sqlite3_bind_text(q, 3, media_type ? media_type : "", -1, SQLITE_STATIC);
  sqlite3_bind_int64(q, 4, (sqlite3_int64)size);
  if (sqlite3_step(q) != SQLITE_DONE) return cn_store_fail_db(st, "recording a layer's digest");
  return 0;
}

static void row_fill(sqlite3_stmt *q, struct cairn_layer_blob *b) {
  memset(b, 0, sizeof *b);
  snprintf(b->digest, sizeof b->digest, "%s", (const char *)sqlite3_column_text(q, 0));
  snprintf(b->diff_id, sizeof b->diff_id, "%s", (const char *)sqlite3_column_text(q, 1));
  snprintf(b->media_type, sizeof b->media_type, "%s", (const char *)sqlite3_column_text(q, 2));
  b->size = (uint64_t)sqlite3_column_int64(q, 3);
}

int cairn_layer_blob_get(cairn_store *st, const char *digest, struct cairn_layer_blob *out) {
  store_errclear(st);
  if (!digest_valid(digest)) return cairn_fail(st, -ENOENT, "no such layer digest");
  cn_autostmt sqlite3_stmt *q = NULL;
  int r = cn_db_prepare(st, &q,
                        "SELECT digest, layer_id, media_type, size FROM layer_blobs"
                        " WHERE digest = ?");
  if (r < 0) return r;
  sqlite3_bind_text(q, 1, digest, -1, SQLITE_STATIC);
  r = sqlite3_step(q);
  if (r == SQLITE_DONE) return cairn_fail(st, -ENOENT, "no layer recorded as %s", digest);
  if (r != SQLITE_ROW) return cn_store_fail_db(st, "layer digest lookup");
  row_fill(q, out);
  return 0;
}

/* Each row of Q (digest, layer_id, media_type, size) to FN, until FN
 * returns non-zero (returned). */
static int rows_each(cairn_store *st, sqlite3_stmt *q, cairn_layer_blob_fn fn, void *arg) {
  int r;
  while ((r = sqlite3_step(q)) == SQLITE_ROW) {
    struct cairn_layer_blob b;
    row_fill(q, &b);
    int stop = fn(&b, arg);
    if (stop) return stop;
  }
  return r == SQLITE_DONE ? 0 : cn_store_fail_db(st, "layer digests");
}

int cairn_layer_blobs_foreach(cairn_store *st, cairn_layer_blob_fn fn, void *arg) {
  store_errclear(st);
  cn_autostmt sqlite3_stmt *q = NULL;
  int r = cn_db_prepare(st, &q,
                        "SELECT digest, layer_id, media_type, size FROM layer_blobs"
                        " ORDER BY digest");
  if (r < 0) return r;
  return rows_each(st, q, fn, arg);
}

int cn_layer_blobs_of(cairn_store *st, const char *diff_id, cairn_layer_blob_fn fn, void *arg) {
  store_errclear(st);
  if (!cairn_id_valid(diff_id)) return cairn_fail(st, -ENOENT, "no such layer %s", diff_id);
  cn_autostmt sqlite3_stmt *q = NULL;
  int r = cn_db_prepare(st, &q,
                        "SELECT digest, layer_id, media_type, size FROM layer_blobs"
                        " WHERE layer_id = ? ORDER BY rowid DESC");
  if (r < 0) return r;
  sqlite3_bind_text(q, 1, diff_id, -1, SQLITE_STATIC);
  return rows_each(st, q, fn, arg);
}

int cairn_layer_blob_open(cairn_store *st, const char *digest) {
  store_errclear(st);
  if (!digest_valid(digest)) return cairn_fail(st, -ENOENT, "no such layer digest");
  char rel[128];
  snprintf(rel, sizeof rel, KEPT_DIR "/%s", digest + 7);
  int fd = cn_store_openat(st, rel, O_RDONLY, 0);
  return fd >= 0 ? fd : cairn_fail(st, -errno, "%s/%s: %s", st->dir, rel, strerror(errno));
}

/* Written by hand, not with Jansson: cairnfs, which serves it, maps no
 * library a mount does not need (tests/e2e/test_mount_libs.sh); every
 * value is a checked digest or a number, nothing needs escaping. */
char *cairn_layer_blob_info(const struct cairn_layer_blob *b) {
  /* containers/storage's pkg/archive Compression: 0 none, 2 gzip, 4 zstd. */
  int compression = strstr(b->media_type, "zstd") ? 4 : strstr(b->media_type, "gzip") ? 2 : 0;
  if (!digest_valid(b->digest) || !cairn_id_valid(b->diff_id)) return NULL;
  return cn_xasprintf("{\"compressed-diff-digest\":\"%s\",\"compressed-size\":%llu,"
                      "\"compression\":%d,\"diff-digest\":\"sha256:%s\",\"read-only\":true}",
                      b->digest, (unsigned long long)b->size, compression, b->diff_id);
}

int cairn_layer_pin_users(cairn_store *st, cairn_pinset *ps, const char *diff_id) {
  store_errclear(st);
  int r = cn_pin_take(st, ps, CAIRN_PIN_LAYER, diff_id);
  if (r < 0) return r;
  cn_autostrv struct strv images = {0};
  {
    cn_autostmt sqlite3_stmt *q = NULL;
    if ((r = cn_db_prepare(st, &q,
                           "SELECT DISTINCT image_id FROM image_layers WHERE layer_id = ?")) < 0)
      return r;
    sqlite3_bind_text(q, 1, diff_id, -1, SQLITE_STATIC);
    while ((r = sqlite3_step(q)) == SQLITE_ROW)
      if (cn_strv_push(&images, (const char *)sqlite3_column_text(q, 0)) < 0)
        return cairn_fail(st, -ENOMEM, "out of memory");
    if (r != SQLITE_DONE) return cn_store_fail_db(st, "images of a layer");
  }
  for (size_t i = 0; i < images.n; i++)
    if ((r = cn_pin_take(st, ps, CAIRN_PIN_IMAGE, images.v[i])) < 0) return r;
  return 0;
}

/* ---- the one-layer tree --------------------------------------------------
 * Built by the merge builder (tree.c) from two passes over the layer's
 * entries, on an empty base: the first gives the entries as they are
 * (whiteouts and opaque markers act only on lower layers, so on an empty
 * base they do nothing), the second lays the overlayfs encoding over them:
 * a 0/0 character device for each whiteout, and each opaque directory
 * again with its attributes plus trusted.overlay.opaque=y (a directory over
 * a directory keeps its contents and takes the new attributes). */

struct diff_src {
  cairn_store *st;
  const char *diff_id;
  struct strv opaque; /* directories with a .wh..wh..opq, "" for the root */
  bool *seen;         /* opaque[i] had its own entry in the second pass */
  cairn_entry_fn fn;
  void *arg;
};

static int collect_opaque(const cairn_entry *e, void *arg) {
  struct diff_src *d = arg;
  if (e->type != CAIRN_OPAQUE) return 0;
  const char *slash = strrchr(e->path, '/');
  size_t len = slash ? (size_t)(slash - e->path) : 0;
  char *dir = strndup(e->path, len);
  int r = dir ? cn_strv_push(&d->opaque, dir) : -ENOMEM;
  free(dir);
  return r;
}

static int first_pass(void *src, cairn_entry_fn fn, void *arg) {
  struct diff_src *d = src;
  return cn_layer_foreach(d->st, d->diff_id, fn, arg);
}

static const char opaque_name[] = "trusted.overlay.opaque";

/* An opaque directory's entry with the marker added to its xattrs. */
static int emit_opaque_dir(struct diff_src *d, const cairn_entry *e) {
  cairn_autofree cairn_xattr *x = calloc(e->n_xattrs + 1, sizeof *x);
  if (!x) return -ENOMEM;
  size_t n = 0;
  for (size_t i = 0; i < e->n_xattrs; i++)
    if (strcmp(e->xattrs[i].name, opaque_name) != 0) x[n++] = e->xattrs[i];
  x[n++] = (cairn_xattr){opaque_name, "y", 1};
  cairn_entry o = *e;
  o.xattrs = x;
  o.n_xattrs = n;
  return d->fn(&o, d->arg);
}

static int overlay_entry(const cairn_entry *e, void *arg) {
  struct diff_src *d = arg;
  if (e->type == CAIRN_WHITEOUT) {
    const char *slash = strrchr(e->path, '/');
    const char *base = slash ? slash + 1 : e->path;
    if (strncmp(base, ".wh.", 4) != 0 || !base[4]) return 0;
    size_t dl = slash ? (size_t)(slash - e->path) + 1 : 0;
    cairn_autofree char *path = cn_xasprintf("%.*s%s", (int)dl, e->path, base + 4);
    if (!path) return -ENOMEM;
    cairn_entry c = {.path = path,
                     .type = CAIRN_CHR,
                     .uid = e->uid,
                     .gid = e->gid,
                     .mtime_sec = e->mtime_sec,
                     .mtime_nsec = e->mtime_nsec};
    return d->fn(&c, d->arg);
  }
  if (e->type == CAIRN_DIR)
    for (size_t i = 0; i < d->opaque.n; i++)
      if (strcmp(d->opaque.v[i], e->path) == 0) {
        d->seen[i] = true;
        return emit_opaque_dir(d, e);
      }
  return 0;
}

static int second_pass(void *src, cairn_entry_fn fn, void *arg) {
  struct diff_src *d = src;
  d->fn = fn;
  d->arg = arg;
  int r = cn_layer_foreach(d->st, d->diff_id, overlay_entry, d);
  for (size_t i = 0; r == 0 && i < d->opaque.n; i++)
    if (!d->seen[i]) /* an opaque directory the layer has no entry of */
      r = emit_opaque_dir(d,
                          &(cairn_entry){.path = d->opaque.v[i], .type = CAIRN_DIR, .mode = 0755});
  return r;
}

int cairn_layer_diff_tree(cairn_store *st, const char *diff_id, cairn_tree **out) {
  store_errclear(st);
  *out = NULL;
  int r = cn_layer_exists(st, diff_id);
  if (r == 0) return cairn_fail(st, -ENOENT, "no such layer %s", diff_id);
  if (r < 0) return r;
  struct diff_src d = {.st = st, .diff_id = diff_id};
  r = cn_layer_foreach(st, diff_id, collect_opaque, &d);
  if (r == 0 && !(d.seen = calloc(d.opaque.n + 1, sizeof *d.seen))) r = -ENOMEM;
  merge_builder *b = NULL;
  if (r == 0) r = cn_merge_builder_new(st, &b);
  if (r == 0) r = cn_merge_builder_add_layer(b, first_pass, &d);
  if (r == 0) r = cn_merge_builder_add_layer(b, second_pass, &d);
  if (r == 0) {
    r = cn_merge_builder_finish(b, out);
    b = NULL;
  }
  if (b) cn_merge_builder_free(b);
  free(d.seen);
  cn_strv_clear(&d.opaque);
  if (r == -ENOMEM) r = cairn_fail(st, r, "out of memory building layer %s", diff_id);
  return r;
}
