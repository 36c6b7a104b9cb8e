/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fill.c — filling an image a lazy pull left partial (cairn_fill,
 * doc/lazy-pulls.md "What is fetched when", item 3): every pending file of
 * the image fetched and stored, under the image's pins.
 *
 * The order: the files each layer's TOC names before its prefetch
 * landmark (eStargz's .prefetch.landmark) or ranks (CN_TOC_PREFETCH: the
 * access list cairn push wrote, in its order), every layer's, first; then
 * the rest in layer and TOC order. Files next to each other in the blob
 * (closer than FILL_MERGE_GAP, a range up to FILL_RANGE_MAX) are one range,
 * the ranges of a batch of files one multi-range request, FILL_INFLIGHT
 * requests in flight (a thread each, with a store handle of its own),
 * each layer's registry source shared by them (its connections kept and
 * reused: libcairn_registry.h); a request holds prefetch files or none, and none
 * of the others starts until the prefetch files' are done (they get the
 * whole link).
 * Each file is verified as a single fetch verifies it (cn_lazy_unpack:
 * every chunk against its digest, the whole against its sha256) before
 * it is written as a blob, which hashes it once more; the files of one
 * request are made durable and recorded in one commit (cn_lazy_group), so
 * a fill killed at any point resumes, losing at most that request's.
 *
 * One fetch of a file across processes: a batch takes each file's lock
 * (cn_lazy_lock) without waiting before it asks for it, and leaves out
 * a file stored meanwhile; a file whose lock another holds (a mount's
 * first read, another fill) is taken up at the end by cairn_lazy_fetch,
 * which waits for the lock and finds it stored. A batch whose request
 * fails has its files fetched one by one the same way.
 *
 * A batch that is not the prefetch files' waits, before it starts, while
 * a mount's first read of a large file is in flight (the fetcher holds
 * STORE/tmp/first-reads-large: fetcher.c), FILL_YIELD_MAX_MS at most;
 * while smaller first reads are in flight or ended less than
 * FILL_QUIET_MS ago (STORE/tmp/first-reads), it goes alone and small
 * (FILL_TRICKLE_BYTES): the container waiting on them finds the link
 * nearly idle (doc/lazy-pulls.md, "The fill as built"). Batches are cut
 * as they start, the first ones small (FILL_RAMP_MS).
 *
 * An eStargz layer's replies are also copied, where they lie in the blob,
 * into an anonymous file of the blob's size (cn_blob_copy, its TOC and
 * footer from the kept TOC), the intervals it holds recorded: its finish
 * (partial.c) fetches only what they lack, checks the blob's digest and
 * ingests that, instead of fetching the whole blob again.
 *
 * Built on cairn.h alone, like the rest of store/remote/.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "libcairn_byteranges.h"
#include "cairn.h"
#include "libcairn_fill.h"
#include "libcairn_remote_lazy.h"
#include "libcairn_remote.h"
#include "libcairn_toc.h"

/* ---- the plan: order, ranges, batches ------------------------------------ */

static int item_cmp(const void *a, const void *b) {
  const cn_fill_item *x = a, *y = b;
  if (x->prefetch != y->prefetch) return x->prefetch ? -1 : 1;
  if (x->layer != y->layer) return x->layer < y->layer ? -1 : 1;
  if (x->rank != y->rank) return !x->rank ? 1 : !y->rank ? -1 : x->rank < y->rank ? -1 : 1;
  return (x->entry > y->entry) - (x->entry < y->entry);
}

void cn_fill_sort(cn_fill_item *v, size_t n) {
  if (n) qsort(v, n, sizeof *v, item_cmp);
}

size_t cn_fill_batch_end(const cn_fill_item *v, size_t n, size_t first, uint64_t max_bytes) {
  uint64_t bytes = 0;
  size_t i = first;
  for (; i < n && i - first < FILL_BATCH_FILES; i++) {
    if (v[i].layer != v[first].layer || v[i].prefetch != v[first].prefetch) break;
    uint64_t len = v[i].hi - v[i].lo;
    if (i > first && bytes + len > max_bytes) break;
    bytes += len;
  }
  return i;
}

