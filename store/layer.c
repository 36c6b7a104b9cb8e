/* SPDX-License-Identifier: Apache-2.0 */
/*
 * layer.c — layers: a layer tar (plain, gzip or zstd) into the store, and
 * a stored layer's rows read back and deleted.
 *
 * One pass over the input: libarchive's raw reader decompresses, every
 * uncompressed byte goes through sha256 (the diff_id) on its way to a
 * second libarchive reader that parses the tar. Entries are checked and
 * staged in a TEMP table; file contents go to blobs as they stream. A
 * tar a partial pull rebuilt comes with hints (cn_layer_ingest_hinted):
 * a regular file whose data the rebuild copied whole from a stored blob
 * takes that blob, its bytes hashed into the diff_id only; the layer is
 * committed only if the diff_id holds, which proves those bytes too.
 *
 * A layer tar is data, never a path on the host: names are made relative
 * ("/x" and "./x" become "x"), a ".." component, a name below a symlink (or
 * any non-directory) of the same layer, a hardlink to a name the layer has
 * not defined and an owner wider than 32 bits are refused with -EBADMSG.
 * Nothing is extracted anywhere: entries become rows. A later entry of a
 * name replaces the staged one (a directory replaced by a non-directory
 * takes what was staged below it along, as extraction would), and before
 * anything is committed the staged layer is merged alone exactly as a
 * mount merges it (tree.c): a layer that cannot be merged, such as a
 * hardlink whose target was later replaced by a directory, is -EBADMSG.
 *
 * The same bytes feed a tar-split recorder (tarsplit.c): what the tar holds
 * besides file contents, kept compressed in layer_tars with the layer's
 * row, in the same transaction, so that push can write the tar again byte
 * for byte. A layer already stored without one gets it from a new import.
 *
 * Commit order keeps the invariant "committed metadata never points at a
 * missing blob": blobs are written, syncfs() makes them durable, then one
 * transaction inserts the blob rows, the layer and its entries. The store
 * lock is held shared throughout so that no sweep removes a blob that is
 * written but not yet referenced.
 */
#include "libcairn_layer.h"
#include "libcairn_blob.h"
#include "libcairn_tarsplit.h"
#include "libcairn_tree.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#define READ_CHUNK (256 * 1024)
/* A sparse file's holes cost no disk but are hashed as the zeros they read
 * as (about 1.5 s a GiB): a layer's holes are capped so that a tiny tar
 * cannot keep an import hashing for hours. */
#define LAYER_HOLES_MAX CN_LAYER_HOLES_MAX

/* The decompressed stream, hashed as the tar reader pulls it; st's
 * progress hook hears how much of the input (input_size bytes, 0 if
 * unknown) has been read. */
struct layer_stream {
  struct archive *raw;
  EVP_MD_CTX *sha;
  uint64_t size, input_size;
  cairn_store *st;
  cn_tarsplit *ts;
  char buf[READ_CHUNK];
};

static void layer_stream_progress(struct layer_stream *ls, bool finished) {
  uint64_t read = (uint64_t)archive_filter_bytes(ls->raw, -1);
  cn_progress(ls->st, "storing", read, ls->input_size, true, finished);
}

static la_ssize_t layer_stream_read(struct archive *tar, void *arg, const void **out) {
  struct layer_stream *ls = arg;
  la_ssize_t n = archive_read_data(ls->raw, ls->buf, sizeof(ls->buf));
  if (n < 0) {
    if (tar) archive_set_error(tar, EILSEQ, "%s", archive_error_string(ls->raw));
    return -1;
  }
  EVP_DigestUpdate(ls->sha, ls->buf, (size_t)n);
  cn_tarsplit_feed(ls->ts, ls->buf, (size_t)n);
  ls->size += (uint64_t)n;
  layer_stream_progress(ls, false);
  *out = ls->buf;
  return n;
}

/* Hashes whatever follows the tar's end marker (padding is part of it). */
static int layer_stream_drain(struct layer_stream *ls) {
  const void *p;
  la_ssize_t n;
  while ((n = layer_stream_read(NULL, ls, &p)) > 0) {
  }
  return n < 0 ? -1 : 0;
}

/* Where the layer comes from: buf (len bytes) if set, else fd. */
struct layer_input {
  int fd;
  const void *buf;
  size_t len;
  const cn_layer_hint *hints; /* sorted by off */
  size_t n_hints;
  cn_layer_writer_done_fn done; /* how fd's writer ended, once its end is read */
  void *done_arg;
};

struct ingest {
  cairn_store *st;
  struct archive *tar;
  sqlite3_stmt *stage_entry, *stage_blob, *lookup_type, *drop_below;
  uint64_t entries;
  uint64_t holes; /* bytes of sparse files' holes so far */
  const cn_layer_hint *hints;
  size_t n_hints, next_hint, taken;
  sqlite3_stmt *blob_row;
};

static const char *const stage_schema =
    "PRAGMA temp_store=MEMORY;"
    "CREATE TEMP TABLE IF NOT EXISTS stage(path TEXT PRIMARY KEY, type INTEGER, mode INTEGER,"
    " uid INTEGER, gid INTEGER, size INTEGER, mtime INTEGER, mtime_nsec INTEGER, rdev INTEGER,"
    " target TEXT, blob TEXT, xattrs BLOB);"
    "CREATE TEMP TABLE IF NOT EXISTS stage_blobs(name TEXT PRIMARY KEY, size INTEGER,"
    " sha256 TEXT);"
    "DELETE FROM temp.stage; DELETE FROM temp.stage_blobs;";

/* Makes a tar name relative and canonical; -EBADMSG if it has "..". */
static int path_normalize(const char *in, char *out, size_t len) {
  size_t o = 0;
  const char *p = in;
  while (*p) {
    while (*p == '/') p++;
    const char *end = strchrnul(p, '/');
    size_t n = (size_t)(end - p);
    if (n == 0 || (n == 1 && p[0] == '.')) {
      p = end;
      continue;
    }
    if (n == 2 && p[0] == '.' && p[1] == '.') return -EBADMSG;
    if (o + n + 2 > len) return -ENAMETOOLONG;
    if (o) out[o++] = '/';
    memcpy(out + o, p, n);
    o += n;
    p = end;
  }
  out[o] = '\0';
  return 0;
}

