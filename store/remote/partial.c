/* SPDX-License-Identifier: Apache-2.0 */
/*
 * partial.c — the partial pull of a zstd:chunked layer (libcairn_partial.h): the
 * TOC by a range request (checked against the manifest's checksum), the
 * plan of what the store lacks, the missing bytes in multi-range requests
 * (up to CN_PARTIAL_INFLIGHT at once, each on a thread of its own, ahead
 * of the rebuild, which takes them in order), and the layer's zstd stream
 * rebuilt (a stored file's bytes, read from its blob, as a frame of raw
 * blocks) and decompressed into the tar for the ingest, which checks its
 * diff_id: nothing the TOC or the registry says is trusted further than
 * that. Where the decompressed bytes of a stored file's frames land in the
 * tar is counted here, not taken from the TOC: the ingest takes such a
 * file as its blob (a hint, cn_layer_ingest_hinted), its bytes hashed into
 * the diff_id only, neither written nor hashed again.
 *
 * The finish of a lazily pulled layer is here too: zstd:chunked's by the
 * same rebuild; eStargz's, which cannot be rebuilt, from its blob: the
 * fill's copy of it (cn_blob_copy) completed by range requests and
 * checked against the blob's digest before the ingest, else the blob
 * fetched whole.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zstd.h>

#include "libcairn_byteranges.h"
#include "libcairn_remote_lazy.h"
#include "libcairn_partial.h"

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
  int r = io->frame ? io->frame(plan, i, io->arg) : 0;
  if (r == 0) r = io->out(head, sizeof head, io->arg);
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

/* A request's worth of FETCH segments, [first, last) of the plan (the
 * STORED ones between included), fetched by one of the workers. */
enum { BATCH_TODO, BATCH_BUSY, BATCH_DONE };
typedef struct batch {
  size_t first, last;
  uint64_t bytes;     /* of its FETCH segments */
  unsigned char *buf; /* the reply's body */
  uint64_t *boff;     /* FETCH segment first + k's bytes at buf + boff[k] */
  bool *got;
  int state, err;
  char why[1024]; /* err's reason, from the worker's handle */
} batch;

typedef struct pull_ctx {
  pull_source *src;
  const pull_desc *d;
  const cn_toc *toc;
  const cn_partial_plan *plan;
  cairn_store *st;
  int out_fd;
  _Atomic uint64_t *progress;
  cn_partial_result *res;
  /* the batches, fetched in order by the workers, at most
   * CN_PARTIAL_INFLIGHT (and CN_PARTIAL_INFLIGHT_BYTES) ahead of the one
   * the rebuild reads, cur */
  batch *batches;
  size_t n_batches, next, cur;
  pthread_mutex_t lock; /* batches' state, err, why; next, cur; res */
  pthread_cond_t cond;
  bool failed;      /* a batch failed: no more are asked for */
  atomic_bool stop; /* the rebuild ended: requests in flight are cancelled */
  /* the stored file being read */
  size_t cur_entry;
  int cur_fd;
  char cur_blob[48];
  uint64_t cur_size;
  size_t hint_entry, hints_cap;
  /* the stream decompressed on its way to out_fd (the tar), upos bytes of
   * it so far; at_frame: the decoder ended a frame with the last bytes */
  ZSTD_DCtx *dz;
  uint64_t upos;
  bool at_frame, no_hints;
} pull_ctx;

/* Collects one reply's parts into the batch, each exactly a range asked. */
typedef struct part_ctx {
  batch *b;
  const unsigned char *body;
  const cn_partial_plan *plan;
  size_t cursor;
  cairn_store *st;
} part_ctx;

static int take_part(uint64_t off, const unsigned char *data, size_t len, void *arg) {
  part_ctx *p = arg;
  batch *b = p->b;
  for (size_t tries = 0; tries < b->last - b->first; tries++) {
    size_t i = p->cursor;
    p->cursor = p->cursor + 1 < b->last ? p->cursor + 1 : b->first;
    const cn_partial_seg *s = &p->plan->segs[i];
    if (s->kind != CN_SEG_FETCH || s->off != off) continue;
    if (s->len != len || b->got[i - b->first])
      return cairn_fail(p->st, -EBADMSG, "range reply: a part is not the range asked for");
    b->boff[i - b->first] = (uint64_t)(data - p->body); /* data lies in the body */
    b->got[i - b->first] = true;
    return 0;
  }
  return cairn_fail(p->st, -EBADMSG, "range reply: a part is not a range asked for");
}

