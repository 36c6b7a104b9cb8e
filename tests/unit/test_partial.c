/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_partial.c — the partial pull's pieces (store/pull/partial.h,
 * byteranges.h) without a network: the plan and the rebuilt zstd stream of
 * a real zstd:chunked layer (podman 4.3.1's, tests/fuzz/corpus/
 * toc_zstd_chunked/podman-4.3.zst) for a store holding all, some or none
 * of its files, which must decompress to exactly the tar the blob does;
 * the range specs; and the answers to range requests, single and
 * multipart/byteranges (as Go's net/http writes them), then malformed and
 * hostile ones, each refused with -EBADMSG.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pull/byteranges.h"
#include "pull/partial.h"
#include "testutil.h"

#define CORPUS CAIRN_SOURCE_DIR "/tests/fuzz/corpus/"
#define ZC_POSITION "301273:835:3516:1"
#define ZC_CHECKSUM "sha256:70863ddaa086e290020cdaadf31c01dcb61d7c864617247e1b636bb17e787a06"

static tu_store T;
static void setup(void) { tu_store_setup(&T); }
static void teardown(void) { tu_store_teardown(&T); }
TestSuite(partial, .init = setup, .fini = teardown);

static unsigned char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  cr_assert(f, "%s", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *b = malloc((size_t)n + 1);
  cr_assert(b);
  cr_assert_eq(fread(b, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  *len = (size_t)n;
  return b;
}

/* The store of the test: files whose sha256 is in it (every k-th of the
 * TOC's regular files, 0: none). */
typedef struct rebuild {
  const unsigned char *blob;
  const cn_toc *toc;
  int every;
  size_t seen;
  unsigned char *out;
  size_t out_len, out_cap;
  size_t fetch_calls;
} rebuild;

static int have(const char *sha256, void *arg) {
  rebuild *r = arg;
  (void)sha256;
  return r->every && (r->seen++ % (size_t)r->every) == 0;
}

static int fetched(const cn_partial_plan *plan, size_t i, const unsigned char **data, void *arg) {
  rebuild *r = arg;
  cr_assert_eq(plan->segs[i].kind, CN_SEG_FETCH);
  r->fetch_calls++;
  *data = r->blob + plan->segs[i].off;
  return 0;
}

/* A stored file's content: its chunks decompressed from the blob. */
static int content(const cn_partial_plan *plan, size_t i, uint64_t at, void *buf, size_t n,
                   void *arg) {
  rebuild *r = arg;
  const cn_partial_seg *s = &plan->segs[i];
  unsigned char *u;
  size_t ulen;
  cr_assert_eq(cn_toc_decompress(r->blob + s->off, s->len, 64u << 20, &u, &ulen, "chunk", T.st), 0);
  cr_assert_eq(ulen, s->usize);
  cr_assert_leq(at + n, ulen);
  memcpy(buf, u + at, n);
  free(u);
  return 0;
}

static int out(const void *buf, size_t n, void *arg) {
  rebuild *r = arg;
  if (r->out_len + n > r->out_cap) {
    r->out_cap = (r->out_len + n) * 2;
    r->out = realloc(r->out, r->out_cap);
    cr_assert(r->out);
  }
  memcpy(r->out + r->out_len, buf, n);
  r->out_len += n;
  return 0;
}

static void rebuild_with(int every) {
  size_t len;
  unsigned char *blob = slurp(CORPUS "toc_zstd_chunked/podman-4.3.zst", &len);
  cn_toc_zstd_pos pos;
  cn_toc toc;
  cr_assert_eq(cn_toc_zstd_position(ZC_POSITION, ZC_CHECKSUM, NULL, NULL, len, &pos, T.st), 0);
  cr_assert_eq(cn_toc_zstd_chunked_parse(blob + pos.off, pos.len, &pos, len, &toc, T.st), 0);
  rebuild r = {.blob = blob, .toc = &toc, .every = every};
  cn_partial_plan plan;
  cr_assert_eq(cn_partial_plan_make(&toc, CN_PARTIAL_MERGE_GAP, have, &r, &plan, T.st), 0, "%s",
               cairn_errmsg(T.st));
  size_t files = 0;
  for (size_t i = 0; i < toc.n_entries; i++) files += toc.entries[i].n_chunks > 0;
  cr_assert_eq(plan.files, files);
  cr_assert_eq(plan.files_stored, every ? (files + (size_t)every - 1) / (size_t)every : 0);
  cr_assert_eq(plan.end, toc.data_end - 8); /* the TOC's skippable frame starts there */
  /* the segments tile [0, end) in order */
  uint64_t at = 0, fetch = 0;
  for (size_t i = 0; i < plan.n_segs; i++) {
    cr_assert_eq(plan.segs[i].off, at, "segment %zu", i);
    cr_assert_gt(plan.segs[i].len, 0);
    if (plan.segs[i].kind == CN_SEG_FETCH) {
      fetch += plan.segs[i].len;
      cr_assert(i == 0 || plan.segs[i - 1].kind != CN_SEG_FETCH, "adjacent fetches merged");
    }
    at += plan.segs[i].len;
  }
  cr_assert_eq(at, plan.end);
  cr_assert_eq(fetch, plan.fetch_bytes);
  if (every == 1) /* all stored: headers and the end of the archive only */
    cr_assert_lt(plan.fetch_bytes * 20, len, "fetched %llu of %zu",
                 (unsigned long long)plan.fetch_bytes, len);
  if (every == 0) cr_assert_eq(plan.fetch_bytes, plan.end);

  cn_partial_io io = {fetched, content, out, &r};
  cr_assert_eq(cn_partial_write(&plan, &io, T.st), 0, "%s", cairn_errmsg(T.st));
  unsigned char *want, *got;
  size_t want_len, got_len;
  cr_assert_eq(cn_toc_decompress(blob, len, 64u << 20, &want, &want_len, "blob", T.st), 0);
  cr_assert_eq(cn_toc_decompress(r.out, r.out_len, 64u << 20, &got, &got_len, "rebuilt", T.st), 0,
               "%s", cairn_errmsg(T.st));
  cr_assert_eq(got_len, want_len);
  cr_assert(memcmp(got, want, want_len) == 0, "the rebuilt stream is the layer's tar");
  free(want);
  free(got);
  free(r.out);
  cn_partial_plan_free(&plan);
  cn_toc_free(&toc);
  free(blob);
}

Test(partial, rebuild_all_stored) { rebuild_with(1); }
Test(partial, rebuild_some_stored) { rebuild_with(2); }
Test(partial, rebuild_none_stored) { rebuild_with(0); }