static int stage_type(struct ingest *in, const char *path) {
  sqlite3_bind_text(in->lookup_type, 1, path, -1, SQLITE_STATIC);
  int type =
      sqlite3_step(in->lookup_type) == SQLITE_ROW ? sqlite3_column_int(in->lookup_type, 0) : -1;
  sqlite3_reset(in->lookup_type);
  return type;
}

/* Refuses a name whose parent, in this layer, is not a directory. */
static int path_check_parents(struct ingest *in, const char *path) {
  char buf[4096];
  snprintf(buf, sizeof(buf), "%s", path);
  for (char *slash = strchr(buf, '/'); slash; slash = strchr(slash + 1, '/')) {
    *slash = '\0';
    int type = stage_type(in, buf);
    *slash = '/';
    if (type >= 0 && type != CAIRN_DIR) /* a symlink, a hardlink (maybe to one), ... */
      return cairn_fail(in->st, -EBADMSG, "entry %s: passes through %.*s, not a directory", path,
                        (int)(slash - buf), buf);
  }
  return 0;
}

static int entry_classify(struct archive_entry *e, const char *path, enum cairn_entry_type *type) {
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  if (strncmp(base, ".wh.", 4) == 0) {
    if (strcmp(base, ".wh..wh..opq") == 0)
      *type = CAIRN_OPAQUE;
    else if (strncmp(base, ".wh..wh.", 8) == 0)
      return 1; /* aufs metadata: not content */
    else if (base[4] == '\0' || strcmp(base + 4, ".") == 0 || strcmp(base + 4, "..") == 0)
      return -EBADMSG;
    else
      *type = CAIRN_WHITEOUT;
    return 0;
  }
  if (archive_entry_hardlink(e)) {
    *type = CAIRN_HARDLINK;
    return 0;
  }
  switch (archive_entry_filetype(e)) {
  case AE_IFREG: *type = CAIRN_REG; return 0;
  case AE_IFDIR: *type = CAIRN_DIR; return 0;
  case AE_IFLNK: *type = CAIRN_SYMLINK; return 0;
  case AE_IFCHR: *type = CAIRN_CHR; return 0;
  case AE_IFBLK: *type = CAIRN_BLK; return 0;
  case AE_IFIFO: *type = CAIRN_FIFO; return 0;
  case AE_IFSOCK: *type = CAIRN_SOCK; return 0;
  default: return -EBADMSG;
  }
}

struct xattr_ref {
  const char *name;
  const void *value;
  size_t len, order;
};

static int xattr_ref_cmp(const void *a, const void *b) {
  const struct xattr_ref *x = a, *y = b;
  int c = strcmp(x->name, y->name);
  return c ? c : x->order < y->order ? -1 : x->order > y->order;
}

static int xattr_ref_order_cmp(const void *a, const void *b) {
  const struct xattr_ref *x = a, *y = b;
  return x->order < y->order ? -1 : x->order > y->order;
}

/* name\0, u32 length (little endian), value — for each xattr, in the tar's
 * order. libarchive gives a pax xattr once per key that carries it
 * (LIBARCHIVE.xattr.NAME and SCHILY.xattr.NAME): the first is kept. */
static int xattrs_encode(struct archive_entry *e, void **out, size_t *len) {
  *out = NULL;
  *len = 0;
  int count = archive_entry_xattr_reset(e);
  if (count <= 0) return 0;
  cairn_autofree struct xattr_ref *v = calloc((size_t)count, sizeof(*v));
  if (!v) return -ENOMEM;
  size_t n = 0;
  while (n < (size_t)count &&
         archive_entry_xattr_next(e, &v[n].name, &v[n].value, &v[n].len) == ARCHIVE_OK) {
    if (v[n].len > UINT32_MAX) return -EBADMSG;
    v[n].order = n;
    n++;
  }
  qsort(v, n, sizeof(*v), xattr_ref_cmp);
  size_t kept = 0;
  for (size_t i = 0; i < n; i++)
    if (kept == 0 || strcmp(v[kept - 1].name, v[i].name) != 0) v[kept++] = v[i];
  qsort(v, kept, sizeof(*v), xattr_ref_order_cmp);
  char *buf = NULL;
  size_t size = 0;
  FILE *f = open_memstream(&buf, &size);
  if (!f) return -ENOMEM;
  for (size_t i = 0; i < kept; i++) {
    size_t vlen = v[i].len;
    unsigned char l[4] = {vlen & 0xff, (vlen >> 8) & 0xff, (vlen >> 16) & 0xff,
                          (vlen >> 24) & 0xff};
    fwrite(v[i].name, 1, strlen(v[i].name) + 1, f);
    fwrite(l, 1, 4, f);
    fwrite(v[i].value, 1, vlen, f);
  }
  if (fclose(f) != 0) {
    free(buf);
    return -ENOMEM;
  }
  *out = buf;
  *len = size;
  return 0;
}

/* A hole of len bytes in the blob w, within the layer's budget. */
static int entry_hole(struct ingest *in, blob_writer *w, uint64_t len) {
  if (len > LAYER_HOLES_MAX - in->holes)
    return cairn_fail(in->st, -EBADMSG, "sparse files with holes of more than %llu GiB in a layer",
                      (unsigned long long)(LAYER_HOLES_MAX >> 30));
  in->holes += len;
  return cn_blob_writer_hole(w, len);
}

/* Streams a regular file's data into a blob; blob_name is set. A sparse
 * entry's holes (where libarchive's blocks skip ahead, and past the last
 * block up to the file's size) stay holes in the blob: a tar of a few KiB
 * cannot take GiBs of the store. */
