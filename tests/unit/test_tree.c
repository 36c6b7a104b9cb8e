/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_tree.c — the merged tree (store/merge.c, store/tree.c) by the OCI image-spec
 * rules, case by case: later layers win, a directory over a directory keeps
 * the lower contents, whiteouts hide subtrees (lower layers only), opaque
 * markers empty a directory (the root too), files and directories replace
 * each other, parents are synthesized, hardlinks share one inode whatever
 * order their names sort in, and numbering is dense, rooted at 1 and the
 * same on every build. Every case reads the tree a mount maps (the image's
 * index file) and compares it with the one built from the layers in
 * memory. The full-tree comparison through a real mount is
 * tests/e2e/test_mount_tree.sh.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "libcairn_image.h"
#include "testutil.h"

static tu_store T;
static void setup(void) { tu_store_setup(&T); }
static void teardown(void) { tu_store_teardown(&T); }
TestSuite(tree, .init = setup, .fini = teardown);

/* The image's tree as a mount gets it (its index file, mapped), checked
 * node by node against the tree built from its layers in memory. */
static cairn_tree *build(const tu_layer *layers, size_t n) {
  cairn_id id;
  cr_assert_eq(tu_import(&T, "t:1", layers, n, id), 0, "%s", cairn_errmsg(T.st));
  cairn_tree *t, *built;
  cr_assert_eq(cairn_tree_build(T.st, id, &t), 0, "%s", cairn_errmsg(T.st));
  cr_assert_eq(cn_image_tree_build(T.st, id, &built), 0, "%s", cairn_errmsg(T.st));
  tu_assert_same_tree(t, built);
  cairn_tree_free(built);
  return t;
}

/* The ino at path ("" is the root), or 0. */
static uint64_t ino_at(const cairn_tree *t, const char *path) {
  uint64_t ino = 1;
  char buf[4096];
  snprintf(buf, sizeof(buf), "%s", path);
  for (char *save = NULL, *name = strtok_r(buf, "/", &save); name;
       name = strtok_r(NULL, "/", &save)) {
    const cairn_node *dir = cairn_tree_node(t, ino);
    if (!S_ISDIR(dir->mode)) return 0;
    const cairn_dirent *de = cairn_tree_lookup(t, dir, name);
    if (!de) return 0;
    ino = de->ino;
  }
  return ino;
}

static const cairn_node *at(const cairn_tree *t, const char *path) {
  uint64_t ino = ino_at(t, path);
  cr_assert_neq(ino, 0, "%s is missing", path);
  return cairn_tree_node(t, ino);
}

/* The name of directory dir's i-th entry. */
static const char *child_name(const cairn_tree *t, const cairn_node *dir, size_t i) {
  return cairn_tree_str(t, cairn_tree_children(t, dir)[i].name);
}

static void assert_missing(const cairn_tree *t, const char *path) {
  cr_assert_eq(ino_at(t, path), 0, "%s should be hidden", path);
}

Test(tree, later_layers_win_and_directories_merge) {
  static const tu_entry l1[] = {
      {.path = "etc", .type = 'd', .mode = 0755, .mtime = 100},
      {.path = "etc/a", .content = "lower a"},
      {.path = "etc/b", .content = "lower b", .uid = 7},
  };
  static const tu_entry l2[] = {
      {.path = "etc", .type = 'd', .mode = 0700, .uid = 3, .mtime = 200},
      {.path = "etc/b", .content = "upper b!", .mode = 0600},
  };
  tu_layer layers[] = {{l1, TU_N(l1)}, {l2, TU_N(l2)}};
  cairn_tree *t = build(layers, 2);
  const cairn_node *etc = at(t, "etc");
  cr_assert_eq(etc->mode, S_IFDIR | 0700);
  cr_assert_eq(etc->uid, 3);
  cr_assert_eq(etc->mtime_sec, 200);
  cr_assert_eq(etc->n_children, 2);
  cr_assert_eq(at(t, "etc/a")->size, strlen("lower a"));
  const cairn_node *b = at(t, "etc/b");
  cr_assert_eq(b->size, strlen("upper b!"));
  cr_assert_eq(b->mode, S_IFREG | 0600);
  cr_assert_eq(b->uid, 0);
  cairn_tree_free(t);
}

