/*
 * merge.c — an image's merged root filesystem: its stored layers, bottom
 * first, through the tree builder (tree.c), which applies the OCI rules.
 */
#include "tree.h"

struct stored_layer {
  cairn_store *st;
  const char *diff_id;
};

static int stored_layer_foreach(void *src, cairn_entry_fn fn, void *arg) {
  struct stored_layer *l = src;
  return cairn_layer_foreach(l->st, l->diff_id, fn, arg);
}

int cairn_tree_build(cairn_store *st, const char *image_id, cairn_tree **out) {
  store_errclear(st);
  *out = NULL;
  char **layers = NULL;
  size_t n_layers = 0;
  int r = cairn_image_layers(st, image_id, &layers, &n_layers);
  if (r < 0) return r;
  merge_builder *b;
  if ((r = cn_merge_builder_new(st, &b)) < 0) goto out;
  for (size_t i = 0; r == 0 && i < n_layers; i++)
    r = cn_merge_builder_add_layer(b, stored_layer_foreach, &(struct stored_layer){st, layers[i]});
  if (r == 0)
    r = cn_merge_builder_finish(b, out);
  else
    cn_merge_builder_free(b);
out:
  cairn_strv_free(layers, n_layers);
  return r;
}
