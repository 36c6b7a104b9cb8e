/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_toc_estargz.c — the eStargz TOC parser (store/remote/toc_estargz.c,
 * toc.c). An input starting with '{' is a TOC's JSON, parsed as the
 * entries of a blob whose file data ends at 1 MiB; any other input is a
 * whole blob: footer, TOC member, entries. What is accepted must hold the
 * invariants a lazy pull relies on: normalised unique paths, chunks that
 * cover each file in order and lie inside the file data.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "libcairn_toc.h"

static void check(const cn_toc *toc) {
  for (size_t i = 0; i < toc->n_entries; i++) {
    const cn_toc_entry *e = &toc->entries[i];
    if (strstr(e->path, "..") && (strncmp(e->path, "../", 3) == 0 || strstr(e->path, "/../")))
      abort();
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
  if (toc->prefetch > toc->n_entries) abort();
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
  uint64_t off;
  if (cn_toc_estargz_footer(data, size, size, &off, NULL) == 0 && off >= size) abort();
  if (cn_toc_estargz_parse(data, size, size, NULL, &toc, NULL) == 0) {
    if (toc.toc_off + toc.toc_len > size) abort();
    check(&toc);
    cn_toc_free(&toc);
  }
  return 0;
}
