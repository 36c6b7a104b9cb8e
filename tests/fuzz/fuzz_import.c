/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_import.c — layer import (store/layer.c) of arbitrary bytes: plain,
 * gzip or zstd tars read through libarchive's memory reader, into a real
 * store on tmpfs (/dev/shm), created once per process. A layer that goes
 * in is read back through cn_layer_foreach; one that is refused must
 * say why. The store is made afresh every few thousand stored layers so
 * that it does not grow without bound.
 */
#include "libcairn_layer.h"
#include "scratch_store.h"

#include <stdint.h>
#include <string.h>

#define LAYERS_PER_STORE 4000

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  scratch_store_init("import");
  return 0;
}

/* Touches what an entry hands out. */
static int entry_touch(const cairn_entry *e, void *arg) {
  size_t *sum = arg;
  *sum += strlen(e->path) + e->type + e->size;
  if (e->target) *sum += strlen(e->target);
  if (e->blob) *sum += strlen(e->blob);
  for (size_t i = 0; i < e->n_xattrs; i++) {
    *sum += strlen(e->xattrs[i].name);
    for (size_t k = 0; k < e->xattrs[i].len; k++) *sum += ((const uint8_t *)e->xattrs[i].value)[k];
  }
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  cairn_pinset *ps = cairn_pinset_new("fuzz", true);
  if (!ps) return 0;
  cairn_id id;
  store_errclear(st);
  int r = cn_layer_ingest_memory(st, data, size, ps, id);
  if (r == 0) {
    size_t sum = 0;
    if (cn_layer_foreach(st, id, entry_touch, &sum) < 0) __builtin_trap();
    stored++;
  } else if (!st->err[0]) {
    fprintf(stderr, "fuzz_import: refused (%d) without a message\n", r);
    __builtin_trap();
  }
  cairn_pinset_release(st, ps);
  if (stored >= LAYERS_PER_STORE) scratch_store_fresh();
  return 0;
}