static void batch_free(batch *b) {
  free(b->buf);
  free(b->boff);
  free(b->got);
  b->buf = NULL;
  b->boff = NULL;
  b->got = NULL;
}

/* One request for batch b; *bytes, *requests what it cost. */
static int fetch_batch(pull_ctx *c, const cn_partial_plan *plan, batch *b, uint64_t *bytes,
                       size_t *requests, cairn_store *st) {
  char spec[PULL_RANGE_SPEC_MAX];
  size_t last;
  cn_partial_spec(plan, b->first, &last, spec);
  if (last != b->last) return cairn_fail(st, -EINVAL, "range request: not the batch planned");
  size_t n = b->last - b->first, parts = 0;
  b->boff = calloc(n ? n : 1, sizeof *b->boff);
  b->got = calloc(n ? n : 1, sizeof *b->got);
  uint64_t total = 0;
  for (size_t i = b->first; i < b->last; i++)
    if (plan->segs[i].kind == CN_SEG_FETCH) total += plan->segs[i].len, parts++;
  if (!b->boff || !b->got) return cairn_fail(st, -ENOMEM, "out of memory");
  for (size_t i = b->first; i < b->last; i++)
    b->got[i - b->first] = plan->segs[i].kind != CN_SEG_FETCH;

  blob_sink s;
  pull_range_reply rr = {0};
  /* the parts' headers: about 100 bytes each; a registry that ignores the
   * Range and sends the whole blob is cut off here */
  int r = cn_blob_sink_init(&s, -1, total + 4096 + 256 * (uint64_t)parts, NULL);
  s.cancel = &c->stop;
  if (r == 0) r = c->src->ops->ranges(c->src, c->d, spec, &s, &rr, st);
  if (r == 0 && rr.status != 206)
    r = cairn_fail(st, -EPROTO, "the registry answered a range request with HTTP %ld", rr.status);
  if (r == 0) {
    *bytes += s.written;
    (*requests)++;
    const char *body = s.mem ? s.mem : "";
    part_ctx p = {b, (const unsigned char *)body, plan, b->first, st};
    int k = cn_byteranges_parse(rr.content_type, rr.content_range, body, s.written, c->d->size,
                                parts, take_part, &p, st);
    r = k < 0 ? k : 0;
  }
  if (r == 0 && s.mem) { /* the parts stay where they arrived */
    b->buf = (unsigned char *)s.mem;
    s.mem = NULL;
  }
  for (size_t i = b->first; r == 0 && i < b->last; i++)
    if (!b->got[i - b->first])
      r = cairn_fail(st, -EBADMSG, "range reply: the range at %llu is missing",
                     (unsigned long long)plan->segs[i].off);
  cn_blob_sink_free(&s);
  return r;
}

/* Each chunk of a missing file that lies in one segment of the batch,
 * decompressed and checked against its digest (the chunk's, or the file's
 * for a file of one chunk) before anything is written. A chunk cut by a
 * request's bound is left to the diff_id check. */
static int verify_batch(const pull_ctx *c, const cn_partial_plan *plan, const batch *b,
                        size_t *verified, cairn_store *st) {
  for (size_t m = 0; m < plan->n_missing; m++) {
    const cn_toc_entry *e = &c->toc->entries[plan->missing[m]];
    for (size_t k = 0; k < e->n_chunks; k++) {
      const cn_toc_chunk *ch = &e->chunks[k];
      const char *want = ch->digest[0] ? ch->digest : e->n_chunks == 1 ? e->digest : NULL;
      if (!want) continue;
      for (size_t i = b->first; i < b->last; i++) {
        const cn_partial_seg *s = &plan->segs[i];
        if (s->kind != CN_SEG_FETCH || ch->off < s->off || ch->csize > s->len ||
            ch->off - s->off > s->len - ch->csize)
          continue;
        unsigned char *u = NULL;
        size_t ulen = 0;
        char got[CAIRN_DIGEST_LEN + 1];
        int r = cn_toc_decompress(b->buf + b->boff[i - b->first] + (ch->off - s->off),
                                  (size_t)ch->csize, (size_t)ch->usize, &u, &ulen, e->path, st);
        if (r == 0) cn_toc_sha256(u, ulen, got);
        free(u);
        if (r < 0) return r;
        if (ulen != ch->usize || strcmp(got, want) != 0)
          return cairn_fail(st, -EBADMSG, "\"%s\": the fetched data is not what the TOC says",
                            e->path);
        (*verified)++;
        break;
      }
    }
  }
  return 0;
}