Test(tree, whiteouts_hide_lower_subtrees_only) {
  static const tu_entry l1[] = {
      {.path = "gone", .type = 'd'},
      {.path = "gone/deep", .type = 'd'},
      {.path = "gone/deep/file", .content = "x"},
      {.path = "same", .type = 'd'},
      {.path = "same/lower", .content = "lower"},
      {.path = "keep", .content = "k"},
  };
  static const tu_entry l2[] = {
      {.path = ".wh.gone", .content = ""},
      {.path = ".wh.same", .content = ""},
      {.path = "same", .content = "a file from the whiting-out layer"},
      {.path = ".wh.never-existed", .content = ""},
  };
  static const tu_entry l3[] = {
      {.path = "gone", .type = 'd'},
      {.path = "gone/new", .content = "new"},
  };
  tu_layer layers[] = {{l1, TU_N(l1)}, {l2, TU_N(l2)}, {l3, TU_N(l3)}};
  cairn_tree *t = build(layers, 3);
  assert_missing(t, "gone/deep");
  cr_assert_eq(at(t, "gone")->n_children, 1);
  at(t, "gone/new");
  cr_assert(S_ISREG(at(t, "same")->mode));
  at(t, "keep");
  const cairn_node *root = cairn_tree_node(t, 1);
  for (size_t i = 0; i < root->n_children; i++)
    cr_assert_neq(strncmp(child_name(t, root, i), ".wh.", 4), 0, "%s shown",
                  child_name(t, root, i));
  cairn_tree_free(t);
}

Test(tree, opaque_directories_and_root) {
  static const tu_entry l1[] = {
      {.path = "top", .content = "top"},      {.path = "d", .type = 'd', .mode = 0755},
      {.path = "d/old", .content = "old"},    {.path = "d/olddir", .type = 'd'},
      {.path = "d/olddir/x", .content = "x"},
  };
  static const tu_entry l2[] = {
      {.path = "d", .type = 'd', .mode = 0711},
      {.path = "d/.wh..wh..opq", .content = ""},
      {.path = "d/new", .content = "new"},
  };
  static const tu_entry l3[] = {
      {.path = ".wh..wh..opq", .content = ""},
      {.path = "only", .content = "only this"},
  };
  tu_layer two[] = {{l1, TU_N(l1)}, {l2, TU_N(l2)}};
  cairn_tree *t = build(two, 2);
  const cairn_node *d = at(t, "d");
  cr_assert_eq(d->mode, S_IFDIR | 0711);
  cr_assert_eq(d->n_children, 1);
  cr_assert_str_eq(child_name(t, d, 0), "new");
  cr_assert_eq(d->nlink, 2);
  at(t, "top");
  cairn_tree_free(t);

  tu_layer three[] = {{l1, TU_N(l1)}, {l2, TU_N(l2)}, {l3, TU_N(l3)}};
  cairn_id id;
  cr_assert_eq(tu_import(&T, "t:3", three, 3, id), 0);
  cr_assert_eq(cairn_tree_build(T.st, id, &t), 0);
  const cairn_node *root = cairn_tree_node(t, 1);
  cr_assert_eq(root->n_children, 1);
  cr_assert_str_eq(child_name(t, root, 0), "only");
  cr_assert_eq(cairn_tree_count(t), 2);
  cairn_tree_free(t);
}

Test(tree, files_and_directories_replace_each_other) {
  static const tu_entry l1[] = {
      {.path = "d2f", .type = 'd'},
      {.path = "d2f/child", .content = "c"},
      {.path = "f2d", .content = "file"},
      {.path = "l2d", .type = 'l', .target = "/etc"},
  };
  static const tu_entry l2[] = {
      {.path = "d2f", .content = "now a file"},
      {.path = "f2d", .type = 'd'},
      {.path = "f2d/child", .content = "c"},
      {.path = "l2d", .type = 'd'},
  };
  tu_layer layers[] = {{l1, TU_N(l1)}, {l2, TU_N(l2)}};
  cairn_tree *t = build(layers, 2);
  cr_assert(S_ISREG(at(t, "d2f")->mode));
  assert_missing(t, "d2f/child");
  cr_assert(S_ISDIR(at(t, "f2d")->mode));
  at(t, "f2d/child");
  const cairn_node *l2d = at(t, "l2d");
  cr_assert(S_ISDIR(l2d->mode));
  cr_assert_eq(l2d->target, 0);
  cairn_tree_free(t);
}

