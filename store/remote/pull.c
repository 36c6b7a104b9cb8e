/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pull.c — cairn_pull: bring an image from a source into the store.
 *
 * The order is the point (doc/design.md, Pins): for each layer of the config,
 * take its shared pin FIRST, then ask whether it is stored. A concurrent
 * rm either finished before the pin (the layer is absent and this pull
 * fetches it) or cannot delete it while the pin is held. Every pin is kept
 * until the image record is committed, so no committed image can reference
 * a layer that vanished.
 *
 * Layers that are absent are fetched by up to opts->jobs worker threads.
 * Each worker has its own store handle (a handle is not thread-safe): its
 * failures are recorded there, and the first one is copied (under the
 * run's lock) for the main thread to record on the pull's handle. It
 * ingests with no pin set of its own: the main thread's set holds every
 * layer throughout. Blobs land in an unlinked temporary file inside the store
 * (STORE/tmp), are checked against their descriptor (size while
 * downloading, sha256 at the end), and only then ingested, which checks the
 * diff_id. Any failure stops the other workers and nothing is committed.
 * The main thread meanwhile reports progress.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "libcairn_remote_lazy.h"
#include "libcairn_partial.h"
#include "libcairn_registry.h"
#include "libcairn_remote.h"

/* ---- the fetch workers ---------------------------------------------------- */

typedef struct layer_slot {
  _Atomic uint64_t fetched;
  _Atomic uint64_t stored; /* of the blob, while it is ingested */
  _Atomic int state;       /* enum cairn_pull_state */
  atomic_bool partial;     /* pulled partially: fetched is all it cost */
  bool fetch;              /* absent from the store and first of its diff_id */
  bool prove;              /* stored unproven from another blob: pulled in full */
  _Atomic bool lazy;       /* recorded from its TOC: its size shown is what was fetched */
} layer_slot;

typedef struct fetch_run {
  pull_source *src;
  pull_image *img;
  layer_slot *slots;
  const char *store_dir;
  const char *purpose;
  pthread_mutex_t lock; /* next, err, why; cond */
  pthread_cond_t cond;  /* signalled on every change of a layer's state */
  size_t next;
  int err;
  char why[1024]; /* the reason of err, copied from the worker's handle */
  atomic_bool cancel;
  bool lazy;         /* pull --lazy */
  bool said_in_full; /* a --lazy pull said it pulls a layer in full */
  bool said_padding; /* a layer's blob without its tar's record padding, said */
} fetch_run;

static void set_state(fetch_run *run, size_t i, enum cairn_pull_state s) {
  pthread_mutex_lock(&run->lock);
  atomic_store(&run->slots[i].state, (int)s);
  pthread_cond_broadcast(&run->cond);
  pthread_mutex_unlock(&run->lock);
}

/* Keeps the first failure (one that is not the cancellation it causes) and
 * its reason from the worker's handle wst (NULL: out of memory). */
static void record_error(fetch_run *run, int err, const cairn_store *wst) {
  pthread_mutex_lock(&run->lock);
  if (!run->err || (run->err == -ECANCELED && err != -ECANCELED)) {
    run->err = err;
    snprintf(run->why, sizeof run->why, "%s", cairn_errmsg(wst));
  }
  atomic_store(&run->cancel, true);
  pthread_cond_broadcast(&run->cond);
  pthread_mutex_unlock(&run->lock);
}

static int open_temp(const char *store_dir, cairn_store *wst) {
  char path[4096]; /* STORE/tmp exists: opening the store makes it */
  /* Anonymous, so that cn_layer_blob_keep can link it into the store. */
  snprintf(path, sizeof path, "%s/tmp", store_dir);
  int tfd = open(path, O_TMPFILE | O_RDWR | O_CLOEXEC, 0444);
  if (tfd >= 0) return tfd;
  snprintf(path, sizeof path, "%s/tmp/pull-XXXXXX", store_dir);
  int fd = mkostemp(path, O_CLOEXEC);
  if (fd < 0)
    return cairn_fail(wst, -errno, "temporary file in %s/tmp: %s", store_dir, strerror(errno));
  unlink(path); /* nothing is left behind, however the process ends */
  return fd;
}

/* The worker's handle's progress hook while it ingests a layer. */
static void on_stored(const cairn_progress *p, void *slot) {
  atomic_store(&((layer_slot *)slot)->stored, p->done);
}

/* Ingests the layer's blob (or rebuilt tar, with what pr knows of it) in
 * fd, from its start. */
static int ingest(fetch_run *run, cairn_store *wst, size_t i, int fd, cn_partial_result *pr) {
  const char *diff_id = run->img->diff_ids[i];
  if (lseek(fd, 0, SEEK_SET) < 0)
    return cairn_fail(wst, -errno, "temporary file: %s", strerror(errno));
  set_state(run, i, CAIRN_PULL_STORING);
  cairn_id got;
  /* No pin set: the main thread pinned this layer before it looked it up
   * and keeps the pin until the image is committed. */
  cairn_store_set_progress(wst, on_stored, &run->slots[i]);
  int r = pr ? cn_layer_ingest_hinted(wst, fd, diff_id, NULL, pr->hints, pr->n_hints,
                                      &pr->files_taken, got)
             : cn_layer_ingest(wst, fd, diff_id, NULL, got);
  cairn_store_set_progress(wst, NULL, NULL);
  uint64_t pad = r == 0 ? cn_layer_ingest_padding(wst) : 0;
  pthread_mutex_lock(&run->lock);
  bool say = pad && !run->said_padding;
  run->said_padding |= say;
  pthread_mutex_unlock(&run->lock);
  if (say)
    cn_pull_log(run->src,
                "layer %.19s: its blob lacks the tar's last %llu zero bytes (the record padding"
                " podman 4.3's zstd:chunked writer drops); its diff_id holds with them, which"
                " its exact tar keeps (said once)",
                run->img->layers[i].digest, (unsigned long long)pad);
  return r;
}

/* The partial pull of a zstd:chunked layer (libcairn_partial.h): 0 when the layer
 * is stored, 1 when it is to be pulled in full (said once when it was
 * tried), a negative errno when the pull must stop. */
static int fetch_partial(fetch_run *run, cairn_store *wst, size_t i, int fd) {
  const pull_desc *d = &run->img->layers[i];
  const char *diff_id = run->img->diff_ids[i];
  cn_partial_result pr;
  int r = cn_partial_pull(run->src, d, fd, &run->slots[i].fetched, &pr, wst);
  if (r == -ECANCELED || r == -ENOSPC) return r;
  if (r == 0) {
    atomic_store(&run->slots[i].partial, true);
    r = ingest(run, wst, i, fd, &pr);
    free(pr.hints);
    if (r == 0) {
      cn_pull_log(run->src,
                  "layer %.19s: partial pull: fetched %llu of %llu bytes in %zu requests "
                  "(%zu of %zu files were stored, %zu taken as stored, not hashed again)",
                  d->digest, (unsigned long long)pr.fetched, (unsigned long long)d->size,
                  pr.requests, pr.files_stored, pr.files, pr.files_taken);
      return 0;
    }
    if (r != -EBADMSG) return cn_fail_context(wst, r, "storing layer %s", diff_id);
  }
  if (r < 0)
    cn_pull_log(run->src, "layer %.19s: partial pull failed (%s); pulling it in full", d->digest,
                cairn_errmsg(wst));
  cairn_fail(wst, 0, "%s", "");
  atomic_store(&run->slots[i].partial, false);
  if (ftruncate(fd, 0) < 0 || lseek(fd, 0, SEEK_SET) < 0)
    return cairn_fail(wst, -errno, "temporary file: %s", strerror(errno));
  atomic_store(&run->slots[i].fetched, 0);
  return 1;
}

/* Fetches, verifies and ingests layer i with the worker's own handle. */
static int fetch_layer(fetch_run *run, cairn_store *wst, size_t i) {
  const pull_desc *d = &run->img->layers[i];
  const char *diff_id = run->img->diff_ids[i];
  cairn_autoclose int fd = open_temp(run->store_dir, wst);
  if (fd < 0) return fd;
  set_state(run, i, CAIRN_PULL_FETCHING);
  int r;
  if (run->slots[i].prove) {
    cn_pull_log(run->src,
                "layer %.19s: its diff_id %.19s is stored by a lazy pull of another blob, not"
                " proven; pulling this one in full to prove it",
                d->digest, diff_id);
  } else if (run->lazy) {
    size_t pending = 0;
    uint64_t got = 0;
    r = cn_lazy_layer(run->src, d, diff_id, &pending, &got, wst);
    atomic_store(&run->slots[i].fetched, got);
    if (r == 0) {
      atomic_store(&run->slots[i].lazy, true);
      cn_pull_log(run->src,
                  "layer %.19s: lazy pull: fetched its TOC (%llu bytes); %zu files to fetch",
                  d->digest, (unsigned long long)got, pending);
      set_state(run, i, CAIRN_PULL_DONE);
      return 0;
    }
    if (r < 0) return cn_fail_context(wst, r, "layer %s (blob %s)", diff_id, d->digest);
    if (r == 2)
      cn_pull_log(run->src,
                  "layer %.19s: its diff_id %.19s is stored by a lazy pull of another blob, not"
                  " proven; pulling this one in full to prove it",
                  d->digest, diff_id);
    pthread_mutex_lock(&run->lock);
    bool say = r == 1 && !run->said_in_full;
    run->said_in_full |= r == 1;
    pthread_mutex_unlock(&run->lock);
    if (say)
      cn_pull_log(run->src,
                  "layer %.19s: no lazy pull (not a registry's zstd:chunked or eStargz layer "
                  "whose TOC the manifest vouches for); pulling it in full, and any other such",
                  d->digest);
  }
  r = fetch_partial(run, wst, i, fd);
  if (r <= 0) {
    if (r == 0) set_state(run, i, CAIRN_PULL_DONE);
    return r;
  }
  blob_sink s;
  r = cn_blob_sink_init(&s, fd, d->size, &run->slots[i].fetched);
  s.cancel = &run->cancel;
  if (r == 0) r = run->src->ops->blob(run->src, d, &s, wst);
  if (r == -ENOSPC)
    cairn_fail(wst, r, "layer %s: %s/tmp: no space left on device", d->digest, run->store_dir);
  cn_blob_sink_free(&s);
  if (r == 0) {
    r = ingest(run, wst, i, fd, NULL);
    if (r == -EBADMSG)
      cn_fail_context(wst, r, "layer %s (blob %s)", diff_id, d->digest);
    else if (r < 0)
      cn_fail_context(wst, r, "storing layer %s", diff_id);
  }
  /* Kept for an Additional Layer Store (cairnfs --als): the blob is what
   * the sink checked against the descriptor. (A partially pulled layer
   * has no such blob: cairnfs --als does not offer it.) */
  if (r == 0 && (r = cn_layer_blob_keep(wst, diff_id, d->digest, d->media_type, d->size, fd)) < 0)
    cn_fail_context(wst, r, "keeping layer %s (blob %s)", diff_id, d->digest);
  if (r == 0) set_state(run, i, CAIRN_PULL_DONE);
  return r;
}

static void *fetch_worker(void *arg) {
  fetch_run *run = arg;
  cairn_store *wst = NULL;
  int r = cairn_store_open(run->store_dir, &wst);
  if (r < 0) {
    cn_fail_context(wst, r, "opening the store");
    record_error(run, r, wst);
  }
  while (r == 0 && !atomic_load(&run->cancel)) {
    pthread_mutex_lock(&run->lock);
    while (run->next < run->img->n_layers && !run->slots[run->next].fetch) run->next++;
    size_t i = run->next < run->img->n_layers ? run->next++ : SIZE_MAX;
    pthread_mutex_unlock(&run->lock);
    if (i == SIZE_MAX) break;
    if ((r = fetch_layer(run, wst, i)) < 0) record_error(run, r, wst);
  }
  if (wst) cairn_store_close(wst);
  return NULL;
}

static void report(const fetch_run *run, const cairn_pull_opts *o) {
  if (!o->progress) return;
  size_t n = run->img->n_layers;
  cairn_autofree cairn_pull_layer *v = calloc(n ? n : 1, sizeof *v);
  if (!v) return;
  for (size_t i = 0; i < n; i++) {
    v[i].digest = run->img->layers[i].digest;
    v[i].diff_id = run->img->diff_ids[i];
    v[i].size = atomic_load(&run->slots[i].lazy) ? atomic_load(&run->slots[i].fetched)
                                                 : run->img->layers[i].size;
    v[i].fetched = atomic_load(&run->slots[i].fetched);
    v[i].stored = atomic_load(&run->slots[i].stored);
    v[i].state = (enum cairn_pull_state)atomic_load(&run->slots[i].state);
    v[i].partial = atomic_load(&run->slots[i].partial);
  }
  o->progress(v, n, o->arg);
}

/* Runs the workers for every slot marked fetch; reports while they work. */
static int fetch_all(fetch_run *run, const cairn_pull_opts *o, cairn_store *st) {
  size_t todo = 0;
  for (size_t i = 0; i < run->img->n_layers; i++) todo += run->slots[i].fetch;
  size_t jobs = o->jobs ? o->jobs : 3;
  if (jobs > todo) jobs = todo;
  cairn_autofree pthread_t *tids = calloc(jobs ? jobs : 1, sizeof *tids);
  if (!tids) return cairn_fail(st, -ENOMEM, "out of memory");
  size_t started = 0;
  for (; started < jobs; started++)
    if (pthread_create(&tids[started], NULL, fetch_worker, run) != 0) break;
  if (started == 0 && jobs > 0) return cairn_fail(st, -EAGAIN, "cannot start a download thread");

  pthread_mutex_lock(&run->lock);
  for (;;) {
    size_t finished = 0;
    for (size_t i = 0; i < run->img->n_layers; i++)
      finished += run->slots[i].fetch && atomic_load(&run->slots[i].state) == CAIRN_PULL_DONE;
    if (finished == todo || run->err) break;
    pthread_mutex_unlock(&run->lock);
    report(run, o);
    pthread_mutex_lock(&run->lock);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 200 * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&run->cond, &run->lock, &ts);
  }
  pthread_mutex_unlock(&run->lock);
  for (size_t t = 0; t < started; t++) pthread_join(tids[t], NULL);
  report(run, o);
  return run->err ? cairn_fail(st, run->err, "%s", run->why) : 0;
}

