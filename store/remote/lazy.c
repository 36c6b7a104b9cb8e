/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lazy.c — lazy pulls of zstd:chunked and eStargz layers over the network
 * (doc/lazy-pulls.md): fetching and checking a layer's TOC (per format,
 * behind lazy_format: for the lazy pull and the partial pull), recording
 * a layer from its TOC alone (cn_lazy_layer, for `cairn pull --lazy`),
 * and fetching one pending file (cairn_lazy_fetch: cairnfs on first read,
 * `cairn fill`); filling an image is fill.c. The store side (the
 * rows, the blob, the transaction) is store/lazy.c, through cairn.h.
 *
 * Verification before anything is stored or served: the TOC is trusted as
 * far as the manifest's annotations vouch for it (zstd:chunked: the
 * checksum of the TOC frame; eStargz: the toc.digest of the TOC JSON),
 * again each time the kept copy is read; a file's chunks are fetched in
 * one range request, each decompressed alone (a gzip member or zstd frame,
 * or a run of them; eStargz's innerOffset skips what precedes the file in
 * a shared member; a file's range streams from the reply into an
 * anonymous file and from there through the decompressor, so that its
 * size costs no memory) and checked against its digest in the TOC (a chunk
 * without one is covered by the file's), the whole against the file's
 * sha256 — and the blob writer hashes it once more before the row that
 * names it is committed. eStargz's own tar entry, stargz.index.json, is
 * the verified TOC JSON itself: stored from it, never fetched.
 *
 * Built on cairn.h alone, like the rest of store/remote/.
 */
#include <errno.h>
#include <malloc.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <openssl/evp.h>
#include <sys/mman.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include "libcairn_byteranges.h"
#include "libcairn_remote_lazy.h"
#include "libcairn_remote.h"
#include "libcairn_registry.h"
#include "libcairn_toc.h"

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

struct range_at {
  uint64_t off, len;
  const unsigned char *base;
  uint64_t at; /* where in the reply the range's bytes are */
  bool got;
};

static int range_at(uint64_t off, const unsigned char *data, size_t len, void *arg) {
  struct range_at *o = arg;
  if (o->got || off != o->off || len != o->len) return -EBADMSG;
  o->at = (uint64_t)(data - o->base);
  o->got = true;
  return 0;
}

/* The blob's bytes [off, off + len), by one request, streamed into the
 * file fd (empty): *at is where in it they start (after a multipart
 * reply's headers). Memory holds none of them. */
static int fetch_range_fd(pull_source *src, const pull_desc *d, uint64_t off, uint64_t len, int fd,
                          uint64_t *at, cairn_store *st) {
  if (len == 0 || len > (1ull << 32))
    return cairn_fail(st, -EBADMSG, "a range of %llu bytes", (unsigned long long)len);
  char spec[64];
  snprintf(spec, sizeof spec, "%llu-%llu", (unsigned long long)off,
           (unsigned long long)(off + len - 1));
  blob_sink s;
  pull_range_reply rr = {0};
  int r = cn_blob_sink_init(&s, fd, len + 4096, NULL);
  if (r == 0) r = src->ops->ranges(src, d, spec, &s, &rr, st);
  if (r == 0 && rr.status != 206)
    r = cairn_fail(st, -EPROTO, "the registry answered a range request with HTTP %ld", rr.status);
  if (r == 0 && s.written == 0) r = cairn_fail(st, -EBADMSG, "range reply: not the range asked for");
  if (r == 0) {
    /* mapped to be parsed: a multipart reply's headers are read, the
     * range's own bytes are not touched */
    void *m = mmap(NULL, (size_t)s.written, PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
      r = cairn_fail(st, -errno, "range reply: %s", strerror(errno));
    } else {
      struct range_at o = {off, len, m, 0, false};
      int k = cn_byteranges_parse(rr.content_type, rr.content_range, m, (size_t)s.written,
                                  d->size, 1, range_at, &o, st);
      if (k < 0 || !o.got)
        r = k < 0 && cairn_errmsg(st)[0]
                ? k
                : cairn_fail(st, -EBADMSG, "range reply: not the range asked for");
      *at = o.at;
      munmap(m, (size_t)s.written);
    }
  }
  cn_blob_sink_free(&s);
  return r;
}

/* ---- the formats ---------------------------------------------------------------
 * What differs between zstd:chunked and eStargz, behind one interface:
 * where the TOC is and what vouches for it (the descriptor's annotations),
 * how it is fetched, and how the kept bytes are parsed and checked. The
 * rest (recording, fetching a file, unpacking it) is shared. */

#define ESTARGZ_TOC_DIGEST "containerd.io/snapshot/stargz/toc.digest"

typedef struct lazy_where {
  cn_toc_zstd_pos pos;                /* zstd:chunked */
  char digest[CAIRN_DIGEST_LEN + 1]; /* eStargz: of the TOC JSON */
} lazy_where;

typedef struct lazy_format {
  /* From a layer descriptor's annotations (may be NULL): 0 a layer of
   * this format whose TOC they vouch for (*w), -ENOENT not one, 1 one
   * whose TOC nothing vouches for, another negative errno: malformed. */
  int (*where)(json_t *ann, uint64_t blob_size, lazy_where *w, cairn_store *st);
  /* The bytes to keep, by range requests (*raw malloc'd). */
  int (*fetch)(pull_source *src, const pull_desc *d, const lazy_where *w, unsigned char **raw,
               size_t *len, uint64_t *fetched, size_t *requests, cairn_store *st);
  /* Those bytes parsed, checked against w, into lt->toc (and lt->self). */
  int (*parse)(const unsigned char *raw, size_t len, const lazy_where *w, uint64_t blob_size,
               cn_lazy_toc *lt, cairn_store *st);
} lazy_format;

static int zstd_where(json_t *ann, uint64_t blob_size, lazy_where *w, cairn_store *st) {
  int r = cn_toc_zstd_annotations(ann, blob_size, &w->pos, st);
  if (r < 0) return r;
  return w->pos.digest[0] ? 0 : 1;
}

static int zstd_fetch(pull_source *src, const pull_desc *d, const lazy_where *w,
                      unsigned char **raw, size_t *len, uint64_t *fetched, size_t *requests,
                      cairn_store *st) {
  int r = fetch_range(src, d, w->pos.off, w->pos.len, raw, fetched, st);
  (*requests)++;
  if (r == 0) *len = (size_t)w->pos.len;
  return r;
}

static int zstd_parse(const unsigned char *raw, size_t len, const lazy_where *w, uint64_t blob_size,
                      cn_lazy_toc *lt, cairn_store *st) {
  if (len != w->pos.len) return cairn_fail(st, -EBADMSG, "zstd:chunked: the TOC is truncated");
  return cn_toc_zstd_chunked_parse(raw, len, &w->pos, blob_size, &lt->toc, st);
}

static int estargz_where(json_t *ann, uint64_t blob_size, lazy_where *w, cairn_store *st) {
  json_t *j = json_object_get(ann, ESTARGZ_TOC_DIGEST);
  if (!j) return -ENOENT;
  if (!json_is_string(j) || !cn_toc_digest_valid(json_string_value(j)))
    return cairn_fail(st, -EBADMSG, "eStargz: the annotation %s is not a sha256 digest",
                      ESTARGZ_TOC_DIGEST);
  if (blob_size <= CN_TOC_ESTARGZ_FOOTER)
    return cairn_fail(st, -EBADMSG, "eStargz: a blob of %llu bytes is too small",
                      (unsigned long long)blob_size);
  snprintf(w->digest, sizeof w->digest, "%s", json_string_value(j));
  return 0;
}

/* The footer (the last 51 bytes: a legacy 47-byte one is their end), then
 * the rest of the tail: [TOC, size - 51). */
static int estargz_fetch(pull_source *src, const pull_desc *d, const lazy_where *w,
                         unsigned char **raw, size_t *len, uint64_t *fetched, size_t *requests,
                         cairn_store *st) {
  (void)w;
  *raw = NULL;
  uint64_t size = d->size, foot = size - CN_TOC_ESTARGZ_FOOTER, toc_off = 0;
  unsigned char *tail = NULL, *body = NULL;
  int r = fetch_range(src, d, foot, CN_TOC_ESTARGZ_FOOTER, &tail, fetched, st);
  (*requests)++;
  if (r == 0) r = cn_toc_estargz_footer(tail, CN_TOC_ESTARGZ_FOOTER, size, &toc_off, st);
  if (r == 0 && toc_off > foot) toc_off = foot; /* a legacy footer after a tiny TOC */
  if (r == 0 && foot - toc_off > CN_TOC_JSON_MAX)
    r = cairn_fail(st, -EFBIG, "eStargz: the TOC is larger than %u bytes", CN_TOC_JSON_MAX);
  if (r == 0 && toc_off < foot) {
    r = fetch_range(src, d, toc_off, foot - toc_off, &body, fetched, st);
    (*requests)++;
  }
  if (r == 0) {
    size_t n = (size_t)(foot - toc_off);
    unsigned char *v = realloc(body, n + CN_TOC_ESTARGZ_FOOTER);
    if (!v) {
      r = cairn_fail(st, -ENOMEM, "out of memory");
    } else {
      body = v;
      memcpy(body + n, tail, CN_TOC_ESTARGZ_FOOTER);
      *raw = body;
      *len = n + CN_TOC_ESTARGZ_FOOTER;
      body = NULL;
    }
  }
  free(body);
  free(tail);
  return r;
}

static int estargz_parse(const unsigned char *raw, size_t len, const lazy_where *w,
                         uint64_t blob_size, cn_lazy_toc *lt, cairn_store *st) {
  if (len > blob_size) return cairn_fail(st, -EBADMSG, "eStargz: the kept TOC is too long");
  return cn_toc_estargz_parse_self(raw, len, blob_size, w->digest, &lt->toc, &lt->self, st);
}

static const lazy_format formats[] = {
    {zstd_where, zstd_fetch, zstd_parse},
    {estargz_where, estargz_fetch, estargz_parse},
};

/* The format of a layer by its descriptor's annotations: 0 and *f, *w;
 * 1 when none applies or nothing vouches for the TOC; a negative errno. */
static int format_of(json_t *ann, uint64_t blob_size, const lazy_format **f, lazy_where *w,
                     cairn_store *st) {
  for (size_t i = 0; i < sizeof formats / sizeof *formats; i++) {
    memset(w, 0, sizeof *w);
    int r = formats[i].where(ann, blob_size, w, st);
    if (r == -ENOENT) continue;
    if (r == 0) *f = &formats[i];
    return r;
  }
  cairn_fail(st, 0, "%s", "");
  return 1;
}

void cn_lazy_toc_free(cn_lazy_toc *lt) {
  if (!lt) return;
  cn_toc_free(&lt->toc);
  cn_toc_estargz_self_free(&lt->self);
  free(lt->raw);
  memset(lt, 0, sizeof *lt);
}

int cn_lazy_toc_fetch(pull_source *src, const pull_desc *d, cn_lazy_toc *lt, uint64_t *fetched,
                      size_t *requests, cairn_store *st) {
  memset(lt, 0, sizeof *lt);
  if (!src->ops->ranges) return 1;
  const lazy_format *f = NULL;
  lazy_where w;
  int r = format_of(d->annotations, d->size, &f, &w, st);
  if (r != 0) return r;
  if ((r = f->fetch(src, d, &w, &lt->raw, &lt->raw_len, fetched, requests, st)) == 0 &&
      (r = f->parse(lt->raw, lt->raw_len, &w, d->size, lt, st)) == 0)
    cn_toc_sha256(lt->raw, lt->raw_len, lt->raw_digest);
  if (r < 0) cn_lazy_toc_free(lt);
  return r;
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

/* The layer's entries from its TOC's records, and eStargz's own TOC entry
 * (stargz.index.json, which the tar holds after the files and the TOC
 * does not list: a full pull records it as a file). */
static int toc_entries(const cn_lazy_toc *lt, cairn_entry **out, size_t *n, cairn_xattr **xs,
                       cairn_store *st) {
  const cn_toc *toc = &lt->toc;
  bool self = lt->self.json != NULL;
  if (self && cn_toc_find(toc, CN_TOC_ESTARGZ_NAME))
    return cairn_fail(st, -EBADMSG, "eStargz: the TOC lists its own name, " CN_TOC_ESTARGZ_NAME);
  size_t nx = 0;
  for (size_t i = 0; i < toc->n_entries; i++) nx += toc->entries[i].n_xattrs;
  cairn_entry *v = calloc(toc->n_entries + 1, sizeof *v);
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
  if (self)
    v[k++] = (cairn_entry){.path = CN_TOC_ESTARGZ_NAME,
                           .type = CAIRN_REG,
                           .mode = lt->self.mode,
                           .uid = lt->self.uid,
                           .gid = lt->self.gid,
                           .size = lt->self.json_len,
                           .mtime_sec = lt->self.mtime_sec,
                           .mtime_nsec = lt->self.mtime_nsec,
                           .blob = lt->self.json_len > 0 ? toc->toc_digest : NULL};
  *out = v;
  *n = k;
  *xs = x;
  return 0;
}

int cn_lazy_open_temp(cairn_store *st) { return cn_store_tmpfile(st, 0600); }

void cn_lazy_trim(void) {
#ifdef __GLIBC__
  malloc_trim(0);
#endif
}

static int write_at(int fd, const unsigned char *p, size_t left, uint64_t at, cairn_store *st) {
  while (left > 0) {
    ssize_t w = pwrite(fd, p, left, (off_t)at);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return cairn_fail(st, -errno, "temporary file: %s", strerror(errno));
    p += w;
    left -= (size_t)w;
    at += (uint64_t)w;
  }
  return 0;
}

/* Stores eStargz's stargz.index.json from the verified TOC JSON (its
 * sha256 is the TOC's digest, which the manifest vouched for): nothing
 * is fetched for it. */
static int store_self(cairn_store *st, const cn_lazy_toc *lt, char blob[48]) {
  int fd = cn_lazy_open_temp(st);
  if (fd < 0) return fd;
  int r = write_at(fd, lt->self.json, lt->self.json_len, 0, st);
  if (r == 0) r = cn_lazy_file_store(st, lt->toc.toc_digest, fd, lt->self.json_len, blob);
  close(fd);
  return r;
}

int cn_lazy_layer(pull_source *src, const pull_desc *d, const char *diff_id, size_t *pending,
                  uint64_t *fetched, cairn_store *st) {
  *pending = 0;
  cn_lazy_toc lt;
  size_t requests = 0;
  int r = cn_lazy_toc_fetch(src, d, &lt, fetched, &requests, st);
  if (r != 0) return r;
  cairn_entry *v = NULL;
  cairn_xattr *xs = NULL;
  size_t n = 0;
  char *ann = NULL;
  if ((r = toc_entries(&lt, &v, &n, &xs, st)) < 0) goto out;
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
                          .toc_digest = lt.raw_digest};
  if ((r = cn_layer_record_partial(st, diff_id, v, n, &ls, lt.raw, lt.raw_len, pending)) != 0)
    goto out; /* 2: stored unproven from another blob meanwhile */
  if (*pending > 0 && lt.self.json_len > 0) {
    cairn_lazy_file f;
    int p = cn_lazy_file_find(st, lt.toc.toc_digest, &f);
    if (p > 0) cn_lazy_file_clear(&f);
    char blob[48];
    if (p > 0 && (r = store_self(st, &lt, blob)) == 0) (*pending)--;
    if (p < 0) r = p;
  }
out:
  free(ann);
  free(v);
  free(xs);
  cn_lazy_toc_free(&lt);
  return r;
}

/* ---- fetching one file ------------------------------------------------------- */

int cn_lazy_kept_toc(cairn_store *st, const cairn_lazy_file *f, cn_lazy_toc *lt) {
  memset(lt, 0, sizeof *lt);
  json_error_t je;
  json_t *ann = json_loads(f->annotations, 0, &je);
  const lazy_format *fm = NULL;
  lazy_where w;
  int r = format_of(ann, f->blob_size, &fm, &w, st);
  json_decref(ann);
  if (r > 0)
    r = cairn_fail(st, -EBADMSG, "layer %s: its annotations name no TOC they vouch for",
                   f->layer_id);
  if (r < 0) return r;
  void *buf = NULL;
  size_t len = 0;
  if ((r = cn_lazy_toc_read(st, f->digest, &buf, &len)) < 0) return r;
  lt->raw = buf;
  lt->raw_len = len;
  cn_toc_sha256(buf, len, lt->raw_digest);
  if (strcmp(lt->raw_digest, f->toc_digest) != 0)
    r = cairn_fail(st, -EBADMSG, "layer %s: its kept TOC is not the one pulled", f->layer_id);
  else
    r = fm->parse(buf, len, &w, f->blob_size, lt, st);
  if (r < 0) cn_lazy_toc_free(lt);
  return r;
}

/* Whether the kept TOC lists a regular file path of that size and
 * content: *e its entry, NULL for eStargz's own (stargz.index.json). */
static bool toc_lists(const cn_lazy_toc *lt, const char *path, uint64_t size, const char *sha256,
                      const cn_toc_entry **e) {
  *e = NULL;
  if (lt->self.json && strcmp(path, CN_TOC_ESTARGZ_NAME) == 0)
    return size == lt->self.json_len && strcmp(sha256, lt->toc.toc_digest) == 0;
  const cn_toc_entry *t = cn_toc_find(&lt->toc, path);
  if (!t || t->type != CN_TOC_REG || t->size != size || strcmp(t->digest, sha256) != 0 ||
      t->n_chunks == 0)
    return false;
  *e = t;
  return true;
}

/* ---- unpacking ------------------------------------------------------------------ */

#define UNPACK_BUF (64u << 10)

typedef int (*unpack_sink)(const unsigned char *p, size_t n, void *arg);

/* Passes the bytes [*pos, *pos + n) of a decompressed stream, as far as
 * they overlap [inner, end), to sink. */
static int emit(const unsigned char *p, size_t n, uint64_t *pos, uint64_t inner, uint64_t end,
                unpack_sink sink, void *arg) {
  uint64_t from = *pos, to = *pos + n;
  *pos = to;
  if (to <= inner || from >= end) return 0;
  uint64_t a = from < inner ? inner : from, b = to > end ? end : to;
  return sink(p + (a - from), (size_t)(b - a), arg);
}

/* A chunk's compressed bytes: in memory (mem), or in the file fd at off,
 * read a window (UNPACK_IN) at a time into buf. */
#define UNPACK_IN (1u << 20)
struct unpack_in {
  const unsigned char *mem;
  int fd;
  uint64_t off, left; /* the next byte's place (in mem or fd), how many remain */
  unsigned char *buf;
};

/* The next piece of input (*n 0 at its end), at most max bytes. */
static int in_next(struct unpack_in *in, size_t max, const unsigned char **p, size_t *n) {
  size_t k = in->left < max ? (size_t)in->left : max;
  if (in->mem) {
    *p = in->mem + in->off;
  } else {
    if (k > UNPACK_IN) k = UNPACK_IN;
    for (size_t got = 0; got < k;) {
      ssize_t m = pread(in->fd, in->buf + got, k - got, (off_t)(in->off + got));
      if (m < 0 && errno == EINTR) continue;
      if (m < 0) return -errno;
      if (m == 0) return -EBADMSG; /* the file is shorter than its reply was */
      got += (size_t)m;
    }
    *p = in->buf;
  }
  *n = k;
  in->off += k;
  in->left -= k;
  return 0;
}

/* A run of gzip members (eStargz): the stream's [inner, end) to sink. */
static int inflate_gzip(struct unpack_in *in, uint64_t inner, uint64_t end, unsigned char *win,
                        unpack_sink sink, void *arg, uint64_t *pos) {
  z_stream z = {0};
  if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) return -ENOMEM;
  int r = 0;
  while (r == 0 && *pos < end) {
    if (z.avail_in == 0 && in->left > 0) {
      const unsigned char *p;
      size_t k;
      if ((r = in_next(in, UINT_MAX, &p, &k)) < 0) break;
      z.next_in = (unsigned char *)p;
      z.avail_in = (uInt)k;
    }
    z.next_out = win;
    z.avail_out = UNPACK_BUF;
    int zr = inflate(&z, Z_NO_FLUSH);
    size_t got = UNPACK_BUF - z.avail_out;
    if (got) r = emit(win, got, pos, inner, end, sink, arg);
    if (zr == Z_STREAM_END) { /* the member's end: another may follow */
      if (z.avail_in == 0 && in->left == 0) break;
      if (inflateReset(&z) != Z_OK) r = -EBADMSG;
    } else if (zr == Z_BUF_ERROR) {
      if (z.avail_in == 0 && in->left == 0) break; /* no more input */
    } else if (zr != Z_OK) {
      r = -EBADMSG;
    }
  }
  inflateEnd(&z);
  return r;
}

