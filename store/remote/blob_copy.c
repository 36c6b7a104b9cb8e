/* SPDX-License-Identifier: Apache-2.0 */
/*
 * blob_copy.c — a fill's copy of an eStargz layer's compressed blob
 * (cn_blob_copy, libcairn_partial.h): the intervals of the blob it holds,
 * sorted and merged, and at the layer's finish (partial.c) its holes
 * fetched by multi-range requests (each part exactly a range asked,
 * written where it lies) and the whole checked against the blob's
 * digest. Nothing here trusts the copy: the finish ingests it only once
 * its sha256 is the digest the manifest names. The fill's requests and
 * the holes' share how a range reply is read (cn_range_reply_locate: each
 * part exactly a range asked for) and written into the copy
 * (cn_blob_copy_take). Built on cairn.h alone, like the rest of
 * store/remote/.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "libcairn_byteranges.h"
#include "libcairn_partial.h"
#include "libcairn_remote_lazy.h"

int cn_blob_copy_add(cn_blob_copy *c, uint64_t lo, uint64_t hi) {
  if (lo >= hi || hi > c->size) return -EINVAL;
  /* iv[i, j): the intervals that touch or overlap [lo, hi) (the ones
   * before i end before lo; the fill's requests come about in order) */
  size_t i = c->n_iv;
  while (i > 0 && c->iv[i - 1].hi >= lo) i--;
  size_t j = i;
  while (j < c->n_iv && c->iv[j].lo <= hi) j++;
  if (j > i) {
    if (c->iv[i].lo < lo) lo = c->iv[i].lo;
    if (c->iv[j - 1].hi > hi) hi = c->iv[j - 1].hi;
    c->iv[i] = (cn_blob_interval){lo, hi};
    memmove(&c->iv[i + 1], &c->iv[j], (c->n_iv - j) * sizeof *c->iv);
    c->n_iv -= j - i - 1;
    return 0;
  }
  if (c->n_iv == c->cap) {
    size_t cap = c->cap ? 2 * c->cap : 16;
    cn_blob_interval *v = realloc(c->iv, cap * sizeof *v);
    if (!v) return -ENOMEM;
    c->iv = v;
    c->cap = cap;
  }
  memmove(&c->iv[i + 1], &c->iv[i], (c->n_iv - i) * sizeof *c->iv);
  c->iv[i] = (cn_blob_interval){lo, hi};
  c->n_iv++;
  return 0;
}

int cn_blob_copy_holes(const cn_blob_copy *c, int (*fn)(uint64_t lo, uint64_t hi, void *arg),
                       void *arg) {
  uint64_t pos = 0;
  for (size_t k = 0; k <= c->n_iv; k++) {
    uint64_t end = k < c->n_iv ? c->iv[k].lo : c->size;
    if (end > pos) {
      int r = fn(pos, end, arg);
      if (r) return r;
    }
    if (k < c->n_iv) pos = c->iv[k].hi;
  }
  return 0;
}

void cn_blob_copy_free(cn_blob_copy *c) {
  if (c->fd >= 0) close(c->fd);
  c->fd = -1;
  free(c->iv);
  c->iv = NULL;
  c->n_iv = c->cap = 0;
}

/* The parts of a range reply (fill.c's requests, the holes' below). */
typedef struct reply_parts {
  cn_reply_range *r;
  size_t n;
  const unsigned char *base; /* the reply, mapped */
  cairn_store *st;
} reply_parts;

static int reply_part(uint64_t off, const unsigned char *data, size_t len, void *arg) {
  reply_parts *p = arg;
  for (size_t k = 0; k < p->n; k++) {
    if (p->r[k].lo != off) continue;
    if (p->r[k].hi - p->r[k].lo != len || p->r[k].got)
      return cairn_fail(p->st, -EBADMSG, "range reply: a part is not the range asked for");
    p->r[k].at = (uint64_t)(data - p->base);
    p->r[k].got = true;
    return 0;
  }
  return cairn_fail(p->st, -EBADMSG, "range reply: a part is not a range asked for");
}

