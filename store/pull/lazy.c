/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lazy.c — lazy pulls of zstd:chunked layers over the network
 * (doc/lazy-pulls.md): recording a layer from its TOC alone
 * (cn_lazy_layer, for `cairn pull --lazy`), fetching one pending file
 * (cairn_lazy_fetch: cairnfs on first read, `cairn fill`), and filling an
 * image (cairn_fill). The store side (the rows, the blob, the
 * transaction) is store/lazy.c, through cairn.h.
 *
 * Verification before anything is stored or served: the TOC is the range
 * the manifest's annotation names, checked against its checksum
 * annotation (again each time the kept copy is read); a file's chunks are
 * fetched in one range request, each decompressed alone and checked
 * against its digest in the TOC (a chunk without one is covered by the
 * file's), the whole against the file's sha256 — and the blob writer
 * hashes it once more before the row that names it is committed.
 *
 * Built on cairn.h alone, like the rest of store/pull/.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "byteranges.h"
#include "lazy.h"
#include "partial.h"
#include "pull.h"
#include "registry.h"
#include "toc.h"

/* ---- one range --------------------------------------------------------------- */

struct one_range {
  uint64_t off, len;
  unsigned char *buf;
  bool got;
};

static int take_range(uint64_t off, const unsigned char *data, size_t len, void *arg) {
  struct one_range *o = arg;
  if (o->got || off != o->off || len != o->len) return -EBADMSG;
  memcpy(o->buf, data, len);
  o->got = true;
  return 0;
}

/* The blob's bytes [off, off + len) into *out (malloc'd), by one request. */
static int fetch_range(pull_source *src, const pull_desc *d, uint64_t off, uint64_t len,
                       unsigned char **out, uint64_t *fetched, cairn_store *st) {
  *out = NULL;
  if (len == 0 || len > (1ull << 32))
    return cairn_fail(st, -EBADMSG, "a range of %llu bytes", (unsigned long long)len);
  char spec[64];
  snprintf(spec, sizeof spec, "%llu-%llu", (unsigned long long)off,
           (unsigned long long)(off + len - 1));
  struct one_range o = {off, len, malloc(len), false};
  if (!o.buf) return cairn_fail(st, -ENOMEM, "out of memory");
  blob_sink s;
  pull_range_reply rr = {0};
  int r = cn_blob_sink_init(&s, -1, len + 4096, NULL);
  if (r == 0) r = src->ops->ranges(src, d, spec, &s, &rr, st);
  if (r == 0 && rr.status != 206)
    r = cairn_fail(st, -EPROTO, "the registry answered a range request with HTTP %ld", rr.status);
  if (r == 0) {
    if (fetched) *fetched += s.written;
    int k = cn_byteranges_parse(rr.content_type, rr.content_range, s.mem ? s.mem : "", s.written,
                                d->size, 1, take_range, &o, st);
    if (k < 0 || !o.got)
      r = k < 0 && cairn_errmsg(st)[0]
              ? k
              : cairn_fail(st, -EBADMSG, "range reply: not the range asked for");
  }
  cn_blob_sink_free(&s);
  if (r < 0) {
    free(o.buf);
    return r;
  }
  *out = o.buf;
  return 0;
}

/* ---- recording a layer from its TOC ---------------------------------------- */

static enum cairn_entry_type entry_type(const cn_toc_entry *e, bool *skip) {
  *skip = false;
  const char *base = strrchr(e->path, '/');
  base = base ? base + 1 : e->path;
  if (strncmp(base, ".wh.", 4) == 0) {
    if (strcmp(base, ".wh..wh..opq") == 0) return CAIRN_OPAQUE;
    if (strncmp(base, ".wh..wh.", 8) == 0) *skip = true; /* aufs metadata */
    return CAIRN_WHITEOUT;
  }
  switch (e->type) {
  case CN_TOC_DIR: return CAIRN_DIR;
  case CN_TOC_SYMLINK: return CAIRN_SYMLINK;
  case CN_TOC_HARDLINK: return CAIRN_HARDLINK;
  case CN_TOC_CHAR: return CAIRN_CHR;
  case CN_TOC_BLOCK: return CAIRN_BLK;
  case CN_TOC_FIFO: return CAIRN_FIFO;
  default: return CAIRN_REG;
  }
}

/* A hardlink's target: the first name of its group (as an import records). */
static const char *link_root(const cn_toc *toc, const cn_toc_entry *e) {
  const char *t = e->link;
  for (int depth = 0; t && depth < 64; depth++) {
    const cn_toc_entry *to = cn_toc_find(toc, t);
    if (!to || to->type != CN_TOC_HARDLINK) break;
    t = to->link;
  }
  return t;
}

static int toc_entries(const cn_toc *toc, cairn_entry **out, size_t *n, cairn_xattr **xs,
                       cairn_store *st) {
  size_t nx = 0;
  for (size_t i = 0; i < toc->n_entries; i++) nx += toc->entries[i].n_xattrs;
  cairn_entry *v = calloc(toc->n_entries ? toc->n_entries : 1, sizeof *v);
  cairn_xattr *x = calloc(nx ? nx : 1, sizeof *x);
  if (!v || !x) {
    free(v);
    free(x);
    return cairn_fail(st, -ENOMEM, "out of memory");
  }
  size_t k = 0, kx = 0;
  for (size_t i = 0; i < toc->n_entries; i++) {
    const cn_toc_entry *e = &toc->entries[i];
    bool skip;
    enum cairn_entry_type type = entry_type(e, &skip);
    if (skip) continue;
    cairn_entry *c = &v[k++];
    *c = (cairn_entry){.path = e->path,
                       .type = type,
                       .mode = e->mode & 07777,
                       .uid = e->uid,
                       .gid = e->gid,
                       .size = type == CAIRN_REG ? e->size : 0,
                       .mtime_sec = e->mtime_sec,
                       .mtime_nsec = e->mtime_nsec,
                       .rdev = (type == CAIRN_CHR || type == CAIRN_BLK)
                                   ? (uint64_t)makedev(e->dev_major, e->dev_minor)
                                   : 0,
                       .target = type == CAIRN_HARDLINK  ? link_root(toc, e)
                                 : type == CAIRN_SYMLINK ? (e->link ? e->link : "")
                                                         : NULL,
                       .blob = type == CAIRN_REG && e->size > 0 ? e->digest : NULL,
                       .xattrs = x + kx,
                       .n_xattrs = e->n_xattrs};
    for (size_t j = 0; j < e->n_xattrs; j++)
      x[kx++] = (cairn_xattr){e->xattrs[j].name, e->xattrs[j].value, e->xattrs[j].len};
  }
  *out = v;
  *n = k;
  *xs = x;
  return 0;
}

int cn_lazy_layer(pull_source *src, const pull_desc *d, const char *diff_id, size_t *pending,
                  uint64_t *fetched, cairn_store *st) {
  *pending = 0;
  cn_toc_zstd_pos pos;
  int r = cn_partial_toc_pos(src, d, &pos, st);
  if (r != 0) return r;
  unsigned char *raw = NULL;
  cn_toc toc = {0};
  cairn_entry *v = NULL;
  cairn_xattr *xs = NULL;
  size_t n = 0;
  char *ann = NULL;
  if ((r = fetch_range(src, d, pos.off, pos.len, &raw, fetched, st)) < 0) goto out;
  if ((r = cn_toc_zstd_chunked_parse(raw, pos.len, &pos, d->size, &toc, st)) < 0) goto out;
  if ((r = toc_entries(&toc, &v, &n, &xs, st)) < 0) goto out;
  ann = json_dumps(d->annotations, JSON_COMPACT | JSON_SORT_KEYS);
  registry *rg = (registry *)src;
  char source[2048];
  snprintf(source, sizeof source, "%s/%s", rg->endpoint, rg->repo);
  cairn_lazy_source ls = {.source = source,
                          .insecure = rg->insecure,
                          .digest = d->digest,
                          .media_type = d->media_type ? d->media_type : "",
                          .size = d->size,
                          .annotations = ann ? ann : "{}",
                          .toc_digest = pos.digest};
  r = cairn_layer_record_partial(st, diff_id, v, n, &ls, raw, pos.len, pending);
out:
  free(ann);
  free(v);
  free(xs);
  free(raw);
  cn_toc_free(&toc);
  return r;
}

/* ---- fetching one file ------------------------------------------------------- */

/* The kept TOC of f's layer, checked again against the digest the pull
 * verified (the annotations it kept give the position). */
static int kept_toc(cairn_store *st, const cairn_lazy_file *f, cn_toc *toc) {
  json_error_t je;
  json_t *ann = json_loads(f->annotations, 0, &je);
  cn_toc_zstd_pos pos;
  int r = cn_toc_zstd_annotations(ann, f->blob_size, &pos, st);
  json_decref(ann);
  if (r < 0) return r;
  if (strcmp(pos.digest, f->toc_digest) != 0)
    return cairn_fail(st, -EBADMSG, "layer %s: its kept TOC is not the one pulled", f->layer_id);
  void *buf = NULL;
  size_t len = 0;
  if ((r = cairn_lazy_toc_read(st, f->digest, &buf, &len)) < 0) return r;
  r = len == pos.len ? cn_toc_zstd_chunked_parse(buf, len, &pos, f->blob_size, toc, st)
                     : cairn_fail(st, -EBADMSG, "layer %s: its kept TOC is truncated", f->layer_id);
  free(buf);
  return r;
}

static int open_temp(cairn_store *st) {
  char path[4096];
  snprintf(path, sizeof path, "%s/tmp", cairn_store_dir(st));
  int fd = open(path, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return cairn_fail(st, -errno, "temporary file in %s: %s", path, strerror(errno));
  return fd;
}

/* The file's chunks from [lo, lo + len) of the blob in buf, each checked,
 * into fd; then the whole against e->digest. */
static int unpack(const cn_toc_entry *e, const unsigned char *buf, uint64_t lo, int fd,
                  cairn_store *st) {
  EVP_MD_CTX *md = EVP_MD_CTX_new();
  if (!md) return cairn_fail(st, -ENOMEM, "out of memory");
  EVP_DigestInit_ex(md, EVP_sha256(), NULL);
  int r = 0;
  uint64_t at = 0;
  for (size_t k = 0; r == 0 && k < e->n_chunks; k++) {
    const cn_toc_chunk *ch = &e->chunks[k];
    unsigned char *u = NULL;
    size_t ulen = 0;
    r = cn_toc_decompress(buf + (ch->off - lo), (size_t)ch->csize, (size_t)(ch->inner + ch->usize),
                          &u, &ulen, e->path, st);
    if (r == 0 && ulen < ch->inner + ch->usize)
      r = cairn_fail(st, -EBADMSG, "\"%s\": a chunk is shorter than the TOC says", e->path);
    if (r == 0 && ch->digest[0]) {
      char got[CN_TOC_DIGEST_LEN + 1];
      cn_toc_sha256(u + ch->inner, (size_t)ch->usize, got);
      if (strcmp(got, ch->digest) != 0)
        r = cairn_fail(st, -EBADMSG, "\"%s\": the fetched data is not what the TOC says", e->path);
    }
    if (r == 0) {
      EVP_DigestUpdate(md, u + ch->inner, (size_t)ch->usize);
      const unsigned char *p = u + ch->inner;
      for (size_t left = (size_t)ch->usize; r == 0 && left > 0;) {
        ssize_t w = pwrite(fd, p, left, (off_t)at);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) {
          r = cairn_fail(st, -errno, "temporary file: %s", strerror(errno));
          break;
        }
        p += w;
        left -= (size_t)w;
        at += (uint64_t)w;
      }
    }
    free(u);
  }
  unsigned char dg[32];
  EVP_DigestFinal_ex(md, dg, NULL);
  EVP_MD_CTX_free(md);
  if (r < 0) return r;
  cairn_id hex;
  cairn_sha256_hex(dg, hex);
  if (at != e->size || strcmp(hex, e->digest + 7) != 0)
    return cairn_fail(st, -EBADMSG, "\"%s\": the fetched data is not what the TOC says", e->path);
  return 0;
}

static int fetch_file(cairn_store *st, const cairn_lazy_file *f, const char *sha256,
                      char blob[48]) {
  cn_toc toc = {0};
  int r = kept_toc(st, f, &toc);
  if (r < 0) return r;
  const cn_toc_entry *e = cn_toc_find(&toc, f->path);
  if (!e || e->type != CN_TOC_REG || e->size != f->size || strcmp(e->digest, sha256) != 0 ||
      e->n_chunks == 0) {
    cn_toc_free(&toc);
    return cairn_fail(st, -EBADMSG, "layer %s: \"%s\" is not in its TOC as recorded", f->layer_id,
                      f->path);
  }
  cairn_pull_opts o = {
      .insecure = f->insecure, .attempts = 3, .backoff_base_ms = 100, .backoff_cap_ms = 1000};
  pull_source *src = NULL;
  unsigned char *buf = NULL;
  int fd = -1;
  if ((r = cn_registry_source_open(f->source, &o, &src, st)) < 0) goto out;
  src->opts = &o;
  pull_desc d = {.media_type = f->media_type, .size = f->blob_size};
  snprintf(d.digest, sizeof d.digest, "%s", f->digest);
  uint64_t lo = e->chunks[0].off;
  const cn_toc_chunk *last = &e->chunks[e->n_chunks - 1];
  uint64_t hi = last->off + last->csize;
  for (size_t k = 0; k < e->n_chunks; k++) {
    if (e->chunks[k].off < lo) lo = e->chunks[k].off;
    if (e->chunks[k].off + e->chunks[k].csize > hi) hi = e->chunks[k].off + e->chunks[k].csize;
  }
  if ((r = fetch_range(src, &d, lo, hi - lo, &buf, NULL, st)) < 0) {
    cairn_fail_context(st, r, "fetching \"%s\" of layer %s", f->path, f->layer_id);
    goto out;
  }
  cairn_test_point(st, "lazy: range fetched");
  if ((fd = open_temp(st)) < 0) {
    r = fd;
    goto out;
  }
  if ((r = unpack(e, buf, lo, fd, st)) < 0) goto out;
  cairn_test_point(st, "lazy: verified, not stored");
  r = cairn_lazy_file_store(st, sha256, fd, e->size, blob);
out:
  if (fd >= 0) close(fd);
  free(buf);
  if (src) src->ops->free(src);
  cn_toc_free(&toc);
  return r;
}

int cairn_lazy_fetch(cairn_store *st, const char *sha256, char blob[48]) {
  cairn_fail(st, 0, "%s", "");
  char full[80];
  snprintf(full, sizeof full, "%s%s", strncmp(sha256, "sha256:", 7) == 0 ? "" : "sha256:", sha256);
  if (!cn_toc_digest_valid(full)) return cairn_fail(st, -EINVAL, "%s: not a sha256", sha256);
  uint64_t size = 0;
  int r = cairn_blob_by_sha256(st, full, blob, 48, &size);
  if (r < 0) return r;
  cairn_lazy_file f;
  int p = cairn_lazy_file_find(st, full, &f);
  if (p < 0) return p;
  if (r > 0 && (p == 0 || size == f.size)) {
    /* stored already (another layer's, or fetched meanwhile): named */
    if (p > 0) r = cairn_lazy_file_store(st, full, -1, f.size, blob);
    if (p > 0) cairn_lazy_file_clear(&f);
    return r < 0 ? r : 0;
  }
  if (p == 0) return cairn_fail(st, -ENOENT, "%s: no such file pending", full);
  r = fetch_file(st, &f, full, blob);
  cairn_lazy_file_clear(&f);
  return r;
}

/* ---- fsck -------------------------------------------------------------------- */

struct lazy_check {
  cairn_store *st;
  cairn_report *r;
  char layer[80];
  bool toc_ok;
  cn_toc toc;
};

static void problem(cairn_report *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void problem(cairn_report *r, const char *fmt, ...) {
  char *line = NULL;
  va_list ap;
  va_start(ap, fmt);
  int n = vasprintf(&line, fmt, ap);
  va_end(ap);
  char **v = n < 0 ? NULL : realloc(r->lines, (r->n_lines + 1) * sizeof *v);
  r->problems++;
  if (!v) {
    free(line);
    return;
  }
  r->lines = v;
  r->lines[r->n_lines++] = line;
}

static int check_pending(const cairn_lazy_file *f, const char *sha256, void *arg) {
  struct lazy_check *c = arg;
  if (strcmp(c->layer, f->layer_id) != 0) {
    snprintf(c->layer, sizeof c->layer, "%s", f->layer_id);
    cn_toc_free(&c->toc);
    memset(&c->toc, 0, sizeof c->toc);
    c->toc_ok = kept_toc(c->st, f, &c->toc) == 0;
    if (!c->toc_ok) problem(c->r, "layer %s: its kept TOC: %s", f->layer_id, cairn_errmsg(c->st));
    cairn_fail(c->st, 0, "%s", "");
  }
  if (!c->toc_ok) return 0;
  const cn_toc_entry *e = cn_toc_find(&c->toc, f->path);
  if (!e || e->type != CN_TOC_REG || e->size != f->size || strcmp(e->digest, sha256) != 0)
    problem(c->r, "layer %s: pending file %s is not the one its kept TOC lists", f->layer_id,
            f->path);
  return 0;
}

int cairn_lazy_fsck(cairn_store *st, cairn_report *r) {
  struct lazy_check c = {.st = st, .r = r};
  int rc = cairn_lazy_pending_foreach(st, check_pending, &c);
  cn_toc_free(&c.toc);
  return rc;
}

/* ---- the fill ----------------------------------------------------------------- */

int cairn_fill(cairn_store *st, const char *image_ref, const cairn_fill_opts *opts,
               cairn_id image_id) {
  cairn_fail(st, 0, "%s", "");
  cairn_fill_opts o = opts ? *opts : (cairn_fill_opts){0};
  char *purpose = NULL;
  if (asprintf(&purpose, "fill %s", image_ref) < 0) return cairn_fail(st, -ENOMEM, "out of memory");
  cairn_pinset *ps = cairn_pinset_new(purpose, true);
  free(purpose);
  if (!ps) return cairn_fail(st, -ENOMEM, "out of memory");
  int r = cairn_image_resolve(st, image_ref, image_id);
  if (r == 0) r = cairn_pin_image(st, ps, image_id);
  char **todo = NULL;
  size_t n = 0;
  if (r == 0) r = cairn_lazy_pending_list(st, image_id, &todo, &n);
  uint64_t files = 0, bytes = 0;
  if (r == 0) r = cairn_image_pending(st, image_id, &files, &bytes);
  size_t failed = 0;
  int first_err = 0;
  char why[1024] = "";
  for (size_t i = 0; r == 0 && i < n; i++) {
    if (o.progress) o.progress(i, n, o.arg);
    char blob[48];
    int k = cairn_lazy_fetch(st, todo[i], blob);
    if (k < 0) {
      if (!failed++) {
        first_err = k;
        snprintf(why, sizeof why, "%s", cairn_errmsg(st));
      }
      if (o.log) {
        char line[1200];
        snprintf(line, sizeof line, "%s: %s", todo[i], cairn_errmsg(st));
        o.log(line, o.arg);
      }
    }
  }
  if (r == 0 && o.progress) o.progress(n, n, o.arg);
  if (r == 0 && n == 0) r = cairn_lazy_tidy(st); /* a crashed fill's TOCs */
  cairn_strv_free(todo, n);
  cairn_pinset_release(st, ps);
  if (r < 0) return r;
  if (failed)
    return cairn_fail(st, first_err, "%zu of %zu files not fetched (first: %s)", failed, n, why);
  return 0;
}
