/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_toc_zstd_chunked.c — the zstd:chunked TOC parser
 * (store/remote/toc_zstd_chunked.c, toc.c). An input starting with '{' is a
 * TOC's JSON, parsed as the entries of a blob whose file data ends at
 * 1 MiB; any other input is a whole blob: its footer gives the TOC's and
 * the tar-split's positions, which are parsed; its first line is also
 * read as a manifest-position annotation. What is accepted must hold the
 * invariants a lazy pull relies on (as fuzz_toc_estargz.c checks).
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "libcairn_toc.h"

static void check(const cn_toc *toc) {
  for (size_t i = 0; i < toc->n_entries; i++) {
    const cn_toc_entry *e = &toc->entries[i];
    if (e->path[0] == '/' || cn_toc_find(toc, e->path) != e) abort();
    uint64_t at = 0;
    for (size_t k = 0; k < e->n_chunks; k++) {
      const cn_toc_chunk *c = &e->chunks[k];
      if (c->uoff != at || c->usize == 0 || c->csize == 0) abort();
      if (c->off >= toc->data_end || c->csize > toc->data_end - c->off) abort();
      at += c->usize;
    }
    if (e->n_chunks && at != e->size) abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  cn_toc toc = {0};
  if (size > 0 && data[0] == '{') {
    json_t *root = json_loadb((const char *)data, size, 0, NULL);
    if (!root) return 0;
    toc.data_end = 1 << 20;
    if (cn_toc_entries_parse(json_object_get(root, "entries"), &toc, NULL) == 0) check(&toc);
    cn_toc_free(&toc);
    json_decref(root);
    return 0;
  }
  cn_toc_zstd_pos pos;
  char line[128];
  size_t n = 0;
  while (n < size && n < sizeof line - 1 && data[n] != '\n') n++;
  memcpy(line, data, n);
  line[n] = '\0';
  if (cn_toc_zstd_position(line, NULL, NULL, NULL, size, &pos, NULL) == 0 &&
      (pos.off > size || pos.len > size - pos.off))
    abort();
  if (cn_toc_zstd_footer(data, size, size, &pos, NULL) < 0) return 0;
  if (pos.off > size || pos.len > size - pos.off) abort();
  if (cn_toc_zstd_chunked_parse(data + pos.off, pos.len, &pos, size, &toc, NULL) == 0) {
    check(&toc);
    cn_toc_free(&toc);
  }
  if (pos.ts_len) {
    unsigned char *ts;
    size_t ts_len;
    if (cn_toc_zstd_tarsplit(data + pos.ts_off, pos.ts_len, &pos, &ts, &ts_len, NULL) == 0) {
      if (ts_len != pos.ts_ulen) abort();
      free(ts);
    }
  }
  return 0;
}
