/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libcairn_fill.h — the plan of a fill (fill.c): which pending files go first, which
 * are one range, which ranges one request. Built on cairn.h alone, like
 * the rest of store/remote/.
 */
#ifndef LIBCAIRN_FILL_H
#define LIBCAIRN_FILL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "libcairn_partial.h"

/* Requests of a fill in flight at once, each on a thread of its own. */
#define FILL_INFLIGHT 4
/* Two files this close in the blob (the tar headers between them, or a
 * stored file smaller than a multipart reply's part headers cost, as a
 * partial pull merges) are one range, up to FILL_RANGE_MAX bytes. */
#define FILL_MERGE_GAP CN_PARTIAL_MERGE_GAP
#define FILL_RANGE_MAX (1u << 20)
/* A request: at most FILL_BATCH_FILES files, of a layer, and about an
 * eighth of the fill's bytes, within [FILL_BATCH_MIN, FILL_BATCH_MAX] (a
 * larger file alone), so that the requests in flight share the work and
 * a file is stored soon after its request's reply. */
#define FILL_BATCH_FILES 128
#define FILL_BATCH_MIN (256u << 10)
#define FILL_BATCH_MAX (4u << 20)
/* While a mount's first reads are in flight or ended less than
 * FILL_QUIET_MS ago (the fetcher holds STORE/tmp/CN_FIRST_READS), the
 * fill has one batch in flight, of at most FILL_TRICKLE_BYTES; while one
 * of FILL_LARGE_READ bytes or more is in flight (CN_FIRST_READS_LARGE
 * held), it starts none, FILL_YIELD_MAX_MS at most. */
#define CN_FIRST_READS "first-reads"
#define CN_FIRST_READS_LARGE "first-reads-large"
#define FILL_QUIET_MS 200
#define FILL_YIELD_MAX_MS 5000
#define FILL_TRICKLE_BYTES (512u << 10)
/* Else a batch's bytes start at FILL_TRICKLE_BYTES and double every
 * FILL_RAMP_MS (fill.c, next_batch). */
#define FILL_RAMP_MS 1000
#define FILL_LARGE_READ (1u << 20)

/* One pending content to fetch: its layer (an index of the fill's), its
 * TOC entry and the bytes [lo, hi) of the blob its chunks lie in;
 * prefetch when the TOC names it before a prefetch landmark or gives it
 * a rank (cairn push's recorded access list, CN_TOC_PREFETCH). */
typedef struct cn_fill_item {
  const char *sha256;
  size_t layer, entry;
  uint64_t lo, hi;
  bool prefetch;
  uint32_t rank;   /* the TOC's prefetch_rank (an access list's order), 0: none */
  int lock, state; /* fill.c's */
} cn_fill_item;

/* Sorts items in fill order: the prefetch files of every layer, then the
 * rest, each by layer, then rank (a ranked file before the others), then
 * TOC order. */
void cn_fill_sort(cn_fill_item *v, size_t n);
/* The end of the batch (one request) that starts at v[first]: items of one
 * layer, all prefetch or none, at most FILL_BATCH_FILES and max_bytes (at least one item). */
size_t cn_fill_batch_end(const cn_fill_item *v, size_t n, size_t first, uint64_t max_bytes);
/* The bytes of a batch that is not a prefetch batch (cn_fill_batch_end's
 * max_bytes), per when no first read is about and the fill started
 * since_ms ago: FILL_TRICKLE_BYTES while reads_about, else from it,
 * doubling every FILL_RAMP_MS, up to per. */
uint64_t cn_fill_batch_max(uint64_t per, int64_t since_ms, bool reads_about);
/* Whether next joins the range [range_lo, prev->hi) that prev ends. */
bool cn_fill_merges(const cn_fill_item *prev, uint64_t range_lo, const cn_fill_item *next);

#endif