int cn_range_reply_locate(int fd, uint64_t written, const pull_range_reply *rr,
                          uint64_t blob_size, cn_reply_range *rg, size_t n, cairn_store *st) {
  if (written == 0) return cairn_fail(st, -EBADMSG, "range reply: empty");
  void *m = mmap(NULL, (size_t)written, PROT_READ, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) return cairn_fail(st, -errno, "range reply: %s", strerror(errno));
  reply_parts p = {rg, n, m, st};
  int r = cn_byteranges_parse(rr->content_type, rr->content_range, m, (size_t)written, blob_size, n,
                              reply_part, &p, st);
  munmap(m, (size_t)written);
  for (size_t j = 0; r == 0 && j < n; j++)
    if (!rg[j].got) r = cairn_fail(st, -EBADMSG, "range reply: a range asked for is missing");
  return r < 0 ? r : 0;
}

/* n bytes of in at from copied to out at to. */
static int copy_bytes(int in, uint64_t from, int out, uint64_t to, uint64_t n) {
  bool plain = false;
  char buf[1 << 16];
  while (n > 0) {
    ssize_t k;
    if (!plain) {
      loff_t a = (loff_t)from, b = (loff_t)to;
      k = copy_file_range(in, &a, out, &b, n, 0);
      if (k < 0 && (errno == EXDEV || errno == ENOSYS || errno == EINVAL || errno == EOPNOTSUPP)) {
        plain = true;
        continue;
      }
    } else {
      k = pread(in, buf, n > sizeof buf ? sizeof buf : (size_t)n, (off_t)from);
      for (ssize_t done = 0; k > 0 && done < k;) {
        ssize_t w = pwrite(out, buf + done, (size_t)(k - done), (off_t)(to + (uint64_t)done));
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return -errno;
        done += w;
      }
    }
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) return -errno;
    if (k == 0) return -EIO;
    from += (uint64_t)k;
    to += (uint64_t)k;
    n -= (uint64_t)k;
  }
  return 0;
}

int cn_blob_copy_take(cn_blob_copy *c, int in, const cn_reply_range *rg, size_t n,
                      pthread_mutex_t *lock) {
  int r = 0;
  for (size_t k = 0; k < n && r == 0; k++)
    r = copy_bytes(in, rg[k].at, c->fd, rg[k].lo, rg[k].hi - rg[k].lo);
  if (lock) pthread_mutex_lock(lock);
  for (size_t k = 0; k < n && r == 0; k++) r = cn_blob_copy_add(c, rg[k].lo, rg[k].hi);
  if (r < 0) c->bad = true;
  if (lock) pthread_mutex_unlock(lock);
  return r;
}

/* The holes of a copy to fetch, cut in pieces one request takes. */
typedef struct holes {
  cn_reply_range *v;
  size_t n, cap;
  uint64_t bytes;
} holes;

static int hole_push(uint64_t lo, uint64_t hi, void *arg) {
  holes *h = arg;
  for (; lo < hi;) {
    uint64_t n = hi - lo > CN_PARTIAL_REQUEST_MAX ? CN_PARTIAL_REQUEST_MAX : hi - lo;
    if (h->n == h->cap) {
      size_t cap = h->cap ? 2 * h->cap : 16;
      cn_reply_range *v = realloc(h->v, cap * sizeof *v);
      if (!v) return -ENOMEM;
      h->v = v;
      h->cap = cap;
    }
    h->v[h->n++] = (cn_reply_range){.lo = lo, .hi = lo + n};
    h->bytes += n;
    lo += n;
  }
  return 0;
}

/* The pieces rg[0, n) in one range request, into copy. */
static int hole_request(pull_source *src, const pull_desc *d, cn_blob_copy *copy,
                        cn_reply_range *rg, size_t n, uint64_t *fetched, size_t *requests,
                        cairn_store *st) {
  char spec[PULL_RANGE_SPEC_MAX];
  size_t used = 0;
  uint64_t total = 0;
  for (size_t k = 0; k < n; k++) {
    int w = snprintf(spec + used, sizeof spec - used, "%s%llu-%llu", k ? "," : "",
                     (unsigned long long)rg[k].lo, (unsigned long long)(rg[k].hi - 1));
    if (w < 0 || (size_t)w >= sizeof spec - used)
      return cairn_fail(st, -E2BIG, "range request: too many ranges");
    used += (size_t)w;
    total += rg[k].hi - rg[k].lo;
  }
  int tmp = cn_store_tmpfile(st, 0600);
  if (tmp < 0) return tmp;
  blob_sink s;
  pull_range_reply rr = {0};
  int r = cn_blob_sink_init(&s, tmp, total + 4096 + 256 * (uint64_t)n, NULL);
  if (r == 0) {
    r = src->ops->ranges(src, d, spec, &s, &rr, st);
    *fetched += s.written;
    (*requests)++;
    if (r == 0 && rr.status != 206)
      r = cairn_fail(st, -EPROTO, "the registry answered a range request with HTTP %ld",
                     rr.status);
    if (r == 0) r = cn_range_reply_locate(tmp, s.written, &rr, d->size, rg, n, st);
    if (r == 0 && (r = cn_blob_copy_take(copy, tmp, rg, n, NULL)) < 0)
      r = cairn_fail(st, r, "the copy: %s", strerror(-r));
    cn_blob_sink_free(&s);
  }
  close(tmp);
  return r;
}

