/* SPDX-License-Identifier: Apache-2.0 */
/*
 * partial.c — the partial pull of a zstd:chunked layer (partial.h): the
 * TOC by a range request (checked against the manifest's checksum), the
 * plan of what the store lacks, the missing bytes in multi-range requests,
 * and the layer's zstd stream rebuilt for the ingest, which checks the
 * diff_id of the tar it decompresses to: nothing the TOC or the registry
 * says is trusted further than that.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "byteranges.h"
#include "partial.h"

/* ---- the plan ------------------------------------------------------------- */

typedef struct stored_chunk {
  uint64_t off, csize, uoff, usize;
  size_t entry;
} stored_chunk;

static int by_off(const void *a, const void *b) {
  const stored_chunk *x = a, *y = b;
  return x->off < y->off ? -1 : x->off > y->off;
}

static int push_seg(cn_partial_plan *p, size_t *cap, cn_partial_seg s) {
  if (p->n_segs == *cap) {
    size_t n = *cap ? *cap * 2 : 64;
    cn_partial_seg *v = realloc(p->segs, n * sizeof *v);
    if (!v) return -ENOMEM;
    p->segs = v;
    *cap = n;
  }
  p->segs[p->n_segs++] = s;
  return 0;
}

/* [from, to) fetched, in pieces one request can take. */
static int push_fetch(cn_partial_plan *p, size_t *cap, uint64_t from, uint64_t to) {
  while (from < to) {
    uint64_t n = to - from > CN_PARTIAL_REQUEST_MAX ? CN_PARTIAL_REQUEST_MAX : to - from;
    if (push_seg(p, cap, (cn_partial_seg){.kind = CN_SEG_FETCH, .off = from, .len = n}) < 0)
      return -ENOMEM;
    p->fetch_bytes += n;
    from += n;
  }
  return 0;
}

int cn_partial_plan_make(const cn_toc *toc, uint64_t merge_gap, cn_partial_have_fn have, void *arg,
                         cn_partial_plan *plan, cairn_store *st) {
  memset(plan, 0, sizeof *plan);
  /* zstd:chunked positions name the data of a skippable frame (the TOC,
   * the tar-split): its 8-byte header precedes, and is no part of the tar */
  if (toc->format != CN_TOC_ZSTD_CHUNKED || toc->data_end < 8)
    return cairn_fail(st, -EBADMSG, "not a zstd:chunked TOC");
  plan->end = toc->data_end - 8;
  stored_chunk *v = NULL;
  size_t n = 0, vcap = 0, cap = 0;
  int r = 0;
  for (size_t i = 0; i < toc->n_entries && r == 0; i++) {
    const cn_toc_entry *e = &toc->entries[i];
    if (e->type != CN_TOC_REG || e->n_chunks == 0) continue;
    plan->files++;
    int h = have(e->digest, arg);
    if (h < 0) r = h;
    if (h == 0) {
      size_t *m = realloc(plan->missing, (plan->n_missing + 1) * sizeof *m);
      if (!m) {
        r = cairn_fail(st, -ENOMEM, "out of memory");
        break;
      }
      plan->missing = m;
      plan->missing[plan->n_missing++] = i;
    }
    if (h <= 0) continue;
    plan->files_stored++;
    for (size_t k = 0; k < e->n_chunks; k++) {
      const cn_toc_chunk *c = &e->chunks[k];
      if (c->inner != 0) {
        r = cairn_fail(st, -EBADMSG, "TOC entry \"%s\": a chunk starts inside a frame", e->path);
        break;
      }
      if (n == vcap) {
        vcap = vcap ? vcap * 2 : 256;
        stored_chunk *w = realloc(v, vcap * sizeof *w);
        if (!w) {
          r = cairn_fail(st, -ENOMEM, "out of memory");
          break;
        }
        v = w;
      }
      v[n++] = (stored_chunk){c->off, c->csize, c->uoff, c->usize, i};
    }
  }
  if (r == 0 && n) qsort(v, n, sizeof *v, by_off);
  uint64_t pos = 0;
  for (size_t k = 0; k < n && r == 0; k++) {
    if (v[k].off < pos || v[k].csize > plan->end || v[k].off > plan->end - v[k].csize) {
      r = cairn_fail(st, -EBADMSG, "TOC entry \"%s\": its data overlaps another's",
                     toc->entries[v[k].entry].path);
      break;
    }
    if (v[k].csize < merge_gap) continue; /* fetched with what surrounds it */
    if (push_fetch(plan, &cap, pos, v[k].off) < 0 ||
        push_seg(plan, &cap,
                 (cn_partial_seg){.kind = CN_SEG_STORED,
                                  .off = v[k].off,
                                  .len = v[k].csize,
                                  .entry = v[k].entry,
                                  .uoff = v[k].uoff,
                                  .usize = v[k].usize}) < 0)
      r = cairn_fail(st, -ENOMEM, "out of memory");
    pos = v[k].off + v[k].csize;
  }
  if (r == 0 && push_fetch(plan, &cap, pos, plan->end) < 0)
    r = cairn_fail(st, -ENOMEM, "out of memory");
  free(v);
  if (r < 0) cn_partial_plan_free(plan);
  return r;
}

