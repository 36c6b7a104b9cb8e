/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_index.c — the image index reader (store/index.c: cn_tree_wrap) fed
 * arbitrary bytes as an index file. Inputs at least a header long are
 * resealed first (file_size set to their length, the checksum computed
 * over what they hold), so that the fuzzer gets past the checksum to the
 * checks of every record. A tree the reader accepts is then walked whole
 * so that AddressSanitizer sees every byte it hands out: every node, its
 * strings and xattrs, a lookup of every entry, and a walk from the root,
 * which must visit each directory at most once. The same bytes, not
 * resealed, go to the lazy reader of mounts (lazy_walk).
 */
#include "libcairn_tree.h"
#include "tree_walk.h"

#include <stdint.h>
#include <string.h>
#include <sys/stat.h>

/* The lazy reader (a mount's) over a copy of the input (its file_size
 * set, its checksum, which this reader does not check, left as it is):
 * every node it hands out is walked as tree_walk walks one, so that
 * AddressSanitizer sees every byte it refers to; a node it refuses is
 * NULL, and a child it refuses is skipped. */
static size_t lazy_walk(const uint8_t *data, size_t size) {
  static struct cairn_store st;
  void *buf = malloc(size ? size : 1);
  if (!buf) return 0;
  memcpy(buf, data, size);
  if (size >= sizeof(struct cn_index_header)) ((struct cn_index_header *)buf)->file_size = size;
  cairn_tree *t;
  if (cn_tree_wrap(&st, buf, size, false, true, &t) < 0) return 0;
  if (!cairn_tree_node(t, 1)) __builtin_trap(); /* the root was checked at open */
  size_t sum = 0;
  for (uint64_t ino = 1; ino <= cairn_tree_count(t); ino++) {
    const cairn_node *n = cairn_tree_node(t, ino);
    if (!n) continue;
    sum += node_strings_walk(t, n);
    const cairn_dirent *c = cairn_tree_children(t, n);
    for (size_t i = 0; i < n->n_children; i++) {
      const char *name = cairn_tree_str(t, c[i].name);
      if (cairn_tree_lookup(t, n, name) != &c[i]) __builtin_trap();
      const cairn_node *child = cairn_tree_node(t, c[i].ino);
      if (child && S_ISDIR(child->mode) && child->parent != ino) __builtin_trap();
    }
  }
  sum += cairn_tree_blocks(t);
  cairn_tree_free(t);
  return sum;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static struct cairn_store st; /* only its message buffer is used */
  volatile size_t sink = lazy_walk(data, size);
  void *buf = malloc(size ? size : 1);
  if (!buf) return 0;
  memcpy(buf, data, size);
  if (size >= sizeof(struct cn_index_header)) {
    ((struct cn_index_header *)buf)->file_size = size;
    cn_index_seal(buf);
  }
  cairn_tree *t;
  if (cn_tree_wrap(&st, buf, size, false, false, &t) < 0) return 0;
  sink = tree_walk(t);
  (void)sink;
  cairn_tree_free(t);
  return 0;
}
