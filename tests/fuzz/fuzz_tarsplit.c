/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_tarsplit.c — exact layers (store/tarsplit.c) on arbitrary bytes: a
 * layer import records its tar-split data from a stream the recorder
 * segments itself, whatever it holds; every layer that goes in with a
 * record must be written back by cn_layer_tar with the diff_id it was
 * imported with (cn_layer_tar checks the sha256 of what it rebuilt), and
 * for an uncompressed input byte for byte equal to it. The store lives on
 * tmpfs (/dev/shm) and is made afresh every few thousand layers.
 */
#include "libcairn_layer.h"
#include "scratch_store.h"

#include <stdint.h>
#include <string.h>

#define LAYERS_PER_STORE 4000

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  scratch_store_init("tarsplit");
  return 0;
}

/* Compares what cn_layer_tar writes with the input, as it comes. */
struct cmp {
  const uint8_t *data;
  size_t size, off;
  bool differs;
};

static int cmp_write(const void *buf, size_t len, void *arg) {
  struct cmp *c = arg;
  if (c->off + len > c->size || memcmp(c->data + c->off, buf, len) != 0) c->differs = true;
  c->off += len;
  return 0;
}

/* The compressed forms libarchive reads (their magic numbers). */
static bool compressed(const uint8_t *d, size_t n) {
  return (n >= 2 && d[0] == 0x1f && (d[1] == 0x8b || d[1] == 0x9d || d[1] == 0xa0)) ||
         (n >= 3 && memcmp(d, "BZh", 3) == 0) ||
         (n >= 4 && memcmp(d, "\x28\xb5\x2f\xfd", 4) == 0) ||
         (n >= 6 && memcmp(d,
                           "\xfd"
                           "7zXZ",
                           5) == 0) ||
         (n >= 4 && d[0] == 0x5d) || (n >= 4 && memcmp(d, "\x89LZO", 4) == 0) ||
         (n >= 4 && memcmp(d, "\x04\x22\x4d\x18", 4) == 0) ||
         (n >= 2 && d[0] == 'L' && d[1] == 'Z');
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  cairn_pinset *ps = cairn_pinset_new("fuzz", true);
  if (!ps) return 0;
  cairn_id id;
  store_errclear(st);
  int r = cn_layer_ingest_memory(st, data, size, ps, id);
  if (r == 0 && cn_layer_tar_recorded(st, id) == 1) {
    struct cmp c = {.data = data, .size = size};
    uint64_t got = 0;
    if (cn_layer_tar(st, id, cmp_write, &c, &got) < 0) {
      fprintf(stderr, "fuzz_tarsplit: %s\n", cairn_errmsg(st));
      __builtin_trap();
    }
    /* plain input: the same bytes (unless libarchive took it for something
     * compressed it does not name by magic: then only the hash counts) */
    if (!compressed(data, size) && got == size && c.differs) __builtin_trap();
    stored++;
  }
  cairn_pinset_release(st, ps);
  if (stored >= LAYERS_PER_STORE) scratch_store_fresh();
  return 0;
}
