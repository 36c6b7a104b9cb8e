/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_partial.c — the partial pull's pieces (store/remote/libcairn_partial.h,
 * libcairn_byteranges.h) without a network: the plan and the rebuilt zstd stream of
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

#include "remote/libcairn_byteranges.h"
#include "remote/libcairn_partial.h"
#include "testutil.h"

#define CORPUS CAIRN_SOURCE_DIR "/tests/fuzz/corpus/"
#define ZC_POSITION "301273:835:3516:1"
#define ZC_CHECKSUM "sha256:70863ddaa086e290020cdaadf31c01dcb61d7c864617247e1b636bb17e787a06"

static tu_store T;
static void setup(void) { tu_store_setup(&T); }
static void teardown(void) { tu_store_teardown(&T); }
TestSuite(partial, .init = setup, .fini = teardown);

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
  unsigned char *blob = tu_read_file(CORPUS "toc_zstd_chunked/podman-4.3.zst", &len);
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
  cr_assert_eq(plan.n_missing, files - plan.files_stored);
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

  cn_partial_io io = {fetched, content, out, &r, NULL};
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

/* ---- range specs -------------------------------------------------------- */

Test(partial, spec_skips_stored_and_bounds_a_request) {
  cn_partial_seg segs[2 * CN_PARTIAL_RANGES_MAX + 2];
  size_t n = 0;
  for (uint64_t k = 0; n + 2 <= sizeof segs / sizeof *segs; k++) {
    segs[n++] = (cn_partial_seg){.kind = CN_SEG_FETCH, .off = k * 100, .len = 10};
    segs[n++] = (cn_partial_seg){.kind = CN_SEG_STORED, .off = k * 100 + 10, .len = 90};
  }
  cn_partial_plan plan = {.segs = segs, .n_segs = n};
  char spec[PULL_RANGE_SPEC_MAX];
  size_t last;
  cn_partial_spec(&plan, 0, &last, spec);
  cr_assert_eq(strncmp(spec, "0-9,100-109,200-209,", 20), 0, "%s", spec);
  cr_assert_eq(last, 2 * CN_PARTIAL_RANGES_MAX, "at most %d ranges a request",
               CN_PARTIAL_RANGES_MAX);
  cn_partial_spec(&plan, last, &last, spec);
  cr_assert_eq(last, n);
  char want[64];
  snprintf(want, sizeof want, "%u-%u", CN_PARTIAL_RANGES_MAX * 100,
           CN_PARTIAL_RANGES_MAX * 100 + 9);
  cr_assert_eq(strncmp(spec, want, strlen(want)), 0, "%s", spec);
  /* a request stops before CN_PARTIAL_REQUEST_MAX bytes */
  cn_partial_seg big[3] = {{.kind = CN_SEG_FETCH, .off = 0, .len = CN_PARTIAL_REQUEST_MAX - 10},
                           {.kind = CN_SEG_FETCH, .off = CN_PARTIAL_REQUEST_MAX, .len = 20},
                           {.kind = CN_SEG_FETCH, .off = 2ull * CN_PARTIAL_REQUEST_MAX, .len = 5}};
  plan = (cn_partial_plan){.segs = big, .n_segs = 3};
  cn_partial_spec(&plan, 0, &last, spec);
  cr_assert_eq(last, 1);
}

/* ---- range replies ------------------------------------------------------- */

typedef struct parts {
  uint64_t off[8];
  size_t len[8];
  char data[8][64];
  size_t n;
} parts;

static int take(uint64_t off, const unsigned char *data, size_t len, void *arg) {
  parts *p = arg;
  cr_assert_lt(p->n, 8);
  p->off[p->n] = off;
  p->len[p->n] = len;
  memcpy(p->data[p->n], data, len < 63 ? len : 63);
  p->n++;
  return 0;
}

#define BOUNDARY "3d6b6a416f9b5"
#define MULTI_CT "multipart/byteranges; boundary=" BOUNDARY

