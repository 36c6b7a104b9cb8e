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
#include "tree_walk.h"

#include <stdint.h>
#include <string.h>
#include <sys/stat.h>

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
