/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libcairn_partial.h — the partial pull of a zstd:chunked layer (doc/lazy-pulls.md,
 * "What is fetched when", item 4): only the files the store lacks are
 * fetched, by range requests, and the layer's zstd stream is rebuilt from
 * the fetched bytes and the stored files, then ingested as a full pull's
 * blob is (the ingest checks the diff_id: the rebuilt tar must be the
 * layer's byte for byte).
 *
 * Why it is exact: a zstd:chunked blob is a zstd-compressed tar in which
 * every regular file's data (or each chunk of it) is frames of its own,
 * [off, off + csize) in the TOC; everything between (tar headers, padding,
 * the end of the archive) is other frames, and after the data come only
 * skippable frames (TOC, tar-split, footer). Frames concatenate: replacing
 * a file's frames by any frames of the same content (cairn writes stored
 * raw blocks) decompresses to the same tar. eStargz cannot do this: a
 * file's last gzip member also holds the padding and the headers of the
 * entries after it, so it must be fetched whatever the store holds.
 *
 * Built on cairn.h alone, like the rest of store/remote/.
 */
#ifndef LIBCAIRN_PARTIAL_H
#define LIBCAIRN_PARTIAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "libcairn_remote.h"
#include "libcairn_toc.h"

/* A stored chunk smaller than this between fetched ranges is fetched too:
 * a range costs about as much in a multipart reply's part headers. */
#define CN_PARTIAL_MERGE_GAP 512
/* Ranges and bytes of one multi-range request. */
#define CN_PARTIAL_RANGES_MAX 200
#define CN_PARTIAL_REQUEST_MAX (32u << 20)
/* Requests of one layer's partial pull in flight at once, each on a thread
 * of its own, and how many bytes they may fetch ahead of the rebuild (the
 * request the rebuild waits for is always sent). */
#define CN_PARTIAL_INFLIGHT 4
#define CN_PARTIAL_INFLIGHT_BYTES (64ull << 20)

typedef enum cn_partial_kind { CN_SEG_FETCH, CN_SEG_STORED } cn_partial_kind;

/* One piece of the rebuilt stream, in blob order: the blob's bytes
 * [off, off + len) fetched, or (STORED) in place of them the bytes
 * [uoff, uoff + usize) of the stored file entry (an index into the TOC). */
typedef struct cn_partial_seg {
  cn_partial_kind kind;
  uint64_t off, len;
  size_t entry;
  uint64_t uoff, usize;
} cn_partial_seg;

typedef struct cn_partial_plan {
  cn_partial_seg *segs;
  size_t n_segs;
  uint64_t end;               /* the stream rebuilt is the blob's [0, end) */
  uint64_t fetch_bytes;       /* of the FETCH segments */
  size_t files, files_stored; /* regular files with data; of them stored */
  size_t *missing;            /* the TOC entries of the others */
  size_t n_missing;
} cn_partial_plan;

/* Says whether the store holds a file of content sha256 ("sha256:hex"): 1,
 * 0, or a negative errno. */
typedef int (*cn_partial_have_fn)(const char *sha256, void *arg);

/* Plans the rebuild of a zstd:chunked layer from its parsed TOC: every
 * regular file have() finds is STORED, every other byte of [0, end)
 * fetched, end the skippable frame (TOC or tar-split) after the tar's
 * frames, toc->data_end - 8 (STORED chunks under merge_gap bytes fetched
 * too, adjacent fetches merged). -EBADMSG when the chunks overlap. */
int cn_partial_plan_make(const cn_toc *toc, uint64_t merge_gap, cn_partial_have_fn have, void *arg,
                         cn_partial_plan *plan, cairn_store *st);
void cn_partial_plan_free(cn_partial_plan *plan);

/* Writes the rebuilt stream to out. fetched(i) gives FETCH segment i's
 * len bytes (valid until the next call); content(i, at, buf, n) reads n
 * bytes at offset seg.uoff + at of STORED segment i's file. */
typedef struct cn_partial_io {
  int (*fetched)(const cn_partial_plan *plan, size_t i, const unsigned char **data, void *arg);
  int (*content)(const cn_partial_plan *plan, size_t i, uint64_t at, void *buf, size_t n,
                 void *arg);
  int (*out)(const void *buf, size_t n, void *arg);
  void *arg;
  /* optionally, before the frame of STORED segment i goes to out */
  int (*frame)(const cn_partial_plan *plan, size_t i, void *arg);
} cn_partial_io;
int cn_partial_write(const cn_partial_plan *plan, const cn_partial_io *io, cairn_store *st);

/* The range spec ("A-B,C-D") of FETCH segments [first, *last) of the plan,
 * as many as one request takes (CN_PARTIAL_RANGES_MAX,
 * CN_PARTIAL_REQUEST_MAX, PULL_RANGE_SPEC_MAX); *last set past the last. */
void cn_partial_spec(const cn_partial_plan *plan, size_t first, size_t *last,
                     char spec[PULL_RANGE_SPEC_MAX]);