/* As Go's net/http (docker-registry) writes it. */
static const char go_reply[] = "--" BOUNDARY "\r\n"
                               "Content-Range: bytes 0-3/100\r\n"
                               "Content-Type: application/octet-stream\r\n"
                               "\r\n"
                               "ab\r\n"
                               "\r\n--" BOUNDARY "\r\n"
                               "Content-Range: bytes 83-99/100\r\n"
                               "Content-Type: application/octet-stream\r\n"
                               "\r\n"
                               "--" BOUNDARY "--"
                               "\r\n--" BOUNDARY "--\r\n";

Test(partial, byteranges_multipart) {
  parts p = {0};
  /* data holding CRLF and the delimiter itself is taken by its length */
  int n =
      cn_byteranges_parse(MULTI_CT, NULL, go_reply, sizeof go_reply - 1, 100, 8, take, &p, T.st);
  cr_assert_eq(n, 2, "%d %s", n, cairn_errmsg(T.st));
  cr_assert_eq(p.off[0], 0);
  cr_assert_eq(p.len[0], 4);
  cr_assert_eq(memcmp(p.data[0], "ab\r\n", 4), 0);
  cr_assert_eq(p.off[1], 83);
  cr_assert_eq(p.len[1], 17);
  cr_assert_eq(memcmp(p.data[1], "--" BOUNDARY "--", 17), 0);
  /* a quoted boundary, a preamble, LF line ends */
  static const char lf[] = "preamble\n--b\nContent-range: bytes 5-5/*\n\nX\n--b--";
  p = (parts){0};
  cr_assert_eq(cn_byteranges_parse("Multipart/ByteRanges; boundary=\"b\"", NULL, lf, sizeof lf - 1,
                                   100, 8, take, &p, T.st),
               1, "%s", cairn_errmsg(T.st));
  cr_assert_eq(p.off[0], 5);
  cr_assert_eq(p.data[0][0], 'X');
}

Test(partial, byteranges_single) {
  parts p = {0};
  cr_assert_eq(cn_byteranges_parse("application/octet-stream", "bytes 10-14/100", "hello", 5, 100,
                                   1, take, &p, T.st),
               1);
  cr_assert_eq(p.off[0], 10);
  cr_assert_eq(p.len[0], 5);
}

Test(partial, byteranges_refused) {
  static const struct {
    const char *ct, *cr, *body;
    size_t max;
  } bad[] = {
      {"application/octet-stream", "bytes 10-14/100", "hell", 1},   /* short */
      {"application/octet-stream", "bytes 10-14/100", "hello!", 1}, /* long */
      {"application/octet-stream", "bytes 10-14/99", "hello", 1},   /* another size */
      {"application/octet-stream", "bytes 14-10/100", "hello", 1},  /* reversed */
      {"application/octet-stream", "bytes 96-100/100", "hello", 1}, /* past the end */
      {"application/octet-stream", "bytes 0-18446744073709551615/100", "x", 1},
      {"application/octet-stream", "items 10-14/100", "hello", 1},
      {"application/octet-stream", "", "hello", 1}, /* a 206 without a range */
      {MULTI_CT, NULL, "no boundary here", 8},
      {MULTI_CT, NULL, "--" BOUNDARY "\r\n\r\nabc\r\n--" BOUNDARY "--", 8}, /* no range */
      {MULTI_CT, NULL, "--" BOUNDARY "\r\nContent-Range: bytes 0-9/100\r\n\r\nabc", 8},
      {MULTI_CT, NULL, "--" BOUNDARY "\r\nContent-Range: bytes 0-2/100\r\n\r\nabcX--" BOUNDARY, 8},
      {MULTI_CT, NULL, "--" BOUNDARY "\r\nContent-Range: bytes 0-2/100\r\n\r\nabc\r\n--x", 8},
      {MULTI_CT, NULL, "--" BOUNDARY "\r\nContent-Range: bytes 0-2/100", 8}, /* cut */
      {MULTI_CT, NULL,
       "--" BOUNDARY "\r\nContent-Range: bytes 0-0/100\r\n\r\na\r\n--" BOUNDARY
       "\r\nContent-Range: bytes 1-1/100\r\n\r\nb\r\n--" BOUNDARY "--",
       1}, /* more parts than asked */
      {"multipart/byteranges; boundary=", NULL, "--\r\n", 8},
      {"multipart/byteranges", NULL, "--\r\n", 8},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    parts p = {0};
    int r = cn_byteranges_parse(bad[i].ct, bad[i].cr, bad[i].body, strlen(bad[i].body), 100,
                                bad[i].max, take, &p, T.st);
    cr_assert_eq(r, -EBADMSG, "case %zu: %d", i, r);
    cr_assert(strstr(cairn_errmsg(T.st), "range reply") != NULL, "case %zu: %s", i,
              cairn_errmsg(T.st));
  }
}

