/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fsck.c — verifying what is stored, and with --repair mending or removing
 * what is broken: blobs (their size, XXH3-128 name and recorded sha256;
 * a corrupt one rebuilt from a kept compressed layer), the database, the
 * index files, the refs file, exact layers' records, kept blobs, and
 * partial layers (store/lazy.c's rows, store/remote/lazy.c's kept TOCs);
 * a corrupt blob of a pulled layer is rebuilt from the registry the layer
 * came from (its layer_origins rows) when the store keeps no copy.
 * cairn_fsck is the one entry. It sits above store/remote/ (scripts/
 * check-layers.sh) because the kept TOCs are parsed by the pull's parser.
 */
#include "libcairn_blob.h"
#include "libcairn_image.h"
#include "libcairn_layer.h"
#include "libcairn_lazy.h"
#include "libcairn_pin.h"
#include "libcairn_sweep.h"
#include "libcairn_tree.h"
#include "libcairn_upper.h"
#include "remote/libcairn_remote_lazy.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <openssl/evp.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>

/* What blob_verify says of a blob whose bytes are its name's but whose
 * row records another sha256: the row is wrong, not the blob. */
static const char WRONG_SHA256[] = "its recorded sha256 does not match its content";

/* Reads a blob through and checks its size and XXH3-128 name, then the
 * sha256 its row records (cn_blob_by_sha256 trusts it), which goes to
 * got: NULL if all hold, WRONG_SHA256 if only the sha256 is wrong. */
static const char *blob_verify(cairn_store *st, const char *name, uint64_t size, const char *sha256,
                               char got[65]) {
  char rel[128];
  cn_blob_name_path(name, rel, sizeof(rel));
  cairn_autoclose int fd = openat(st->blobs_fd, rel, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return "missing";
  XXH3_state_t *x = XXH3_createState();
  EVP_MD_CTX *sha = EVP_MD_CTX_new();
  if (!x || !sha || XXH3_128bits_reset(x) != XXH_OK ||
      EVP_DigestInit_ex(sha, EVP_sha256(), NULL) != 1) {
    XXH3_freeState(x);
    EVP_MD_CTX_free(sha);
    return "unreadable (out of memory)";
  }
  static char buf[1 << 17];
  uint64_t n_read = 0;
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) {
    XXH3_128bits_update(x, buf, (size_t)n);
    EVP_DigestUpdate(sha, buf, (size_t)n);
    n_read += (uint64_t)n;
  }
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, XXH3_128bits_digest(x));
  XXH3_freeState(x);
  cn_sha256_final_hex(sha, got);
  EVP_MD_CTX_free(sha);
  if (n < 0) return "unreadable";
  if (n_read != size) return "wrong size";
  char key[33];
  cn_hex_encode(c.digest, sizeof(c.digest), key);
  if (strncmp(name, key, 32) != 0) return "content does not match its name";
  return strcmp(got, sha256) == 0 ? NULL : WRONG_SHA256;
}

/* Sets the sha256 of blobs whose content is right but whose row records
 * another one (pairs: name, sha256), under the store lock exclusive (no
 * import compares against the rows meanwhile); how many it set. */
static uint64_t fsck_fix_sha256(cairn_store *st, const struct strv *fix, cairn_report *r) {
  cairn_autoclose int lock = cn_store_lock(st, STORE_LOCK_EXCLUSIVE);
  if (lock < 0) return 0;
  cn_autostmt sqlite3_stmt *u = NULL;
  if (cn_db_begin(st) < 0) return 0;
  if (cn_db_prepare(st, &u, "UPDATE blobs SET sha256 = ? WHERE name = ?") < 0) goto fail;
  for (size_t i = 0; i + 1 < fix->n; i += 2) {
    sqlite3_bind_text(u, 1, fix->v[i + 1], -1, SQLITE_STATIC);
    sqlite3_bind_text(u, 2, fix->v[i], -1, SQLITE_STATIC);
    if (sqlite3_step(u) != SQLITE_DONE) goto fail;
    sqlite3_reset(u);
  }
  if (cn_db_commit_durable(st) < 0) return 0;
  for (size_t i = 0; i + 1 < fix->n; i += 2)
    cn_report_line(r, "repaired: recorded the sha256 of blob %s", fix->v[i]);
  return fix->n / 2;
fail:
  cn_db_rollback(st);
  return 0;
}

/* What uses the blob name, for a person: the files (paths in their
 * layers) and the images, "etc/one in layer sha256:ID12; image ID12
 * (NAME, ...)"; NULL if out of memory. */