void cn_partial_plan_free(cn_partial_plan *plan) {
  free(plan->segs);
  plan->segs = NULL;
  plan->n_segs = 0;
  free(plan->missing);
  plan->missing = NULL;
  plan->n_missing = 0;
}

void cn_partial_spec(const cn_partial_plan *plan, size_t first, size_t *last,
                     char spec[PULL_RANGE_SPEC_MAX]) {
  size_t used = 0, ranges = 0;
  uint64_t bytes = 0;
  size_t i = first;
  spec[0] = '\0';
  for (; i < plan->n_segs; i++) {
    const cn_partial_seg *s = &plan->segs[i];
    if (s->kind != CN_SEG_FETCH) continue;
    if (ranges && (ranges == CN_PARTIAL_RANGES_MAX || bytes + s->len > CN_PARTIAL_REQUEST_MAX))
      break;
    char one[48];
    int k = snprintf(one, sizeof one, "%s%llu-%llu", ranges ? "," : "", (unsigned long long)s->off,
                     (unsigned long long)(s->off + s->len - 1));
    if (used + (size_t)k + 1 > PULL_RANGE_SPEC_MAX) break;
    memcpy(spec + used, one, (size_t)k + 1);
    used += (size_t)k;
    ranges++;
    bytes += s->len;
  }
  *last = i;
}

/* ---- the rebuilt stream ---------------------------------------------------- */

/* A stored file's bytes as one zstd frame of raw blocks (RFC 8878): magic,
 * a frame header with a 128 KiB window and no content size, blocks of at
 * most 128 KiB, no checksum. */
#define RAW_BLOCK (128u << 10)

static int write_raw_frame(const cn_partial_plan *plan, size_t i, const cn_partial_io *io,
                           unsigned char *buf, cairn_store *st) {
  static const unsigned char head[] = {0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x38};
  int r = io->out(head, sizeof head, io->arg);
  const cn_partial_seg *s = &plan->segs[i];
  for (uint64_t at = 0; r == 0 && at < s->usize;) {
    size_t n = s->usize - at > RAW_BLOCK ? RAW_BLOCK : (size_t)(s->usize - at);
    bool last = at + n == s->usize;
    uint32_t bh = (uint32_t)n << 3 | (last ? 1u : 0u); /* type 0: raw */
    buf[0] = (unsigned char)bh;
    buf[1] = (unsigned char)(bh >> 8);
    buf[2] = (unsigned char)(bh >> 16);
    if ((r = io->content(plan, i, at, buf + 3, n, io->arg)) < 0) break;
    r = io->out(buf, n + 3, io->arg);
    at += n;
  }
  if (r < 0 && !cairn_errmsg(st)[0]) cairn_fail(st, r, "rebuilding the layer: %s", strerror(-r));
  return r;
}

int cn_partial_write(const cn_partial_plan *plan, const cn_partial_io *io, cairn_store *st) {
  unsigned char *buf = malloc(RAW_BLOCK + 3);
  if (!buf) return cairn_fail(st, -ENOMEM, "out of memory");
  int r = 0;
  for (size_t i = 0; i < plan->n_segs && r == 0; i++) {
    const cn_partial_seg *s = &plan->segs[i];
    if (s->kind == CN_SEG_STORED) {
      r = write_raw_frame(plan, i, io, buf, st);
      continue;
    }
    const unsigned char *data;
    if ((r = io->fetched(plan, i, &data, io->arg)) == 0) r = io->out(data, s->len, io->arg);
  }
  free(buf);
  return r;
}

/* ---- over the network ------------------------------------------------------ */

typedef struct pull_ctx {
  pull_source *src;
  const pull_desc *d;
  const cn_toc *toc;
  cairn_store *st;
  int out_fd;
  _Atomic uint64_t *progress;
  cn_partial_result *res;
  /* the batch of FETCH segments [b_first, b_last) in buf at boff[] */
  size_t b_first, b_last;
  unsigned char *buf;
  uint64_t *boff;
  bool *got;
  /* the stored file being read */
  size_t cur_entry;
  int cur_fd;
} pull_ctx;

/* Collects one reply's parts into the batch, each exactly a range asked. */
typedef struct part_ctx {
  pull_ctx *c;
  const cn_partial_plan *plan;
  size_t cursor;
} part_ctx;