/* A run of zstd frames (zstd:chunked): the stream's [inner, end) to sink. */
static int inflate_zstd(struct unpack_in *in, uint64_t inner, uint64_t end, unsigned char *win,
                        unpack_sink sink, void *arg, uint64_t *pos) {
  ZSTD_DCtx *dc = ZSTD_createDCtx();
  if (!dc) return -ENOMEM;
  ZSTD_inBuffer ib = {NULL, 0, 0};
  int r = 0;
  while (r == 0 && *pos < end) {
    if (ib.pos == ib.size && in->left > 0) {
      const unsigned char *p;
      size_t k;
      if ((r = in_next(in, SIZE_MAX, &p, &k)) < 0) break;
      ib = (ZSTD_inBuffer){p, k, 0};
    }
    size_t before = ib.pos;
    ZSTD_outBuffer ob = {win, UNPACK_BUF, 0};
    size_t k = ZSTD_decompressStream(dc, &ob, &ib);
    if (ZSTD_isError(k)) {
      r = -EBADMSG;
      break;
    }
    if (ob.pos) r = emit(win, ob.pos, pos, inner, end, sink, arg);
    if (ob.pos < UNPACK_BUF && ((ib.pos == ib.size && in->left == 0) || ib.pos == before)) break;
  }
  ZSTD_freeDCtx(dc);
  return r;
}

