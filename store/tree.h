/*
 * tree.h — the merged-tree builder (tree.c), the layer above pins: OCI layers
 * merged in memory, whatever their entries come from.
 */
#ifndef CAIRN_TREE_H
#define CAIRN_TREE_H

#include "internal.h"

/* The merged-tree builder (tree.c): layers applied bottom first by the
 * OCI rules, whatever their entries come from. A source calls fn for each
 * entry of one layer, in path order (as cairn_layer_foreach does), and
 * returns what a non-zero fn returned. Errors are -EBADMSG for a layer
 * that cannot be merged (the message says why) or -ENOMEM. */
typedef struct merge_builder merge_builder;
typedef int (*merge_source_fn)(void *src, cairn_entry_fn fn, void *arg);
int cn_merge_builder_new(cairn_store *st, merge_builder **out);
int cn_merge_builder_add_layer(merge_builder *b, merge_source_fn source, void *src);
/* Freezes the tree into *out; b is freed either way. */
int cn_merge_builder_finish(merge_builder *b, cairn_tree **out);
void cn_merge_builder_free(merge_builder *b);

#endif