/* Whether the next batch may be asked for: the one the rebuild waits for
 * always; others while few enough are fetched ahead of it. Under lock. */
static bool may_take(const pull_ctx *c) {
  if (c->next <= c->cur) return true;
  if (c->next - c->cur >= CN_PARTIAL_INFLIGHT) return false;
  uint64_t ahead = 0;
  for (size_t k = c->cur; k <= c->next; k++) ahead += c->batches[k].bytes;
  return ahead <= CN_PARTIAL_INFLIGHT_BYTES;
}

/* Fetches and verifies batches in order, with a handle of its own for
 * the reasons of failures, until none is left or the rebuild stops. */
static void *fetch_worker(void *arg) {
  pull_ctx *c = arg;
  cairn_store *wst = NULL;
  int r0 = cairn_store_open_lazy(cairn_store_dir(c->st), &wst);
  pthread_mutex_lock(&c->lock);
  for (;;) {
    while (!atomic_load(&c->stop) && !c->failed && c->next < c->n_batches && !may_take(c))
      pthread_cond_wait(&c->cond, &c->lock);
    if (atomic_load(&c->stop) || c->failed || c->next == c->n_batches) break;
    batch *b = &c->batches[c->next++];
    b->state = BATCH_BUSY;
    pthread_mutex_unlock(&c->lock);
    uint64_t bytes = 0;
    size_t requests = 0, verified = 0;
    int r = r0 < 0 ? r0 : fetch_batch(c, c->plan, b, &bytes, &requests, wst);
    if (r == 0) r = verify_batch(c, c->plan, b, &verified, wst);
    pthread_mutex_lock(&c->lock);
    c->res->fetched += bytes;
    c->res->requests += requests;
    c->res->chunks_verified += verified;
    if (c->progress) atomic_store(c->progress, c->res->fetched);
    if (r < 0) {
      b->err = r;
      snprintf(b->why, sizeof b->why, "%s", wst ? cairn_errmsg(wst) : "out of memory");
      c->failed = true;
    }
    b->state = BATCH_DONE;
    pthread_cond_broadcast(&c->cond);
  }
  pthread_mutex_unlock(&c->lock);
  cairn_store_close(wst);
  return NULL;
}

/* FETCH segment i, from its batch, waiting for the workers; the batches
 * before it are done with. */
static int io_fetched(const cn_partial_plan *plan, size_t i, const unsigned char **data,
                      void *arg) {
  pull_ctx *c = arg;
  (void)plan;
  pthread_mutex_lock(&c->lock);
  while (c->cur < c->n_batches && c->batches[c->cur].last <= i) {
    batch_free(&c->batches[c->cur++]); /* done: its worker let it go */
    pthread_cond_broadcast(&c->cond);
  }
  batch *b = c->cur < c->n_batches ? &c->batches[c->cur] : NULL;
  while (b && b->first <= i && b->state != BATCH_DONE) pthread_cond_wait(&c->cond, &c->lock);
  pthread_mutex_unlock(&c->lock);
  if (!b || b->first > i) return cairn_fail(c->st, -EINVAL, "rebuilding: a range not planned");
  if (b->err) return cairn_fail(c->st, b->err, "%s", b->why);
  *data = b->buf + b->boff[i - b->first];
  return 0;
}

/* The blob of STORED segment i's file opened (c->cur_fd), its name in
 * c->cur_blob, its size in c->cur_size. */