/* Decompresses one chunk's bytes, a run of gzip members or zstd frames by
 * their magic, and passes the stream's [inner, inner + usize) to sink:
 * bounded memory, whatever the sizes the TOC claims. */
static int chunk_unpack(struct unpack_in *in, uint64_t inner, uint64_t usize, unpack_sink sink,
                        void *arg, const char *path, cairn_store *st) {
  static const unsigned char gz[] = {0x1f, 0x8b}, zs[] = {0x28, 0xb5, 0x2f, 0xfd};
  unsigned char magic[4] = {0};
  size_t m = in->left < sizeof magic ? (size_t)in->left : sizeof magic;
  if (in->mem) {
    memcpy(magic, in->mem + in->off, m);
  } else if (pread(in->fd, magic, m, (off_t)in->off) != (ssize_t)m) {
    return cairn_fail(st, -EBADMSG, "\"%s\": the fetched data is short", path);
  }
  bool is_gz = m >= sizeof gz && memcmp(magic, gz, sizeof gz) == 0;
  bool is_zs = m >= sizeof zs && memcmp(magic, zs, sizeof zs) == 0;
  if (!is_gz && !is_zs)
    return cairn_fail(st, -EBADMSG, "\"%s\": the fetched data is not gzip or zstd", path);
  unsigned char *win = malloc(UNPACK_BUF);
  if (!win) return cairn_fail(st, -ENOMEM, "out of memory");
  uint64_t pos = 0, end = inner + usize;
  int r = is_gz ? inflate_gzip(in, inner, end, win, sink, arg, &pos)
                : inflate_zstd(in, inner, end, win, sink, arg, &pos);
  free(win);
  if (r == -ENOMEM) return cairn_fail(st, r, "out of memory");
  if (r == -EBADMSG)
    return cairn_fail(st, r, "\"%s\": the fetched data is not what the TOC says (corrupt %s)", path,
                      is_gz ? "gzip" : "zstd");
  if (r < 0) return cairn_fail(st, r, "\"%s\": reading the fetched data: %s", path, strerror(-r));
  if (pos < end)
    return cairn_fail(st, -EBADMSG, "\"%s\": a chunk is shorter than the TOC says", path);
  return 0;
}