/* A fill's copy of a blob (cn_blob_copy): the intervals it holds stay
 * sorted, apart and merged whatever order they come in; its holes are
 * the rest of the blob. */
static int hole_note(uint64_t lo, uint64_t hi, void *arg) {
  char *s = arg;
  size_t n = strlen(s);
  snprintf(s + n, 256 - n, "%s%llu-%llu", n ? "," : "", (unsigned long long)lo,
           (unsigned long long)hi);
  return 0;
}

static void holes_are(const cn_blob_copy *c, const char *want) {
  char got[256] = "";
  cr_assert_eq(cn_blob_copy_holes(c, hole_note, got), 0);
  cr_assert_str_eq(got, want);
}

Test(partial, blob_copy_intervals) {
  cn_blob_copy c = {.fd = -1, .size = 100};
  holes_are(&c, "0-100");
  cr_assert_eq(cn_blob_copy_add(&c, 50, 60), 0);
  cr_assert_eq(cn_blob_copy_add(&c, 10, 20), 0);
  cr_assert_eq(cn_blob_copy_add(&c, 80, 90), 0);
  cr_assert_eq(c.n_iv, 3);
  holes_are(&c, "0-10,20-50,60-80,90-100");
  cr_assert_eq(cn_blob_copy_add(&c, 20, 30), 0); /* adjacent: merged */
  cr_assert_eq(c.n_iv, 3);
  cr_assert_eq(cn_blob_copy_add(&c, 55, 85), 0); /* overlaps two */
  cr_assert_eq(c.n_iv, 2);
  holes_are(&c, "0-10,30-50,90-100");
  cr_assert_eq(cn_blob_copy_add(&c, 12, 15), 0); /* inside one */
  cr_assert_eq(c.n_iv, 2);
  cr_assert_eq(cn_blob_copy_add(&c, 0, 10), 0);
  cr_assert_eq(cn_blob_copy_add(&c, 95, 100), 0);
  holes_are(&c, "30-50,90-95");
  cr_assert_eq(cn_blob_copy_add(&c, 5, 101), -EINVAL); /* past the blob */
  cr_assert_eq(cn_blob_copy_add(&c, 7, 7), -EINVAL);
  cr_assert_eq(cn_blob_copy_add(&c, 0, 100), 0);
  cr_assert_eq(c.n_iv, 1);
  holes_are(&c, "");
  cn_blob_copy_free(&c);
  c = (cn_blob_copy){.fd = -1, .size = 100};
  for (uint64_t k = 40; k-- > 0;) /* many apart, backwards: each kept, in order */
    cr_assert_eq(cn_blob_copy_add(&c, 2 * k + 1, 2 * k + 2), 0);
  cr_assert_eq(c.n_iv, 40);
  for (size_t k = 0; k < c.n_iv; k++) cr_assert_eq(c.iv[k].lo, 2 * k + 1);
  cr_assert_eq(cn_blob_copy_add(&c, 0, 81), 0);
  cr_assert_eq(c.n_iv, 1);
  holes_are(&c, "81-100");
  cn_blob_copy_free(&c);
  cr_assert_eq(c.fd, -1);
  cr_assert_eq(c.n_iv, 0);
}
