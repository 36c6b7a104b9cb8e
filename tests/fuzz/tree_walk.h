/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tree_walk.h — what the fuzz targets that end with a merged tree (the
 * builder's, fuzz_merge; the index reader's, fuzz_index) do with it: touch
 * every byte it hands out, so that AddressSanitizer sees them, and trap on
 * a tree that breaks a promise of cairn.h. Every node, its strings and
 * xattrs; every directory's entries sorted, each found by a lookup; then a
 * walk from the root, depth first as export walks, that must visit each
 * directory at most once.
 */
#ifndef CAIRN_FUZZ_TREE_WALK_H
#define CAIRN_FUZZ_TREE_WALK_H

#include "cairn.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Touches a node's strings and xattrs. */
static size_t node_strings_walk(const cairn_tree *t, const cairn_node *n) {
  size_t sum = 0;
  if (n->target) sum += strlen(cairn_tree_str(t, n->target));
  if (n->blob) sum += strlen(cairn_tree_str(t, n->blob));
  for (size_t i = 0; i < n->n_xattrs; i++) {
    cairn_xattr x = cairn_tree_xattr(t, n, i);
    sum += strlen(x.name);
    for (size_t k = 0; k < x.len; k++) sum += ((const uint8_t *)x.value)[k];
  }
  return sum;
}

static size_t tree_walk(const cairn_tree *t) {
  size_t sum = 0, count = cairn_tree_count(t), n_dirs = 0;
  if (cairn_tree_node(t, 0) || cairn_tree_node(t, count + 1)) __builtin_trap();
  for (uint64_t ino = 1; ino <= count; ino++) {
    const cairn_node *n = cairn_tree_node(t, ino);
    if (!n) __builtin_trap();
    sum += n->mode + n->nlink + n->size + n->parent;
    sum += node_strings_walk(t, n);
    if (!S_ISDIR(n->mode)) continue;
    n_dirs++;
    if (!cairn_tree_node(t, n->parent)) __builtin_trap();
    const cairn_dirent *c = cairn_tree_children(t, n);
    for (size_t i = 0; i < n->n_children; i++) {
      const char *name = cairn_tree_str(t, c[i].name);
      if (cairn_tree_lookup(t, n, name) != &c[i] || !cairn_tree_node(t, c[i].ino)) __builtin_trap();
      if (i > 0 && strcmp(cairn_tree_str(t, c[i - 1].name), name) >= 0) __builtin_trap();
    }
  }
  uint64_t *stack = malloc((n_dirs + 1) * sizeof(*stack));
  if (!stack) return sum;
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

#endif