/* ---- the pull --------------------------------------------------------------- */

/* registry set when the source is a registry's (docker://). */
static int open_source(const char *source, const cairn_pull_opts *o, pull_source **src,
                       bool *registry, cairn_store *st) {
  int r;
  *registry = false;
  if (strncmp(source, "oci:", 4) == 0)
    r = cn_oci_layout_open(source + 4, src, st);
  else if (strncmp(source, "docker-archive:", 15) == 0)
    r = cn_docker_archive_open(source + 15, src, st);
  else if (strncmp(source, "oci-archive:", 12) == 0) {
    char tmp[64]; /* STORE/tmp as the store's opening checked it */
    cn_store_tmp_path(st, tmp, sizeof tmp);
    r = cn_oci_archive_open(source + 12, tmp, src, st);
  } else if (strncmp(source, "docker://", 9) == 0) {
    *registry = true;
    r = cn_registry_source_open(source + 9, o, src, st);
  } else if (strncmp(source, "dir:", 4) == 0 || strncmp(source, "docker:", 7) == 0 ||
             strncmp(source, "containers-storage:", 19) == 0 ||
             strncmp(source, "docker-daemon:", 14) == 0 || strstr(source, "://"))
    return cairn_fail(st, -EINVAL,
                      "unsupported source (expected oci:DIR[:REF], oci-archive:FILE[:REF], "
                      "docker-archive:FILE or "
                      "[docker://][HOST/]REPO[:TAG|@DIGEST])");
  else { /* as podman: no transport is docker:// */
    *registry = true;
    r = cn_registry_source_open(source, o, src, st);
  }
  if (r == 0) (*src)->opts = o;
  return r;
}

