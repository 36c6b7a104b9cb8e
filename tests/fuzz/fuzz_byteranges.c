/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_byteranges.c — the answer to a range request (store/remote/
 * byteranges.c), network input of the partial pull: the input's first line
 * is the reply's Content-Type, its second its Content-Range, the rest its
 * body, for a blob of 1 MiB. Every part handed on must lie in the blob and
 * in the body, at most as many parts as allowed.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "libcairn_byteranges.h"

#define BLOB (1u << 20)
#define MAX_PARTS 16

typedef struct seen {
  const uint8_t *body;
  size_t len, n;
} seen;

static int take(uint64_t off, const unsigned char *data, size_t len, void *arg) {
  seen *s = arg;
  if (off >= BLOB || len == 0 || len > BLOB - off) abort();
  if (data < s->body || len > s->len || data > s->body + s->len - len) abort();
  if (++s->n > MAX_PARTS) abort();
  return 0;
}

/* The next line of data (without its LF) into out, NUL-terminated. */
static size_t line(const uint8_t *data, size_t size, char *out, size_t cap) {
  size_t n = 0;
  while (n < size && data[n] != '\n') n++;
  size_t k = n < cap - 1 ? n : cap - 1;
  memcpy(out, data, k);
  out[k] = '\0';
  return n < size ? n + 1 : n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char ct[256], cr[128];
  size_t a = line(data, size, ct, sizeof ct);
  size_t b = line(data + a, size - a, cr, sizeof cr);
  seen s = {data + a + b, size - a - b, 0};
  int r = cn_byteranges_parse(ct, cr, s.body, s.len, BLOB, MAX_PARTS, take, &s, NULL);
  if (r >= 0 && (size_t)r != s.n) abort();
  uint64_t off, len;
  if (cn_content_range_parse(cr, strlen(cr), BLOB, &off, &len) == 0 &&
      (off >= BLOB || len == 0 || len > BLOB - off))
    abort();
  return 0;
}
