/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_merge.c — the merged-tree builder (store/tree.c) fed arbitrary
 * layers, no database: the input decodes into up to 8 layers of
 * cairn_entry records, each layer handed over in path order (one entry
 * per path, as the store gives them) through cn_merge_builder_add_layer; the
 * frozen tree is then walked whole (every node, a lookup of every child)
 * so that AddressSanitizer sees all of it.
 *
 * Encoding, record by record until the input ends:
 *   0xff                     ends the current layer
 *   op                       type = op % 10 (enum cairn_entry_type)
 *   mode (2 bytes, LE)       permission bits (& 07777)
 *   path\0                   (a missing \0 ends the input)
 *   target\0                 symlinks and hardlinks only
 *   nx (1 byte)              xattrs: nx % 4 of (name\0, len byte, value)
 */
#include "libcairn_tree.h"
#include "tree_walk.h"

#include <stdint.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_LAYERS 8
#define MAX_ENTRIES 512

struct input {
  const uint8_t *p, *end;
};

static bool take_byte(struct input *in, uint8_t *b) {
  if (in->p >= in->end) return false;
  *b = *in->p++;
  return true;
}

static const char *take_string(struct input *in) {
  const uint8_t *nul = memchr(in->p, 0, (size_t)(in->end - in->p));
  if (!nul) return NULL;
  const char *s = (const char *)in->p;
  in->p = nul + 1;
  return s;
}

struct layer {
  cairn_entry e[MAX_ENTRIES];
  cairn_xattr x[MAX_ENTRIES][3];
  size_t n;
};

static int entry_cmp(const void *a, const void *b) {
  return strcmp(((const cairn_entry *)a)->path, ((const cairn_entry *)b)->path);
}

/* Decodes one layer; false at the end of the input (the layer may still
 * hold entries). */
static bool layer_decode(struct input *in, struct layer *l) {
  l->n = 0;
  uint8_t op, lo, hi, nx;
  while (take_byte(in, &op)) {
    if (op == 0xff) return true;
    const char *path, *target = NULL;
    if (!take_byte(in, &lo) || !take_byte(in, &hi) || !(path = take_string(in))) return false;
    enum cairn_entry_type type = (enum cairn_entry_type)(op % 10);
    if ((type == CAIRN_SYMLINK || type == CAIRN_HARDLINK) && !(target = take_string(in)))
      return false;
    if (!take_byte(in, &nx)) return false;
    size_t n_x = 0;
    for (size_t i = 0; i < nx % 4u; i++) {
      const char *name = take_string(in);
      uint8_t len;
      if (!name || !take_byte(in, &len) || (size_t)(in->end - in->p) < len) return false;
      if (l->n < MAX_ENTRIES) l->x[l->n][n_x++] = (cairn_xattr){name, in->p, len};
      in->p += len;
    }
    if (l->n == MAX_ENTRIES) continue;
    l->e[l->n] = (cairn_entry){
        .path = path,
        .type = type,
        .mode = (uint32_t)(lo | hi << 8) & 07777,
        .uid = lo,
        .gid = hi,
        .size = type == CAIRN_REG ? hi : 0,
        .mtime_sec = lo,
        .rdev = type == CAIRN_CHR || type == CAIRN_BLK ? (uint64_t)hi << 8 | lo : 0,
        .target = target,
        .blob = type == CAIRN_REG && hi ? "0123456789abcdef0123456789abcdef" : NULL,
        .xattrs = l->x[l->n],
        .n_xattrs = n_x,
    };
    l->n++;
  }
  return false;
}

static int layer_source(void *src, cairn_entry_fn fn, void *arg) {
  struct layer *l = src;
  qsort(l->e, l->n, sizeof(l->e[0]), entry_cmp);
  for (size_t i = 0; i < l->n; i++) {
    if (i > 0 && strcmp(l->e[i - 1].path, l->e[i].path) == 0) continue; /* one per path */
    int r = fn(&l->e[i], arg);
    if (r) return r;
  }
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static struct layer layers[MAX_LAYERS];
  static struct cairn_store st; /* only its message buffer is used */
  struct input in = {data, data + size};
  merge_builder *b;
  if (cn_merge_builder_new(&st, &b) < 0) return 0;
  bool more = true;
  int r = 0;
  for (size_t i = 0; r == 0 && more && i < MAX_LAYERS; i++) {
    more = layer_decode(&in, &layers[i]);
    r = cn_merge_builder_add_layer(b, layer_source, &layers[i]);
  }
  if (r < 0) {
    cn_merge_builder_free(b);
    return 0;
  }
  cairn_tree *t;
  if (cn_merge_builder_finish(b, &t) < 0) return 0;
  volatile size_t sink = tree_walk(t);
  (void)sink;
  cairn_tree_free(t);
  return 0;
}