uint64_t cn_fill_batch_max(uint64_t per, int64_t since_ms, bool reads_about) {
  int64_t steps = reads_about || since_ms < 0 ? 0 : since_ms / FILL_RAMP_MS;
  if (steps < 8 && ((uint64_t)FILL_TRICKLE_BYTES << steps) < per)
    return (uint64_t)FILL_TRICKLE_BYTES << steps;
  return per;
}

bool cn_fill_merges(const cn_fill_item *prev, uint64_t range_lo, const cn_fill_item *next) {
  return next->layer == prev->layer && next->lo >= prev->hi &&
         next->lo - prev->hi <= FILL_MERGE_GAP && next->hi - range_lo <= FILL_RANGE_MAX;
}

/* ---- the fill ---------------------------------------------------------------- */

typedef struct fill_layer {
  cairn_lazy_file f; /* its source, from its first pending file */
  cn_lazy_toc lt;    /* its kept TOC */
  pull_source *src;
  cairn_pull_opts po;
  pull_desc d;
} fill_layer;

typedef struct fill_ctx {
  cairn_store *st;
  const cairn_fill_opts *o;
  fill_layer *layers;
  cn_blob_copy *copies; /* layers[k]'s blob as the requests bring it (eStargz's; fd -1: none) */
  pthread_mutex_t copy_lock; /* the copies' intervals */
  size_t n_layers;
  cn_fill_item *items;
  size_t n_items;
  const char **later; /* fetched one by one */
  size_t n_later;
  size_t next;             /* the first item no batch has taken; a batch is cut when it starts */
  uint64_t per;            /* a batch's bytes (cn_fill_batch_end) while no first read is about */
  int64_t t0;              /* when the workers started (CLOCK_MONOTONIC, ms) */
  cn_lazy_sources sources; /* of the one-by-one fetches */
  /* batches in flight, and of them the prefetch files': until the last of
   * those is done, no other batch starts (the files a container reads
   * first get the whole link) */
  size_t running, prefetch_running;
  pthread_cond_t changed; /* a batch ended */
  pthread_mutex_t lock;   /* next, the counts, the items' state, the hooks */
  size_t done, total, failed;
  int first_err;
  char why[1024];
} fill_ctx;

enum { ITEM_TODO, ITEM_DONE, ITEM_LATER, ITEM_FAILED, ITEM_STORING };

static void item_failed(fill_ctx *c, cn_fill_item *it, int err, const char *why) {
  pthread_mutex_lock(&c->lock);
  it->state = ITEM_FAILED;
  if (!c->failed++) {
    c->first_err = err;
    snprintf(c->why, sizeof c->why, "%s", why);
  }
  if (c->o->log) {
    char line[1200];
    snprintf(line, sizeof line, "%s: %s", it->sha256, why);
    c->o->log(line, c->o->arg);
  }
  pthread_mutex_unlock(&c->lock);
}

static void item_done(fill_ctx *c, cn_fill_item *it) {
  pthread_mutex_lock(&c->lock);
  it->state = ITEM_DONE;
  c->done++;
  if (c->o->progress) c->o->progress(c->done, c->total, c->o->arg);
  pthread_mutex_unlock(&c->lock);
}

/* The items [first, last) of a batch one range of its request covers
 * (some left out: locked elsewhere). */
typedef struct fill_span {
  size_t first, last;
} fill_span;

/* A reply's ranges (rg, at their places in the reply's file in) written
 * into the copy of their layer's blob, where they lie in the blob, and
 * recorded in it (an eStargz layer's: cn_blob_copy, its finish fetches
 * only what no request brought). A failure marks the copy bad, and the
 * finish fetches the blob whole, as without one; the fill goes on. */