static int open_stored(pull_ctx *c, const cn_partial_plan *plan, size_t i) {
  const cn_partial_seg *s = &plan->segs[i];
  if (c->cur_fd >= 0 && c->cur_entry == s->entry) return 0;
  if (c->cur_fd >= 0) close(c->cur_fd);
  c->cur_fd = -1;
  const cn_toc_entry *e = &c->toc->entries[s->entry];
  int h = cn_blob_find_sha256(c->st, e->digest, c->cur_blob, sizeof c->cur_blob, &c->cur_size);
  if (h <= 0)
    return cairn_fail(c->st, h < 0 ? h : -ENOENT, "the stored copy of \"%s\" is gone", e->path);
  if ((c->cur_fd = cairn_blob_open(c->st, c->cur_blob)) < 0)
    return cairn_fail(c->st, c->cur_fd, "opening the stored copy of \"%s\": %s", e->path,
                      strerror(-c->cur_fd));
  c->cur_entry = s->entry;
  return 0;
}

/* A STORED segment's frame begins: where its bytes land in the tar, if
 * the decoder is between frames (else no hint holds). A file's segments
 * in order, each next to the last, from its start to its end: one hint. */
static int io_frame(const cn_partial_plan *plan, size_t i, void *arg) {
  pull_ctx *c = arg;
  const cn_partial_seg *s = &plan->segs[i];
  int r = open_stored(c, plan, i);
  if (r < 0 || c->no_hints) return r;
  if (!c->at_frame) {
    c->no_hints = true;
    return 0;
  }
  cn_partial_result *res = c->res;
  cn_layer_hint *h = res->n_hints ? &res->hints[res->n_hints - 1] : NULL;
  if (s->uoff > 0) { /* a file's next piece: right after its last one, or the file has none */
    if (!h || c->hint_entry != s->entry) return 0;
    if (h->off + h->size == c->upos && h->size == s->uoff)
      h->size += s->usize;
    else
      res->n_hints--; /* a piece between was fetched */
    c->hint_entry = SIZE_MAX;
    if (res->n_hints && h == &res->hints[res->n_hints - 1]) c->hint_entry = s->entry;
    return 0;
  }
  if (res->n_hints == c->hints_cap) {
    size_t cap = c->hints_cap ? 2 * c->hints_cap : 256;
    cn_layer_hint *v = realloc(res->hints, cap * sizeof *v);
    if (!v) return cairn_fail(c->st, -ENOMEM, "out of memory");
    res->hints = v;
    c->hints_cap = cap;
  }
  h = &res->hints[res->n_hints++];
  *h = (cn_layer_hint){.off = c->upos, .size = s->usize};
  snprintf(h->blob, sizeof h->blob, "%s", c->cur_blob);
  c->hint_entry = s->entry;
  return 0;
}