struct unpack_out {
  int fd;
  uint64_t at;
  EVP_MD_CTX *whole, *piece;
  cairn_store *st;
};

static int unpack_take(const unsigned char *p, size_t n, void *arg) {
  struct unpack_out *o = arg;
  EVP_DigestUpdate(o->whole, p, n);
  EVP_DigestUpdate(o->piece, p, n);
  int r = write_at(o->fd, p, n, o->at, o->st);
  o->at += n;
  return r;
}

/* cn_lazy_unpack's, the range in buf, or (buf NULL) in the file in at
 * offset base. */
static int unpack(const cn_toc_entry *e, const unsigned char *buf, int in_fd, uint64_t base,
                  uint64_t lo, int fd, cairn_store *st) {
  struct unpack_out o = {fd, 0, EVP_MD_CTX_new(), EVP_MD_CTX_new(), st};
  unsigned char *inbuf = buf ? NULL : malloc(UNPACK_IN);
  if (!buf && !inbuf) {
    EVP_MD_CTX_free(o.whole);
    EVP_MD_CTX_free(o.piece);
    return cairn_fail(st, -ENOMEM, "out of memory");
  }
  int r = o.whole && o.piece ? 0 : cairn_fail(st, -ENOMEM, "out of memory");
  if (r == 0) EVP_DigestInit_ex(o.whole, EVP_sha256(), NULL);
  for (size_t k = 0; r == 0 && k < e->n_chunks; k++) {
    const cn_toc_chunk *ch = &e->chunks[k];
    if (ch->uoff != o.at || ch->off < lo) {
      r = cairn_fail(st, -EBADMSG, "\"%s\": its chunks are not in order", e->path);
      break;
    }
    EVP_DigestInit_ex(o.piece, EVP_sha256(), NULL);
    struct unpack_in in = {buf, in_fd, (buf ? 0 : base) + (ch->off - lo), ch->csize, inbuf};
    r = chunk_unpack(&in, ch->inner, ch->usize, unpack_take, &o, e->path, st);
    char got[CAIRN_DIGEST_LEN + 1];
    cn_sha256_final_digest(o.piece, got);
    if (r == 0 && ch->digest[0] && strcmp(got, ch->digest) != 0)
      r = cairn_fail(st, -EBADMSG, "\"%s\": the fetched data is not what the TOC says", e->path);
  }
  if (r == 0) {
    char got[CAIRN_DIGEST_LEN + 1];
    cn_sha256_final_digest(o.whole, got);
    if (o.at != e->size || strcmp(got, e->digest) != 0)
      r = cairn_fail(st, -EBADMSG, "\"%s\": the fetched data is not what the TOC says", e->path);
  }
  EVP_MD_CTX_free(o.whole);
  EVP_MD_CTX_free(o.piece);
  free(inbuf);
  return r;
}

