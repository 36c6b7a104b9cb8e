/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lazy.h — lazy pulls of zstd:chunked and eStargz layers (lazy.c), for
 * pull.c, partial.c and the fill. Built on cairn.h alone, like the rest
 * of store/remote/.
 */
#ifndef LIBCAIRN_REMOTE_LAZY_H
#define LIBCAIRN_REMOTE_LAZY_H

#include "libcairn_remote.h"
#include "libcairn_toc.h"

/* A layer's TOC as fetched (cn_lazy_toc_fetch) or kept (cn_lazy_kept_toc),
 * verified against what the manifest's annotations vouch for. */
typedef struct cn_lazy_toc {
  cn_toc toc; /* parsed; toc.format says which */
  /* the bytes kept as STORE/toc/HEX: zstd:chunked the TOC frame, eStargz
   * the blob from the TOC's gzip member to its end (the footer included) */
  unsigned char *raw;
  size_t raw_len;
  char raw_digest[CAIRN_DIGEST_LEN + 1]; /* their sha256: the source row's */
  /* eStargz: the TOC's own tar entry (stargz.index.json, json_len > 0),
   * which the tar holds and the TOC does not list */
  cn_toc_estargz_self self;
} cn_lazy_toc;
void cn_lazy_toc_free(cn_lazy_toc *lt);

/* fsck's check of the pending files against their layers' kept TOCs (the
 * parser is the pull's): each TOC parses and matches the digest the pull
 * verified, and lists each pending file as a regular file of its size and
 * sha256. Each problem goes to r (cn_report_problem); a negative errno if
 * it could not look. Only store/fsck.c calls it. */
int cn_lazy_toc_fsck(cairn_store *st, cairn_report *r);

/* Fetches layer d's TOC by range requests, per format: zstd:chunked the
 * range the annotation names (checked against the checksum annotation);
 * eStargz the footer (the last 51 bytes), then [TOC, footer) (the TOC
 * JSON checked against "containerd.io/snapshot/stargz/toc.digest"). 0
 * with *lt, 1 when the layer has no TOC the manifest vouches for or the
 * source cannot range-request (pull it in full), a negative errno on
 * failure. *fetched and *requests grow by what it cost. */
int cn_lazy_toc_fetch(pull_source *src, const pull_desc *d, cn_lazy_toc *lt, uint64_t *fetched,
                      size_t *requests, cairn_store *st);

/* Records layer d (diff_id, pinned by the caller) of a registry source
 * from its TOC alone (cn_lazy_toc_fetch), kept; the files the store holds
 * are linked, the others pending (*pending); an eStargz layer's
 * stargz.index.json (the TOC itself) is stored at once. 0 when recorded
 * (or stored already), 1 when the layer has no TOC the manifest vouches
 * for, or the source cannot range-request (pull it in full), 2 when a
 * lazy pull of another blob stored that diff_id meanwhile, unproven (pull
 * it in full: cn_layer_reusable), a negative
 * errno on failure. *fetched grows by the bytes fetched. */
int cn_lazy_layer(pull_source *src, const pull_desc *d, const char *diff_id, size_t *pending,
                  uint64_t *fetched, cairn_store *st);

/* The layer of blob digest of the registry's image ref ("[docker://]HOST
 * [:PORT]/REPO[:TAG|@DIGEST]", opts' platform and credentials; a loopback
 * host is spoken to as insecure, as containerd does), for a remote
 * snapshot (store/snapshot.c): its manifest and config fetched, the layer
 * pinned in ps and recorded lazily from its TOC (cn_lazy_layer) unless
 * the store may reuse it as it is, where it came from recorded; no image
 * is committed. 0 and its diff_id; 1 when it cannot be pulled lazily (no
 * TOC the manifest vouches for, or its diff_id stored unproven from
 * another blob); -ENOENT: the manifest has no such layer; else the
 * registry's failure. */
int cn_pull_lazy_layer(cairn_store *st, const char *ref, const char *digest,
                       const cairn_pull_opts *opts, cairn_pinset *ps, cairn_id diff_id);

/* The kept TOC of f's layer, parsed and checked again (its bytes against
 * the digest recorded, its content against the annotations kept). */
int cn_lazy_kept_toc(cairn_store *st, const cairn_lazy_file *f, cn_lazy_toc *lt);