static int entry_store_data(struct ingest *in, int64_t size, char blob_name[48]) {
  blob_writer *w;
  int r = cn_blob_writer_new(in->st, &w);
  if (r < 0) return r;
  uint64_t at = 0;
  int a;
  for (;;) {
    const void *buf;
    size_t n;
    la_int64_t off;
    a = archive_read_data_block(in->tar, &buf, &n, &off);
    if (a == ARCHIVE_EOF) {
      /* off: the end of the file, past a last hole if it has one */
      if (off > 0 && (uint64_t)off > at && off <= size &&
          (r = entry_hole(in, w, (uint64_t)off - at)) < 0)
        goto out;
      break;
    }
    if (a != ARCHIVE_OK) { /* a warning too: it can repeat forever */
      r = cairn_fail(in->st, -EBADMSG, "%s", archive_error_string(in->tar));
      goto out;
    }
    if (off < 0 || (uint64_t)off < at || n > (uint64_t)size || (uint64_t)off > (uint64_t)size - n) {
      r = cairn_fail(in->st, -EBADMSG, "sparse data at %lld (%zu bytes) is out of order",
                     (long long)off, n);
      goto out;
    }
    if ((uint64_t)off > at && (r = entry_hole(in, w, (uint64_t)off - at)) < 0) goto out;
    if (n > 0 && (r = cn_blob_writer_write(w, buf, n)) < 0) goto out;
    at = (uint64_t)off + n;
  }
  uint64_t got;
  char sha[65];
  if ((r = cn_blob_writer_finish(w, blob_name, &got, sha)) < 0) goto out;
  /* staged first: a failed import removes the files it staged */
  sqlite3_bind_text(in->stage_blob, 1, blob_name, -1, SQLITE_STATIC);
  sqlite3_bind_int64(in->stage_blob, 2, (sqlite3_int64)got);
  sqlite3_bind_text(in->stage_blob, 3, sha, -1, SQLITE_STATIC);
  if (sqlite3_step(in->stage_blob) != SQLITE_DONE) r = cn_store_fail_db(in->st, "staging");
  sqlite3_reset(in->stage_blob);
  if (r == 0 && got != (uint64_t)size)
    r = cairn_fail(in->st, -EBADMSG, "file data is %llu bytes, header says %lld",
                   (unsigned long long)got, (long long)size);
out:
  cn_blob_writer_free(w);
  return r;
}

/* A regular file of size bytes whose data starts here, which a hint says
 * is a stored blob's whole content: 1 (blob set, the data passed on to
 * the diff_id's hash only, the blob staged) when the store holds that blob
 * as the hint says, 0 when the entry is to be stored as any other. */