static char *blob_users(cairn_store *st, const char *name) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f) return NULL;
  cn_autostmt sqlite3_stmt *q = NULL;
  size_t n = 0;
  if (cn_db_prepare(st, &q,
                    "SELECT path, layer_id FROM entries WHERE blob = ? ORDER BY layer_id, path") ==
      0) {
    sqlite3_bind_text(q, 1, name, -1, SQLITE_STATIC);
    while (sqlite3_step(q) == SQLITE_ROW)
      fprintf(f, "%s%s in layer sha256:%.12s", n++ ? ", " : "",
              (const char *)sqlite3_column_text(q, 0), (const char *)sqlite3_column_text(q, 1));
  }
  cn_autostmt sqlite3_stmt *i = NULL;
  size_t k = 0;
  if (cn_db_prepare(st, &i,
                    "SELECT DISTINCT il.image_id, (SELECT group_concat(name, ', ') FROM names"
                    " WHERE image_id = il.image_id) FROM image_layers il WHERE il.layer_id IN"
                    " (SELECT layer_id FROM entries WHERE blob = ?) ORDER BY il.image_id") == 0) {
    sqlite3_bind_text(i, 1, name, -1, SQLITE_STATIC);
    while (sqlite3_step(i) == SQLITE_ROW) {
      const char *names = (const char *)sqlite3_column_text(i, 1);
      fprintf(f, "%s image %.12s (%s)", k++ ? "," : n ? ";" : "",
              (const char *)sqlite3_column_text(i, 0), names ? names : "no name");
    }
  }
  if (!n && !k) fputs("used by nothing", f);
  fclose(f);
  return buf;
}

/* A tar path as the layer import records it: no "./" or "/" before, no
 * "/" after. */
static void tar_path_normal(const char *in, char *out, size_t len) {
  while (in[0] == '.' && in[1] == '/') in += 2;
  while (in[0] == '/') in++;
  snprintf(out, len, "%s", in);
  size_t n = strlen(out);
  while (n > 0 && out[n - 1] == '/') out[--n] = '\0';
}

/* Whether the file fd has the sha256 hex (the compressed layer's digest). */
static bool file_has_sha256(int fd, const char *hex) {
  EVP_MD_CTX *sha = EVP_MD_CTX_new();
  if (!sha || EVP_DigestInit_ex(sha, EVP_sha256(), NULL) != 1) {
    EVP_MD_CTX_free(sha);
    return false;
  }
  static char buf[1 << 17];
  ssize_t n;
  off_t off = 0;
  while ((n = pread(fd, buf, sizeof(buf), off)) > 0) {
    EVP_DigestUpdate(sha, buf, (size_t)n);
    off += n;
  }
  cairn_id got;
  cn_sha256_final_hex(sha, got);
  EVP_MD_CTX_free(sha);
  return n == 0 && strcmp(got, hex) == 0;
}

/* Writes the content of the tar entry path of the compressed layer fd
 * into a new blob; its name to got (48 bytes). 0, or -errno / -ENOENT if
 * the layer has no such file. */
static int blob_from_layer(cairn_store *st, int fd, const char *path, char got[48]) {
  struct archive *a = archive_read_new();
  if (!a) return -ENOMEM;
  archive_read_support_filter_all(a);
  archive_read_support_format_tar(a);
  int rc = archive_read_open_fd(a, fd, 1 << 17) == ARCHIVE_OK ? -ENOENT : -EIO;
  struct archive_entry *e;
  while (rc == -ENOENT && archive_read_next_header(a, &e) == ARCHIVE_OK) {
    char p[PATH_MAX];
    tar_path_normal(archive_entry_pathname(e), p, sizeof(p));
    if (strcmp(p, path) != 0 || archive_entry_filetype(e) != AE_IFREG ||
        archive_entry_hardlink(e)) /* a hard link's content is at its first name */
      continue;
    blob_writer *w = NULL;
    if ((rc = cn_blob_writer_new(st, &w)) < 0) break;
    uint64_t pos = 0, size = (uint64_t)archive_entry_size(e);
    const void *buf;
    size_t len;
    la_int64_t off;
    int ar;
    while (rc == 0 && (ar = archive_read_data_block(a, &buf, &len, &off)) == ARCHIVE_OK) {
      if ((uint64_t)off > pos) rc = cn_blob_writer_hole(w, (uint64_t)off - pos);
      if (rc == 0 && len) rc = cn_blob_writer_write(w, buf, len);
      pos = (uint64_t)off + len;
    }
    if (rc == 0 && ar != ARCHIVE_EOF) rc = -EIO;
    if (rc == 0 && pos < size) rc = cn_blob_writer_hole(w, size - pos);
    uint64_t n;
    char sha[65];
    if (rc == 0) rc = cn_blob_writer_finish(w, got, &n, sha);
    cn_blob_writer_free(w);
  }
  archive_read_free(a);
  return rc;
}

/* Whether the layer blob in fd (compressed or not) decompresses to the tar
 * of diff_id: its sha256, or with the record padding a zstd:chunked writer
 * drops (as the ingest proves it, cn_layer_padding_blocks). */
static bool stream_is_layer(int fd, const char *diff_id) {
  if (lseek(fd, 0, SEEK_SET) < 0) return false;
  struct archive *a = archive_read_new();
  EVP_MD_CTX *sha = EVP_MD_CTX_new(), *kept = EVP_MD_CTX_new();
  struct archive_entry *e;
  bool ok = a && sha && kept && EVP_DigestInit_ex(sha, EVP_sha256(), NULL) == 1;
  if (ok) {
    archive_read_support_filter_all(a);
    archive_read_support_format_raw(a);
    ok = archive_read_open_fd(a, fd, 1 << 17) == ARCHIVE_OK &&
         archive_read_next_header(a, &e) == ARCHIVE_OK;
  }
  static char buf[1 << 17];
  uint64_t size = 0;
  la_ssize_t n = 0;
  while (ok && (n = archive_read_data(a, buf, sizeof(buf))) > 0) {
    EVP_DigestUpdate(sha, buf, (size_t)n);
    size += (uint64_t)n;
  }
  ok = ok && n == 0 && size > 0 && EVP_MD_CTX_copy_ex(kept, sha) == 1;
  if (ok) {
    cairn_id got;
    cn_sha256_final_hex(sha, got);
    ok = strcmp(got, diff_id) == 0 || (size % 512 == 0 && cn_layer_padding_blocks(kept, diff_id));
  }
  EVP_MD_CTX_free(sha);
  EVP_MD_CTX_free(kept);
  if (a) archive_read_free(a);
  return ok;
}