/* Records the registry (the endpoint that gave the manifest), repository
 * and blob of each layer of img (stored, pinned by the caller), reused
 * ones too: a layer that several pulls bring has each one's origin. */
static int record_origins(registry *rg, const pull_image *img, cairn_store *st) {
  for (size_t i = 0; i < img->n_layers; i++) {
    const pull_desc *d = &img->layers[i];
    int r = cn_layer_origin_add(st, img->diff_ids[i], rg->endpoint, rg->repo, rg->insecure,
                                d->digest, d->media_type, d->size);
    if (r < 0)
      return cn_fail_context(st, r, "recording where layer %s came from", img->diff_ids[i]);
  }
  return 0;
}

/* Resolves the source's reference to an image manifest and its config;
 * the manifest's bytes in *manifest (len in *manifest_len) when not NULL. */
static int resolve_image(pull_source *src, const pull_platform *plat, pull_image *img,
                         char **manifest, size_t *manifest_len, cairn_store *st) {
  cairn_autofree char *body = NULL;
  size_t len = 0;
  int r = src->ops->manifest(src, NULL, &body, &len, st);
  for (int depth = 0; r == 0; depth++) {
    pull_desc child = {0};
    r = cn_oci_index_select(body, len, plat, &child, st);
    if (r <= 0) break;
    free(body);
    body = NULL;
    r = depth < 2 ? src->ops->manifest(src, &child, &body, &len, st)
                  : cairn_fail(st, -EBADMSG, "indexes nested too deep");
    cn_pull_desc_clear(&child);
  }
  if (r == 0) r = cn_oci_manifest_parse(body, len, img, st);
  if (r < 0) return r;
  if (manifest) {
    *manifest = body;
    *manifest_len = len;
    body = NULL;
  }

  if (img->config.size > PULL_MANIFEST_MAX)
    return cairn_fail(st, -EBADMSG, "config %s is too large", img->config.digest);
  blob_sink s;
  r = cn_blob_sink_init(&s, -1, img->config.size, NULL);
  if (r == 0) r = src->ops->blob(src, &img->config, &s, st);
  if (r == 0) {
    img->config_json = s.mem ? s.mem : strdup("");
    img->config_len = s.written;
    s.mem = NULL;
  }
  cn_blob_sink_free(&s);
  return r < 0 ? r : cn_oci_config_diff_ids(img, st);
}

