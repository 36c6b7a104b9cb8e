/* SPDX-License-Identifier: Apache-2.0 */
/*
 * merge.c — an image's merged root filesystem, served from its index file
 * (index.c) when there is a valid one; otherwise built from its stored
 * layers (image.c, through the tree builder of tree.c, which applies the
 * OCI rules), written as its index and mapped. An image committed before
 * indexes existed gets its index here, on first use; a corrupt one is
 * rebuilt. A store that cannot take the file (read-only, full) still
 * serves the tree, from memory. cairn_tree_open, for mounts, checks an
 * index lazily (index.c).
 */
#include "libcairn_image.h"
#include "libcairn_tree.h"

/* The tree of cairn_tree_build (lazy false) or cairn_tree_open. */
static int tree_get(cairn_store *st, const char *image_id, bool lazy, cairn_tree **out) {
  store_errclear(st);
  int r = cn_index_map(st, image_id, lazy, out);
  if (r != -ENOENT && r != -EBADMSG) return r;
  store_errclear(st);
  cairn_tree *built;
  if ((r = cn_image_tree_build(st, image_id, &built)) < 0) return r;
  if (cn_index_write(st, image_id, built) == 0 && cn_index_map(st, image_id, lazy, out) == 0) {
    cairn_tree_free(built);
    return 0;
  }
  store_errclear(st);
  *out = built;
  return 0;
}

int cairn_tree_build(cairn_store *st, const char *image_id, cairn_tree **out) {
  return tree_get(st, image_id, false, out);
}

int cairn_tree_open(cairn_store *st, const char *image_id, cairn_tree **out) {
  return tree_get(st, image_id, true, out);
}