static void copy_ranges(fill_ctx *c, size_t layer, int in, const cn_reply_range *rg, size_t n) {
  cn_blob_copy *cp = &c->copies[layer];
  if (cp->fd >= 0) cn_blob_copy_take(cp, in, rg, n, &c->copy_lock);
}

/* Fetches the items of [first, last) this process holds the locks of
 * (it->lock >= 0), in one request of merged ranges, and stores each. The
 * reply streams into an anonymous file of STORE/tmp, each file's chunks
 * read back from it a window at a time: a batch in flight costs the fill
 * no memory of its size. A failure of the request leaves them ITEM_TODO
 * (locks released) for the one-by-one fetch; a file that fails its
 * checks is ITEM_FAILED. */
static int fetch_batch(fill_ctx *c, size_t first, size_t last, cairn_store *wst) {
  cn_reply_range *rg = calloc(last - first, sizeof *rg);
  fill_span *sp = calloc(last - first, sizeof *sp);
  if (!rg || !sp) {
    free(rg);
    free(sp);
    return cairn_fail(wst, -ENOMEM, "out of memory");
  }
  size_t n = 0;
  uint64_t total = 0;
  const cn_fill_item *prev = NULL;
  for (size_t i = first; i < last; i++) {
    const cn_fill_item *it = &c->items[i];
    if (it->lock < 0) continue;
    if (prev && cn_fill_merges(prev, rg[n - 1].lo, it)) {
      total += it->hi - rg[n - 1].hi;
      rg[n - 1].hi = it->hi;
      sp[n - 1].last = i + 1;
    } else {
      sp[n] = (fill_span){i, i + 1};
      rg[n++] = (cn_reply_range){.lo = it->lo, .hi = it->hi};
      total += it->hi - it->lo;
    }
    prev = it;
  }
  int r = 0;
  if (n == 0) goto out;
  char *spec = malloc(PULL_RANGE_SPEC_MAX);
  if (!spec) {
    r = cairn_fail(wst, -ENOMEM, "out of memory");
    goto out;
  }
  size_t used = 0;
  for (size_t k = 0; k < n && r == 0; k++) {
    int w = snprintf(spec + used, PULL_RANGE_SPEC_MAX - used, "%s%llu-%llu", k ? "," : "",
                     (unsigned long long)rg[k].lo, (unsigned long long)(rg[k].hi - 1));
    if (w < 0 || (size_t)w >= PULL_RANGE_SPEC_MAX - used)
      r = cairn_fail(wst, -E2BIG, "range request: too many ranges");
    else
      used += (size_t)w;
  }
  fill_layer *l = &c->layers[c->items[first].layer];
  blob_sink s;
  pull_range_reply rr = {0};
  bool sink = false;
  int in = r == 0 ? cn_lazy_open_temp(wst) : -1;
  if (r == 0 && in < 0) r = in;
  if (r == 0) r = cn_blob_sink_init(&s, in, total + 4096 + 256 * (uint64_t)n, NULL);
  if (r == 0) sink = true;
  if (r == 0) r = l->src->ops->ranges(l->src, &l->d, spec, &s, &rr, wst);
  free(spec);
  if (r == 0 && rr.status != 206)
    r = cairn_fail(wst, -EPROTO, "the registry answered a range request with HTTP %ld", rr.status);
  if (r == 0) r = cn_range_reply_locate(in, s.written, &rr, l->d.size, rg, n, wst);
  if (r < 0) { /* the files are fetched one by one later */
    for (size_t i = first; i < last; i++) {
      cn_fill_item *it = &c->items[i];
      if (it->lock < 0) continue;
      cn_lazy_unlock(wst, it->sha256, it->lock);
      it->lock = -1;
    }
    goto out_sink;
  }
  cairn_test_point(wst, "lazy: range fetched");
  copy_ranges(c, c->items[first].layer, in, rg, n);
  /* the request's files verified and written, then recorded in one commit */
  cn_lazy_group *g = malloc(sizeof *g);
  int gr = g ? cn_lazy_group_begin(wst, g) : cairn_fail(wst, -ENOMEM, "out of memory");
  for (size_t k = 0; k < n; k++) {
    for (size_t i = sp[k].first; i < sp[k].last; i++) {
      cn_fill_item *it = &c->items[i];
      if (it->lock < 0) continue;
      const cn_toc_entry *e = &l->lt.toc.entries[it->entry];
      char blob[48];
      int fd = gr < 0 ? gr : cn_lazy_open_temp(wst);
      int q = fd < 0 ? fd : cn_lazy_unpack_fd(e, in, rg[k].at, rg[k].lo, fd, wst);
      if (q == 0) cairn_test_point(wst, "lazy: verified, not stored");
      if (q == 0) q = gr = cn_lazy_group_put(wst, g, it->sha256, fd, e->size, blob);
      if (fd >= 0) close(fd);
      if (q == 0) {
        it->state = ITEM_STORING;
        continue;
      }
      cn_lazy_unlock(wst, it->sha256, it->lock);
      it->lock = -1;
      item_failed(c, it, q, cairn_errmsg(wst));
    }
  }
  if (g && g->lock >= 0) {
    int q = cn_lazy_group_commit(wst, g);
    for (size_t i = first; i < last; i++) {
      cn_fill_item *it = &c->items[i];
      if (it->lock < 0 || it->state != ITEM_STORING) continue;
      cn_lazy_unlock(wst, it->sha256, it->lock);
      it->lock = -1;
      if (q < 0)
        item_failed(c, it, q, cairn_errmsg(wst));
      else
        item_done(c, it);
    }
  }
  free(g);
out_sink:
  if (sink) cn_blob_sink_free(&s);
  if (in >= 0) close(in);
out:
  free(rg);
  free(sp);
  return r;
}