static int pull_image_into(cairn_store *st, const char *source, const char *name,
                           const cairn_pull_opts *o, cairn_id image_id_out) {
  pull_platform plat;
  pull_source *src = NULL;
  pull_image img = {0};
  cairn_pinset *ps = NULL;
  cairn_autofree layer_slot *slots = NULL;
  cairn_autofree char *purpose = NULL;
  char norm[1024];
  int r;

  if (cn_pull_platform_parse(o->platform, &plat) < 0)
    return cairn_fail(st, -EINVAL, "bad platform %s (expected OS/ARCH[/VARIANT])", o->platform);
  if (name && cairn_name_normalize(name, norm, sizeof norm) < 0)
    return cairn_fail(st, -EINVAL, "bad image name %s", name);
  bool from_registry;
  if ((r = open_source(source, o, &src, &from_registry, st)) < 0) return r;
  if ((r = resolve_image(src, &plat, &img, NULL, NULL, st)) < 0) goto out;

  if (asprintf(&purpose, "pull %s", source) < 0 || !(ps = cairn_pinset_new(purpose, true)) ||
      !(slots = calloc(img.n_layers ? img.n_layers : 1, sizeof *slots))) {
    r = cairn_fail(st, -ENOMEM, "out of memory");
    goto out;
  }
  /* Pin, then look: never the other way round. */
  for (size_t i = 0; i < img.n_layers; i++) {
    const char *id = img.diff_ids[i];
    if ((r = cn_pin_take(st, ps, CAIRN_PIN_LAYER, id)) < 0) {
      r = cn_fail_context(st, r, "pinning layer %s", id);
      goto out;
    }
    bool first = true;
    for (size_t j = 0; j < i && first; j++) first = strcmp(img.diff_ids[j], id) != 0;
    /* a layer a lazy pull stored, its diff_id not proven, is reused only
     * by a lazy pull of the same blob and TOC */
    char *ann =
        o->lazy ? json_dumps(img.layers[i].annotations, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    int have = cn_layer_reusable(st, id, o->lazy ? img.layers[i].digest : NULL,
                                 o->lazy ? (ann ? ann : "{}") : NULL);
    free(ann);
    if (have < 0) {
      r = cn_fail_context(st, have, "looking up layer %s", id);
      goto out;
    }
    slots[i].prove = have == 2;
    if (have == 2) have = 0;
    slots[i].fetch = !have && first;
    atomic_store(&slots[i].state, have ? CAIRN_PULL_REUSED : CAIRN_PULL_WAITING);
  }

  fetch_run run = {.src = src,
                   .img = &img,
                   .slots = slots,
                   .store_dir = cairn_store_dir(st),
                   .purpose = purpose,
                   .lazy = o->lazy};
  pthread_mutex_init(&run.lock, NULL);
  pthread_cond_init(&run.cond, NULL);
  r = fetch_all(&run, o, st);
  pthread_cond_destroy(&run.cond);
  pthread_mutex_destroy(&run.lock);
  if (r < 0) goto out;
  for (size_t i = 0; i < img.n_layers; i++) /* repeated diff_ids are stored now */
    if (atomic_load(&slots[i].state) == CAIRN_PULL_WAITING)
      atomic_store(&slots[i].state, CAIRN_PULL_DONE);

  /* where each layer came from, for fsck --repair to fetch it again;
   * while the layers are pinned, before the image that uses them */
  if (from_registry && (r = record_origins((registry *)src, &img, st)) < 0) goto out;

  if (!name) name = src->default_name;
  r = cn_image_commit(st, img.config_json, img.config_len, (const char *const *)img.diff_ids,
                      img.n_layers, name, image_id_out);
  if (r < 0)
    cn_fail_context(st, r, "committing the image");
  else if (strcmp(image_id_out, img.config.digest + 7) != 0)
    r = cairn_fail(st, -EBADMSG, "stored image id %s is not the config digest %s", image_id_out,
                   img.config.digest);
out:
  if (ps) cairn_pinset_release(st, ps); /* only now: the image record (if any) is in */
  cn_pull_image_free(&img);
  if (src) src->ops->free(src);
  return r;
}

int cairn_pull(cairn_store *st, const char *source, const char *name, const cairn_pull_opts *opts,
               cairn_id image_id_out) {
  cairn_pull_opts o = opts ? *opts : (cairn_pull_opts){0};
  cairn_fail(st, 0, "%s", ""); /* no reason of an earlier call survives */
  int r = pull_image_into(st, source, name, &o, image_id_out);
  if (r < 0 && !cairn_errmsg(st)[0]) cairn_fail(st, r, "%s", strerror(-r));
  return r;
}

int cn_pull_blob_again(cairn_store *st, const char *where, bool insecure, const pull_desc *d,
                       const cairn_pull_opts *net, int fd) {
  cairn_pull_opts o = net ? *net : (cairn_pull_opts){0};
  o.insecure = o.insecure || insecure;
  o.config = NULL; /* where is the endpoint that answered the pull: no mirrors before it */
  o.lazy = false;
  pull_source *src = NULL;
  int r = cn_registry_source_open(where, &o, &src, st);
  if (r < 0) return r;
  src->opts = &o;
  blob_sink s;
  if ((r = cn_blob_sink_init(&s, fd, d->size, NULL)) < 0)
    r = cairn_fail(st, r, "out of memory");
  else if ((r = cn_blob_sink_reset(&s)) < 0)
    r = cairn_fail(st, r, "temporary file: %s", strerror(-r));
  else if ((r = src->ops->blob(src, d, &s, st)) == -ENOSPC)
    cairn_fail(st, r, "blob %s: %s/tmp: no space left on device", d->digest, cairn_store_dir(st));
  cn_blob_sink_free(&s);
  src->ops->free(src);
  return r;
}

/* The host of a reference ("[docker://]HOST[:PORT]/REPO..."): whether it
 * is this machine's loopback, to which containerd and stargz-snapshotter
 * speak plain HTTP unasked. */
static bool loopback_host(const char *ref) {
  if (strncmp(ref, "docker://", 9) == 0) ref += 9;
  size_t n = strcspn(ref, "/");
  static const char *const hosts[] = {"localhost", "127.0.0.1", "[::1]"};
  for (size_t i = 0; i < sizeof hosts / sizeof *hosts; i++) {
    size_t h = strlen(hosts[i]);
    if (n >= h && strncmp(ref, hosts[i], h) == 0 && (n == h || ref[h] == ':')) return true;
  }
  return false;
}

/* ---- the images of lazy layers' Prepares --------------------------------- */

/* containerd prepares an image's layers one after the other, each
 * Prepare naming the image: what the first one fetched of it (the
 * manifest its platform resolves to, the config) is kept a short time,
 * for the next ones to fetch their own layer's TOC only. A few images,
 * small ones (a manifest and config of an ordinary image are a few KiB),
 * for LAZY_IMAGE_TTL_S after they were fetched; used only from the same
 * endpoint (a mirror's is not the registry's) and for a layer its
 * manifest lists (a tag moved meanwhile: fetched again). */
#define LAZY_IMAGES 8
#define LAZY_IMAGE_TTL_S 60
#define LAZY_IMAGE_MAX (256u << 10) /* manifest and config, at most */

static struct lazy_image {
  char *key; /* "REF PLATFORM ENDPOINT" */
  char *manifest, *config;
  size_t manifest_len, config_len;
  struct timespec at;
} lazy_images[LAZY_IMAGES];
static pthread_mutex_t lazy_images_mu = PTHREAD_MUTEX_INITIALIZER;

static double seconds_since(const struct timespec *t) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (double)(now.tv_sec - t->tv_sec) + (double)(now.tv_nsec - t->tv_nsec) / 1e9;
}