static int io_content(const cn_partial_plan *plan, size_t i, uint64_t at, void *buf, size_t n,
                      void *arg) {
  pull_ctx *c = arg;
  const cn_partial_seg *s = &plan->segs[i];
  int r = open_stored(c, plan, i);
  if (r < 0) return r;
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

static int write_out(pull_ctx *c, const void *buf, size_t n) {
  for (const char *p = buf; n > 0;) {
    ssize_t k = write(c->out_fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) return cairn_fail(c->st, -errno, "temporary file: %s", strerror(errno));
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

/* The rebuilt stream's bytes, decompressed into the tar. */
static int io_out(const void *buf, size_t n, void *arg) {
  pull_ctx *c = arg;
  static __thread unsigned char ob[1 << 17];
  ZSTD_inBuffer in = {buf, n, 0};
  while (in.pos < in.size) {
    ZSTD_outBuffer o = {ob, sizeof ob, 0};
    size_t k = ZSTD_decompressStream(c->dz, &o, &in);
    if (ZSTD_isError(k))
      return cairn_fail(c->st, -EBADMSG, "rebuilding the layer: zstd: %s", ZSTD_getErrorName(k));
    int r = write_out(c, ob, o.pos);
    if (r < 0) return r;
    c->upos += o.pos;
    c->at_frame = k == 0;
    /* a frame's last bytes may wait in the decoder for room */
    while (k == 0 ? false : o.pos == o.size) {
      o = (ZSTD_outBuffer){ob, sizeof ob, 0};
      ZSTD_inBuffer none = {NULL, 0, 0};
      k = ZSTD_decompressStream(c->dz, &o, &none);
      if (ZSTD_isError(k))
        return cairn_fail(c->st, -EBADMSG, "rebuilding the layer: zstd: %s",
                          ZSTD_getErrorName(k));
      if ((r = write_out(c, ob, o.pos)) < 0) return r;
      c->upos += o.pos;
      c->at_frame = k == 0;
    }
  }
  return 0;
}

static int have_stored(const char *sha256, void *arg) {
  char blob[64];
  return cn_blob_find_sha256(arg, sha256, blob, sizeof blob, NULL);
}

/* The TOC: fetched and checked as the lazy pull does (cn_lazy_toc_fetch),
 * 1 unless it is zstd:chunked's. */
static int fetch_toc(pull_ctx *c, cn_toc *toc) {
  cn_lazy_toc lt;
  uint64_t got = 0;
  int r = cn_lazy_toc_fetch(c->src, c->d, &lt, &got, &c->res->requests, c->st);
  c->res->fetched += got;
  if (c->progress) atomic_store(c->progress, c->res->fetched);
  if (r == 0 && lt.toc.format != CN_TOC_ZSTD_CHUNKED) r = 1;
  if (r == 0) {
    *toc = lt.toc;
    memset(&lt.toc, 0, sizeof lt.toc);
  }
  cn_lazy_toc_free(&lt);
  return r;
}

/* The plan's FETCH segments cut into requests, as cn_partial_spec cuts them. */
static int make_batches(pull_ctx *c, const cn_partial_plan *plan) {
  size_t cap = 0;
  for (size_t i = 0; i < plan->n_segs;) {
    if (plan->segs[i].kind != CN_SEG_FETCH) {
      i++;
      continue;
    }
    char spec[PULL_RANGE_SPEC_MAX];
    size_t last;
    cn_partial_spec(plan, i, &last, spec);
    if (last <= i) return cairn_fail(c->st, -EINVAL, "range request: a range does not fit");
    if (c->n_batches == cap) {
      cap = cap ? cap * 2 : 16;
      batch *v = realloc(c->batches, cap * sizeof *v);
      if (!v) return cairn_fail(c->st, -ENOMEM, "out of memory");
      c->batches = v;
    }
    batch *b = &c->batches[c->n_batches++];
    *b = (batch){.first = i, .last = last};
    for (size_t k = i; k < last; k++)
      if (plan->segs[k].kind == CN_SEG_FETCH) b->bytes += plan->segs[k].len;
    i = last;
  }
  return 0;
}

int cn_partial_toc_pos(pull_source *src, const pull_desc *d, cn_toc_zstd_pos *pos,
                       cairn_store *st) {
  if (!src->ops->ranges) return 1;
  int r = cn_toc_zstd_annotations(d->annotations, d->size, pos, st);
  if (r == -ENOENT) return 1;
  if (r < 0) return r;
  return pos->digest[0] ? 0 : 1; /* 1: a TOC the manifest does not vouch for */
}

/* Rebuilds the layer's stream from its parsed TOC into c->out_fd: the
 * files the store holds from their blobs, every other byte fetched. 1 when
 * the store holds none of its files and !whole (pull it in full). */
static int rebuild(pull_ctx *c, const cn_toc *toc, bool whole) {
  cairn_store *st = c->st;
  cn_partial_plan plan = {0};
  pthread_t tids[CN_PARTIAL_INFLIGHT];
  size_t started = 0;
  c->toc = toc;
  int r = cn_partial_plan_make(toc, CN_PARTIAL_MERGE_GAP, have_stored, st, &plan, st);
  if (r < 0) return r;
  c->res->files = plan.files;
  c->res->files_stored = plan.files_stored;
  if (plan.files_stored == 0 && !whole) {
    r = 1; /* one request for the whole blob costs least */
    goto out;
  }
  c->plan = &plan;
  if ((r = make_batches(c, &plan)) < 0) goto out;
  for (; started < CN_PARTIAL_INFLIGHT && started < c->n_batches; started++)
    if (pthread_create(&tids[started], NULL, fetch_worker, c) != 0) break;
  if (started == 0 && c->n_batches > 0) {
    r = cairn_fail(st, -EAGAIN, "cannot start a download thread");
    goto out;
  }
  cn_partial_io io = {io_fetched, io_content, io_out, c, io_frame};
  c->at_frame = true;
  if (!(c->dz = ZSTD_createDCtx())) {
    r = cairn_fail(st, -ENOMEM, "out of memory");
    goto out;
  }
  r = cn_partial_write(&plan, &io, st);
  if (r == 0 && !c->at_frame)
    r = cairn_fail(st, -EBADMSG, "rebuilding the layer: a frame cut short");
  if (r == 0 && c->no_hints) { /* the frames were not where the TOC says: a plain ingest */
    free(c->res->hints);
    c->res->hints = NULL;
    c->res->n_hints = 0;
  }
out:
  ZSTD_freeDCtx(c->dz);
  c->dz = NULL;
  pthread_mutex_lock(&c->lock);
  atomic_store(&c->stop, true);
  pthread_cond_broadcast(&c->cond);
  pthread_mutex_unlock(&c->lock);
  for (size_t t = 0; t < started; t++) pthread_join(tids[t], NULL);
  for (size_t k = 0; k < c->n_batches; k++) batch_free(&c->batches[k]);
  free(c->batches);
  c->batches = NULL;
  c->n_batches = 0;
  c->plan = NULL;
  if (c->cur_fd >= 0) close(c->cur_fd);
  c->cur_fd = -1;
  cn_partial_plan_free(&plan);
  return r;
}

int cn_partial_pull(pull_source *src, const pull_desc *d, int fd, _Atomic uint64_t *progress,
                    cn_partial_result *res, cairn_store *st) {
  memset(res, 0, sizeof *res);
  cn_toc_zstd_pos pos;
  int r = cn_partial_toc_pos(src, d, &pos, st);
  if (r != 0) return r;
  pull_ctx c = {.src = src,
                .d = d,
                .st = st,
                .out_fd = fd,
                .progress = progress,
                .res = res,
                .cur_fd = -1,
                .lock = PTHREAD_MUTEX_INITIALIZER,
                .cond = PTHREAD_COND_INITIALIZER};
  cn_toc toc = {0};
  if ((r = fetch_toc(&c, &toc)) == 0) r = rebuild(&c, &toc, false);
  cn_toc_free(&toc);
  if (r != 0) {
    free(res->hints);
    res->hints = NULL;
    res->n_hints = 0;
  }
  return r;
}

/* ---- finishing a lazily pulled layer ---------------------------------------- */

static void say(void (*log)(const char *, void *), void *arg, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void say(void (*log)(const char *, void *), void *arg, const char *fmt, ...) {
  if (!log) return;
  char line[1400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  log(line, arg);
}

/* The kept TOC of f's layer (cn_lazy_kept_toc); 1 for eStargz's, which
 * keeps no record of the tar headers between its files. */
static int finish_toc(cairn_store *st, const cairn_lazy_file *f, cn_toc *toc) {
  cn_lazy_toc lt;
  int r = cn_lazy_kept_toc(st, f, &lt);
  if (r < 0) return r;
  if (lt.toc.format != CN_TOC_ZSTD_CHUNKED) {
    r = 1;
  } else {
    *toc = lt.toc;
    memset(&lt.toc, 0, sizeof lt.toc);
  }
  cn_lazy_toc_free(&lt);
  return r;
}

/* The layer's tar rebuilt from the registry's headers and the stored
 * files, into fd (from 0), ingested: the diff_id checked, the tar
 * recorded. */
static int finish_rebuild(pull_source *src, const pull_desc *d, const cairn_lazy_file *f,
                          cairn_pinset *ps, int fd, cn_partial_result *res, cairn_store *st) {
  cn_toc toc = {0};
  int r = finish_toc(st, f, &toc);
  if (r != 0) return r;
  pull_ctx c = {.src = src,
                .d = d,
                .st = st,
                .out_fd = fd,
                .res = res,
                .cur_fd = -1,
                .lock = PTHREAD_MUTEX_INITIALIZER,
                .cond = PTHREAD_COND_INITIALIZER};
  r = rebuild(&c, &toc, true);
  cn_toc_free(&toc);
  if (r == 0 && lseek(fd, 0, SEEK_SET) < 0)
    r = cairn_fail(st, -errno, "temporary file: %s", strerror(errno));
  cairn_id got;
  if (r == 0)
    r = cn_layer_ingest_hinted(st, fd, f->layer_id, ps, res->hints, res->n_hints,
                               &res->files_taken, got);
  free(res->hints);
  res->hints = NULL;
  res->n_hints = 0;
  return r;
}

/* The layer's blob in fd (d's, checked), ingested and kept, as a full
 * pull does. A blob that is not a tar of the layer's diff_id refutes the
 * lazy pull's layer: it is taken out of service, and the failure names
 * its images. */
static int ingest_blob(const pull_desc *d, cairn_pinset *ps, int fd, const char *diff_id,
                       cairn_store *st) {
  int r = 0;
  if (lseek(fd, 0, SEEK_SET) < 0) r = cairn_fail(st, -errno, "temporary file: %s", strerror(errno));
  cairn_id got;
  if (r == 0 && (r = cn_layer_ingest(st, fd, diff_id, ps, got)) == -EBADMSG) {
    char why[1024], *images = NULL;
    snprintf(why, sizeof why, "%s", cairn_errmsg(st));
    int k = cn_layer_refute(st, diff_id, why, &images);
    if (k < 0) {
      r = k;
    } else {
      r = cairn_fail(st, -EBADMSG,
                     "blob %s: %s; layer sha256:%.12s taken out of service (images: %s)",
                     d->digest, why, diff_id, images && *images ? images : "none");
    }
    free(images);
    return r;
  }
  if (r == 0) r = cn_layer_blob_keep(st, diff_id, d->digest, d->media_type, d->size, fd);
  return r;
}

/* The layer's blob fetched whole into fd, ingested and kept (ingest_blob). */
static int finish_in_full(pull_source *src, const pull_desc *d, cairn_pinset *ps, int fd,
                          const char *diff_id, cairn_store *st) {
  if (ftruncate(fd, 0) < 0 || lseek(fd, 0, SEEK_SET) < 0)
    return cairn_fail(st, -errno, "temporary file: %s", strerror(errno));
  blob_sink s;
  int r = cn_blob_sink_init(&s, fd, d->size, NULL);
  if (r == 0) r = src->ops->blob(src, d, &s, st);
  cn_blob_sink_free(&s);
  return r == 0 ? ingest_blob(d, ps, fd, diff_id, st) : r;
}

/* The layer's blob from a fill's copy of it (cn_blob_copy): its holes
 * fetched (*fetched bytes in *requests requests), the whole checked
 * against d's digest, then ingested and kept (ingest_blob). 1 (the reason
 * on st) when the copy is not the blob or could not be completed: the
 * caller fetches it whole, as if there were no copy; but a full disk or
 * a fill told to stop (-ENOSPC, -ECANCELED) ends it as they end the
 * whole blob's fetch. */
static int finish_from_copy(pull_source *src, const pull_desc *d, cn_blob_copy *copy,
                            cairn_pinset *ps, const char *diff_id, uint64_t *fetched,
                            size_t *requests, cairn_store *st) {
  int r = cn_blob_copy_complete(src, d, copy, fetched, requests, st);
  if (r == -ENOSPC || r == -ECANCELED) return r;
  if (r < 0) return 1;
  return ingest_blob(d, ps, copy->fd, diff_id, st);
}

int cn_lazy_finish_layer(cairn_store *st, const char *diff_id, bool whole, cn_blob_copy *copies,
                         size_t n_copies, void (*log)(const char *line, void *arg), void *arg) {
  cairn_fail(st, 0, "%s", "");
  cairn_lazy_file f;
  int r = cn_lazy_source_get(st, diff_id, &f);
  if (r <= 0) return r;
  if (r == 1) {
    cn_lazy_file_clear(&f);
    return cairn_fail(st, -ENODATA, "layer %.12s: files not fetched yet (a lazy pull)", diff_id);
  }
  int have = cn_layer_tar_recorded(st, diff_id);
  if (have != 0) { /* recorded (a crash before the row went, a full pull) */
    cn_lazy_file_clear(&f);
    return have < 0 ? have : cn_lazy_layer_finished(st, diff_id);
  }
  cairn_pull_opts o = {
      .insecure = f.insecure, .attempts = 3, .backoff_base_ms = 100, .backoff_cap_ms = 1000};
  pull_source *src = NULL;
  json_error_t je;
  pull_desc d = {.media_type = f.media_type,
                 .size = f.blob_size,
                 .annotations = json_loads(f.annotations, 0, &je)};
  snprintf(d.digest, sizeof d.digest, "%s", f.digest);
  char *purpose = NULL;
  cairn_pinset *ps = NULL;
  int fd = -1;
  if (asprintf(&purpose, "finish layer %.12s", diff_id) < 0 ||
      !(ps = cairn_pinset_new(purpose, true))) {
    r = cairn_fail(st, -ENOMEM, "out of memory");
    goto out;
  }
  if ((r = cn_registry_source_open(f.source, &o, &src, st)) < 0) goto out;
  src->opts = &o;
  if ((fd = cn_store_tmpfile(st, 0444)) < 0) {
    r = fd;
    goto out;
  }
  cn_partial_result res = {0};
  cn_blob_copy *copy = NULL;
  for (size_t k = 0; k < n_copies && !copy; k++)
    if (copies[k].fd >= 0 && strcmp(copies[k].digest, f.digest) == 0) copy = &copies[k];
  if (copy) { /* eStargz: a fill's copy of its blob */
    uint64_t holes = 0;
    size_t requests = 0;
    r = finish_from_copy(src, &d, copy, ps, diff_id, &holes, &requests, st);
    if (r == 0)
      say(log, arg,
          "layer %.19s: its blob assembled from the fill's requests and kept (the bytes they "
          "lacked fetched: %llu of %llu bytes in %zu requests), its exact tar recorded",
          f.digest, (unsigned long long)holes, (unsigned long long)f.blob_size, requests);
    if (r == 1) {
      say(log, arg,
          "layer %.19s: the fill's copy of its blob is not usable (%s); fetching it whole",
          f.digest, cairn_errmsg(st));
      cairn_fail(st, 0, "%s", "");
    }
  } else {
    r = whole ? 1 : finish_rebuild(src, &d, &f, ps, fd, &res, st);
    if (r == 0) {
      say(log, arg,
          "layer %.19s: its exact tar recorded (the tar headers fetched: %llu of %llu bytes in "
          "%zu requests)",
          f.digest, (unsigned long long)res.fetched, (unsigned long long)f.blob_size,
          res.requests);
    } else if (r < 0 && r != -ENOSPC && r != -ECANCELED) {
      say(log, arg, "layer %.19s: rebuilding its tar failed (%s); fetching it in full", f.digest,
          cairn_errmsg(st));
      cairn_fail(st, 0, "%s", "");
      r = finish_in_full(src, &d, ps, fd, diff_id, st);
      if (r == 0)
        say(log, arg, "layer %.19s: fetched in full (%llu bytes), its exact tar recorded",
            f.digest, (unsigned long long)f.blob_size);
    }
  }
  if (r == 1) { /* the blob whole, kept */
    r = finish_in_full(src, &d, ps, fd, diff_id, st);
    if (r == 0)
      say(log, arg, "layer %.19s: fetched whole (%llu bytes) and kept, its exact tar recorded",
          f.digest, (unsigned long long)f.blob_size);
  }
  if (r == 0 && cn_layer_ingest_padding(st))
    say(log, arg,
        "layer %.19s: its blob lacks the tar's last %llu zero bytes (the record padding podman"
        " 4.3's zstd:chunked writer drops); its diff_id holds with them, which its exact tar"
        " keeps",
        f.digest, (unsigned long long)cn_layer_ingest_padding(st));
  if (r == 0) r = cn_lazy_layer_finished(st, diff_id);
  if (r < 0) cn_fail_context(st, r, "finishing layer %.12s", diff_id);
out:
  if (fd >= 0) close(fd);
  if (ps) cairn_pinset_release(st, ps);
  free(purpose);
  if (src) src->ops->free(src);
  json_decref(d.annotations);
  cn_lazy_file_clear(&f);
  return r;
}

int cn_lazy_finish_image(cairn_store *st, const char *image_id, bool whole,
                         cn_blob_copy *copies, size_t n_copies,
                         void (*log)(const char *line, void *arg), void *arg) {
  char **ids = NULL;
  size_t n = 0;
  int r = cn_lazy_unfinished(st, image_id, &ids, &n);
  char why[1024] = "";
  int first = 0;
  for (size_t i = 0; r == 0 && i < n; i++) { /* each tried; the first failure returned */
    int k = cn_lazy_finish_layer(st, ids[i], whole, copies, n_copies, log, arg);
    if (k < 0 && !first) {
      first = k;
      snprintf(why, sizeof why, "%s", cairn_errmsg(st));
    }
  }
  cn_strv_free(ids, n);
  if (r == 0 && first) r = cairn_fail(st, first, "%s", why);
  return r;
}
