/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rw_listing.c — the merged listing of a writable mount's directory (rw.h
 * says how the upper is laid out and served).
 *
 * A listing (struct dirh) is the upper entries less whiteouts, then the
 * lower entries no upper entry (or whiteout) hides, each with the d_ino a
 * lookup gives it (key_ino): what readdir shows (rw_dir.c) and what a
 * merged directory's link count counts (dir_subdirs). Callers hold mu.
 */
#include "rw.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

void rw_dirh_clear(struct dirh *d) {
  for (size_t k = 0; k < d->n; k++) free(d->e[k].name);
  free(d->e);
  d->e = NULL;
  d->n = d->cap = 0;
}

static int dirh_add(struct dirh *d, const char *name, uint64_t ino, mode_t type) {
  if (d->n == d->cap) {
    size_t cap = d->cap ? 2 * d->cap : 32;
    struct dent *e = realloc(d->e, cap * sizeof(*e));
    if (!e) return -ENOMEM;
    d->e = e;
    d->cap = cap;
  }
  char *copy = strdup(name);
  if (!copy) return -ENOMEM;
  d->e[d->n++] = (struct dent){copy, ino, type};
  return 0;
}

static int name_cmp(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

void rw_dirh_free(struct dirh *d) {
  rw_dirh_clear(d);
  free(d);
}

/* The merged listing of directory i: upper entries, then the lower ones no
 * upper entry (or whiteout) hides. */
int rw_dirh_fill(struct cairnfs *fs, struct rw_inode *i, struct dirh *d) {
  rw_dirh_clear(d);
  d->self = i->id;
  d->parent = i->parent ? i->parent->id : FUSE_ROOT_ID;
  cairn_autofree char **seen = NULL;
  size_t n_seen = 0, cap_seen = 0;
  int r = 0;
  if (i->fd >= 0) {
    int dfd = openat(i->fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) return -errno;
    DIR *dir = fdopendir(dfd);
    if (!dir) {
      close(dfd);
      return -errno;
    }
    struct dirent *e;
    while (r == 0 && (e = readdir(dir))) {
      if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
      struct stat st;
      if (fstatat(i->fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) continue;
      if (!is_whiteout(&st)) {
        uint32_t origin = rw_origin_at(i->fd, e->d_name);
        r = dirh_add(d, e->d_name, rw_key_ino(fs->rw, origin ? origin : UPPER_BASE + st.st_ino),
                     st.st_mode & S_IFMT);
      }
      if (r == 0 && n_seen == cap_seen) {
        cap_seen = cap_seen ? 2 * cap_seen : 32;
        char **s = realloc(seen, cap_seen * sizeof(*s));
        if (!s)
          r = -ENOMEM;
        else
          seen = s;
      }
      if (r == 0 && !(seen[n_seen] = strdup(e->d_name))) r = -ENOMEM;
      if (r == 0) n_seen++;
    }
    closedir(dir);
  }
  const cairn_node *ld = r == 0 ? rw_lower_dir(fs, i) : NULL;
  if (ld) {
    if (n_seen) qsort(seen, n_seen, sizeof(*seen), name_cmp);
    const cairn_dirent *c = cairn_tree_children(fs->tree, ld);
    for (uint32_t k = 0; r == 0 && k < ld->n_children; k++) {
      const char *name = cairn_tree_str(fs->tree, c[k].name);
      if (n_seen && bsearch(&name, seen, n_seen, sizeof(*seen), name_cmp)) continue;
      const cairn_node *n = cairn_tree_node(fs->tree, c[k].ino);
      if (!n) {
        r = -EIO;
        break;
      }
      r = dirh_add(d, name, rw_key_ino(fs->rw, c[k].ino), n->mode & S_IFMT);
    }
  }
  for (size_t k = 0; k < n_seen; k++) free(seen[k]);
  return r;
}

/* How many subdirectories directory i has in the merged view. */
int rw_dir_subdirs(struct cairnfs *fs, struct rw_inode *i) {
  struct dirh d = {0};
  int r = rw_dirh_fill(fs, i, &d);
  int n = 0;
  for (size_t k = 0; r == 0 && k < d.n; k++) n += d.e[k].type == S_IFDIR;
  rw_dirh_clear(&d);
  return r < 0 ? r : n;
}