/* The kept image of key into img (the bytes copied, parsed again): 0, or
 * -ENOENT when none is kept that lists the layer digest. */
static int lazy_image_get(const char *key, const char *digest, pull_image *img, cairn_store *st) {
  char *manifest = NULL, *config = NULL;
  size_t mlen = 0, clen = 0;
  pthread_mutex_lock(&lazy_images_mu);
  for (size_t i = 0; i < LAZY_IMAGES; i++) {
    struct lazy_image *e = &lazy_images[i];
    if (!e->key || strcmp(e->key, key) != 0 || seconds_since(&e->at) > LAZY_IMAGE_TTL_S) continue;
    manifest = malloc(e->manifest_len + 1);
    config = malloc(e->config_len + 1);
    if (manifest && config) {
      memcpy(manifest, e->manifest, e->manifest_len + 1);
      memcpy(config, e->config, e->config_len + 1);
      mlen = e->manifest_len;
      clen = e->config_len;
    }
    break;
  }
  pthread_mutex_unlock(&lazy_images_mu);
  int r = -ENOENT;
  if (manifest && config && cn_oci_manifest_parse(manifest, mlen, img, st) == 0) {
    img->config_json = config;
    img->config_len = clen;
    config = NULL;
    r = cn_oci_config_diff_ids(img, st);
    size_t i = 0;
    while (r == 0 && i < img->n_layers && strcmp(img->layers[i].digest, digest) != 0) i++;
    if (r == 0 && i == img->n_layers) r = -ENOENT;
  }
  if (r < 0) {
    cn_pull_image_free(img);
    cairn_fail(st, 0, "%s", "");
    r = -ENOENT;
  }
  free(manifest);
  free(config);
  return r;
}