/* A batch: each file's lock taken without waiting (busy: later), a file
 * stored meanwhile only named; the others fetched together. */
static void run_batch(fill_ctx *c, size_t first, size_t last, cairn_store *wst) {
  for (size_t i = first; i < last; i++) {
    cn_fill_item *it = &c->items[i];
    it->lock = -1;
    int lk = cn_lazy_lock(wst, it->sha256, false);
    if (lk == -EWOULDBLOCK) {
      it->state = ITEM_LATER; /* read by a mount or filled by another fill now */
      continue;
    }
    if (lk < 0) {
      item_failed(c, it, lk, cairn_errmsg(wst));
      continue;
    }
    cairn_lazy_file f;
    char blob[48];
    int k = cn_lazy_file_named(wst, it->sha256, blob, &f);
    if (k == 0) {
      cn_lazy_file_clear(&f);
      it->lock = lk;
      continue;
    }
    cn_lazy_unlock(wst, it->sha256, lk);
    if (k < 0)
      item_failed(c, it, k, cairn_errmsg(wst));
    else
      item_done(c, it);
  }
  if (fetch_batch(c, first, last, wst) < 0 && c->o->log) {
    char line[1200];
    snprintf(line, sizeof line, "a request for %zu files failed (%s); fetching them one by one",
             last - first, cairn_errmsg(wst));
    pthread_mutex_lock(&c->lock);
    c->o->log(line, c->o->arg);
    pthread_mutex_unlock(&c->lock);
  }
}

static int64_t ms_of(const struct timespec *t) {
  return (int64_t)t->tv_sec * 1000 + t->tv_nsec / 1000000;
}

/* Whether a mount's first reads are about: in flight (the fetcher holds
 * STORE/tmp/CN_FIRST_READS shared) or ended less than FILL_QUIET_MS ago.
 * Waits first while a large one is in flight (CN_FIRST_READS_LARGE held),
 * FILL_YIELD_MAX_MS at most: it needs the link. The files are opened
 * through the store's descriptor, as the rest of the store. */
