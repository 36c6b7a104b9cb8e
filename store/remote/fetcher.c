/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fetcher.c — a long-lived fetcher of pending files (cairn_lazy_fetcher,
 * what `cairn fill --serve` runs for a mount's first reads: doc/lazy-pulls.md
 * "The first read as built"). A queue of requests, a few threads each with
 * a store handle of its own, each request cn_lazy_fetch_from's (the lock of
 * the content across processes, every check of cairn_lazy_fetch), the
 * layers' kept TOCs from a cache: each read, checked against the digest
 * recorded and parsed once (cn_lazy_kept_toc), then shared read-only by
 * the fetches of its layer. An entry is keyed by everything its check
 * depends on (the layer blob's digest, the TOC's digest, the annotations,
 * the blob's size); at most TOC_CACHE_MAX are kept, the least recently
 * used no fetch holds given up first.
 *
 * A request is answered once its file is verified and written as a blob,
 * before the blob is made durable and recorded (cn_lazy_file_store_ready;
 * doc/crash-safety.md): the reader waits for the network, not the disk.
 *
 * Each thread keeps the registry sources it opened (cn_lazy_kept_open),
 * with their connection and token (libcairn_registry.h): a first read costs one
 * request, not a connection, a token and a source opened.
 *
 * While requests are in flight, the fetcher holds a shared lock on
 * STORE/tmp/first-reads, and touches it when the last ends; while the
 * fetch of a file of FILL_LARGE_READ bytes or more is, one on
 * STORE/tmp/first-reads-large: a fill yields the link to them (fill.c).
 *
 * Built on cairn.h alone, like the rest of store/remote/.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cairn.h"
#include "libcairn_fill.h"
#include "libcairn_remote_lazy.h"

#define TOC_CACHE_MAX 8
#define THREADS_MAX 16

typedef struct toc_entry {
  struct toc_entry *next;
  char *digest, *toc_digest, *annotations;
  uint64_t blob_size;
  cn_lazy_toc lt;
  unsigned refs;
  bool loading;
  uint64_t used; /* the tick of its last get */
} toc_entry;

typedef struct request {
  struct request *next;
  char sha256[];
} request;

struct cairn_lazy_fetcher {
  pthread_mutex_t mu;
  pthread_cond_t work; /* a request queued, or stopping */
  pthread_cond_t toc;  /* a TOC loaded (or its load failed) */
  request *head, **tail;
  bool stopping;
  toc_entry *tocs;
  size_t n_tocs;
  uint64_t tick;
  char *dir;
  cairn_lazy_fetched_fn done;
  void *arg;
  pthread_t tids[THREADS_MAX];
  unsigned n_threads;
  int reads_fd;       /* STORE/tmp/first-reads (-1: none), shared-locked while */
  unsigned in_flight; /* requests are in flight */
  int large_fd;       /* STORE/tmp/first-reads-large (-1: none), shared-locked */
  unsigned large;     /* while fetches of large files are */
};

/* Whether sha256 is pending as a file of FILL_LARGE_READ bytes or more. */
static bool is_large(cairn_store *st, const char *sha256) {
  char full[80];
  snprintf(full, sizeof full, "%s%s", strncmp(sha256, "sha256:", 7) == 0 ? "" : "sha256:", sha256);
  cairn_lazy_file f;
  if (cn_lazy_file_find(st, full, &f) <= 0) return false;
  bool large = f.size >= FILL_LARGE_READ;
  cn_lazy_file_clear(&f);
  return large;
}

static bool toc_is(const toc_entry *e, const cairn_lazy_file *f) {
  return e->blob_size == f->blob_size && strcmp(e->digest, f->digest) == 0 &&
         strcmp(e->toc_digest, f->toc_digest) == 0 && strcmp(e->annotations, f->annotations) == 0;
}

static void toc_entry_free(toc_entry *e) {
  cn_lazy_toc_free(&e->lt);
  free(e->digest);
  free(e->toc_digest);
  free(e->annotations);
  free(e);
}

static void toc_unlink(cairn_lazy_fetcher *fx, toc_entry *e) {
  for (toc_entry **p = &fx->tocs; *p; p = &(*p)->next)
    if (*p == e) {
      *p = e->next;
      fx->n_tocs--;
      return;
    }
}

/* Gives up the least recently used entries no fetch holds while there are
 * more than TOC_CACHE_MAX. Under mu. */
static void toc_trim(cairn_lazy_fetcher *fx) {
  while (fx->n_tocs > TOC_CACHE_MAX) {
    toc_entry *old = NULL;
    for (toc_entry *e = fx->tocs; e; e = e->next)
      if (!e->refs && !e->loading && (!old || e->used < old->used)) old = e;
    if (!old) return;
    toc_unlink(fx, old);
    toc_entry_free(old);
  }
}

static int toc_get(void *arg, cairn_store *st, const cairn_lazy_file *f, const cn_lazy_toc **lt) {
  cairn_lazy_fetcher *fx = arg;
  pthread_mutex_lock(&fx->mu);
  for (;;) {
    toc_entry *e = fx->tocs;
    while (e && !toc_is(e, f)) e = e->next;
    if (e && e->loading) { /* another thread reads it: wait, then look again */
      pthread_cond_wait(&fx->toc, &fx->mu);
      continue;
    }
    if (e) {
      e->refs++;
      e->used = ++fx->tick;
      pthread_mutex_unlock(&fx->mu);
      *lt = &e->lt;
      return 0;
    }
    break;
  }
  toc_entry *e = calloc(1, sizeof *e);
  if (!e || !(e->digest = strdup(f->digest)) || !(e->toc_digest = strdup(f->toc_digest)) ||
      !(e->annotations = strdup(f->annotations))) {
    pthread_mutex_unlock(&fx->mu);
    if (e) toc_entry_free(e);
    return cairn_fail(st, -ENOMEM, "out of memory");
  }
  e->blob_size = f->blob_size;
  e->loading = true;
  e->next = fx->tocs;
  fx->tocs = e;
  fx->n_tocs++;
  pthread_mutex_unlock(&fx->mu);
  int r = cn_lazy_kept_toc(st, f, &e->lt); /* verified here, once */
  cn_lazy_trim();                          /* its JSON tree, freed */
  pthread_mutex_lock(&fx->mu);
  e->loading = false;
  if (r < 0) {
    toc_unlink(fx, e);
  } else {
    e->refs = 1;
    e->used = ++fx->tick;
    toc_trim(fx);
  }
  pthread_cond_broadcast(&fx->toc);
  pthread_mutex_unlock(&fx->mu);
  if (r < 0) {
    memset(&e->lt, 0, sizeof e->lt); /* cn_lazy_kept_toc freed it */
    toc_entry_free(e);
    return r;
  }
  *lt = &e->lt;
  return 0;
}

static void toc_put(void *arg, const cn_lazy_toc *lt) {
  cairn_lazy_fetcher *fx = arg;
  pthread_mutex_lock(&fx->mu);
  for (toc_entry *e = fx->tocs; e; e = e->next)
    if (&e->lt == lt) {
      e->refs--;
      break;
    }
  toc_trim(fx);
  pthread_mutex_unlock(&fx->mu);
}

static void one_line(char *s) {
  for (; *s; s++)
    if (*s == '\n' || *s == '\r') *s = ' ';
}

/* A request answered as soon as its file is verified and written, before
 * the store makes it durable and records it (doc/crash-safety.md). */
typedef struct answer {
  cairn_lazy_fetcher *fx;
  const char *sha256;
  bool sent;
} answer;

static void ready(const char *blob, void *arg) {
  answer *a = arg;
  a->fx->done(a->sha256, 0, blob, a->fx->arg);
  a->sent = true;
}

static void *worker(void *arg) {
  cairn_lazy_fetcher *fx = arg;
  cairn_store *st = NULL;
  int open_r = 1;                /* opened on the first request it takes */
  cn_lazy_sources sources = {0}; /* this thread's; auth.json's credentials */
  cn_lazy_toc_source ts = {.get = toc_get,
                           .put = toc_put,
                           .arg = fx,
                           .open = cn_lazy_kept_open,
                           .done = cn_lazy_kept_done,
                           .src_arg = &sources};
  for (;;) {
    pthread_mutex_lock(&fx->mu);
    while (!fx->head && !fx->stopping) pthread_cond_wait(&fx->work, &fx->mu);
    request *q = fx->head;
    if (q) {
      fx->head = q->next;
      if (!fx->head) fx->tail = &fx->head;
    }
    if (q && fx->reads_fd >= 0 && fx->in_flight++ == 0) flock(fx->reads_fd, LOCK_SH);
    pthread_mutex_unlock(&fx->mu);
    if (!q) break;
    char blob[48], msg[1024] = "";
    answer a = {fx, q->sha256, false};
    ts.ready = ready;
    ts.ready_arg = &a;
    int r;
    if (open_r > 0) open_r = cairn_store_open_lazy(fx->dir, &st);
    bool large = open_r == 0 && fx->large_fd >= 0 && is_large(st, q->sha256);
    if (large) {
      pthread_mutex_lock(&fx->mu);
      if (fx->large++ == 0) flock(fx->large_fd, LOCK_SH);
      pthread_mutex_unlock(&fx->mu);
    }
    if (open_r < 0) {
      r = open_r;
      snprintf(msg, sizeof msg, "%s: cannot open the store: %s", fx->dir, strerror(-r));
    } else if ((r = cn_lazy_fetch_from(st, q->sha256, &ts, blob)) < 0) {
      const char *why = cairn_errmsg(st);
      snprintf(msg, sizeof msg, "%s", why && *why ? why : strerror(-r));
    }
    one_line(msg);
    /* answered already: a failure after it (the sync, the record) leaves
     * the file pending and its blob in place, for the next fetch */
    if (!a.sent) fx->done(q->sha256, r, r < 0 ? msg : blob, fx->arg);
    free(q);
    pthread_mutex_lock(&fx->mu);
    if (large && --fx->large == 0) flock(fx->large_fd, LOCK_UN);
    if (fx->reads_fd >= 0 && --fx->in_flight == 0) {
      futimens(fx->reads_fd, NULL); /* when the last ended */
      flock(fx->reads_fd, LOCK_UN);
    }
    pthread_mutex_unlock(&fx->mu);
  }
  cn_lazy_kept_free(&sources);
  if (st) cairn_store_close(st);
  return NULL;
}

int cairn_lazy_fetcher_new(const char *store_dir, unsigned threads, cairn_lazy_fetched_fn done,
                           void *arg, cairn_lazy_fetcher **out) {
  *out = NULL;
  if (threads < 1 || threads > THREADS_MAX || !done) return -EINVAL;
  cairn_lazy_fetcher *fx = calloc(1, sizeof *fx);
  if (!fx || !(fx->dir = strdup(store_dir))) {
    free(fx);
    return -ENOMEM;
  }
  pthread_mutex_init(&fx->mu, NULL);
  pthread_cond_init(&fx->work, NULL);
  pthread_cond_init(&fx->toc, NULL);
  fx->tail = &fx->head;
  /* opened through the store's descriptor, as the rest of the store;
   * none: the fills do not yield */
  fx->reads_fd = fx->large_fd = -1;
  cairn_store *st = NULL;
  if (cairn_store_open_lazy(store_dir, &st) == 0) {
    int flags = O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC;
    fx->reads_fd = cn_store_openat(st, "tmp/" CN_FIRST_READS, flags, 0600);
    fx->large_fd = cn_store_openat(st, "tmp/" CN_FIRST_READS_LARGE, flags, 0600);
    cairn_store_close(st);
  }
  fx->done = done;
  fx->arg = arg;
  for (; fx->n_threads < threads; fx->n_threads++)
    if (pthread_create(&fx->tids[fx->n_threads], NULL, worker, fx) != 0) break;
  if (fx->n_threads == 0) {
    cairn_lazy_fetcher_free(fx);
    return -EAGAIN;
  }
  *out = fx;
  return 0;
}

int cairn_lazy_fetcher_submit(cairn_lazy_fetcher *fx, const char *sha256) {
  size_t n = strlen(sha256);
  request *q = malloc(sizeof *q + n + 1);
  if (!q) return -ENOMEM;
  q->next = NULL;
  memcpy(q->sha256, sha256, n + 1);
  pthread_mutex_lock(&fx->mu);
  *fx->tail = q;
  fx->tail = &q->next;
  pthread_cond_signal(&fx->work);
  pthread_mutex_unlock(&fx->mu);
  return 0;
}

void cairn_lazy_fetcher_free(cairn_lazy_fetcher *fx) {
  if (!fx) return;
  pthread_mutex_lock(&fx->mu);
  fx->stopping = true;
  pthread_cond_broadcast(&fx->work);
  pthread_mutex_unlock(&fx->mu);
  for (unsigned t = 0; t < fx->n_threads; t++) pthread_join(fx->tids[t], NULL);
  while (fx->head) {
    request *q = fx->head;
    fx->head = q->next;
    free(q);
  }
  while (fx->tocs) {
    toc_entry *e = fx->tocs;
    fx->tocs = e->next;
    toc_entry_free(e);
  }
  pthread_cond_destroy(&fx->toc);
  pthread_cond_destroy(&fx->work);
  pthread_mutex_destroy(&fx->mu);
  if (fx->reads_fd >= 0) close(fx->reads_fd);
  if (fx->large_fd >= 0) close(fx->large_fd);
  free(fx->dir);
  free(fx);
}