/* Fetches what copy lacks: its holes in as few multi-range requests as
 * CN_PARTIAL_RANGES_MAX, CN_PARTIAL_REQUEST_MAX and PULL_RANGE_SPEC_MAX
 * allow, one after another. */
static int fetch_holes(pull_source *src, const pull_desc *d, cn_blob_copy *copy,
                       uint64_t *fetched, size_t *requests, cairn_store *st) {
  holes h = {0};
  int r = cn_blob_copy_holes(copy, hole_push, &h);
  if (r < 0) r = cairn_fail(st, r, "out of memory");
  if (r == 0 && h.n && !src->ops->ranges)
    r = cairn_fail(st, -ENOTSUP, "the source takes no range requests");
  for (size_t first = 0; r == 0 && first < h.n;) {
    size_t last = first;
    uint64_t bytes = 0, chars = 0;
    while (last < h.n && last - first < CN_PARTIAL_RANGES_MAX) {
      uint64_t len = h.v[last].hi - h.v[last].lo;
      if (last > first &&
          (bytes + len > CN_PARTIAL_REQUEST_MAX || chars + 48 > PULL_RANGE_SPEC_MAX))
        break;
      bytes += len;
      chars += 48; /* "A-B," at most: two 20-digit numbers */
      last++;
    }
    r = hole_request(src, d, copy, &h.v[first], last - first, fetched, requests, st);
    first = last;
  }
  free(h.v);
  return r;
}

/* The sha256 of fd's size bytes, "sha256:HEX". */
static int copy_digest(int fd, uint64_t size, char out[CAIRN_DIGEST_LEN + 1], cairn_store *st) {
  enum { BUF = 1 << 20 };
  unsigned char *buf = malloc(BUF);
  EVP_MD_CTX *md = EVP_MD_CTX_new();
  int r = buf && md && EVP_DigestInit_ex(md, EVP_sha256(), NULL) == 1
              ? 0
              : cairn_fail(st, -ENOMEM, "out of memory");
  for (uint64_t at = 0; r == 0 && at < size;) {
    size_t want = size - at > BUF ? BUF : (size_t)(size - at);
    ssize_t k = pread(fd, buf, want, (off_t)at);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0)
      r = cairn_fail(st, k < 0 ? -errno : -EIO, "reading the copy: %s",
                     k < 0 ? strerror(errno) : "short");
    else if (EVP_DigestUpdate(md, buf, (size_t)k) != 1)
      r = cairn_fail(st, -EIO, "sha256 failed");
    else
      at += (uint64_t)k;
  }
  if (r == 0) cn_sha256_final_digest(md, out);
  EVP_MD_CTX_free(md);
  free(buf);
  return r;
}

int cn_blob_copy_complete(pull_source *src, const pull_desc *d, cn_blob_copy *copy,
                          uint64_t *fetched, size_t *requests, cairn_store *st) {
  struct stat sb;
  int r = 0;
  if (copy->fd < 0)
    r = cairn_fail(st, -EBADF, "no copy");
  else if (copy->bad)
    r = cairn_fail(st, -EIO, "a write to it failed");
  else if (copy->size != d->size || strcmp(copy->digest, d->digest) != 0)
    r = cairn_fail(st, -EINVAL, "not a copy of blob %s", d->digest);
  else if (fstat(copy->fd, &sb) < 0 || (uint64_t)sb.st_size != d->size)
    r = cairn_fail(st, -EIO, "its size is not the blob's");
  if (r == 0) r = fetch_holes(src, d, copy, fetched, requests, st);
  char got[CAIRN_DIGEST_LEN + 1];
  if (r == 0) r = copy_digest(copy->fd, d->size, got, st);
  if (r == 0 && strcmp(got, d->digest) != 0) r = cairn_fail(st, -EBADMSG, "its digest is %s", got);
  return r;
}
