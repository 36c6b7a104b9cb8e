/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libcairn_tree.h — the merged-tree builder (tree.c) and the image index format it
 * freezes into (index.c), the layer above pins: OCI layers merged in
 * memory, whatever their entries come from, and served from one buffer or
 * one mapped file.
 */
#ifndef CAIRN_TREE_H
#define CAIRN_TREE_H

#include "libcairn_store.h"

/* The merged-tree builder (tree.c): layers applied bottom first by the
 * OCI rules, whatever their entries come from. A source calls fn for each
 * entry of one layer, in path order (as cn_layer_foreach does), and
 * returns what a non-zero fn returned. Errors are -EBADMSG for a layer
 * that cannot be merged (the message says why) or -ENOMEM. */
typedef struct merge_builder merge_builder;
typedef int (*merge_source_fn)(void *src, cairn_entry_fn fn, void *arg);
int cn_merge_builder_new(cairn_store *st, merge_builder **out);
int cn_merge_builder_add_layer(merge_builder *b, merge_source_fn source, void *src);
/* Freezes the tree into *out; b is freed either way. */
int cn_merge_builder_finish(merge_builder *b, cairn_tree **out);
void cn_merge_builder_free(merge_builder *b);

/* ---- the index format (index.c) --------------------------------------------
 * One file per image, STORE/index/ID, read-only once linked. Every field
 * is fixed-width little-endian (the records are read in place, so this
 * code builds only for little-endian hosts); every reference is an offset
 * or an index, never a pointer:
 *
 *   header        struct cn_index_header at 0
 *   nodes         n_nodes cairn_node (cairn.h), node of ino i at i - 1
 *   dirents       n_dirents cairn_dirent, each directory's a sorted run
 *   xattrs        n_xattrs struct cn_index_xattr, each node's a run
 *   strings       strings_size bytes: names, targets, blob names (NUL
 *                 terminated) and xattr values (len bytes); its first
 *                 and last bytes are NUL, and offset 0 means "none"
 *
 * checksum is XXH3-64 of every byte after it (file_size included). A new
 * layout gets a new version; an index of another version is rebuilt.
 * blocks is in the header so that statfs (which `cairn mount` asks to
 * see that the mount answers) reads no node. */
#define CN_INDEX_MAGIC "CAIRNIX"
#define CN_INDEX_VERSION 2 /* 2: blocks */

struct cn_index_header {
  char magic[8];
  uint32_t version;
  uint32_t header_size;
  uint64_t checksum;
  uint64_t file_size;
  uint32_t n_nodes, n_dirents, n_xattrs, reserved;
  uint64_t nodes_off, dirents_off, xattrs_off, strings_off, strings_size;
  uint64_t blocks; /* the nodes' sizes in 4 KiB blocks, summed (statfs) */
};

struct cn_index_xattr {
  uint32_t name, value, len;
};

/* Computes and stores the checksum of the index image in buf. */
void cn_index_seal(void *buf);
/* A tree over the index image buf of size bytes, after checking it: magic,
 * version, sizes, checksum, every offset and index in range, every string
 * terminated, every directory's entries sorted (-EBADMSG, saying what is
 * wrong, otherwise); lazy: the header (no checksum) and the root now, each
 * node when cairn_tree_node first hands it out (index.c). Takes buf either
 * way: munmap'd (mapped) or freed. */
int cn_tree_wrap(cairn_store *st, void *buf, size_t size, bool mapped, bool lazy, cairn_tree **out);
/* Maps STORE/index/ID read-only and shared and checks it: -ENOENT when
 * there is none, -EBADMSG when it is corrupt. lazy: only its header and
 * root now, each node when first handed out (see index.c). */
int cn_index_map(cairn_store *st, const char *image_id, bool lazy, cairn_tree **out);
/* Writes t as STORE/index/ID: an anonymous file in STORE/index, fsync'd,
 * linked under its name (replacing a corrupt one), the directory fsync'd.
 * A valid index already there (another writer's) is kept. */
int cn_index_write(cairn_store *st, const char *image_id, const cairn_tree *t);
/* Unlinks STORE/index/ID (after the commit that removed the image). */
void cn_index_remove(cairn_store *st, const char *image_id);

#endif