/* A layer's compressed blob fetched again from a registry by one repair
 * (a layer origin, cn_layer_origin_add), kept for the other corrupt blobs
 * of the layer: an anonymous file of STORE/tmp, or why there is none. */
struct fetched {
  char *where; /* "HOST[:PORT]/REPO" */
  char digest[CAIRN_DIGEST_LEN + 1];
  cairn_id layer;
  int fd; /* -1: not fetched, or not the layer (why) */
  char *why;
};
struct fetch_cache {
  struct fetched *v;
  size_t n;
  const cairn_pull_opts *net; /* the fetches' options (NULL: a pull's defaults) */
};

static void fetch_cache_free(struct fetch_cache *c) {
  for (size_t i = 0; i < c->n; i++) {
    free(c->v[i].where);
    free(c->v[i].why);
    if (c->v[i].fd >= 0) close(c->v[i].fd);
  }
  free(c->v);
  c->v = NULL;
  c->n = 0;
}

/* Layer (its diff_id) fetched from origin where as the blob d, checked
 * against d's digest and size, then decompressed against the diff_id;
 * once a repair (a failure said in r: "not rebuilt from ..."). NULL if out
 * of memory. */
static struct fetched *origin_fetch(cairn_store *st, struct fetch_cache *c, const char *layer,
                                    const char *where, bool insecure, const pull_desc *d,
                                    cairn_report *r) {
  for (size_t i = 0; i < c->n; i++)
    if (strcmp(c->v[i].where, where) == 0 && strcmp(c->v[i].digest, d->digest) == 0 &&
        strcmp(c->v[i].layer, layer) == 0)
      return &c->v[i];
  struct fetched *v = realloc(c->v, (c->n + 1) * sizeof(*v));
  if (!v) return NULL;
  c->v = v;
  struct fetched *f = &c->v[c->n];
  *f = (struct fetched){.where = strdup(where), .fd = -1};
  if (!f->where) return NULL;
  c->n++;
  snprintf(f->digest, sizeof(f->digest), "%s", d->digest);
  snprintf(f->layer, sizeof(f->layer), "%s", layer);
  f->fd = cn_store_tmpfile(st, 0600); /* through STORE/tmp's fd: no symlink followed */
  int rc = f->fd < 0 ? f->fd : cn_pull_blob_again(st, where, insecure, d, c->net, f->fd);
  if (rc == 0 && !stream_is_layer(f->fd, layer))
    rc = cairn_fail(st, -EBADMSG, "it is not layer sha256:%s (its tar has another sha256)", layer);
  if (rc == 0) return f;
  f->why = strdup(st->err[0] ? st->err : strerror(-rc));
  store_errclear(st);
  if (f->fd >= 0) close(f->fd);
  f->fd = -1;
  cn_report_line(r, "not rebuilt from %s (layer sha256:%s, blob %s): %s", where, layer, d->digest,
                 f->why ? f->why : "?");
  return f;
}

/* Rebuilds the corrupt or missing blob name from the registries its
 * layers were pulled from (layer_origins, the latest first): each layer
 * blob fetched (once a repair: c) and verified (origin_fetch), the file's
 * content written as a new blob, which counts only if it has the blob's
 * name, size and recorded sha256. 1 if rebuilt (said in r), 0 if no
 * origin answers with it, -ENOMEM. */