static bool reads_about(cairn_store *st) {
  int fd = cn_store_openat(st, "tmp/" CN_FIRST_READS_LARGE, O_RDONLY | O_CLOEXEC, 0);
  if (fd >= 0) {
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (flock(fd, LOCK_EX | LOCK_NB) < 0) {
      clock_gettime(CLOCK_MONOTONIC, &now);
      if (ms_of(&now) - ms_of(&t0) >= FILL_YIELD_MAX_MS) break;
      cn_sleep_ms(20);
    }
    close(fd);
  }
  if ((fd = cn_store_openat(st, "tmp/" CN_FIRST_READS, O_RDONLY | O_CLOEXEC, 0)) < 0)
    return false;    /* no mount has read a pending file */
  bool about = true; /* reads in flight */
  if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
    struct timespec rt;
    struct stat sb;
    clock_gettime(CLOCK_REALTIME, &rt);
    int64_t quiet = fstat(fd, &sb) < 0 ? FILL_QUIET_MS : ms_of(&rt) - ms_of(&sb.st_mtim);
    flock(fd, LOCK_UN);
    about = quiet >= 0 && quiet < FILL_QUIET_MS;
  }
  close(fd);
  return about;
}

/* Takes the next batch: [*first, *last), cut from the items no batch has
 * taken. A batch of the prefetch files starts at once; any other waits
 * until the prefetch batches are done, and while first reads are about
 * (reads_about) goes alone and small: one batch in flight, of at most
 * FILL_TRICKLE_BYTES, so that the reads find the link nearly idle while
 * the fill still uses what they leave of it. Else its bytes grow from
 * FILL_TRICKLE_BYTES, doubling every FILL_RAMP_MS, to c->per: a
 * container started right after the pull reads its first files while
 * the first batches are in flight, and waits for the batch that holds
 * one. False: none left. */
static bool next_batch(fill_ctx *c, cairn_store *wst, size_t *first, size_t *last) {
  pthread_mutex_lock(&c->lock);
  for (;;) {
    while (c->next < c->n_items && !c->items[c->next].prefetch && c->prefetch_running)
      pthread_cond_wait(&c->changed, &c->lock);
    if (c->next == c->n_items) break;
    uint64_t max = c->per;
    if (!c->items[c->next].prefetch) {
      pthread_mutex_unlock(&c->lock);
      bool about = reads_about(wst);
      pthread_mutex_lock(&c->lock);
      if (c->next == c->n_items) break;
      if (about && c->running) { /* another batch in flight: after it */
        pthread_mutex_unlock(&c->lock);
        cn_sleep_ms(20);
        pthread_mutex_lock(&c->lock);
        continue;
      }
      struct timespec now;
      clock_gettime(CLOCK_MONOTONIC, &now);
      max = cn_fill_batch_max(c->per, ms_of(&now) - c->t0, about);
    }
    *first = c->next;
    *last = c->next = cn_fill_batch_end(c->items, c->n_items, c->next, max);
    c->running++;
    if (c->items[*first].prefetch) c->prefetch_running++;
    pthread_mutex_unlock(&c->lock);
    return true;
  }
  pthread_mutex_unlock(&c->lock);
  return false;
}

static void *fill_worker(void *arg) {
  fill_ctx *c = arg;
  cairn_store *wst = NULL;
  if (cairn_store_open_lazy(cairn_store_dir(c->st), &wst) < 0) return NULL;
  size_t first, last;
  while (next_batch(c, wst, &first, &last)) {
    run_batch(c, first, last, wst);
    /* its connection closed (reopened by the next batch) and the freed
     * memory given back: a page cache and a heap that do not grow */
    cairn_store_idle(wst);
    pthread_mutex_lock(&c->lock);
    c->running--;
    if (c->items[first].prefetch) c->prefetch_running--;
    pthread_cond_broadcast(&c->changed);
    pthread_mutex_unlock(&c->lock);
  }
  cairn_store_close(wst);
  return NULL;
}

