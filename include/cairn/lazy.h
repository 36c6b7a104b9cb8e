/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cairn/lazy.h — libcairn's public face: lazily pulled layers: what a mount fetches.
 * Included by cairn.h, whose comment gives the conventions every function
 * here keeps (errors, ids, handles).
 */
#ifndef CAIRN_LAZY_H
#define CAIRN_LAZY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cairn/store.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- partial layers: lazy pulls (store/lazy.c) ------------------------- */

/* Whether blob is a pending file's "sha256:HEX" (a lazily pulled file not
 * fetched yet), not a stored blob's name.
 * Returns true if it is (false for NULL). */
bool cairn_blob_is_pending(const char *blob);

/* Where a partial layer's files are fetched from. */
typedef struct cairn_lazy_source {
  const char *source;      /* the registry and repository, "HOST[:PORT]/REPO" */
  bool insecure;           /* no TLS checks; plain HTTP if it speaks no TLS */
  const char *digest;      /* the layer blob's "sha256:HEX" */
  const char *media_type;  /* the blob's */
  uint64_t size;           /* the blob's */
  const char *annotations; /* the manifest descriptor's annotations (JSON) */
  const char *toc_digest;  /* "sha256:HEX" of the kept TOC's bytes */
} cairn_lazy_source;

/* A pending file and its layer's source (cn_lazy_file_find). */
typedef struct cairn_lazy_file {
  char *layer_id, *path; /* one of the entries pending on that content */
  uint64_t size;
  char *source, *digest, *media_type, *annotations, *toc_digest; /* cairn_lazy_source's */
  bool insecure;
  uint64_t blob_size;
} cairn_lazy_file;
/* Calls fn for every pending file of the store, by layer then path, with
 * its layer's source (f's strings valid during the call) and its content's
 * "sha256:HEX"; a non-zero return stops the walk and is returned. */
typedef int (*cairn_lazy_pending_fn)(const cairn_lazy_file *f, const char *sha256, void *arg);
/* The access list of image_id (store/access.c): the paths (relative,
 * normalised) of the files a mount read first, in the order of their first
 * reads, as cairnfs -o record_access recorded them. _write replaces the
 * image's list with paths[0..n); cn_access_list_read gives it
 * (cn_strv_free) and returns 1, or 0 (*n 0) when the image has none.
 * Returns 0; -EINVAL: image_id is not an id; -ENOSPC: the store's file system is full. */
int cairn_access_list_write(cairn_store *st, const char *image_id, const char *const *paths,
                            size_t n);
/* How many paths the access list of image_id holds.
 * Returns the count; 0: the image has none; -EINVAL: image_id is not an id; -EBADMSG: the
 * list is too large to be one. */
int cairn_access_list_count(cairn_store *st, const char *image_id);
/* How many files (and bytes) of image_id are pending (each layer's), in
 * *files and *bytes (each unless NULL); 0 for an image that is complete or
 * not there.
 * Returns 0. */
int cairn_image_pending(cairn_store *st, const char *image_id, uint64_t *files, uint64_t *bytes);

/* Fetches the pending file of content sha256 from its layer's registry
 * (store/remote/lazy.c): its chunks by one range request, each decompressed
 * and checked against its digest in the kept TOC, the whole against
 * sha256, before cn_lazy_file_store records it; blob gets its name.
 * A content the store holds already is only named. May be called from
 * several threads, each with its own handle.
 * Returns 0; -EBADMSG: the fetched bytes are not what the TOC says; -ENOENT: nothing is
 * pending on sha256 and the store lacks it; -EINVAL: sha256 is not a sha256; else the
 * registry's failure, after the pull's bounded retries (-EPROTO: an HTTP status it did not
 * expect). */
int cairn_lazy_fetch(cairn_store *st, const char *sha256, char blob[48]);
/* The diff_ids (hex; free each and the array) of image_id's layers a lazy
 * pull recorded whose diff_id is not proven yet (or refuted), in layer
 * order, in *diff_ids and *n.
 * Returns 0 (*n 0: none, or no such image). */
int cairn_image_unverified(cairn_store *st, const char *image_id, char ***diff_ids, size_t *n);

/* A long-lived fetcher of pending files (store/remote/fetcher.c: what
 * `cairn fill --serve` runs for a mount): up to `threads` fetches at once
 * (1 to 16), each thread with a store handle of its own on store_dir; each
 * is cairn_lazy_fetch's (the same lock, the same checks), except that the
 * kept TOC of a layer is read, checked and parsed once and kept in memory
 * (a few layers' at most) for the next fetches of the layer. done hears
 * each request's end, from a fetcher thread (one call at a time is not
 * promised): r 0 and text the blob's name, or a negative errno and text
 * the failure (one line). The fetcher in *out.
 * Returns 0; -EINVAL: threads out of range or no done; -EAGAIN: no thread could be started. */
typedef struct cairn_lazy_fetcher cairn_lazy_fetcher;
typedef void (*cairn_lazy_fetched_fn)(const char *sha256, int r, const char *text, void *arg);
int cairn_lazy_fetcher_new(const char *store_dir, unsigned threads, cairn_lazy_fetched_fn done,
                           void *arg, cairn_lazy_fetcher **out);
/* Queues a fetch of content sha256 ("sha256:HEX" or HEX; copied); done is
 * called for it (a malformed one too).
 * Returns 0; -ENOMEM: it cannot be queued. */
int cairn_lazy_fetcher_submit(cairn_lazy_fetcher *fx, const char *sha256);
/* Finishes the fetches queued, then frees fx. */
void cairn_lazy_fetcher_free(cairn_lazy_fetcher *fx);
/* A test seam: a named point of a step (store/remote/ has no libcairn_store.h),
 * where a unit test's hook, or the crash-point injector
 * (tests/crash/inject.c, CAIRN_INJECT_POINTS=1), may act; nothing
 * otherwise. */
void cairn_test_point(cairn_store *st, const char *point);

#ifdef __cplusplus
}
#endif

#endif