static int rebuild_from_origin(cairn_store *st, const char *name, struct fetch_cache *c,
                               cairn_report *r) {
  cn_autostrv struct strv from = {0};    /* path, layer, registry/repo, insecure, digest, type */
  cairn_autofree uint64_t *sizes = NULL; /* of the layer blobs */
  size_t n = 0;
  uint64_t size = 0;
  char sha[65] = "";
  {
    cn_autostmt sqlite3_stmt *q = NULL;
    if (cn_db_prepare(st, &q,
                      "SELECT e.path, o.layer_id, o.registry || '/' || o.repository, o.insecure,"
                      " o.digest, o.media_type, o.size, b.size, b.sha256 FROM entries e"
                      " JOIN layer_origins o ON o.layer_id = e.layer_id"
                      " JOIN blobs b ON b.name = e.blob WHERE e.blob = ?"
                      " ORDER BY o.since DESC, o.registry, o.repository, o.digest, e.path") < 0)
      return 0;
    sqlite3_bind_text(q, 1, name, -1, SQLITE_STATIC);
    while (sqlite3_step(q) == SQLITE_ROW) {
      for (int k = 0; k < 6; k++)
        if (cn_strv_push(&from, k == 3 ? (sqlite3_column_int(q, 3) ? "1" : "0")
                                       : (const char *)sqlite3_column_text(q, k)) < 0)
          return -ENOMEM;
      uint64_t *v = realloc(sizes, (n + 1) * sizeof(*v));
      if (!v) return -ENOMEM;
      sizes = v;
      sizes[n++] = (uint64_t)sqlite3_column_int64(q, 6);
      size = (uint64_t)sqlite3_column_int64(q, 7);
      snprintf(sha, sizeof(sha), "%s", (const char *)sqlite3_column_text(q, 8));
    }
  }
  for (size_t i = 0; i < n; i++) {
    char **o = from.v + 6 * i;
    pull_desc d = {.media_type = o[5], .size = sizes[i]};
    snprintf(d.digest, sizeof(d.digest), "%s", o[4]);
    struct fetched *f = origin_fetch(st, c, o[1], o[2], o[3][0] == '1', &d, r);
    if (!f) return -ENOMEM;
    if (f->fd < 0 || lseek(f->fd, 0, SEEK_SET) < 0) continue;
    char *one[] = {(char *)name};
    if (cn_blob_files_remove(st, &(struct strv){.v = one, .n = 1}) < 0) return 0;
    char got[48], check[65];
    if (blob_from_layer(st, f->fd, o[0], got) < 0 || strcmp(got, name) != 0 ||
        blob_verify(st, name, size, sha, check) != NULL) {
      store_errclear(st);
      continue;
    }
    cn_report_line(r, "repaired: layer sha256:%s from %s: rebuilt blob %s (%s) from its blob %s",
                   o[1], o[2], name, o[0], o[4]);
    return 1;
  }
  return 0;
}

/* Rebuilds the corrupt or missing blob name from a kept compressed layer
 * (STORE/compressed/HEX, als.c) of a layer that uses it: the compressed
 * file checked against its digest first, the file's content written as a
 * new blob, which is the blob again only if it has the blob's name (its
 * XXH3-128), size and recorded sha256. The bad file is quarantined first,
 * so that the writer links the rebuilt one under its name. 1 if rebuilt
 * (said in r), 0 if nothing the store has rebuilds it. */
static int rebuild_blob(cairn_store *st, const char *name, cairn_report *r) {
  cn_autostrv struct strv from = {0}; /* pairs: path, compressed digest */
  uint64_t size = 0;
  char sha[65] = "";
  {
    cn_autostmt sqlite3_stmt *q = NULL;
    if (cn_db_prepare(st, &q,
                      "SELECT e.path, lb.digest, b.size, b.sha256 FROM entries e"
                      " JOIN layer_blobs lb ON lb.layer_id = e.layer_id"
                      " JOIN blobs b ON b.name = e.blob WHERE e.blob = ? ORDER BY lb.digest") < 0)
      return 0;
    sqlite3_bind_text(q, 1, name, -1, SQLITE_STATIC);
    while (sqlite3_step(q) == SQLITE_ROW) {
      if (cn_strv_push(&from, (const char *)sqlite3_column_text(q, 0)) < 0 ||
          cn_strv_push(&from, (const char *)sqlite3_column_text(q, 1)) < 0)
        return 0;
      size = (uint64_t)sqlite3_column_int64(q, 2);
      snprintf(sha, sizeof(sha), "%s", (const char *)sqlite3_column_text(q, 3));
    }
  }
  for (size_t i = 0; i + 1 < from.n; i += 2) {
    const char *digest = from.v[i + 1];
    if (strncmp(digest, "sha256:", 7) != 0) continue;
    char rel[128];
    snprintf(rel, sizeof(rel), "compressed/%s", digest + 7);
    cairn_autoclose int fd = cn_store_openat(st, rel, O_RDONLY, 0);
    if (fd < 0 || !file_has_sha256(fd, digest + 7)) continue;
    char *one[] = {(char *)name};
    if (cn_blob_files_remove(st, &(struct strv){.v = one, .n = 1}) < 0) return 0;
    char got[48];
    if (blob_from_layer(st, fd, from.v[i], got) < 0) continue;
    char check[65];
    if (strcmp(got, name) != 0 || blob_verify(st, name, size, sha, check) != NULL) continue;
    cn_report_line(r, "repaired: rebuilt blob %s (%s) from the kept compressed layer %s", name,
                   from.v[i], digest);
    return 1;
  }
  return 0;
}

/* Locks exclusively every target that sql (?1: a blob's name) selects and
 * held lacks, adding it to held. -EBUSY, with *why naming the holders, if
 * one is pinned or (an image) has a live mount. */