/* The copy of eStargz layer f's blob (cn_blob_copy): an anonymous file of
 * STORE/tmp of the blob's size, its TOC and footer (its end: the kept
 * TOC's bytes, checked) written already. None (fd -1) when that fails:
 * the finish fetches the blob whole. */
static void copy_open(fill_ctx *c, cn_blob_copy *cp, const cairn_lazy_file *f,
                      const cn_lazy_toc *lt) {
  snprintf(cp->digest, sizeof cp->digest, "%s", f->digest);
  cp->size = f->blob_size;
  if (lt->raw_len == 0 || lt->raw_len > cp->size) return;
  uint64_t at = cp->size - lt->raw_len;
  int fd = cn_store_tmpfile(c->st, 0444);
  int r = fd < 0 ? fd : ftruncate(fd, (off_t)cp->size) < 0 ? -errno : 0;
  for (size_t done = 0; r == 0 && done < lt->raw_len;) {
    ssize_t w = pwrite(fd, lt->raw + done, lt->raw_len - done, (off_t)(at + done));
    if (w < 0 && errno == EINTR) continue;
    if (w < 0)
      r = -errno;
    else
      done += (size_t)w;
  }
  cp->fd = fd;
  if (r == 0) r = cn_blob_copy_add(cp, at, cp->size);
  if (r < 0) {
    cn_blob_copy_free(cp);
    cairn_fail(c->st, 0, "%s", "");
  }
}

/* The layer of pending file f (by its blob's digest), its kept TOC read
 * and its registry opened on first use; -1 when that failed (said). */
static ssize_t layer_of(fill_ctx *c, cairn_lazy_file *f) {
  for (size_t k = 0; k < c->n_layers; k++)
    if (strcmp(c->layers[k].f.digest, f->digest) == 0) return (ssize_t)k;
  fill_layer *v = realloc(c->layers, (c->n_layers + 1) * sizeof *v);
  if (!v) return cairn_fail(c->st, -ENOMEM, "out of memory");
  c->layers = v;
  cn_blob_copy *cv = realloc(c->copies, (c->n_layers + 1) * sizeof *cv);
  if (!cv) return cairn_fail(c->st, -ENOMEM, "out of memory");
  c->copies = cv;
  cv[c->n_layers] = (cn_blob_copy){.fd = -1};
  /* each open source points at its layer's options, which have moved */
  for (size_t k = 0; k < c->n_layers; k++) v[k].src->opts = &v[k].po;
  fill_layer *l = &v[c->n_layers];
  memset(l, 0, sizeof *l);
  int r = cn_lazy_kept_toc(c->st, f, &l->lt);
  if (r == 0) {
    cn_lazy_source_opts(f, c->o->creds, &l->po);
    r = cn_registry_source_open(f->source, &l->po, &l->src, c->st);
  }
  if (r < 0) {
    cn_lazy_toc_free(&l->lt);
    return r;
  }
  if (l->lt.toc.format == CN_TOC_ESTARGZ) copy_open(c, &cv[c->n_layers], f, &l->lt);
  /* the fill reads its entries alone: the TOC's bytes and eStargz's own
   * JSON go (that file is fetched one by one, its TOC read for it) */
  free(l->lt.raw);
  l->lt.raw = NULL;
  l->lt.raw_len = 0;
  cn_toc_estargz_self_free(&l->lt.self);
  l->src->opts = &l->po;
  l->d = (pull_desc){.media_type = f->media_type, .size = f->blob_size};
  snprintf(l->d.digest, sizeof l->d.digest, "%s", f->digest);
  l->f = *f; /* its strings now the layer's */
  memset(f, 0, sizeof *f);
  return (ssize_t)c->n_layers++;
}