Test(tree, missing_parents_are_synthesized) {
  static const tu_entry l1[] = {
      {.path = "file", .content = "a file"},
      {.path = "a/b/c.txt", .content = "deep", .mtime = 5},
  };
  static const tu_entry l2[] = {
      {.path = "file/under", .content = "a path through a file"},
  };
  tu_layer layers[] = {{l1, TU_N(l1)}, {l2, TU_N(l2)}};
  cairn_tree *t = build(layers, 2);
  const char *synthesized[] = {"a", "a/b", "file"};
  for (size_t i = 0; i < TU_N(synthesized); i++) {
    const cairn_node *n = at(t, synthesized[i]);
    cr_assert_eq(n->mode, S_IFDIR | 0755, "%s", synthesized[i]);
    cr_assert_eq(n->uid, 0);
    cr_assert_eq(n->mtime_sec, 0);
  }
  cr_assert_eq(at(t, "a")->nlink, 3);
  at(t, "file/under");
  cairn_tree_free(t);
}

Test(tree, hardlinks_share_an_inode) {
  static const tu_entry l1[] = {
      {.path = "m", .content = "shared", .uid = 9},
      {.path = "a_first_by_name", .type = 'h', .target = "m"},
      {.path = "z", .type = 'h', .target = "m"},
      {.path = "pair", .content = "pair"},
      {.path = "pair2", .type = 'h', .target = "pair"},
  };
  static const tu_entry l2[] = {
      {.path = "pair2", .content = "replaced"},
  };
  tu_layer layers[] = {{l1, TU_N(l1)}, {l2, TU_N(l2)}};
  cairn_tree *t = build(layers, 2);
  uint64_t m = ino_at(t, "m");
  cr_assert_eq(ino_at(t, "a_first_by_name"), m);
  cr_assert_eq(ino_at(t, "z"), m);
  const cairn_node *n = cairn_tree_node(t, m);
  cr_assert_eq(n->nlink, 3);
  cr_assert_eq(n->uid, 9);
  cr_assert_neq(n->blob, 0);
  cr_assert_eq(at(t, "pair")->nlink, 1);
  cr_assert_neq(ino_at(t, "pair2"), ino_at(t, "pair"));
  cairn_tree_free(t);
}

Test(tree, numbering_is_dense_sorted_and_stable) {
  static const tu_entry l1[] = {
      {.path = "b", .type = 'd'},
      {.path = "b/y", .content = "y"},
      {.path = "a", .content = "a"},
      {.path = "b/x", .type = 'd'},
      {.path = "c", .type = 'l', .target = "a"},
      {.path = "empty", .content = ""},
  };
  tu_layer layers[] = {{l1, TU_N(l1)}};
  cairn_tree *t = build(layers, 1);
  cairn_tree *again;
  cairn_id id;
  cr_assert_eq(cairn_image_resolve(T.st, "t:1", id), 0);
  cr_assert_eq(cairn_tree_build(T.st, id, &again), 0);
  cr_assert_eq(cairn_tree_count(t), 7);
  cr_assert_null(cairn_tree_node(t, 0));
  cr_assert_null(cairn_tree_node(t, 8));
  const cairn_node *root = cairn_tree_node(t, 1);
  cr_assert_eq(root->parent, 1);
  cr_assert_eq(root->nlink, 3);
  for (size_t i = 1; i < root->n_children; i++)
    cr_assert_lt(strcmp(child_name(t, root, i - 1), child_name(t, root, i)), 0);
  const char *paths[] = {"", "a", "b", "b/x", "b/y", "c", "empty"};
  for (size_t i = 0; i < TU_N(paths); i++)
    cr_assert_eq(ino_at(t, paths[i]), ino_at(again, paths[i]), "%s", paths[i]);
  cr_assert_eq(at(t, "b/x")->parent, ino_at(t, "b"));
  cr_assert_str_eq(cairn_tree_str(t, at(t, "c")->target), "a");
  cr_assert_eq(at(t, "c")->size, 1);
  cr_assert_eq(at(t, "empty")->blob, 0);
  cairn_tree_free(t);
  cairn_tree_free(again);
}