static int repair_lock(cairn_store *st, enum cairn_pin_kind kind, const char *sql, const char *blob,
                       struct held_set *held, char **why) {
  cn_autostrv struct strv ids = {0};
  {
    cn_autostmt sqlite3_stmt *q = NULL;
    int rc = cn_db_prepare(st, &q, sql);
    if (rc < 0) return rc;
    sqlite3_bind_text(q, 1, blob, -1, SQLITE_STATIC);
    while (sqlite3_step(q) == SQLITE_ROW)
      if (cn_strv_push(&ids, (const char *)sqlite3_column_text(q, 0)) < 0)
        return cairn_fail(st, -ENOMEM, "out of memory listing what uses blob %s", blob);
  }
  for (size_t i = 0; i < ids.n; i++) {
    const char *id = ids.v[i];
    if (cn_held_has(held, kind, id)) continue;
    int fd = cn_pin_lock_exclusive(st, kind, id);
    if (fd == -EBUSY) {
      cairn_autofree char *who = cairn_pin_holders(st, kind, id);
      *why = cn_xasprintf(kind == CAIRN_PIN_IMAGE ? "image %.12s: pinned by %s"
                                                  : "layer sha256:%s: pinned by %s",
                          id, who && *who ? who : "another process");
      return *why ? -EBUSY : cairn_fail(st, -ENOMEM, "out of memory naming the holders");
    }
    int rc = fd < 0 ? fd : cn_held_add(st, held, kind, id, fd);
    if (rc < 0) return rc;
    if (kind != CAIRN_PIN_IMAGE) continue;
    cairn_autofree char *mounts = NULL;
    int live = cn_mount_live_for_image(st, id, &mounts);
    if (live < 0) return live;
    if (live > 0) {
      *why = cn_xasprintf("image %.12s: in use by %s", id, mounts);
      return *why ? -EBUSY : cairn_fail(st, -ENOMEM, "out of memory naming the holders");
    }
  }
  return 0;
}

/* One transaction: the locked images, then the locked layers, then the
 * blob's row. */
static int repair_delete_tx(cairn_store *st, const char *blob, const struct held_set *held) {
  int rc = cn_db_begin(st);
  for (size_t i = 0; i < held->n && rc == 0; i++)
    if (held->v[i].kind == CAIRN_PIN_IMAGE) rc = cn_image_delete_rows(st, held->v[i].id);
  for (size_t i = 0; i < held->n && rc == 0; i++)
    if (held->v[i].kind == CAIRN_PIN_LAYER) rc = cn_layer_delete_rows(st, held->v[i].id);
  if (rc == 0) {
    cn_autostmt sqlite3_stmt *d = NULL;
    if ((rc = cn_db_prepare(st, &d, "DELETE FROM blobs WHERE name = ?")) == 0) {
      sqlite3_bind_text(d, 1, blob, -1, SQLITE_STATIC);
      if (sqlite3_step(d) != SQLITE_DONE) rc = cn_store_fail_db(st, "repair");
    }
  }
  if (rc == 0) return cn_db_commit_durable(st);
  cn_db_rollback(st);
  return rc;
}

/* The same, with STORE/refs kept (images may go). */
static int repair_delete_rows(cairn_store *st, const char *blob, const struct held_set *held) {
  int lock = cn_refs_begin(st);
  if (lock < 0) return lock;
  int rc = repair_delete_tx(st, blob, held);
  cn_refs_end(st, lock);
  return rc;
}

/* Repairs one corrupt or missing blob. The layers whose entries use it and
 * the images using those layers go, with the blob's row, in one
 * transaction, if none of them is pinned or mounted; after the commit their
 * pin files and the blob file go. Otherwise no row goes: the blob file is
 * unlinked (quarantined), so that reads of it through a live mount fail
 * with EIO while the rest of the image works, and its row stays for an
 * import of the same content to heal (blob.c links the name again) or a
 * later repair to remove; -EBUSY then, *why naming the holders. The caller
 * holds the store lock exclusive: no import dedups against the blob. */
static int repair_blob(cairn_store *st, const char *name, cairn_report *r, char **why) {
  static const char *const images_sql = "SELECT DISTINCT image_id FROM image_layers WHERE layer_id"
                                        " IN (SELECT layer_id FROM entries WHERE blob = ?1)";
  struct held_set held = {0};
  /* Images first, so that a mounted image is named as the holder; then
   * their layers; then images again: once its layers are locked no new
   * image can use them (an image is committed under its layers' pins). */
  int rc = repair_lock(st, CAIRN_PIN_IMAGE, images_sql, name, &held, why);
  if (rc == 0)
    rc = repair_lock(st, CAIRN_PIN_LAYER, "SELECT DISTINCT layer_id FROM entries WHERE blob = ?1",
                     name, &held, why);
  if (rc == 0) rc = repair_lock(st, CAIRN_PIN_IMAGE, images_sql, name, &held, why);
  cairn_autofree char *users = rc == 0 ? blob_users(st, name) : NULL;
  cn_autostrv struct strv gone = {0}; /* lines naming what goes, said once it went */
  for (size_t i = 0; rc == 0 && i < held.n; i++) {
    if (held.v[i].kind == CAIRN_PIN_LAYER) {
      cairn_autofree char *l = cn_xasprintf("removed layer sha256:%s", held.v[i].id);
      if (!l || cn_strv_push(&gone, l) < 0) rc = cairn_fail(st, -ENOMEM, "out of memory");
      continue;
    }
    cn_autostmt sqlite3_stmt *q = NULL;
    const char *names = NULL;
    if (cn_db_prepare(st, &q, "SELECT group_concat(name, ', ') FROM names WHERE image_id = ?") ==
        0) {
      sqlite3_bind_text(q, 1, held.v[i].id, -1, SQLITE_STATIC);
      if (sqlite3_step(q) == SQLITE_ROW) names = (const char *)sqlite3_column_text(q, 0);
    }
    cairn_autofree char *l =
        cn_xasprintf("removed image %.12s (%s)", held.v[i].id, names ? names : "no name");
    if (!l || cn_strv_push(&gone, l) < 0) rc = cairn_fail(st, -ENOMEM, "out of memory");
  }
  if (rc == 0) rc = repair_delete_rows(st, name, &held);
  cn_held_release(st, &held, rc == 0);
  if (rc < 0 && rc != -EBUSY) return rc;
  char *one[] = {(char *)name};
  int unlinked = cn_blob_files_remove(st, &(struct strv){.v = one, .n = 1});
  if (rc == -EBUSY) {
    cn_report_line(r, "kept %s; blob %s quarantined (reads of it fail with EIO)", *why, name);
    return unlinked < 0 ? unlinked : rc;
  }
  cn_report_line(r, "repaired: removed blob %s, which no kept layer or registry rebuilds: %s", name,
                 users ? users : "?");
  for (size_t i = 0; i < gone.n; i++) cn_report_line(r, "%s", gone.v[i]);
  return unlinked;
}