static int take_part(uint64_t off, const unsigned char *data, size_t len, void *arg) {
  part_ctx *p = arg;
  pull_ctx *c = p->c;
  for (size_t tries = 0; tries < c->b_last - c->b_first; tries++) {
    size_t i = p->cursor;
    p->cursor = p->cursor + 1 < c->b_last ? p->cursor + 1 : c->b_first;
    const cn_partial_seg *s = &p->plan->segs[i];
    if (s->kind != CN_SEG_FETCH || s->off != off) continue;
    if (s->len != len || c->got[i - c->b_first])
      return cairn_fail(c->st, -EBADMSG, "range reply: a part is not the range asked for");
    memcpy(c->buf + c->boff[i - c->b_first], data, len);
    c->got[i - c->b_first] = true;
    return 0;
  }
  return cairn_fail(c->st, -EBADMSG, "range reply: a part is not a range asked for");
}

static int fetch_batch(pull_ctx *c, const cn_partial_plan *plan, size_t first) {
  char spec[PULL_RANGE_SPEC_MAX];
  size_t last;
  cn_partial_spec(plan, first, &last, spec);
  free(c->buf);
  free(c->boff);
  free(c->got);
  size_t n = last - first, parts = 0;
  c->buf = NULL;
  c->boff = calloc(n ? n : 1, sizeof *c->boff);
  c->got = calloc(n ? n : 1, sizeof *c->got);
  uint64_t total = 0;
  for (size_t i = first; c->boff && i < last; i++) {
    c->boff[i - first] = total;
    if (plan->segs[i].kind == CN_SEG_FETCH) total += plan->segs[i].len, parts++;
  }
  if (!c->boff || !c->got || !(c->buf = malloc(total ? total : 1)))
    return cairn_fail(c->st, -ENOMEM, "out of memory");
  c->b_first = first;
  c->b_last = last;
  for (size_t i = first; i < last; i++) c->got[i - first] = plan->segs[i].kind != CN_SEG_FETCH;

  blob_sink s;
  pull_range_reply rr = {0};
  /* the parts' headers: about 100 bytes each; a registry that ignores the
   * Range and sends the whole blob is cut off here */
  int r = cn_blob_sink_init(&s, -1, total + 4096 + 256 * (uint64_t)parts, NULL);
  if (r == 0) r = c->src->ops->ranges(c->src, c->d, spec, &s, &rr, c->st);
  if (r == 0 && rr.status != 206)
    r = cairn_fail(c->st, -EPROTO, "the registry answered a range request with HTTP %ld",
                   rr.status);
  if (r == 0) {
    c->res->fetched += s.written;
    c->res->requests++;
    if (c->progress) atomic_store(c->progress, c->res->fetched);
    part_ctx p = {c, plan, first};
    int k = cn_byteranges_parse(rr.content_type, rr.content_range, s.mem ? s.mem : "", s.written,
                                c->d->size, parts, take_part, &p, c->st);
    r = k < 0 ? k : 0;
  }
  for (size_t i = first; r == 0 && i < last; i++)
    if (!c->got[i - first])
      r = cairn_fail(c->st, -EBADMSG, "range reply: the range at %llu is missing",
                     (unsigned long long)plan->segs[i].off);
  cn_blob_sink_free(&s);
  return r;
}

/* Each chunk of a missing file that lies in one segment of the batch,
 * decompressed and checked against its digest (the chunk's, or the file's
 * for a file of one chunk) before anything is written. A chunk cut by a
 * request's bound is left to the diff_id check. */
static int verify_batch(pull_ctx *c, const cn_partial_plan *plan) {
  if (!plan->missing) return 0; /* the TOC's own request */
  for (size_t m = 0; m < plan->n_missing; m++) {
    const cn_toc_entry *e = &c->toc->entries[plan->missing[m]];
    for (size_t k = 0; k < e->n_chunks; k++) {
      const cn_toc_chunk *ch = &e->chunks[k];
      const char *want = ch->digest[0] ? ch->digest : e->n_chunks == 1 ? e->digest : NULL;
      if (!want) continue;
      for (size_t i = c->b_first; i < c->b_last; i++) {
        const cn_partial_seg *s = &plan->segs[i];
        if (s->kind != CN_SEG_FETCH || ch->off < s->off || ch->csize > s->len ||
            ch->off - s->off > s->len - ch->csize)
          continue;
        unsigned char *u = NULL;
        size_t ulen = 0;
        char got[CN_TOC_DIGEST_LEN + 1];
        int r = cn_toc_decompress(c->buf + c->boff[i - c->b_first] + (ch->off - s->off),
                                  (size_t)ch->csize, (size_t)ch->usize, &u, &ulen, e->path, c->st);
        if (r == 0) cn_toc_sha256(u, ulen, got);
        free(u);
        if (r < 0) return r;
        if (ulen != ch->usize || strcmp(got, want) != 0)
          return cairn_fail(c->st, -EBADMSG, "\"%s\": the fetched data is not what the TOC says",
                            e->path);
        c->res->chunks_verified++;
        break;
      }
    }
  }
  return 0;
}

