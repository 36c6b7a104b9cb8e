/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_chunked_write.c — the tar reader of push --format
 * (store/remote/chunked_write.c): a layer's tar is what a user imported, so
 * any bytes. The input's first byte picks the format and the size of the
 * pieces it is fed in, the rest is the tar. The writer must fail cleanly
 * or finish; a zstd:chunked blob it finishes must decompress to the input
 * (its diff_id is the input's sha256).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "libcairn_chunked_write.h"
#include "libcairn_toc.h"

typedef struct out {
  unsigned char *p;
  size_t n, cap;
} out;

static int put(const void *d, size_t n, void *arg) {
  out *o = arg;
  if (o->n + n > o->cap) {
    size_t cap = (o->n + n) * 2;
    unsigned char *p = realloc(o->p, cap);
    if (!p) return -12;
    o->p = p;
    o->cap = cap;
  }
  memcpy(o->p + o->n, d, n);
  o->n += n;
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  enum cn_chunked_format fmt = data[0] & 1 ? CN_CHUNKED_ESTARGZ : CN_CHUNKED_ZSTD;
  size_t step = (size_t)(data[0] >> 1) * 7 + 1;
  data++;
  size--;
  out o = {0};
  cn_chunked_writer *w;
  if (cn_chunked_new(fmt, put, &o, &w) < 0) abort();
  int r = 0;
  for (size_t at = 0; at < size && r == 0; at += step)
    r = cn_chunked_write(w, data + at, size - at < step ? size - at : step);
  cn_chunked_result res;
  if (r == 0) r = cn_chunked_finish(w, &res);
  if (r < 0 && !cn_chunked_error(w)[0]) abort(); /* every failure says why */
  cn_chunked_free(w);
  if (r == 0 && fmt == CN_CHUNKED_ZSTD) {
    char d[CAIRN_DIGEST_LEN + 1];
    cn_toc_sha256(data, size, d);
    if (strcmp(d, res.diff_id) != 0) abort();
  }
  free(o.p);
  return 0;
}