/* Keeps what was fetched of the image of key (the manifest's bytes; the
 * manifest taken), in place of the same key's or the oldest. */
static void lazy_image_put(const char *key, char *manifest, size_t mlen, const pull_image *img) {
  if (mlen + img->config_len > LAZY_IMAGE_MAX) {
    free(manifest);
    return;
  }
  char *k = strdup(key), *config = malloc(img->config_len + 1);
  if (!k || !config) {
    free(k);
    free(config);
    free(manifest);
    return;
  }
  memcpy(config, img->config_json, img->config_len);
  config[img->config_len] = '\0';
  pthread_mutex_lock(&lazy_images_mu);
  size_t slot = 0;
  for (size_t i = 0; i < LAZY_IMAGES; i++) {
    struct lazy_image *e = &lazy_images[i];
    if (e->key && strcmp(e->key, key) == 0) {
      slot = i;
      break;
    }
    if (!e->key ||
        (lazy_images[slot].key && seconds_since(&e->at) > seconds_since(&lazy_images[slot].at)))
      slot = i;
  }
  struct lazy_image *e = &lazy_images[slot];
  free(e->key);
  free(e->manifest);
  free(e->config);
  *e = (struct lazy_image){.key = k,
                           .manifest = manifest,
                           .manifest_len = mlen,
                           .config = config,
                           .config_len = img->config_len};
  clock_gettime(CLOCK_MONOTONIC, &e->at);
  pthread_mutex_unlock(&lazy_images_mu);
}