static int entry_hinted(struct ingest *in, struct archive_entry *e, int64_t size,
                        char blob[48]) {
  cairn_store *st = in->st;
  la_int64_t at = archive_filter_bytes(in->tar, 0);
  while (in->next_hint < in->n_hints && in->hints[in->next_hint].off < (uint64_t)at)
    in->next_hint++;
  if (in->next_hint == in->n_hints) return 0;
  const cn_layer_hint *h = &in->hints[in->next_hint];
  if (h->off != (uint64_t)at || h->size != (uint64_t)size || archive_entry_sparse_count(e) > 0)
    return 0;
  sqlite3_stmt *q = in->blob_row;
  sqlite3_reset(q);
  sqlite3_bind_text(q, 1, h->blob, -1, SQLITE_STATIC);
  if (sqlite3_step(q) != SQLITE_ROW || (uint64_t)sqlite3_column_int64(q, 0) != h->size) return 0;
  char rel[128];
  struct stat sb;
  cn_blob_name_path(h->blob, rel, sizeof rel);
  if (fstatat(st->blobs_fd, rel, &sb, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(sb.st_mode) ||
      (uint64_t)sb.st_size != h->size)
    return 0;
  sqlite3_bind_text(in->stage_blob, 1, h->blob, -1, SQLITE_STATIC);
  sqlite3_bind_int64(in->stage_blob, 2, (sqlite3_int64)h->size);
  sqlite3_bind_text(in->stage_blob, 3, (const char *)sqlite3_column_text(q, 1), -1,
                    SQLITE_TRANSIENT);
  int r = sqlite3_step(in->stage_blob) == SQLITE_DONE ? 0 : cn_store_fail_db(st, "staging");
  sqlite3_reset(in->stage_blob);
  sqlite3_reset(q);
  if (r < 0) return r;
  if (archive_read_data_skip(in->tar) != ARCHIVE_OK)
    return cairn_fail(st, -EBADMSG, "%s", archive_error_string(in->tar));
  if (archive_filter_bytes(in->tar, 0) < at + size)
    return cairn_fail(st, -EBADMSG, "file data is shorter than its header says");
  snprintf(blob, 48, "%s", h->blob);
  in->taken++;
  return 1;
}

static int ingest_entry(struct ingest *in, struct archive_entry *e) {
  cairn_store *st = in->st;
  const char *raw = archive_entry_pathname(e);
  if (!raw) return cairn_fail(st, -EBADMSG, "entry without a name");
  char path[4096], target[4096] = "";
  if (path_normalize(raw, path, sizeof(path)) < 0)
    return cairn_fail(st, -EBADMSG, "entry %s: escapes the layer", raw);
  enum cairn_entry_type type;
  int r = entry_classify(e, path, &type);
  if (r == 1) return 0;
  if (r < 0) return cairn_fail(st, r, "entry %s: not a supported file type", raw);
  if (path[0] == '\0' && type != CAIRN_DIR)
    return cairn_fail(st, -EBADMSG, "entry %s: the layer root must be a directory", raw);
  if ((r = path_check_parents(in, path)) < 0) return r;
  if (archive_entry_uid(e) < 0 || archive_entry_uid(e) > UINT32_MAX || archive_entry_gid(e) < 0 ||
      archive_entry_gid(e) > UINT32_MAX)
    return cairn_fail(st, -EBADMSG, "entry %s: owner %lld:%lld is not a 32-bit id", raw,
                      (long long)archive_entry_uid(e), (long long)archive_entry_gid(e));
  if (type == CAIRN_HARDLINK) {
    const char *link = archive_entry_hardlink(e);
    if (path_normalize(link, target, sizeof(target)) < 0)
      return cairn_fail(st, -EBADMSG, "hardlink %s: target %s escapes the layer", raw, link);
    int ttype = stage_type(in, target);
    if (ttype == CAIRN_HARDLINK) {
      /* point at the first name, so that a group has one root */
      cn_autostmt sqlite3_stmt *q = NULL;
      if ((r = cn_db_prepare(st, &q, "SELECT target FROM temp.stage WHERE path = ?")) < 0) return r;
      sqlite3_bind_text(q, 1, target, -1, SQLITE_STATIC);
      if (sqlite3_step(q) == SQLITE_ROW)
        snprintf(target, sizeof(target), "%s", (const char *)sqlite3_column_text(q, 0));
      ttype = stage_type(in, target);
    }
    if (ttype < 0 || ttype == CAIRN_DIR || ttype == CAIRN_WHITEOUT || ttype == CAIRN_OPAQUE)
      return cairn_fail(st, -EBADMSG, "hardlink %s: target %s is not a file of this layer", raw,
                        link);
    if (strcmp(target, path) == 0)
      return cairn_fail(st, -EBADMSG, "hardlink %s: links to itself", raw);
  } else if (type == CAIRN_SYMLINK) {
    const char *link = archive_entry_symlink(e);
    snprintf(target, sizeof(target), "%s", link ? link : "");
  }
  char blob[48] = "";
  int64_t size = type == CAIRN_REG ? archive_entry_size(e) : 0;
  if (size < 0) return cairn_fail(st, -EBADMSG, "entry %s: negative size", raw);
  if (type == CAIRN_REG && size > 0 && in->n_hints && (r = entry_hinted(in, e, size, blob)) < 0)
    return cn_fail_context(st, r, "entry %s", raw);
  if (type == CAIRN_REG && size > 0 && !blob[0] && (r = entry_store_data(in, size, blob)) < 0)
    return cn_fail_context(st, r, "entry %s", raw);
  cairn_autofree void *xattrs = NULL;
  size_t xlen;
  if ((r = xattrs_encode(e, &xattrs, &xlen)) < 0)
    return cairn_fail(st, r, "entry %s: %s", raw,
                      r == -ENOMEM ? "out of memory" : "an xattr value over 4 GiB");
  if (type != CAIRN_DIR && stage_type(in, path) == CAIRN_DIR) {
    /* a directory replaced by something else loses what was staged below
     * it, as when the tar is extracted */
    sqlite3_bind_text(in->drop_below, 1, path, -1, SQLITE_STATIC);
    r = sqlite3_step(in->drop_below) == SQLITE_DONE ? 0 : cn_store_fail_db(st, "staging");
    sqlite3_reset(in->drop_below);
    if (r < 0) return r;
  }
  sqlite3_stmt *s = in->stage_entry;
  sqlite3_bind_text(s, 1, path, -1, SQLITE_STATIC);
  sqlite3_bind_int(s, 2, type);
  sqlite3_bind_int(s, 3, (int)(archive_entry_perm(e) & 07777));
  sqlite3_bind_int64(s, 4, archive_entry_uid(e));
  sqlite3_bind_int64(s, 5, archive_entry_gid(e));
  sqlite3_bind_int64(s, 6, size);
  sqlite3_bind_int64(s, 7, archive_entry_mtime(e));
  sqlite3_bind_int64(s, 8, archive_entry_mtime_nsec(e));
  sqlite3_bind_int64(
      s, 9,
      (type == CAIRN_CHR || type == CAIRN_BLK)
          ? (sqlite3_int64)makedev(archive_entry_rdevmajor(e), archive_entry_rdevminor(e))
          : 0);
  if (target[0] || type == CAIRN_SYMLINK)
    sqlite3_bind_text(s, 10, target, -1, SQLITE_STATIC);
  else
    sqlite3_bind_null(s, 10);
  if (blob[0])
    sqlite3_bind_text(s, 11, blob, -1, SQLITE_STATIC);
  else
    sqlite3_bind_null(s, 11);
  if (xattrs)
    sqlite3_bind_blob(s, 12, xattrs, (int)xlen, SQLITE_STATIC);
  else
    sqlite3_bind_null(s, 12);
  r = sqlite3_step(s) == SQLITE_DONE ? 0 : cn_store_fail_db(st, "staging");
  sqlite3_reset(s);
  in->entries++;
  return r;
}

/* Drops the indexes of the images that use layer diff_id (built again,
 * from the rows as they are now, by the next use). */
void cn_layer_indexes_remove(cairn_store *st, const char *diff_id) {
  cn_autostmt sqlite3_stmt *q = NULL;
  if (cn_db_prepare(st, &q, "SELECT DISTINCT image_id FROM image_layers WHERE layer_id = ?") < 0)
    return;
  sqlite3_bind_text(q, 1, diff_id, -1, SQLITE_STATIC);
  while (sqlite3_step(q) == SQLITE_ROW)
    cn_index_remove(st, (const char *)sqlite3_column_text(q, 0));
}

/* A lazily pulled layer (lazy.c) not proven yet: see layer.h. */
int cn_layer_unproven_drop(cairn_store *st, const char *diff_id, char toc[80]) {
  toc[0] = '\0';
  cn_autostmt sqlite3_stmt *q = NULL;
  int r = cn_db_prepare(st, &q,
                        "SELECT digest FROM layer_sources WHERE layer_id = ?1 UNION ALL"
                        " SELECT NULL FROM layer_refuted WHERE layer_id = ?1");
  if (r < 0) return r;
  sqlite3_bind_text(q, 1, diff_id, -1, SQLITE_STATIC);
  r = sqlite3_step(q);
  if (r == SQLITE_DONE) return 0;
  if (r != SQLITE_ROW) return cn_store_fail_db(st, "layer sources");
  const char *d = (const char *)sqlite3_column_text(q, 0);
  if (d && strncmp(d, "sha256:", 7) == 0 && cn_is_hex_id(d + 7, CAIRN_ID_LEN))
    snprintf(toc, 80, "toc/%s", d + 7);
  static const char *const del[] = {
      "DELETE FROM pending WHERE layer_id = ?",   "DELETE FROM layer_sources WHERE layer_id = ?",
      "DELETE FROM layer_refuted WHERE layer_id = ?", "DELETE FROM layer_tars WHERE layer_id = ?",
      "DELETE FROM entries WHERE layer_id = ?"};
  for (size_t i = 0; i < sizeof del / sizeof del[0]; i++) {
    cn_autostmt sqlite3_stmt *s = NULL;
    if ((r = cn_db_prepare(st, &s, del[i])) < 0) return r;
    sqlite3_bind_text(s, 1, diff_id, -1, SQLITE_STATIC);
    if (sqlite3_step(s) != SQLITE_DONE) return cn_store_fail_db(st, "layer rows");
  }
  /* before the commit: a crash after it leaves no index of the old rows */
  cn_layer_indexes_remove(st, diff_id);
  return 1;
}

/* Records the layer's tar-split data (NULL: none), within the caller's
 * transaction; a layer that has some keeps it. */
static int layer_tar_insert(cairn_store *st, const char *diff_id, const void *tar, size_t tar_len,
                            uint64_t size) {
  if (!tar) return 0;
  cn_autostmt sqlite3_stmt *s = NULL;
  int r = cn_db_prepare(st, &s,
                        "INSERT OR IGNORE INTO layer_tars(layer_id, size, data) VALUES(?, ?, ?)");
  if (r < 0) return r;
  sqlite3_bind_text(s, 1, diff_id, -1, SQLITE_STATIC);
  sqlite3_bind_int64(s, 2, (sqlite3_int64)size);
  sqlite3_bind_blob(s, 3, tar, (int)tar_len, SQLITE_STATIC);
  return sqlite3_step(s) == SQLITE_DONE ? 0 : cn_store_fail_db(st, "layer tar record");
}

/* Commits the staged layer unless it is already stored (then only its
 * tar-split data, if it had none). */
static int layer_commit(cairn_store *st, const char *diff_id, uint64_t size, uint64_t n,
                        const void *tar, size_t tar_len) {
  int r;
  if (syncfs(st->blobs_fd) < 0) return cairn_fail(st, -errno, "syncfs: %s", strerror(errno));
  if ((r = cn_db_begin(st)) < 0) return r;
  /* a lazy pull's layer of that diff_id, not proven (or refuted): this
   * ingest hashed its tar, so what it read replaces those rows */
  bool replace = false;
  char toc[80] = "";
  if ((r = cn_layer_exists(st, diff_id)) > 0 &&
      (r = cn_layer_unproven_drop(st, diff_id, toc)) > 0) {
    replace = true;
    r = 0;
  } else if (r == 0) {
    r = cn_layer_exists(st, diff_id);
  }
  if (r != 0) {
    if (r > 0 && tar) {
      cn_autostmt sqlite3_stmt *q = NULL;
      if ((r = cn_db_prepare(st, &q, "SELECT 1 FROM layer_tars WHERE layer_id = ?")) < 0) goto fail;
      sqlite3_bind_text(q, 1, diff_id, -1, SQLITE_STATIC);
      if (sqlite3_step(q) != SQLITE_ROW) {
        /* the blobs the record names are the stored layer's: same diff_id */
        if ((r = layer_tar_insert(st, diff_id, tar, tar_len, size)) < 0) goto fail;
        return cn_db_commit_durable(st);
      }
    }
    cn_db_rollback(st);
    return r < 0 ? r : 0;
  }
  if ((r = cn_db_exec(st, "INSERT OR IGNORE INTO blobs(name, size, sha256)"
                          " SELECT name, size, sha256 FROM temp.stage_blobs")) < 0)
    goto fail;
  {
    cn_autostmt sqlite3_stmt *q = NULL;
    if ((r = cn_db_prepare(st, &q,
                           "SELECT s.name FROM temp.stage_blobs s JOIN blobs b"
                           " ON b.name = s.name WHERE b.size != s.size"
                           " OR b.sha256 != s.sha256")) < 0)
      goto fail;
    if (sqlite3_step(q) == SQLITE_ROW) {
      r = cairn_fail(st, -EBADMSG, "blob %s: stored content differs",
                     (const char *)sqlite3_column_text(q, 0));
      goto fail;
    }
  }
  {
    cn_autostmt sqlite3_stmt *s = NULL;
    if ((r = cn_db_prepare(st, &s,
                           replace ? "UPDATE layers SET size = ?2, entries = ?3,"
                                     " state = 'complete' WHERE id = ?1 AND ?4 IS NOT NULL"
                                   : "INSERT INTO layers(id, size, entries, created)"
                                     " VALUES(?, ?, ?, ?)")) < 0)
      goto fail;
    sqlite3_bind_text(s, 1, diff_id, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, (sqlite3_int64)size);
    sqlite3_bind_int64(s, 3, (sqlite3_int64)n);
    sqlite3_bind_int64(s, 4, cn_now_seconds());
    if (sqlite3_step(s) != SQLITE_DONE) {
      r = cn_store_fail_db(st, "layer");
      goto fail;
    }
  }
  {
    cn_autostmt sqlite3_stmt *s = NULL;
    if ((r = cn_db_prepare(st, &s,
                           "INSERT INTO entries(layer_id, path, type, mode, uid, gid, size,"
                           " mtime, mtime_nsec, rdev, target, blob, xattrs)"
                           " SELECT ?, path, type, mode, uid, gid, size, mtime, mtime_nsec,"
                           " rdev, target, blob, xattrs FROM temp.stage ORDER BY path")) < 0)
      goto fail;
    sqlite3_bind_text(s, 1, diff_id, -1, SQLITE_STATIC);
    if (sqlite3_step(s) != SQLITE_DONE) {
      r = cn_store_fail_db(st, "entries");
      goto fail;
    }
  }
  if ((r = layer_tar_insert(st, diff_id, tar, tar_len, size)) < 0) goto fail;
  if ((r = cn_db_commit_durable(st)) < 0 || !toc[0]) return r;
  { /* the lazy pull's kept TOC, unless another source names its blob (a
     * crash before this leaves it to the sweep) */
    cn_autostmt sqlite3_stmt *o = NULL;
    if (cn_db_prepare(st, &o, "SELECT 1 FROM layer_sources WHERE digest = 'sha256:' || ?") == 0) {
      sqlite3_bind_text(o, 1, toc + 4, -1, SQLITE_STATIC);
      if (sqlite3_step(o) == SQLITE_DONE) unlinkat(st->dirfd, toc, 0);
    }
    store_errclear(st);
  }
  store_test_point(st, "lazy: TOCs unlinked"); /* as a finish's (lazy.c) */
  return 0;
fail:
  cn_db_rollback(st);
  return r;
}

static int ingest_open(struct ingest *in, struct layer_stream *ls, const struct layer_input *src) {
  cairn_store *st = in->st;
  ls->raw = archive_read_new();
  ls->sha = EVP_MD_CTX_new();
  in->tar = archive_read_new();
  if (!ls->raw || !ls->sha || !in->tar)
    return cairn_fail(st, -ENOMEM, "out of memory opening the layer");
  int r;
  if ((r = cn_tarsplit_new(st, &ls->ts)) < 0) return r;
  EVP_DigestInit_ex(ls->sha, EVP_sha256(), NULL);
  struct stat sb;
  ls->st = st;
  ls->input_size = src->buf                                          ? src->len
                   : fstat(src->fd, &sb) == 0 && S_ISREG(sb.st_mode) ? (uint64_t)sb.st_size
                                                                     : 0;
  archive_read_support_filter_all(ls->raw);
  archive_read_support_format_raw(ls->raw);
  if ((src->buf ? archive_read_open_memory(ls->raw, src->buf, src->len)
                : archive_read_open_fd(ls->raw, src->fd, READ_CHUNK)) != ARCHIVE_OK)
    return cairn_fail(st, -EBADMSG, "%s", archive_error_string(ls->raw));
  struct archive_entry *raw_entry;
  if (archive_read_next_header(ls->raw, &raw_entry) != ARCHIVE_OK)
    return cairn_fail(st, -EBADMSG, "not a tar stream: %s", archive_error_string(ls->raw));
  archive_read_support_format_tar(in->tar);
  if (archive_read_open(in->tar, ls, NULL, layer_stream_read, NULL) != ARCHIVE_OK)
    return cairn_fail(st, -EBADMSG, "not a tar: %s", archive_error_string(in->tar));
  if ((r = cn_db_exec(st, stage_schema)) < 0) return r;
  if ((r = cn_db_prepare(st, &in->stage_entry,
                         "INSERT OR REPLACE INTO temp.stage VALUES(?,?,?,?,?,?,?,?,?,?,?,?)")) <
          0 ||
      (r = cn_db_prepare(st, &in->stage_blob,
                         "INSERT OR IGNORE INTO temp.stage_blobs VALUES(?,?,?)")) < 0 ||
      (r = cn_db_prepare(st, &in->lookup_type, "SELECT type FROM temp.stage WHERE path = ?")) < 0 ||
      (r = cn_db_prepare(st, &in->drop_below,
                         "DELETE FROM temp.stage WHERE path > ?1 || '/' AND path < ?1 || '0'")) < 0)
    return r;
  in->hints = src->hints;
  in->n_hints = src->n_hints;
  if (in->n_hints &&
      (r = cn_db_prepare(st, &in->blob_row, "SELECT size, sha256 FROM blobs WHERE name = ?")) < 0)
    return r;
  return 0;
}

static void ingest_close(struct ingest *in, struct layer_stream *ls) {
  sqlite3_finalize(in->stage_entry);
  sqlite3_finalize(in->stage_blob);
  sqlite3_finalize(in->lookup_type);
  sqlite3_finalize(in->drop_below);
  sqlite3_finalize(in->blob_row);
  if (in->tar) archive_read_free(in->tar);
  if (ls->raw) archive_read_free(ls->raw);
  EVP_MD_CTX_free(ls->sha);
  cn_tarsplit_free(ls->ts);
}

static int stage_foreach(void *src, cairn_entry_fn fn, void *arg) {
  cairn_store *st = src;
  cn_autostmt sqlite3_stmt *q = NULL;
  int r = cn_db_prepare(st, &q,
                        "SELECT path, type, mode, uid, gid, size, mtime, mtime_nsec, rdev,"
                        " target, blob, xattrs FROM temp.stage ORDER BY path");
  return r < 0 ? r : cn_entry_rows_foreach(st, q, fn, arg);
}

/* Refuses a staged layer that a mount could not merge: the merge of the
 * layer alone (each name as the last entry for it left it) must succeed. */
static int stage_validate(cairn_store *st) {
  merge_builder *b;
  int r = cn_merge_builder_new(st, &b);
  if (r < 0) return r;
  r = cn_merge_builder_add_layer(b, stage_foreach, st);
  cn_merge_builder_free(b);
  return r;
}

/* How many 512-byte zero blocks (1 to PAD_MAX_BLOCKS) after the stream
 * hashed so far by sha (a copy, left as it is) give the sha256 expected,
 * or 0.
 * podman 4.3's zstd:chunked writer drops a tar's record padding (GNU tar
 * pads to 10,240 bytes, -b 20; 64 KiB at most here) while the config's
 * diff_id is of the padded tar. */
#define PAD_MAX_BLOCKS 127
unsigned cn_layer_padding_blocks(EVP_MD_CTX *sha, const char *expected) {
  static const unsigned char zero[512];
  EVP_MD_CTX *c = EVP_MD_CTX_new(), *t = EVP_MD_CTX_new();
  unsigned found = 0;
  if (c && t && EVP_MD_CTX_copy_ex(c, sha))
    for (unsigned k = 1; k <= PAD_MAX_BLOCKS && !found; k++) {
      unsigned char d[32];
      cairn_id hex;
      if (!EVP_DigestUpdate(c, zero, sizeof zero) || !EVP_MD_CTX_copy_ex(t, c) ||
          !EVP_DigestFinal_ex(t, d, NULL))
        break;
      cn_sha256_hex(d, hex);
      if (strcmp(hex, expected) == 0) found = k;
    }
  EVP_MD_CTX_free(c);
  EVP_MD_CTX_free(t);
  return found;
}

/* The ingest proper; the caller holds the store lock shared. */
static int layer_ingest_locked(cairn_store *st, const struct layer_input *src,
                               const char *expected_diff_id, cairn_pinset *ps, size_t *taken,
                               cairn_id diff_id_out) {
  struct layer_stream *ls = calloc(1, sizeof(*ls));
  if (!ls) return cairn_fail(st, -ENOMEM, "out of memory opening the layer");
  struct ingest in = {.st = st};
  int r = ingest_open(&in, ls, src);
  for (struct archive_entry *e; r == 0;) {
    int a = archive_read_next_header(in.tar, &e);
    if (a == ARCHIVE_EOF) break;
    if (a < ARCHIVE_WARN) {
      r = cairn_fail(st, -EBADMSG, "corrupt or truncated tar: %s", archive_error_string(in.tar));
      break;
    }
    r = ingest_entry(&in, e);
  }
  if (r == 0 && layer_stream_drain(ls) < 0)
    r = cairn_fail(st, -EBADMSG, "corrupt or truncated stream: %s", archive_error_string(ls->raw));
  if (r == 0 && src->done) r = src->done(src->done_arg);
  if (r == 0 && ls->size == 0) r = cairn_fail(st, -EBADMSG, "empty input is not a tar");
  st->ingest_padding = 0;
  if (r == 0) {
    /* the stream without its record padding: proven with the zero blocks,
     * which the exact tar then keeps (cn_layer_tar gives the padded
     * tar, of the diff_id); anything else stays a mismatch */
    EVP_MD_CTX *kept = expected_diff_id && ls->size % 512 == 0 ? EVP_MD_CTX_new() : NULL;
    if (kept && !EVP_MD_CTX_copy_ex(kept, ls->sha)) {
      EVP_MD_CTX_free(kept);
      kept = NULL;
    }
    cn_sha256_final_hex(ls->sha, diff_id_out);
    unsigned pad = kept && strcmp(expected_diff_id, diff_id_out) != 0
                       ? cn_layer_padding_blocks(kept, expected_diff_id)
                       : 0;
    EVP_MD_CTX_free(kept);
    if (pad) {
      static const unsigned char zero[512];
      for (unsigned k = 0; k < pad; k++) cn_tarsplit_feed(ls->ts, zero, sizeof zero);
      ls->size += (uint64_t)pad * 512;
      st->ingest_padding = (uint64_t)pad * 512;
      snprintf(diff_id_out, sizeof(cairn_id), "%s", expected_diff_id);
    }
    if (expected_diff_id && strcmp(expected_diff_id, diff_id_out) != 0)
      r = cairn_fail(st, -EBADMSG, "diff_id mismatch: expected sha256:%s, got sha256:%s",
                     expected_diff_id, diff_id_out);
  }
  if (r == 0) r = stage_validate(st);
  cairn_autofree void *tar = NULL;
  size_t tar_len = 0;
  if (r == 0 && (r = cn_tarsplit_finish(ls->ts, &tar, &tar_len)) > 0)
    r = 0; /* a tar no record can describe: the layer is stored without one */
  if (r == 0 && ps) r = cn_pin_take(st, ps, CAIRN_PIN_LAYER, diff_id_out);
  if (r == 0) r = layer_commit(st, diff_id_out, ls->size, in.entries, tar, tar_len);
  if (r == 0) layer_stream_progress(ls, true);
  if (taken) *taken = r == 0 ? in.taken : 0;
  ingest_close(&in, ls);
  free(ls);
  return r;
}

static int layer_ingest(cairn_store *st, const struct layer_input *src,
                        const char *expected_diff_id, cairn_pinset *ps, size_t *taken,
                        cairn_id diff_id_out) {
  if (expected_diff_id && !cn_is_hex_id(expected_diff_id, CAIRN_ID_LEN))
    return cairn_fail(st, -EINVAL, "%s: not a diff_id", expected_diff_id);
  if (!ps && !expected_diff_id)
    return cairn_fail(st, -EINVAL, "a layer of unknown diff_id needs a pin set");
  int lock = cn_store_lock(st, STORE_LOCK_SHARED);
  if (lock < 0) return lock;
  int r = cn_staging_begin(st);
  if (r == 0) r = layer_ingest_locked(st, src, expected_diff_id, ps, taken, diff_id_out);
  close(lock);
  if (r == -ENOSPC) cn_store_fail_nospace(st);
  /* After a failure, the blob files it linked that no committed row
   * references go (unless another import runs: then the next opening of
   * the store removes them). */
  cn_staging_end(st, r < 0);
  sqlite3_exec(st->db, "DELETE FROM temp.stage; DELETE FROM temp.stage_blobs", NULL, NULL, NULL);
  return r;
}

int cn_layer_ingest(cairn_store *st, int fd, const char *expected_diff_id, cairn_pinset *ps,
                       cairn_id diff_id_out) {
  store_errclear(st);
  return layer_ingest(st, &(struct layer_input){.fd = fd}, expected_diff_id, ps, NULL,
                      diff_id_out);
}

int cn_layer_ingest_written(cairn_store *st, int fd, cn_layer_writer_done_fn done, void *arg,
                            cairn_pinset *ps, cairn_id diff_id_out) {
  store_errclear(st);
  return layer_ingest(st, &(struct layer_input){.fd = fd, .done = done, .done_arg = arg}, NULL, ps,
                      NULL, diff_id_out);
}

int cn_layer_ingest_hinted(cairn_store *st, int fd, const char *expected_diff_id,
                           cairn_pinset *ps, const cn_layer_hint *hints, size_t n_hints,
                           size_t *taken, cairn_id diff_id_out) {
  store_errclear(st);
  *taken = 0;
  if (!expected_diff_id) return cairn_fail(st, -EINVAL, "hints without a diff_id to prove");
  return layer_ingest(st, &(struct layer_input){.fd = fd, .hints = hints, .n_hints = n_hints},
                      expected_diff_id, ps, taken, diff_id_out);
}

int cn_layer_ingest_memory(cairn_store *st, const void *buf, size_t len, cairn_pinset *ps,
                           cairn_id diff_id_out) {
  return layer_ingest(st, &(struct layer_input){.fd = -1, .buf = buf ? buf : "", .len = len}, NULL,
                      ps, NULL, diff_id_out);
}

int cairn_layer_resolve(cairn_store *st, const char *ref, cairn_id id) {
  store_errclear(st);
  int r = cn_id_lookup(st, "layers", ref, id);
  return r == 1 ? 0 : r < 0 ? r : cairn_fail(st, -ENOENT, "no such layer");
}

uint64_t cn_layer_ingest_padding(const cairn_store *st) { return st ? st->ingest_padding : 0; }

int cn_layer_exists(cairn_store *st, const char *diff_id) {
  store_errclear(st);
  cn_autostmt sqlite3_stmt *q = NULL;
  int r = cn_db_prepare(st, &q, "SELECT 1 FROM layers WHERE id = ?");
  if (r < 0) return r;
  sqlite3_bind_text(q, 1, diff_id, -1, SQLITE_STATIC);
  r = sqlite3_step(q);
  return r == SQLITE_ROW ? 1 : r == SQLITE_DONE ? 0 : cn_store_fail_db(st, "layer lookup");
}

int cn_layer_delete_rows(cairn_store *st, const char *diff_id) {
  cn_autostmt sqlite3_stmt *t = NULL, *e = NULL, *l = NULL;
  int r;
  if ((r = cn_db_prepare(st, &t, "DELETE FROM layer_tars WHERE layer_id = ?")) < 0 ||
      (r = cn_db_prepare(st, &e, "DELETE FROM entries WHERE layer_id = ?")) < 0 ||
      (r = cn_db_prepare(st, &l, "DELETE FROM layers WHERE id = ?")) < 0)
    return r;
  sqlite3_bind_text(t, 1, diff_id, -1, SQLITE_STATIC);
  sqlite3_bind_text(e, 1, diff_id, -1, SQLITE_STATIC);
  sqlite3_bind_text(l, 1, diff_id, -1, SQLITE_STATIC);
  if (sqlite3_step(t) != SQLITE_DONE || sqlite3_step(e) != SQLITE_DONE ||
      sqlite3_step(l) != SQLITE_DONE)
    return cn_store_fail_db(st, "layer delete");
  return 0;
}

/* Decodes the xattrs column (see ingest_entry) into *out, grown as needed;
 * -ENOMEM or the number of xattrs. */
static ssize_t xattrs_decode(const unsigned char *p, size_t len, cairn_xattr **out, size_t *cap) {
  size_t n = 0, off = 0;
  while (off < len) {
    const char *name = (const char *)p + off;
    size_t nl = strnlen(name, len - off);
    if (off + nl + 1 + 4 > len) break;
    off += nl + 1;
    size_t vl =
        p[off] | (size_t)p[off + 1] << 8 | (size_t)p[off + 2] << 16 | (size_t)p[off + 3] << 24;
    off += 4;
    if (vl > len - off) break;
    if (n == *cap) {
      size_t ncap = *cap ? 2 * *cap : 16;
      cairn_xattr *v = realloc(*out, ncap * sizeof(*v));
      if (!v) return -ENOMEM;
      *out = v;
      *cap = ncap;
    }
    (*out)[n++] = (cairn_xattr){name, p + off, vl};
    off += vl;
  }
  return (ssize_t)n;
}

int cn_entry_rows_foreach(cairn_store *st, sqlite3_stmt *q, cairn_entry_fn fn, void *arg) {
  cairn_autofree cairn_xattr *xattrs = NULL;
  size_t cap = 0;
  int r;
  while ((r = sqlite3_step(q)) == SQLITE_ROW) {
    cairn_entry e = {
        .path = (const char *)sqlite3_column_text(q, 0),
        .type = (enum cairn_entry_type)sqlite3_column_int(q, 1),
        .mode = (uint32_t)sqlite3_column_int(q, 2),
        .uid = (uint32_t)sqlite3_column_int64(q, 3),
        .gid = (uint32_t)sqlite3_column_int64(q, 4),
        .size = (uint64_t)sqlite3_column_int64(q, 5),
        .mtime_sec = sqlite3_column_int64(q, 6),
        .mtime_nsec = (uint32_t)sqlite3_column_int64(q, 7),
        .rdev = (uint64_t)sqlite3_column_int64(q, 8),
        .target = (const char *)sqlite3_column_text(q, 9),
        .blob = (const char *)sqlite3_column_text(q, 10),
    };
    const void *xb = sqlite3_column_blob(q, 11);
    if (xb) {
      ssize_t n = xattrs_decode(xb, (size_t)sqlite3_column_bytes(q, 11), &xattrs, &cap);
      if (n < 0) return cairn_fail(st, -ENOMEM, "out of memory reading layer entries");
      e.n_xattrs = (size_t)n;
      e.xattrs = xattrs;
    }
    int stop = fn(&e, arg);
    if (stop) return stop;
  }
  return r == SQLITE_DONE ? 0 : cn_store_fail_db(st, "layer entries");
}

int cn_layer_foreach(cairn_store *st, const char *diff_id, cairn_entry_fn fn, void *arg) {
  store_errclear(st);
  cn_autostmt sqlite3_stmt *q = NULL;
  int r = cn_db_prepare(st, &q,
                        "SELECT e.path, type, mode, uid, gid, e.size, mtime, mtime_nsec, rdev,"
                        " target, coalesce(blob, 'sha256:' || p.sha256), xattrs FROM entries e"
                        " LEFT JOIN pending p ON p.layer_id = e.layer_id AND p.path = e.path"
                        " WHERE e.layer_id = ? ORDER BY e.path");
  if (r < 0) return r;
  sqlite3_bind_text(q, 1, diff_id, -1, SQLITE_STATIC);
  return cn_entry_rows_foreach(st, q, fn, arg);
}

int cn_layer_origin_add(cairn_store *st, const char *diff_id, const char *registry,
                        const char *repository, bool insecure, const char *digest,
                        const char *media_type, uint64_t size) {
  store_errclear(st);
  if (!cairn_id_valid(diff_id) || strncmp(digest, "sha256:", 7) != 0 ||
      !cairn_id_valid(digest + 7) || !*registry || !*repository)
    return cairn_fail(st, -EINVAL, "bad layer origin %s/%s %s for %s", registry, repository, digest,
                      diff_id);
  cn_autostmt sqlite3_stmt *q = NULL;
  int r = cn_db_prepare(st, &q,
                        "INSERT OR IGNORE INTO layer_origins(layer_id, registry, repository,"
                        " insecure, digest, media_type, size, since) VALUES(?,?,?,?,?,?,?,?)");
  if (r < 0) return r;
  sqlite3_bind_text(q, 1, diff_id, -1, SQLITE_STATIC);
  sqlite3_bind_text(q, 2, registry, -1, SQLITE_STATIC);
  sqlite3_bind_text(q, 3, repository, -1, SQLITE_STATIC);
  sqlite3_bind_int(q, 4, insecure);
  sqlite3_bind_text(q, 5, digest, -1, SQLITE_STATIC);
  sqlite3_bind_text(q, 6, media_type ? media_type : "", -1, SQLITE_STATIC);
  sqlite3_bind_int64(q, 7, (sqlite3_int64)size);
  sqlite3_bind_int64(q, 8, cn_now_seconds());
  if (sqlite3_step(q) != SQLITE_DONE) return cn_store_fail_db(st, "recording a layer's origin");
  return 0;
}