/* The partial pull of layer d from src into fd. Each fetched chunk of a
 * missing file is checked against its TOC digest as its request arrives;
 * the whole against the diff_id by the ingest (fd gets the rebuilt tar,
 * decompressed, for cn_layer_ingest_hinted with res->hints: the stored
 * files' bytes copied from their blobs, where the tar holds them): 0 when
 * done (*fetched, *stored_files say what it cost and saved), 1 when the layer is not zstd:chunked, the source cannot
 * range-request, or the store holds none of its files (pull it in full),
 * a negative errno when it failed (fd is then to be truncated and the
 * layer pulled in full). progress gets the bytes fetched so far. */
/* Where layer d's zstd:chunked TOC is (*pos), from the manifest's
 * annotations: 0, 1 when the layer cannot be fetched by ranges (no range
 * requests, not zstd:chunked, or a TOC the manifest does not vouch for),
 * or a negative errno (bad annotations). The partial and the lazy pull. */
int cn_partial_toc_pos(pull_source *src, const pull_desc *d, cn_toc_zstd_pos *pos, cairn_store *st);

typedef struct cn_partial_result {
  uint64_t fetched; /* bytes over the network: TOC and ranges */
  size_t files, files_stored, requests;
  size_t chunks_verified; /* fetched chunks checked against the TOC's
                             digests before the ingest */
  size_t files_taken;      /* stored files the ingest took as they are */
  cn_layer_hint *hints;    /* the stored files' places in the tar (free) */
  size_t n_hints;
} cn_partial_result;
int cn_partial_pull(pull_source *src, const pull_desc *d, int fd, _Atomic uint64_t *progress,
                    cn_partial_result *res, cairn_store *st);

/* ---- a fill's copy of an eStargz layer's blob ------------------------------ */

/* An eStargz layer's compressed blob as a fill's requests bring it
 * (fill.c), for the finish of the layer (cn_lazy_finish_layer), which
 * fetches only the bytes it lacks (its holes) instead of the whole blob
 * again: fd, an anonymous file of STORE/tmp of size bytes (gone on a
 * crash), holds the blob's bytes [iv[k].lo, iv[k].hi) at their offsets,
 * the intervals sorted and apart (adjacent ones merged: a few, whatever
 * the number of requests); fd < 0: none. bad: a write to it failed, it
 * is not to be used. What it holds is checked against digest, the
 * blob's, before anything takes it. */
typedef struct cn_blob_interval {
  uint64_t lo, hi;
} cn_blob_interval;
typedef struct cn_blob_copy {
  char digest[CAIRN_DIGEST_LEN + 1];
  uint64_t size;
  int fd;
  bool bad;
  cn_blob_interval *iv;
  size_t n_iv, cap;
} cn_blob_copy;
/* Records [lo, hi) as held (lo < hi <= c->size), merged with the
 * intervals it touches or overlaps. 0 or -ENOMEM; -EINVAL (nothing
 * recorded) outside the blob. Not thread-safe: the fill holds a lock. */
int cn_blob_copy_add(cn_blob_copy *c, uint64_t lo, uint64_t hi);
/* The holes of c: the bytes of [0, c->size) no interval holds, in order,
 * each through fn (lo < hi); stops at fn's first nonzero return, which it
 * returns. */
int cn_blob_copy_holes(const cn_blob_copy *c, int (*fn)(uint64_t lo, uint64_t hi, void *arg),
                       void *arg);
/* Completes c into blob d (from src): its holes fetched by range requests
 * (*fetched bytes in *requests requests, counted even when it fails), in
 * as few as CN_PARTIAL_RANGES_MAX, CN_PARTIAL_REQUEST_MAX and
 * PULL_RANGE_SPEC_MAX allow; then its sha256 checked against d's digest.
 * 0 when c->fd holds d's blob; a negative errno (the reason on st) when
 * it does not or could not be completed (the blob is then to be fetched
 * whole, c not used). */
int cn_blob_copy_complete(pull_source *src, const pull_desc *d, cn_blob_copy *c,
                          uint64_t *fetched, size_t *requests, cairn_store *st);
/* Closes c's file and frees its intervals (c->fd -1). */
void cn_blob_copy_free(cn_blob_copy *c);

/* One range a range request asked for, [lo, hi) of the blob, and where
 * its bytes start in the reply's file (at), once found there (got). */
typedef struct cn_reply_range {
  uint64_t lo, hi;
  uint64_t at;
  bool got;
} cn_reply_range;
/* The range reply in the file fd (written bytes, rr its headers) to
 * ranges rg[0, n) of a blob of blob_size bytes, mapped to be parsed: each
 * part must be exactly one range asked for, and every range must come;
 * rg[k].at set. A multipart reply's headers are read, the ranges' own
 * bytes are not touched. 0, or a negative errno (the reason on st). */
int cn_range_reply_locate(int fd, uint64_t written, const pull_range_reply *rr,
                          uint64_t blob_size, cn_reply_range *rg, size_t n, cairn_store *st);
/* The bytes of ranges rg[0, n) (located in the reply's file in) written
 * into c where they lie in the blob, and recorded in it (under lock, if
 * given). A failure marks c bad (nothing to use: the blob is then fetched
 * whole) and is returned, a negative errno. */
int cn_blob_copy_take(cn_blob_copy *c, int in, const cn_reply_range *rg, size_t n,
                      pthread_mutex_t *lock);

#endif