int cn_lazy_unpack(const cn_toc_entry *e, const unsigned char *buf, uint64_t lo, int fd,
                   cairn_store *st) {
  return unpack(e, buf, -1, 0, lo, fd, st);
}

int cn_lazy_unpack_fd(const cn_toc_entry *e, int in_fd, uint64_t at, uint64_t lo, int fd,
                      cairn_store *st) {
  return unpack(e, NULL, in_fd, at, lo, fd, st);
}

void cn_lazy_source_opts(const cairn_lazy_file *f, const char *creds, cairn_pull_opts *o) {
  *o = (cairn_pull_opts){.insecure = f->insecure,
                         .creds = creds,
                         .attempts = 3,
                         .backoff_base_ms = 100,
                         .backoff_cap_ms = 1000};
}

/* ---- registry sources kept across fetches ------------------------------------
 * A list of the sources a fetcher thread (or a fill's one-by-one fetches)
 * opened, at most SOURCES_MAX, keyed by the layer source's spec and
 * --insecure, the most recently used first: each keeps its connections
 * and token (libcairn_registry.h). A source whose request failed is dropped (the
 * next fetch opens a new one); one older than SOURCE_MAX_AGE_S is renewed
 * (credentials and certificates read again); an expired token is renewed
 * by the source itself (the registry's 401 answered again). */