/* Repairs the corrupt blobs, holding the store lock exclusive throughout,
 * then sweeps what the removed images left unused (layers no image uses go
 * then, as after rm). -EBUSY, naming the holders, if a blob's users are
 * pinned (the blob is quarantined then). */
static int fsck_repair(cairn_store *st, const struct strv *bad, const cairn_pull_opts *net,
                       cairn_report *r) {
  cairn_autoclose int lock = cn_store_lock(st, STORE_LOCK_EXCLUSIVE);
  if (lock < 0) return lock;
  cairn_autofree char *first_kept = NULL;
  size_t kept = 0;
  size_t rebuilt = 0;
  struct fetch_cache fetched = {.net = net};
  for (size_t i = 0; i < bad->n; i++) {
    char *why = NULL;
    /* from what the store still has, else from the registries its layers came from */
    int again = rebuild_blob(st, bad->v[i], r);
    if (again == 0) again = rebuild_from_origin(st, bad->v[i], &fetched, r);
    if (again < 0) {
      fetch_cache_free(&fetched);
      return cairn_fail(st, again, "out of memory repairing blob %s", bad->v[i]);
    }
    if (again == 1) {
      rebuilt++;
      continue;
    }
    int rc = repair_blob(st, bad->v[i], r, &why);
    if (rc == -EBUSY && kept++ == 0)
      first_kept = why;
    else
      free(why);
    if (rc < 0 && rc != -EBUSY) {
      fetch_cache_free(&fetched);
      return rc;
    }
  }
  fetch_cache_free(&fetched);
  int rc = kept + rebuilt < bad->n ? cn_sweep_unused(st, false, true, r) : 0;
  if (rc < 0 || kept == 0) return rc;
  return cairn_fail(st, -EBUSY, "%zu corrupt blob%s kept, quarantined: %s", kept,
                    kept == 1 ? "" : "s", first_kept);
}

static void fsck_database(cairn_store *st, cairn_report *r) {
  cn_autostmt sqlite3_stmt *q = NULL;
  if (cn_db_prepare(st, &q, "PRAGMA integrity_check") == 0)
    while (sqlite3_step(q) == SQLITE_ROW)
      if (strcmp((const char *)sqlite3_column_text(q, 0), "ok") != 0)
        cn_report_problem(r, "database: %s", (const char *)sqlite3_column_text(q, 0));
  cn_autostmt sqlite3_stmt *f = NULL;
  if (cn_db_prepare(st, &f, "PRAGMA foreign_key_check") == 0)
    while (sqlite3_step(f) == SQLITE_ROW)
      cn_report_problem(r, "database: a row of %s points at a missing %s",
                        (const char *)sqlite3_column_text(f, 0),
                        (const char *)sqlite3_column_text(f, 2));
  cn_autostmt sqlite3_stmt *i = NULL;
  if (cn_db_prepare(st, &i, "SELECT id, config FROM images") == 0)
    while (sqlite3_step(i) == SQLITE_ROW) {
      unsigned char d[32];
      char hex[65];
      const void *cfg = sqlite3_column_blob(i, 1);
      EVP_Digest(cfg, (size_t)sqlite3_column_bytes(i, 1), d, NULL, EVP_sha256(), NULL);
      cn_sha256_hex(d, hex);
      if (strcmp(hex, (const char *)sqlite3_column_text(i, 0)) != 0)
        cn_report_problem(r, "image %s: config does not match its id",
                          (const char *)sqlite3_column_text(i, 0));
    }
}

/* Incomplete work: blob files of imports that died before committing (only
 * when no import runs), stale pin annotations and mount records. Complete
 * layers that no image uses are kept: a re-run of a killed pull reuses
 * them; gc removes them. */
static int fsck_discard_incomplete(cairn_store *st, cairn_report *r) {
  cn_sweep_stale_records(st);
  cairn_autoclose int lock = cn_store_lock(st, STORE_LOCK_EXCLUSIVE_NB);
  if (lock == -EBUSY) {
    cn_report_line(r, "an import is running: its blobs were not examined");
    return 0;
  }
  if (lock < 0) return lock;
  int rc = cn_blob_orphans_sweep(st, false, r);
  if (rc == 0 && r->blobs)
    cn_report_line(r, "discarded incomplete work: %llu blob files no layer uses",
                   (unsigned long long)r->blobs);
  return rc;
}