int cn_pull_lazy_layer(cairn_store *st, const char *ref, const char *digest,
                       const cairn_pull_opts *opts, cairn_pinset *ps, cairn_id diff_id) {
  cairn_pull_opts o = opts ? *opts : (cairn_pull_opts){0};
  o.lazy = true;
  o.insecure = o.insecure || loopback_host(ref);
  pull_platform plat;
  pull_source *src = NULL;
  pull_image img = {0};
  cairn_autofree char *key = NULL; /* of the image kept (lazy_images) */
  bool from_registry;
  int r;
  cairn_fail(st, 0, "%s", "");
  if (cn_pull_platform_parse(o.platform, &plat) < 0)
    return cairn_fail(st, -EINVAL, "bad platform %s (expected OS/ARCH[/VARIANT])", o.platform);
  if ((r = open_source(ref, &o, &src, &from_registry, st)) < 0) return r;
  if (!from_registry) {
    r = cairn_fail(st, -EINVAL, "%s: not a registry's image", ref);
    goto out;
  }
  registry *rg = (registry *)src;
  if (asprintf(&key, "%s %s/%s/%s %s", ref, plat.os, plat.arch, plat.variant, rg->endpoint) < 0) {
    r = cairn_fail(st, -ENOMEM, "out of memory");
    goto out;
  }
  if (lazy_image_get(key, digest, &img, st) < 0) {
    char *manifest = NULL;
    size_t mlen = 0;
    if ((r = resolve_image(src, &plat, &img, &manifest, &mlen, st)) < 0) goto out;
    if (strcmp(rg->endpoint, rg->endpoints[0]) == 0) /* not a mirror's after a failure */
      lazy_image_put(key, manifest, mlen, &img);
    else
      free(manifest);
  }
  size_t i = 0;
  while (i < img.n_layers && strcmp(img.layers[i].digest, digest) != 0) i++;
  if (i == img.n_layers) {
    r = cairn_fail(st, -ENOENT, "%s: no layer %s in its manifest", ref, digest);
    goto out;
  }
  const pull_desc *d = &img.layers[i];
  const char *id = img.diff_ids[i];
  if ((r = cn_pin_take(st, ps, CAIRN_PIN_LAYER, id)) < 0) {
    cn_fail_context(st, r, "pinning layer %s", id);
    goto out;
  }
  char *ann = json_dumps(d->annotations, JSON_COMPACT | JSON_SORT_KEYS);
  int have = cn_layer_reusable(st, id, digest, ann ? ann : "{}");
  free(ann);
  if (have < 0) {
    r = cn_fail_context(st, have, "looking up layer %s", id);
    goto out;
  }
  if (have == 0) {
    size_t pending = 0;
    uint64_t got = 0;
    r = cn_lazy_layer(src, d, id, &pending, &got, st);
    if (r < 0) {
      cn_fail_context(st, r, "layer %s (blob %s)", id, digest);
      goto out;
    }
  } else {
    r = have == 1 ? 0 : 2;
  }
  if (r > 0) { /* no TOC vouched for, or its diff_id stored unproven: not lazily */
    r = 1;
    goto out;
  }
  if ((r = cn_layer_origin_add(st, id, rg->endpoint, rg->repo, rg->insecure, d->digest,
                               d->media_type, d->size)) < 0) {
    cn_fail_context(st, r, "recording where layer %s came from", id);
    goto out;
  }
  snprintf(diff_id, sizeof(cairn_id), "%s", id);
out:
  cn_pull_image_free(&img);
  if (src) src->ops->free(src);
  return r;
}