#define SOURCES_MAX 4
#define SOURCE_MAX_AGE_S 600

struct cn_lazy_kept {
  struct cn_lazy_kept *next;
  char *spec;
  bool insecure;
  cairn_pull_opts o; /* what src->opts points to */
  pull_source *src;
  time_t opened; /* CLOCK_MONOTONIC seconds */
};

static time_t now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec;
}

static void kept_free(cn_lazy_kept *k) {
  if (k->src) k->src->ops->free(k->src);
  free(k->spec);
  free(k);
}

int cn_lazy_kept_open(void *arg, cairn_store *st, const cairn_lazy_file *f, pull_source **src) {
  cn_lazy_sources *s = arg;
  cn_lazy_kept **head = &s->kept, *k;
  time_t now = now_s();
  for (cn_lazy_kept **p = head; (k = *p); p = &k->next) {
    if (k->insecure != f->insecure || strcmp(k->spec, f->source) != 0) continue;
    *p = k->next;
    if (now - k->opened >= SOURCE_MAX_AGE_S) { /* renewed */
      kept_free(k);
      break;
    }
    k->next = *head; /* the most recently used first */
    *head = k;
    *src = k->src;
    return 0;
  }
  if (!(k = calloc(1, sizeof *k)) || !(k->spec = strdup(f->source))) {
    free(k);
    return cairn_fail(st, -ENOMEM, "out of memory");
  }
  k->insecure = f->insecure;
  cn_lazy_source_opts(f, s->creds, &k->o);
  int r = cn_registry_source_open(f->source, &k->o, &k->src, st);
  if (r < 0) {
    k->src = NULL;
    kept_free(k);
    return r;
  }
  k->src->opts = &k->o;
  k->opened = now;
  k->next = *head;
  *head = k;
  unsigned n = 0;
  for (cn_lazy_kept **p = head; (k = *p);)
    if (++n > SOURCES_MAX) {
      *p = k->next;
      kept_free(k);
    } else {
      p = &k->next;
    }
  *src = (*head)->src;
  return 0;
}