/* Every image's index file: a corrupt one is a problem, which --repair
 * fixes by writing it again from the stored layers; a missing one (an
 * image committed before indexes existed, or whose index could not be
 * written) is none, and --repair writes it. Returns how many corrupt ones
 * it repaired. */
static uint64_t fsck_indexes(cairn_store *st, bool repair, cairn_report *r) {
  cn_autostrv struct strv ids = {0};
  {
    cn_autostmt sqlite3_stmt *q = NULL;
    if (cn_db_prepare(st, &q, "SELECT id FROM images ORDER BY id") < 0) return 0;
    while (sqlite3_step(q) == SQLITE_ROW)
      if (cn_strv_push(&ids, (const char *)sqlite3_column_text(q, 0)) < 0) return 0;
  }
  uint64_t repaired = 0;
  for (size_t i = 0; i < ids.n; i++) {
    cairn_tree *t;
    int rc = cn_index_map(st, ids.v[i], false, &t);
    cairn_tree_free(t);
    if (rc == 0) continue;
    bool corrupt = rc != -ENOENT;
    if (corrupt) cn_report_problem(r, "%s", st->err);
    store_errclear(st);
    if (!repair) continue;
    if ((rc = cn_image_tree_build(st, ids.v[i], &t)) == 0) {
      rc = cn_index_write(st, ids.v[i], t);
      cairn_tree_free(t);
    }
    if (rc < 0) {
      cn_report_line(r, "index of image %.12s not written: %s", ids.v[i], st->err);
      store_errclear(st);
      continue;
    }
    cn_report_line(r, "%s the index of image %.12s", corrupt ? "repaired: rewrote" : "wrote",
                   ids.v[i]);
    repaired += corrupt;
  }
  return repaired;
}

/* STORE/refs against the database: one that says otherwise is a problem
 * (read-only mounts trust it), which --repair fixes by writing it again; a
 * missing one is none (mounts ask the database then), and --repair writes
 * it. Returns 1 if it repaired a wrong one. */
static uint64_t fsck_refs(cairn_store *st, bool repair, cairn_report *r) {
  int rc = cn_refs_check(st, repair);
  if (rc < 0) {
    cn_report_problem(r, "%s", st->err);
    store_errclear(st);
    return 0;
  }
  if (rc == CN_REFS_WRONG) cn_report_problem(r, "STORE/refs does not say what the database says");
  if (repair && rc != CN_REFS_RIGHT)
    cn_report_line(r, "%s STORE/refs", rc == CN_REFS_WRONG ? "repaired: rewrote" : "wrote");
  return repair && rc == CN_REFS_WRONG;
}

/* True if the layer's entries name one of the blobs in bad. */
static bool layer_uses_bad_blob(cairn_store *st, const char *id, const struct strv *bad) {
  if (bad->n == 0) return false;
  cn_autostmt sqlite3_stmt *q = NULL;
  if (cn_db_prepare(st, &q, "SELECT 1 FROM entries WHERE layer_id = ? AND blob = ?") < 0)
    return false;
  sqlite3_bind_text(q, 1, id, -1, SQLITE_STATIC);
  for (size_t i = 0; i < bad->n; i++) {
    sqlite3_bind_text(q, 2, bad->v[i], -1, SQLITE_STATIC);
    if (sqlite3_step(q) == SQLITE_ROW) return true;
    sqlite3_reset(q);
  }
  return false;
}

/* Every layer's tar record writes a tar whose sha256 is its diff_id (read
 * through once, nothing written), but for layers using a blob already
 * reported bad (one problem is enough); layers stored without a record
 * are counted. */
static void fsck_layer_tars(cairn_store *st, const struct strv *bad, cairn_report *r) {
  cn_autostrv struct strv ids = {0};
  uint64_t without = 0;
  {
    cn_autostmt sqlite3_stmt *q = NULL;
    if (cn_db_prepare(st, &q,
                      "SELECT l.id, t.layer_id IS NOT NULL FROM layers l"
                      " LEFT JOIN layer_tars t ON t.layer_id = l.id ORDER BY l.id") < 0)
      return;
    while (sqlite3_step(q) == SQLITE_ROW)
      if (!sqlite3_column_int(q, 1))
        without++;
      else if (cn_strv_push(&ids, (const char *)sqlite3_column_text(q, 0)) < 0)
        return;
  }
  for (size_t i = 0; i < ids.n; i++)
    if (!layer_uses_bad_blob(st, ids.v[i], bad) &&
        cn_layer_tar(st, ids.v[i], NULL, NULL, NULL) < 0) {
      cn_report_problem(r, "%s", st->err);
      store_errclear(st);
    }
  cn_report_line(r, "checked %zu layer tar records", ids.n);
  if (without)
    cn_report_line(r,
                   "%llu layers stored without a tar record (push refuses them until"
                   " imported or pulled again)",
                   (unsigned long long)without);
}