/* Where a fetch gets a layer's kept TOC from: get sets *lt to it, parsed
 * and checked as cn_lazy_kept_toc checks it (0, or a negative errno with
 * WHY in st), put gives it back once the fetch is done with it (a cache of
 * them: fetcher.c); get NULL: read for the fetch. Optionally (open not
 * NULL) the registry source too:
 * open sets *src to a source for f's layer (f->source, f->insecure), one
 * kept across fetches with its connection and token; done gives it back
 * with the fetch's result (a failure of the request: the caller may drop
 * it and open a new one next time). */
typedef struct cn_lazy_toc_source {
  int (*get)(void *arg, cairn_store *st, const cairn_lazy_file *f, const cn_lazy_toc **lt);
  void (*put)(void *arg, const cn_lazy_toc *lt);
  void *arg;
  int (*open)(void *src_arg, cairn_store *st, const cairn_lazy_file *f, pull_source **src);
  void (*done)(void *src_arg, pull_source *src, int r);
  void *src_arg;
  /* Optionally: the fetched file's blob, written and verified, before it
   * is made durable and recorded (cn_lazy_file_store_ready): a reader may
   * be served from it. */
  void (*ready)(const char *blob, void *ready_arg);
  void *ready_arg;
} cn_lazy_toc_source;

/* The options a fetch of one file opens its registry source with (f's
 * --insecure; creds "USER:PASS", or NULL for auth.json's; three attempts,
 * a short backoff). */
void cn_lazy_source_opts(const cairn_lazy_file *f, const char *creds, cairn_pull_opts *o);

/* Registry sources kept across fetches, for cn_lazy_toc_source's open and
 * done (src_arg: a cn_lazy_sources, zeroed but for creds at first; one
 * thread's): at most a few, by f->source and f->insecure, each with its
 * connections and token; one whose request failed dropped, one ten
 * minutes old renewed. */
typedef struct cn_lazy_kept cn_lazy_kept;
typedef struct cn_lazy_sources {
  cn_lazy_kept *kept;
  const char *creds; /* "USER:PASS" for every source, or NULL: auth.json's */
} cn_lazy_sources;
int cn_lazy_kept_open(void *src_arg, cairn_store *st, const cairn_lazy_file *f, pull_source **src);
void cn_lazy_kept_done(void *src_arg, pull_source *src, int r);
void cn_lazy_kept_free(cn_lazy_sources *s);

/* Fetches f (of content sha256) from its layer's registry and stores it
 * (cn_lazy_file_store); blob gets its name. Its layer's TOC from ts, or
 * (ts NULL) read and checked for this fetch alone (cn_lazy_kept_toc). */
int cn_lazy_fetch_file(cairn_store *st, const cairn_lazy_file *f, const char *sha256,
                       const cn_lazy_toc_source *ts, char blob[48]);

/* cairn_lazy_fetch, the TOCs from ts (NULL: each read for the fetch). */
int cn_lazy_fetch_from(cairn_store *st, const char *sha256, const cn_lazy_toc_source *ts,
                       char blob[48]);

/* Entry e's chunks from the blob's bytes [lo, lo + n) in buf (n: up to its
 * last chunk's end), each decompressed (a gzip member or a zstd frame, or
 * a run of them: the data's magic says which; eStargz's innerOffset
 * honoured) and checked against its digest, into fd from offset 0; then
 * the whole against e->digest. -EBADMSG when the data is not what the TOC
 * says: nothing of it is to be served. */
int cn_lazy_unpack(const cn_toc_entry *e, const unsigned char *buf, uint64_t lo, int fd,
                   cairn_store *st);
/* The same, the blob's bytes [lo, ...) in the file in_fd from offset at,
 * read a window at a time: memory does not follow the range's size. */
int cn_lazy_unpack_fd(const cn_toc_entry *e, int in_fd, uint64_t at, uint64_t lo, int fd,
                      cairn_store *st);

/* Gives the allocator's free pages back to the system (malloc_trim): what
 * a long-lived fill or fetcher calls after a TOC's parse (its JSON tree
 * freed) and between fetches, so that its resident memory follows what
 * it holds, not what it once held. */
void cn_lazy_trim(void);

/* An anonymous file in STORE/tmp for a fetched file's content. */
int cn_lazy_open_temp(cairn_store *st);

/* Under the lock of content full ("sha256:HEX", cn_lazy_lock): 1 (blob
 * set) when the store holds it already (then named in its pending
 * entries), 0 when it is to fetch (*f set: cn_lazy_file_clear), -ENOENT
 * when it is neither stored nor pending, another negative errno. */
int cn_lazy_file_named(cairn_store *st, const char *full, char blob[48], cairn_lazy_file *f);

#endif