static int io_fetched(const cn_partial_plan *plan, size_t i, const unsigned char **data,
                      void *arg) {
  pull_ctx *c = arg;
  if (i < c->b_first || i >= c->b_last || !c->buf) {
    int r = fetch_batch(c, plan, i);
    if (r == 0) r = verify_batch(c, plan);
    if (r < 0) return r;
  }
  *data = c->buf + c->boff[i - c->b_first];
  return 0;
}

static int io_content(const cn_partial_plan *plan, size_t i, uint64_t at, void *buf, size_t n,
                      void *arg) {
  pull_ctx *c = arg;
  const cn_partial_seg *s = &plan->segs[i];
  if (c->cur_fd < 0 || c->cur_entry != s->entry) {
    if (c->cur_fd >= 0) close(c->cur_fd);
    c->cur_fd = -1;
    const cn_toc_entry *e = &c->toc->entries[s->entry];
    char blob[64];
    int h = cairn_blob_by_sha256(c->st, e->digest, blob, sizeof blob, NULL);
    if (h <= 0)
      return cairn_fail(c->st, h < 0 ? h : -ENOENT, "the stored copy of \"%s\" is gone", e->path);
    if ((c->cur_fd = cairn_blob_open(c->st, blob)) < 0)
      return cairn_fail(c->st, c->cur_fd, "opening the stored copy of \"%s\": %s", e->path,
                        strerror(-c->cur_fd));
    c->cur_entry = s->entry;
  }
  for (size_t done = 0; done < n;) {
    ssize_t k = pread(c->cur_fd, (char *)buf + done, n - done, (off_t)(s->uoff + at + done));
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0)
      return cairn_fail(c->st, k < 0 ? -errno : -EIO, "reading the stored copy of \"%s\"",
                        c->toc->entries[s->entry].path);
    done += (size_t)k;
  }
  return 0;
}

static int io_out(const void *buf, size_t n, void *arg) {
  pull_ctx *c = arg;
  for (const char *p = buf; n > 0;) {
    ssize_t k = write(c->out_fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) return cairn_fail(c->st, -errno, "temporary file: %s", strerror(errno));
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

static int have_stored(const char *sha256, void *arg) {
  char blob[64];
  return cairn_blob_by_sha256(arg, sha256, blob, sizeof blob, NULL);
}

/* The TOC: its range, checked against the checksum, parsed. */
static int fetch_toc(pull_ctx *c, const cn_toc_zstd_pos *pos, cn_toc *toc) {
  cn_partial_plan one = {0};
  cn_partial_seg seg = {.kind = CN_SEG_FETCH, .off = pos->off, .len = pos->len};
  one.segs = &seg;
  one.n_segs = 1;
  int r = fetch_batch(c, &one, 0);
  if (r == 0) r = cn_toc_zstd_chunked_parse(c->buf, pos->len, pos, c->d->size, toc, c->st);
  free(c->buf);
  c->buf = NULL;
  return r;
}

int cn_partial_pull(pull_source *src, const pull_desc *d, int fd, _Atomic uint64_t *progress,
                    cn_partial_result *res, cairn_store *st) {
  memset(res, 0, sizeof *res);
  if (!src->ops->ranges) return 1;
  cn_toc_zstd_pos pos;
  int r = cn_toc_zstd_annotations(d->annotations, d->size, &pos, st);
  if (r == -ENOENT) return 1;
  if (r < 0) return r;
  if (!pos.digest[0]) return 1; /* a TOC the manifest does not vouch for */
  pull_ctx c = {
      .src = src, .d = d, .st = st, .out_fd = fd, .progress = progress, .res = res, .cur_fd = -1};
  cn_toc toc = {0};
  cn_partial_plan plan = {0};
  if ((r = fetch_toc(&c, &pos, &toc)) < 0) goto out;
  c.toc = &toc;
  if ((r = cn_partial_plan_make(&toc, CN_PARTIAL_MERGE_GAP, have_stored, st, &plan, st)) < 0)
    goto out;
  res->files = plan.files;
  res->files_stored = plan.files_stored;
  if (plan.files_stored == 0) {
    r = 1; /* one request for the whole blob costs least */
    goto out;
  }
  cn_partial_io io = {io_fetched, io_content, io_out, &c};
  c.b_first = c.b_last = 0;
  r = cn_partial_write(&plan, &io, st);
out:
  if (c.cur_fd >= 0) close(c.cur_fd);
  free(c.buf);
  free(c.boff);
  free(c.got);
  cn_partial_plan_free(&plan);
  cn_toc_free(&toc);
  return r;
}