void cn_lazy_kept_done(void *arg, pull_source *src, int r) {
  if (r >= 0) return;
  cn_lazy_kept **head = &((cn_lazy_sources *)arg)->kept, *k;
  for (cn_lazy_kept **p = head; (k = *p); p = &k->next)
    if (k->src == src) {
      *p = k->next;
      kept_free(k);
      return;
    }
}

void cn_lazy_kept_free(cn_lazy_sources *s) {
  cn_lazy_kept **head = &s->kept;
  while (*head) {
    cn_lazy_kept *k = *head;
    *head = k->next;
    kept_free(k);
  }
}

static int fetch_listed(cairn_store *st, const cairn_lazy_file *f, const char *sha256,
                        const cn_lazy_toc *lt, const cn_lazy_toc_source *ts, char blob[48]) {
  const cn_toc_entry *e = NULL;
  if (!toc_lists(lt, f->path, f->size, sha256, &e))
    return cairn_fail(st, -EBADMSG, "layer %s: \"%s\" is not in its TOC as recorded", f->layer_id,
                      f->path);
  if (!e) /* eStargz's stargz.index.json: the kept TOC holds it */
    return store_self(st, lt, blob);
  int r;
  cairn_pull_opts o;
  cn_lazy_source_opts(f, NULL, &o);
  pull_source *src = NULL;
  bool kept = ts && ts->open; /* the caller's, kept across fetches */
  bool fetched = false;
  int fd = -1, range_fd = -1;
  if (kept)
    r = ts->open(ts->src_arg, st, f, &src);
  else if ((r = cn_registry_source_open(f->source, &o, &src, st)) == 0)
    src->opts = &o;
  if (r < 0) goto out;
  pull_desc d = {.media_type = f->media_type, .size = f->blob_size};
  snprintf(d.digest, sizeof d.digest, "%s", f->digest);
  uint64_t lo = e->chunks[0].off;
  const cn_toc_chunk *last = &e->chunks[e->n_chunks - 1];
  uint64_t hi = last->off + last->csize;
  for (size_t k = 0; k < e->n_chunks; k++) {
    if (e->chunks[k].off < lo) lo = e->chunks[k].off;
    if (e->chunks[k].off + e->chunks[k].csize > hi) hi = e->chunks[k].off + e->chunks[k].csize;
  }
  uint64_t at = 0;
  if ((range_fd = cn_lazy_open_temp(st)) < 0) {
    r = range_fd;
    goto out;
  }
  if ((r = fetch_range_fd(src, &d, lo, hi - lo, range_fd, &at, st)) < 0) {
    cn_fail_context(st, r, "fetching \"%s\" of layer %s", f->path, f->layer_id);
    goto out;
  }
  fetched = true;
  cairn_test_point(st, "lazy: range fetched");
  if ((fd = cn_lazy_open_temp(st)) < 0) {
    r = fd;
    goto out;
  }
  if ((r = unpack(e, NULL, range_fd, at, lo, fd, st)) < 0) goto out;
  close(range_fd); /* its disk back before the blob is stored */
  range_fd = -1;
  cairn_test_point(st, "lazy: verified, not stored");
  r = cn_lazy_file_store_ready(st, sha256, fd, e->size, blob, ts ? ts->ready : NULL,
                               ts ? ts->ready_arg : NULL);
out:
  if (fd >= 0) close(fd);
  if (range_fd >= 0) close(range_fd);
  if (src && kept)
    ts->done(ts->src_arg, src, fetched ? 0 : r); /* a failed request: its source renewed */
  else if (src)
    src->ops->free(src);
  return r;
}

