/* SPDX-License-Identifier: Apache-2.0 */
/*
 * access.c — the order of a mount's first reads (-o record_access): the
 * files read first after the mount, for `cairn push --format
 * estargz|zstd:chunked` to put first (doc/lazy-pulls.md, "The access
 * list").
 *
 * Bounded: the first CAIRNFS_ACCESS_FILES distinct contents read within
 * CAIRNFS_ACCESS_SECONDS of the server's start. A read notes its file's
 * content (the tree's blob string) once: the thread remembers the last
 * node it noted, so a file's later reads cost a compare; a new one takes
 * a mutex and a hash probe. Nothing is written while serving: when the
 * session ends, the contents noted are named by their paths in the image
 * (every path of a content, in tree order) and cairn_access_list_write
 * replaces the image's list in the store. A server killed leaves the
 * earlier list.
 */
#include "cairnfs.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <xxhash.h>

#define SLOTS (2 * CAIRNFS_ACCESS_FILES) /* a power of two */
#define ACCESS_PATH_MAX 4096

struct slot {
  char *blob;    /* the content's name in the tree, or NULL */
  uint32_t rank; /* 1: read first */
};

struct cairnfs_access {
  pthread_mutex_t mu;
  uint64_t until_ms; /* no recording after */
  uint32_t n;
  bool done; /* a bound reached */
  struct slot slots[SLOTS];
};

static uint64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static struct slot *slot_of(struct cairnfs_access *a, const char *blob) {
  for (uint64_t i = XXH3_64bits(blob, strlen(blob)) & (SLOTS - 1);; i = (i + 1) & (SLOTS - 1))
    if (!a->slots[i].blob || strcmp(a->slots[i].blob, blob) == 0) return &a->slots[i];
}

int cairnfs_access_start(struct cairnfs *fs) {
  struct cairnfs_access *a = calloc(1, sizeof *a);
  if (!a) return -ENOMEM;
  pthread_mutex_init(&a->mu, NULL);
  a->until_ms = mono_ms() + CAIRNFS_ACCESS_SECONDS * 1000u;
  fs->access = a;
  return 0;
}

void cairnfs_access_note(struct cairnfs *fs, const cairn_node *n) {
  static __thread const cairn_node *last;
  struct cairnfs_access *a = fs->access;
  if (!a || __atomic_load_n(&a->done, __ATOMIC_RELAXED) || !n || !n->blob || n == last) return;
  last = n;
  const char *blob = cairn_tree_str(fs->tree, n->blob);
  if (!blob) return;
  pthread_mutex_lock(&a->mu);
  if (!a->done && mono_ms() > a->until_ms) __atomic_store_n(&a->done, true, __ATOMIC_RELAXED);
  if (!a->done) {
    struct slot *s = slot_of(a, blob);
    if (!s->blob && (s->blob = strdup(blob))) {
      s->rank = ++a->n;
      if (a->n >= CAIRNFS_ACCESS_FILES) __atomic_store_n(&a->done, true, __ATOMIC_RELAXED);
    }
  }
  pthread_mutex_unlock(&a->mu);
}

struct found {
  char **paths;
  uint32_t *ranks;
  size_t n, cap;
};

/* Every regular file under dir (whose path is path[0..len)) that was noted. */
static int walk(struct cairnfs *fs, const cairn_node *dir, char *path, size_t len, struct found *f,
                unsigned depth) {
  if (depth > ACCESS_PATH_MAX / 2) return 0;
  const cairn_dirent *d = cairn_tree_children(fs->tree, dir);
  for (uint32_t i = 0; d && i < dir->n_children; i++) {
    const char *name = cairn_tree_str(fs->tree, d[i].name);
    const cairn_node *n = cairn_tree_node(fs->tree, d[i].ino);
    if (!name || !n) continue;
    size_t nl = strlen(name);
    if (len + nl + 2 > ACCESS_PATH_MAX) continue;
    if (len) path[len] = '/';
    memcpy(path + len + (len ? 1 : 0), name, nl + 1);
    size_t l = len + (len ? 1 : 0) + nl;
    if (S_ISDIR(n->mode)) {
      int r = walk(fs, n, path, l, f, depth + 1);
      if (r < 0) return r;
    } else if (S_ISREG(n->mode) && n->blob) {
      const char *blob = cairn_tree_str(fs->tree, n->blob);
      struct slot *s = blob ? slot_of(fs->access, blob) : NULL;
      if (s && s->blob) {
        if (f->n == f->cap) {
          size_t cap = f->cap ? 2 * f->cap : 64;
          char **p = realloc(f->paths, cap * sizeof *p);
          if (p) f->paths = p;
          uint32_t *r = p ? realloc(f->ranks, cap * sizeof *r) : NULL;
          if (!r) return -ENOMEM;
          f->ranks = r;
          f->cap = cap;
        }
        if (!(f->paths[f->n] = strdup(path))) return -ENOMEM;
        f->ranks[f->n++] = s->rank;
      }
    }
    path[len] = '\0';
  }
  return 0;
}

static struct found *sort_found;
static int by_rank(const void *x, const void *y) {
  size_t i = *(const size_t *)x, j = *(const size_t *)y;
  uint32_t a = sort_found->ranks[i], b = sort_found->ranks[j];
  if (a != b) return a < b ? -1 : 1;
  return (i > j) - (i < j);
}

int cairnfs_access_save(struct cairnfs *fs, const char *image_id) {
  struct cairnfs_access *a = fs->access;
  if (!a || a->n == 0) return 0;
  struct found f = {0};
  char *path = malloc(ACCESS_PATH_MAX + 1);
  const cairn_node *root = cairn_tree_node(fs->tree, 1);
  int r = path && root ? 0 : -ENOMEM;
  if (r == 0) {
    path[0] = '\0';
    r = walk(fs, root, path, 0, &f, 0);
  }
  size_t *order = r == 0 ? calloc(f.n ? f.n : 1, sizeof *order) : NULL;
  const char **v = order ? calloc(f.n ? f.n : 1, sizeof *v) : NULL;
  if (r == 0 && !v) r = -ENOMEM;
  if (r == 0) {
    for (size_t i = 0; i < f.n; i++) order[i] = i;
    sort_found = &f; /* one save per process, at its end */
    qsort(order, f.n, sizeof *order, by_rank);
    for (size_t i = 0; i < f.n; i++) v[i] = f.paths[order[i]];
    r = cairn_access_list_write(fs->st, image_id, v, f.n);
  }
  free(v);
  free(order);
  for (size_t i = 0; i < f.n; i++) free(f.paths[i]);
  free(f.paths);
  free(f.ranks);
  free(path);
  return r;
}

void cairnfs_access_free(struct cairnfs *fs) {
  struct cairnfs_access *a = fs->access;
  if (!a) return;
  for (size_t i = 0; i < SLOTS; i++) free(a->slots[i].blob);
  pthread_mutex_destroy(&a->mu);
  free(a);
  fs->access = NULL;
}