/* The plan: each pending content of the image, its layer, its TOC entry
 * and its bytes in the blob, in fill order (c->items); a content not to be
 * fetched so (stored meanwhile, or its layer's TOC or source unusable) is
 * left to the one-by-one fetch (c->later), which names it or says why. */
static int plan(fill_ctx *c, char **todo, size_t n) {
  c->items = calloc(n ? n : 1, sizeof *c->items);
  c->later = calloc(n ? n : 1, sizeof *c->later);
  if (!c->items || !c->later) return cairn_fail(c->st, -ENOMEM, "out of memory");
  for (size_t i = 0; i < n; i++) {
    cairn_lazy_file f;
    int p = cn_lazy_file_find(c->st, todo[i], &f);
    if (p < 0) return p;
    if (p == 0) {
      c->later[c->n_later++] = todo[i];
      continue;
    }
    char *path = strdup(f.path);
    uint64_t size = f.size;
    ssize_t l = path ? layer_of(c, &f) : -ENOMEM;
    cn_lazy_file_clear(&f);
    const cn_toc_entry *e = NULL;
    if (l >= 0) e = cn_toc_find(&c->layers[l].lt.toc, path);
    free(path);
    if (l < 0) cairn_fail(c->st, 0, "%s", "");
    if (!e || e->type != CN_TOC_REG || e->size != size || strcmp(e->digest, todo[i]) != 0 ||
        e->n_chunks == 0) {
      c->later[c->n_later++] = todo[i];
      continue;
    }
    const cn_toc *toc = &c->layers[l].lt.toc;
    cn_fill_item *it = &c->items[c->n_items++];
    *it = (cn_fill_item){.sha256 = todo[i],
                         .layer = (size_t)l,
                         .entry = (size_t)(e - toc->entries),
                         .lo = e->chunks[0].off,
                         .hi = e->chunks[0].off + e->chunks[0].csize,
                         .lock = -1,
                         .state = ITEM_TODO};
    it->rank = e->prefetch_rank;
    it->prefetch = !toc->no_prefetch && (it->entry < toc->prefetch || it->rank);
    for (size_t k = 0; k < e->n_chunks; k++) {
      const cn_toc_chunk *ch = &e->chunks[k];
      if (ch->off < it->lo) it->lo = ch->off;
      if (ch->off + ch->csize > it->hi) it->hi = ch->off + ch->csize;
    }
  }
  cn_fill_sort(c->items, c->n_items);
  uint64_t bytes = 0;
  for (size_t i = 0; i < c->n_items; i++) bytes += c->items[i].hi - c->items[i].lo;
  uint64_t per = bytes / (2 * FILL_INFLIGHT);
  c->per = per < FILL_BATCH_MIN ? FILL_BATCH_MIN : per > FILL_BATCH_MAX ? FILL_BATCH_MAX : per;
  return 0;
}

/* One by one, waiting for each file's lock (cairn_lazy_fetch), the
 * registry sources kept from one to the next (c->sources). */