int cn_lazy_fetch_file(cairn_store *st, const cairn_lazy_file *f, const char *sha256,
                       const cn_lazy_toc_source *ts, char blob[48]) {
  cn_lazy_toc own;
  const cn_lazy_toc *lt = &own;
  bool cached = ts && ts->get;
  int r = cached ? ts->get(ts->arg, st, f, &lt) : cn_lazy_kept_toc(st, f, &own);
  if (r < 0) return r;
  r = fetch_listed(st, f, sha256, lt, ts, blob);
  if (cached)
    ts->put(ts->arg, lt);
  else
    cn_lazy_toc_free(&own);
  return r;
}

int cn_lazy_file_named(cairn_store *st, const char *full, char blob[48], cairn_lazy_file *f) {
  uint64_t size = 0;
  int r = cn_blob_find_sha256(st, full, blob, 48, &size);
  if (r < 0) return r;
  int p = cn_lazy_file_find(st, full, f);
  if (p < 0) return p;
  if (r > 0 && (p == 0 || size == f->size)) {
    /* stored already (another layer's, or fetched meanwhile): named */
    if (p > 0) r = cn_lazy_file_store(st, full, -1, f->size, blob);
    if (p > 0) cn_lazy_file_clear(f);
    return r < 0 ? r : 1;
  }
  if (p == 0) return cairn_fail(st, -ENOENT, "%s: no such file pending", full);
  return 0;
}

int cn_lazy_fetch_from(cairn_store *st, const char *sha256, const cn_lazy_toc_source *ts,
                       char blob[48]) {
  cairn_fail(st, 0, "%s", "");
  char full[80];
  snprintf(full, sizeof full, "%s%s", strncmp(sha256, "sha256:", 7) == 0 ? "" : "sha256:", sha256);
  if (!cn_toc_digest_valid(full)) return cairn_fail(st, -EINVAL, "%s: not a sha256", sha256);
  int lock = cn_lazy_lock(st, full, true); /* one fetch of it across processes */
  if (lock < 0) return lock;
  cairn_lazy_file f;
  int r = cn_lazy_file_named(st, full, blob, &f);
  if (r == 0) {
    r = cn_lazy_fetch_file(st, &f, full, ts, blob);
    cn_lazy_file_clear(&f);
  }
  cn_lazy_unlock(st, full, lock);
  return r < 0 ? r : 0;
}

int cairn_lazy_fetch(cairn_store *st, const char *sha256, char blob[48]) {
  return cn_lazy_fetch_from(st, sha256, NULL, blob);
}

/* ---- fsck -------------------------------------------------------------------- */

struct lazy_check {
  cairn_store *st;
  cairn_report *r;
  char layer[80];
  bool toc_ok;
  cn_lazy_toc toc;
};

static int check_pending(const cairn_lazy_file *f, const char *sha256, void *arg) {
  struct lazy_check *c = arg;
  if (strcmp(c->layer, f->layer_id) != 0) {
    snprintf(c->layer, sizeof c->layer, "%s", f->layer_id);
    cn_lazy_toc_free(&c->toc);
    c->toc_ok = cn_lazy_kept_toc(c->st, f, &c->toc) == 0;
    if (!c->toc_ok)
      cn_report_problem(c->r, "layer %s: its kept TOC: %s", f->layer_id, cairn_errmsg(c->st));
    cairn_fail(c->st, 0, "%s", "");
  }
  if (!c->toc_ok) return 0;
  const cn_toc_entry *e;
  if (!toc_lists(&c->toc, f->path, f->size, sha256, &e))
    cn_report_problem(c->r, "layer %s: pending file %s is not the one its kept TOC lists",
                      f->layer_id, f->path);
  return 0;
}

int cn_lazy_toc_fsck(cairn_store *st, cairn_report *r) {
  struct lazy_check c = {.st = st, .r = r};
  int rc = cn_lazy_pending_foreach(st, check_pending, &c);
  cn_lazy_toc_free(&c.toc);
  return rc;
}
