/*
 * fuzz_index.c — the image index reader (store/index.c: cn_tree_wrap) fed
 * arbitrary bytes as an index file. Inputs at least a header long are
 * resealed first (file_size set to their length, the checksum computed
 * over what they hold), so that the fuzzer gets past the checksum to the
 * checks of every record. A tree the reader accepts is then walked whole
 * so that AddressSanitizer sees every byte it hands out: every node, its
 * strings and xattrs, a lookup of every entry, and a walk from the root,
 * which must visit each directory at most once.
 */
#include "tree.h"

#include <stdint.h>
#include <string.h>
#include <sys/stat.h>

static size_t tree_walk(const cairn_tree *t) {
  size_t sum = 0, count = cairn_tree_count(t), n_dirs = 0;
  for (uint64_t ino = 1; ino <= count; ino++) {
    const cairn_node *n = cairn_tree_node(t, ino);
    if (n->target) sum += strlen(cairn_tree_str(t, n->target));
    if (n->blob) sum += strlen(cairn_tree_str(t, n->blob));
    for (size_t i = 0; i < n->n_xattrs; i++) {
      cairn_xattr x = cairn_tree_xattr(t, n, i);
      sum += strlen(x.name);
      for (size_t k = 0; k < x.len; k++) sum += ((const uint8_t *)x.value)[k];
    }
    if (!S_ISDIR(n->mode)) continue;
    n_dirs++;
    if (!cairn_tree_node(t, n->parent)) __builtin_trap();
    const cairn_dirent *c = cairn_tree_children(t, n);
    for (size_t i = 0; i < n->n_children; i++)
      if (cairn_tree_lookup(t, n, cairn_tree_str(t, c[i].name)) != &c[i] ||
          !cairn_tree_node(t, c[i].ino))
        __builtin_trap();
  }
  /* From the root, depth first, as export walks. */
  uint64_t *stack = malloc((n_dirs + 1) * sizeof(*stack));
  size_t top = 0, visits = 0;
  stack[top++] = 1;
  while (top > 0) {
    const cairn_node *d = cairn_tree_node(t, stack[--top]);
    if (++visits > n_dirs) __builtin_trap();
    const cairn_dirent *c = cairn_tree_children(t, d);
    for (size_t i = 0; i < d->n_children; i++)
      if (S_ISDIR(cairn_tree_node(t, c[i].ino)->mode)) {
        if (top == n_dirs) __builtin_trap();
        stack[top++] = c[i].ino;
      }
  }
  free(stack);
  return sum;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static struct cairn_store st; /* only its message buffer is used */
  void *buf = malloc(size ? size : 1);
  if (!buf) return 0;
  memcpy(buf, data, size);
  if (size >= sizeof(struct cn_index_header)) {
    ((struct cn_index_header *)buf)->file_size = size;
    cn_index_seal(buf);
  }
  cairn_tree *t;
  if (cn_tree_wrap(&st, buf, size, false, &t) < 0) return 0;
  volatile size_t sink = tree_walk(t);
  (void)sink;
  cairn_tree_free(t);
  return 0;
}