/* Every kept compressed layer (layer_blobs, als.c) has its file, of the
 * recorded size (its sha256 is not read again: the pull checked it and
 * nothing rewrites it). A row without its file can only mislead podman's
 * Additional Layer Store: repair deletes it (the ALS then no longer lists
 * the layer); returns how many it deleted. */
static uint64_t fsck_kept_blobs(cairn_store *st, bool repair, cairn_report *r) {
  cn_autostrv struct strv broken = {0};
  uint64_t checked = 0, repaired = 0;
  {
    cn_autostmt sqlite3_stmt *q = NULL;
    if (cn_db_prepare(st, &q, "SELECT digest, layer_id, size FROM layer_blobs ORDER BY digest") < 0)
      return 0;
    while (sqlite3_step(q) == SQLITE_ROW) {
      const char *digest = (const char *)sqlite3_column_text(q, 0);
      char rel[128];
      snprintf(rel, sizeof rel, "compressed/%s", digest + 7);
      struct stat sb;
      checked++;
      if (fstatat(st->dirfd, rel, &sb, 0) == 0 &&
          (uint64_t)sb.st_size == (uint64_t)sqlite3_column_int64(q, 2))
        continue;
      cn_report_problem(r, "layer %s: its kept compressed blob %s is missing or truncated",
                        (const char *)sqlite3_column_text(q, 1), digest);
      if (cn_strv_push(&broken, digest) < 0) return 0;
    }
  }
  for (size_t i = 0; repair && i < broken.n; i++) {
    cn_autostmt sqlite3_stmt *d = NULL;
    if (cn_db_prepare(st, &d, "DELETE FROM layer_blobs WHERE digest = ?") < 0) break;
    sqlite3_bind_text(d, 1, broken.v[i], -1, SQLITE_STATIC);
    if (sqlite3_step(d) != SQLITE_DONE) break;
    cn_report_line(r, "forgot the kept blob %s (podman downloads that layer again)", broken.v[i]);
    repaired++;
  }
  cn_report_line(r, "checked %llu kept compressed layers", (unsigned long long)checked);
  return repaired;
}

static void fsck_report_unused(cairn_store *st, cairn_report *r) {
  cn_autostmt sqlite3_stmt *q = NULL;
  if (cn_db_prepare(st, &q,
                    "SELECT count(*) FROM layers WHERE NOT EXISTS"
                    " (SELECT 1 FROM image_layers WHERE layer_id = layers.id)") < 0)
    return;
  if (sqlite3_step(q) == SQLITE_ROW && sqlite3_column_int(q, 0) > 0)
    cn_report_line(r, "%d layers no image uses (kept for a pull to reuse; cairn gc removes them)",
                   sqlite3_column_int(q, 0));
}

int cairn_fsck(cairn_store *st, bool repair, cairn_report *r) {
  return cairn_fsck_net(st, repair, NULL, r);
}

int cairn_fsck_net(cairn_store *st, bool repair, const struct cairn_pull_opts *net,
                   cairn_report *r) {
  store_errclear(st);
  int rc = fsck_discard_incomplete(st, r);
  if (rc < 0) return rc;
  fsck_database(st, r);
  fsck_report_unused(st, r);
  cn_autostrv struct strv bad = {0}, wrong_sha = {0};
  {
    cn_autostmt sqlite3_stmt *q = NULL;
    if ((rc = cn_db_prepare(st, &q, "SELECT name, size, sha256 FROM blobs ORDER BY name")) < 0)
      return rc;
    uint64_t checked = 0;
    while (sqlite3_step(q) == SQLITE_ROW) {
      const char *name = (const char *)sqlite3_column_text(q, 0);
      char got[65];
      const char *why = blob_verify(st, name, (uint64_t)sqlite3_column_int64(q, 1),
                                    (const char *)sqlite3_column_text(q, 2), got);
      checked++;
      if (!why) continue;
      cairn_autofree char *users = blob_users(st, name);
      cn_report_problem(r, "blob %s: %s: %s", name, why, users ? users : "?");
      if (why == WRONG_SHA256
              ? cn_strv_push(&wrong_sha, name) < 0 || cn_strv_push(&wrong_sha, got) < 0
              : cn_strv_push(&bad, name) < 0)
        return cairn_fail(st, -ENOMEM, "out of memory checking blobs");
    }
    cn_report_line(r, "checked %llu blobs", (unsigned long long)checked);
  }
  uint64_t problems = r->problems;
  if (repair && wrong_sha.n > 0) problems -= fsck_fix_sha256(st, &wrong_sha, r);
  if (repair && bad.n > 0) {
    if ((rc = fsck_repair(st, &bad, net, r)) < 0) return rc;
    problems -= bad.n;
  }
  uint64_t before = r->problems;
  fsck_layer_tars(st, &bad, r);
  problems -= fsck_indexes(st, repair, r);
  problems -= fsck_refs(st, repair, r);
  problems -= fsck_kept_blobs(st, repair, r);
  if ((rc = cn_lazy_fsck(st, r)) < 0 || (rc = cn_lazy_toc_fsck(st, r)) < 0) return rc;
  problems += r->problems - before;
  return problems ? cairn_fail(st, -EBADMSG, "%llu problems found", (unsigned long long)problems)
                  : 0;
}
