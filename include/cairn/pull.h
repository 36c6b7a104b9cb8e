/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cairn/pull.h — libcairn's public face: pull and fill.
 * Included by cairn.h, whose comment gives the conventions every function
 * here keeps (errors, ids, handles).
 */
#ifndef CAIRN_PULL_H
#define CAIRN_PULL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cairn/store.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- pull -------------------------------------------------------------- */

/* The wait before retry number attempt (0 = the first retry): exponential
 * from base_ms, doubling per attempt up to cap_ms, with "equal jitter" (the
 * upper half of the current step is random, taken from rnd). Correct for
 * every attempt number, UINT_MAX included: no shift or multiply can wrap
 * (base_ms > cap_ms is read as base_ms == cap_ms).
 * Returns the wait in milliseconds, always in [base_ms, cap_ms]. */
uint64_t cairn_backoff_ms(unsigned attempt, uint64_t base_ms, uint64_t cap_ms, uint64_t rnd);

enum cairn_pull_state {
  CAIRN_PULL_WAITING = 0, /* pinned, not started */
  CAIRN_PULL_FETCHING,    /* bytes are arriving */
  CAIRN_PULL_STORING,     /* verified blob is being ingested */
  CAIRN_PULL_REUSED,      /* was already in the store */
  CAIRN_PULL_DONE,        /* fetched, verified and stored */
};

/* One layer as a progress callback sees it. */
typedef struct cairn_pull_layer {
  const char *digest;  /* the blob's "sha256:..." */
  const char *diff_id; /* the layer id (hex) */
  uint64_t size;       /* the blob's size from its descriptor */
  uint64_t fetched;    /* bytes received so far (of this attempt) */
  uint64_t stored;     /* STORING: bytes of the blob ingested so far (of size) */
  enum cairn_pull_state state;
  /* STORING, DONE: pulled partially (doc/lazy-pulls.md): fetched is all that
   * came over the network for it (the TOC and the ranges of the files the
   * store lacked), against size; stored counts the rebuilt stream, which
   * is not size */
  bool partial;
} cairn_pull_layer;

typedef struct cairn_pull_opts {
  const char *platform; /* "OS/ARCH[/VARIANT]"; NULL is linux/amd64 */
  const char *creds;    /* "USER:PASS"; NULL reads auth.json files */
  bool insecure;        /* docker://: no TLS checks, plain HTTP to a host with no TLS */
  /* docker://: cairn.conf (cairn_config_load), or NULL: the registry's
   * mirrors are tried first, in order, each until one gives the image's
   * manifest, which then serves the whole pull; a registry (or mirror) it
   * marks insecure is talked to as with insecure. */
  const cairn_config *config;
  /* docker://: a directory whose *.crt CAs are trusted besides the
   * system's; NULL looks in /etc/{containers,docker}/certs.d/HOST[:PORT] */
  const char *cert_dir;
  unsigned jobs; /* layers fetched at once; 0 is 3 */
  /* docker://: a zstd:chunked layer is recorded from its TOC alone, its
   * files fetched on first read or by cairn_fill (doc/lazy-pulls.md);
   * other layers are pulled in full, said once through log */
  bool lazy;
  unsigned attempts;                        /* tries per request; 0 is 6 */
  uint64_t backoff_base_ms, backoff_cap_ms; /* 0 is 200 / 10000 */
  /* Called on the calling thread a few times a second while layers move
   * and on every change of state; the array is valid during the call. */
  void (*progress)(const cairn_pull_layer *layers, size_t n, void *arg);
  /* One line per retried attempt (no newline); calls are serialized but
   * may come from any thread. */
  void (*log)(const char *line, void *arg);
  void *arg;
} cairn_pull_opts;

/* Pulls SOURCE ("oci:DIR[:REF]", "docker-archive:FILE",
 * "docker://HOST[:PORT]/REPO[:TAG|@sha256:HEX]") into the store and
 * commits it, named name (or a default name from the source when NULL:
 * HOST[:PORT]/REPO:TAG, the archive's first RepoTag, the OCI layout
 * entry's name annotation as podman reads it: io.containerd.image.name,
 * else org.opencontainers.image.ref.name, with "localhost/" when it names
 * no host and ":latest" when no tag; no name when it has none). Every layer is pinned before it is
 * looked up and stays pinned until the image is committed. Nothing is committed when any blob fails
 * its digest or size. On failure cairn_errmsg(st) gives the reason.
 * Returns 0; -EBADMSG: a blob fails its digest or size (or a manifest, config or archive is
 * malformed); -ENOENT: the source, manifest, platform or a blob is not there; -EACCES: auth is
 * refused; -EINVAL: a bad source, name or platform; else the registry's failure. */
int cairn_pull(cairn_store *st, const char *source, const char *name, const cairn_pull_opts *opts,
               cairn_id image_id_out);

/* Fetches every pending file of image ref, holding the image's and its
 * layers' pins throughout (rm is refused meanwhile; pinned, when set, is
 * called once they are held): the files a prefetch landmark names first,
 * then the rest in layer and TOC order; files next to each other in a
 * layer's blob one range, several ranges one request, a few requests in
 * flight (store/remote/fill.c); each file verified as cairn_lazy_fetch
 * verifies it and stored alone, under its lock (cn_lazy_lock): a file
 * another process is fetching is not fetched again. A file that fails is
 * said through log and the rest are fetched. Resumable:
 * what a killed fill stored stays stored, the rest stays pending. image_id
 * gets the image.
 * Returns 0: nothing is pending any more; -ENOENT: no such image; -EINVAL: an ambiguous
 * prefix; else the first file's failure (as cairn_lazy_fetch's), the WHY saying how many
 * failed. */
typedef struct cairn_fill_opts {
  void (*progress)(size_t done, size_t total, void *arg); /* files */
  void (*log)(const char *line, void *arg);
  void (*pinned)(void *arg);
  void *arg;
  bool keep_blobs;   /* finish each layer from its whole blob, kept (cairnfs --als) */
  const char *creds; /* "USER:PASS" for the layers' registries; NULL: auth.json's */
} cairn_fill_opts;
int cairn_fill(cairn_store *st, const char *image_ref, const cairn_fill_opts *opts,
               cairn_id image_id);

/* What push and export do first (store/remote/partial.c): an image a lazy
 * pull left with files not fetched yet, or layers without their exact tar
 * record, is filled (cairn_fill), said through log first ("ID was pulled
 * lazily: fetching its N files not fetched yet (SIZE) first, as cairn fill
 * does").
 * Returns 0, also when there was nothing to do; else as cairn_fill. */
int cairn_fill_lazy(cairn_store *st, const char *image_id, void (*log)(const char *line, void *arg),
                    void *arg);

#ifdef __cplusplus
}
#endif

#endif