static void fetch_one(fill_ctx *c, const char *sha256, cn_fill_item *it) {
  char blob[48];
  cn_lazy_toc_source ts = {
      .open = cn_lazy_kept_open, .done = cn_lazy_kept_done, .src_arg = &c->sources};
  int k = cn_lazy_fetch_from(c->st, sha256, &ts, blob);
  cn_fill_item none = {.sha256 = sha256};
  if (k < 0)
    item_failed(c, it ? it : &none, k, cairn_errmsg(c->st));
  else
    item_done(c, it ? it : &none);
}

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
  if (r == 0 && o.pinned) o.pinned(o.arg);
  char **todo = NULL;
  size_t n = 0;
  if (r == 0) r = cn_lazy_pending_list(st, image_id, &todo, &n);
  fill_ctx c = {.st = st,
                .o = &o,
                .copy_lock = PTHREAD_MUTEX_INITIALIZER,
                .total = n,
                .sources = {.creds = o.creds},
                .lock = PTHREAD_MUTEX_INITIALIZER,
                .changed = PTHREAD_COND_INITIALIZER};
  if (r == 0) r = plan(&c, todo, n);
  /* the TOCs' JSON trees parsed and freed, the pending rows read: the
   * connection's page cache and the heap given back */
  cairn_store_idle(st);
  if (r == 0 && o.progress) o.progress(0, n, o.arg);
  pthread_t tids[FILL_INFLIGHT];
  size_t started = 0;
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  c.t0 = ms_of(&t0);
  for (; r == 0 && started < FILL_INFLIGHT && started < c.n_items; started++)
    if (pthread_create(&tids[started], NULL, fill_worker, &c) != 0) break;
  for (size_t t = 0; t < started; t++) pthread_join(tids[t], NULL);
  /* what the workers left: busy elsewhere, a failed request, no worker */
  for (size_t i = 0; r == 0 && i < c.n_items; i++)
    if (c.items[i].state == ITEM_TODO || c.items[i].state == ITEM_LATER)
      fetch_one(&c, c.items[i].sha256, &c.items[i]);
  for (size_t i = 0; r == 0 && i < c.n_later; i++) fetch_one(&c, c.later[i], NULL);
  for (size_t k = 0; k < c.n_layers; k++) {
    if (c.layers[k].src) c.layers[k].src->ops->free(c.layers[k].src);
    cn_lazy_toc_free(&c.layers[k].lt);
    cn_lazy_file_clear(&c.layers[k].f);
  }
  cn_lazy_kept_free(&c.sources);
  free(c.layers);
  free(c.items);
  free(c.later);
  cn_strv_free(todo, n);
  cn_lazy_trim();
  /* every file here: each layer's exact tar recorded (partial.c) */
  if (r == 0 && !c.failed)
    r = cn_lazy_finish_image(st, image_id, o.keep_blobs, c.copies, c.n_layers, o.log, o.arg);
  for (size_t k = 0; k < c.n_layers; k++) cn_blob_copy_free(&c.copies[k]);
  free(c.copies);
  if (r == 0 && n == 0) r = cn_lazy_tidy(st); /* a crashed fill's TOCs */
  cairn_pinset_release(st, ps);
  if (r < 0) return r;
  if (c.failed)
    return cairn_fail(st, c.first_err, "%zu of %zu files not fetched (first: %s)", c.failed, n,
                      c.why);
  return 0;
}

/* What push and export do first with an image a lazy pull left partial
 * or not finished: a fill, said. */
int cairn_fill_lazy(cairn_store *st, const char *image_id, void (*log)(const char *line, void *arg),
                    void *arg) {
  uint64_t files = 0, bytes = 0;
  char **unf = NULL;
  size_t n_unf = 0;
  int r = cairn_image_pending(st, image_id, &files, &bytes);
  if (r == 0) r = cn_lazy_unfinished(st, image_id, &unf, &n_unf);
  cn_strv_free(unf, n_unf);
  if (r < 0 || (files == 0 && n_unf == 0)) return r;
  char size[32];
  cairn_human_size(bytes, size, sizeof size);
  char line[256];
  if (files)
    snprintf(line, sizeof line,
             "%.12s was pulled lazily: fetching its %llu files not fetched yet (%s) first, as "
             "cairn fill does",
             image_id, (unsigned long long)files, size);
  else
    snprintf(line, sizeof line,
             "%.12s was pulled lazily: recording its layers' exact tars first, as cairn fill does",
             image_id);
  if (log) log(line, arg);
  cairn_fill_opts fo = {.log = log, .arg = arg};
  cairn_id got;
  r = cairn_fill(st, image_id, &fo, got);
  return r < 0 ? cn_fail_context(st, r, "filling %.12s first", image_id) : 0;
}
