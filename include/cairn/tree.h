/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cairn/tree.h — libcairn's public face: an image's merged tree.
 * Included by cairn.h, whose comment gives the conventions every function
 * here keeps (errors, ids, handles).
 */
#ifndef CAIRN_TREE_H
#define CAIRN_TREE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cairn/layer.h"
#include "cairn/store.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- merged tree (store/merge.c, tree.c, index.c) -------------------------
 * An image's root filesystem with its layers merged by the OCI rules,
 * read-only (safe to read from many threads). cairn_tree_build serves it
 * from the image's index file (STORE/index/ID), mapped shared: every mount
 * of an image reads the same page-cache pages, and nothing is allocated per
 * entry. The index is written when the image is committed, or on the first
 * build that finds none (or a corrupt one). Nodes and directory entries
 * are the index's own fixed-width records: they hold no pointers, only
 * offsets, which the cairn_tree_* accessors below turn into strings.
 * Inode numbers run 1..cairn_tree_count(), root = 1, stable for an image. */

typedef struct cairn_dirent {
  uint32_t name; /* cairn_tree_str */
  uint32_t ino;
} cairn_dirent;

typedef struct cairn_node {
  uint32_t mode; /* file type bits (S_IFMT) | 07777 */
  uint32_t uid, gid, nlink;
  uint64_t size; /* regular files; symlinks: length of target */
  uint64_t rdev;
  int64_t mtime_sec;
  uint32_t mtime_nsec;
  uint32_t parent; /* directories: parent's ino (root: 1) */
  uint32_t target; /* symlinks: cairn_tree_str */
  uint32_t blob;   /* regular files with size > 0: cairn_tree_str */
  uint32_t xattrs; /* cairn_tree_xattr */
  uint32_t n_xattrs;
  uint32_t children;   /* directories: cairn_tree_children */
  uint32_t n_children; /* sorted by name (strcmp) */
} cairn_node;

typedef struct cairn_tree cairn_tree;

/* The merged tree of image_id, in *out (cairn_tree_free it): its index
 * checked whole, or built from its layers (and written) if it has none or
 * a corrupt one.
 * Returns 0; -ENOENT: no such image; -EOVERFLOW: the tree has more than an index can hold. */
int cairn_tree_build(cairn_store *st, const char *image_id, cairn_tree **out);
/* The same tree for serving (a mount): its index is checked lazily, the
 * header and root now (its checksum by fsck only), each node the first
 * time cairn_tree_node hands it out, so that opening it costs the same at
 * a thousand entries or a million. Everything a node that was handed out
 * refers to (strings, xattrs, children) was checked.
 * Returns as cairn_tree_build. */
int cairn_tree_open(cairn_store *st, const char *image_id, cairn_tree **out);
/* Starts reading the image's index in the background, if it has one, and
 * returns at once: a mount asks before it pins, so that the disk reads the
 * index while the pins are taken (cairn_tree_open then waits less).
 * Returns true if the image has an index. */
bool cairn_tree_prefetch(cairn_store *st, const char *image_id);
void cairn_tree_free(cairn_tree *t);
/* How many nodes the tree has: its inode numbers run 1 to that.
 * Returns the count (at least 1, the root). */
size_t cairn_tree_count(const cairn_tree *t);
/* The node of inode ino.
 * Returns it, pointing into the tree; NULL: ino is out of range, or its node fails its checks
 * (a corrupt index opened by cairn_tree_open). */
const cairn_node *cairn_tree_node(const cairn_tree *t, uint64_t ino);
/* The nodes' sizes in 4 KiB blocks, summed (statfs): read from the
 * index's header, no node is read.
 * Returns the sum. */
uint64_t cairn_tree_blocks(const cairn_tree *t);
/* A string of the tree (a name, target or blob field).
 * Returns it, pointing into the tree; NULL: off is 0. */
const char *cairn_tree_str(const cairn_tree *t, uint32_t off);
/* The n_children entries of directory dir.
 * Returns the first of them, pointing into the tree. */
const cairn_dirent *cairn_tree_children(const cairn_tree *t, const cairn_node *dir);
/* Extended attribute i (< n_xattrs) of n.
 * Returns it, pointing into the tree. */
cairn_xattr cairn_tree_xattr(const cairn_tree *t, const cairn_node *n, size_t i);
/* The entry named name in directory dir.
 * Returns it, pointing into the tree; NULL: there is none. */
const cairn_dirent *cairn_tree_lookup(const cairn_tree *t, const cairn_node *dir, const char *name);

#ifdef __cplusplus
}
#endif

#endif
