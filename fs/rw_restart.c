/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rw_restart.c — restarts: inodes and handles a dead server handed out (rw.h says how the
 * upper is laid out and served).
 *
 * A server restarted by the supervisor serves what the kernel still holds
 * from the dead one: a nodeid is restored from the node table (nodetab.c)
 * or found where the tree has it (inode_restore); a file handle of
 * another epoch is opened again from its nodeid and flags, once, and kept
 * until released (rw->stale). A restored inode's count of the kernel's
 * references is unknown: RESTORED_REFS until its first FORGET. Callers
 * hold mu unless a function says it takes it.
 */
#include "rw.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- restarts: inodes and handles a dead server handed out ------------- */

/* A restored inode's count of the kernel's references is unknown: it is
 * kept until the kernel's FORGET of it (inode_forget). */

/* The tree directory that holds tree inode ino (one of them, for a file
 * with several names), or 0. */
static uint32_t tree_parent(struct cairnfs *fs, uint32_t ino) {
  struct cairnfs_rw *rw = fs->rw;
  const cairn_node *n = cairn_tree_node(fs->tree, ino);
  if (!n || ino == FUSE_ROOT_ID) return 0;
  if (S_ISDIR(n->mode)) return n->parent;
  size_t count = cairn_tree_count(fs->tree);
  if (!rw->rparent) { /* once: every directory's children */
    if (!(rw->rparent = calloc(count + 1, sizeof(*rw->rparent)))) return 0;
    for (size_t d = 1; d <= count; d++) {
      const cairn_node *dn = cairn_tree_node(fs->tree, d);
      if (!dn || !S_ISDIR(dn->mode)) continue;
      const cairn_dirent *c = cairn_tree_children(fs->tree, dn);
      for (uint32_t k = 0; k < dn->n_children; k++)
        if (c[k].ino <= count) rw->rparent[c[k].ino] = (uint32_t)d;
    }
  }
  return ino <= count ? rw->rparent[ino] : 0;
}

/* Tree inode ino's name in tree directory dir, or NULL. */
static const char *tree_name(struct cairnfs *fs, uint32_t dir, uint32_t ino) {
  const cairn_node *dn = cairn_tree_node(fs->tree, dir);
  if (!dn || !S_ISDIR(dn->mode)) return NULL;
  const cairn_dirent *c = cairn_tree_children(fs->tree, dn);
  for (uint32_t k = 0; k < dn->n_children; k++)
    if (c[k].ino == ino) return cairn_tree_str(fs->tree, c[k].name);
  return NULL;
}

static struct rw_inode *inode_lookup(struct cairnfs *fs, uint64_t ino, unsigned depth) {
  if (ino == FUSE_ROOT_ID) return fs->rw->root;
  struct rw_inode *i = rw_inode_get(fs->rw, ino);
  return i ? i : rw_inode_restore(fs, ino, depth);
}

/* The directory inode that holds tree inode ino where the tree has it,
 * and its name there in *name; NULL if there is none. */
static struct rw_inode *tree_place(struct cairnfs *fs, uint32_t ino, unsigned depth,
                                const char **name) {
  uint32_t p = tree_parent(fs, ino);
  *name = p ? tree_name(fs, p, ino) : NULL;
  return *name ? inode_lookup(fs, p, depth) : NULL;
}

/* Gives a restored lower-only inode the place the tree says it has. */
void rw_inode_find_parent(struct cairnfs *fs, struct rw_inode *i) {
  const char *name;
  struct rw_inode *dir = i->lower ? tree_place(fs, i->lower, 1, &name) : NULL;
  if (dir) rw_inode_place(fs->rw, i, dir, name);
}

/* Rebuilds inode ino that an earlier server handed out to the kernel: an
 * upper object recorded in nodetab, or (after a move) the tree inode it
 * records, else a tree inode found where the tree has it (through
 * resolve: it may have been copied up since), else a lower-only inode
 * with no place yet (inode_find_parent). */
struct rw_inode *rw_inode_restore(struct cairnfs *fs, uint64_t ino, unsigned depth) {
  struct cairnfs_rw *rw = fs->rw;
  if (depth > 4096) return NULL;
  uint32_t lower = 0;
  bool indexed = false;
  int fd = cairnfs_nodetab_find(rw->nodes, ino, &lower, &indexed);
  struct rw_inode *i;
  if (fd >= 0) {
    if (!(i = rw_inode_new(rw, ino, lower))) {
      close(fd);
      return NULL;
    }
    i->fd = fd;
    i->indexed = indexed;
    i->orphan = !indexed && rw_orphan_is(rw, ino, fd);
    i->refs = RESTORED_REFS;
    i->restored = i->base = true;
    struct stat st;
    /* After a move, its identity, which lookups find it by. */
    if (rw->rebased && !lower && fstatat(fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == 0)
      rw_key_set(rw, i, UPPER_BASE + st.st_ino);
    else if (rw->rebased)
      rw_key_set(rw, i, lower);
    return i;
  }
  if (fd == -ENODATA && lower && cairn_tree_node(fs->tree, lower)) {
    /* After a move: a nodeid the kernel held before it, now lower only
     * as another tree inode. */
    if (!(i = rw_inode_new(rw, ino, lower))) return NULL;
    rw_key_set(rw, i, lower);
    i->refs = RESTORED_REFS;
    i->restored = i->base = true;
    const cairn_node *n = cairn_tree_node(fs->tree, lower);
    if (!S_ISDIR(n->mode) && n->nlink > 1) {
      char idx[16];
      snprintf(idx, sizeof(idx), "%" PRIu32, lower);
      i->fd = openat(rw->index_fd, idx, O_PATH | O_NOFOLLOW | O_CLOEXEC);
      i->indexed = i->fd >= 0;
    }
    return i;
  }
  if (fd != -ENOENT || ino >= UPPER_BASE) return NULL;
  const cairn_node *n = cairn_tree_node(fs->tree, ino);
  if (!n) return NULL;
  const char *name;
  struct rw_inode *dir = tree_place(fs, (uint32_t)ino, depth + 1, &name);
  if (dir && rw_resolve(fs, dir, name, &i) == 0) {
    if (i->id == ino) {
      i->refs += RESTORED_REFS;
      i->restored = i->base = true;
      return i;
    }
    rw_inode_drop_unused(rw, i);
  }
  if (!(i = rw_inode_new(rw, ino, (uint32_t)ino))) return NULL;
  i->refs = RESTORED_REFS;
  i->restored = i->base = true;
  if (!S_ISDIR(n->mode) && n->nlink > 1) {
    char idx[16];
    snprintf(idx, sizeof(idx), "%" PRIu64, ino);
    i->fd = openat(rw->index_fd, idx, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    i->indexed = i->fd >= 0;
  }
  return i;
}

/* Whether the kernel holds an inode of nodeid now: an invalidation of its
 * attributes, which the kernel answers ENOENT when it has none (a
 * restored inode's count of its references is unknown). True when it
 * cannot be asked. */
bool rw_kernel_holds(struct cairnfs_rw *rw, uint64_t nodeid) {
  return !rw->se || fuse_lowlevel_notify_inval_inode(rw->se, nodeid, -1, 0) != -ENOENT;
}

/* The inode the kernel names ino (mu held), or NULL. */
struct rw_inode *rw_inode_of(struct cairnfs *fs, fuse_ino_t ino) {
  return inode_lookup(fs, ino, 0);
}

/* The record of a dead server's handle fh (mu held), or NULL. */
struct stale_fh *rw_stale_find(struct cairnfs_rw *rw, uint64_t fh) {
  struct stale_fh *s = rw->stale;
  while (s && s->fh != fh) s = s->next;
  return s;
}

/* Records fh (mu held), with what it holds: fd, or a listing. */
struct stale_fh *rw_stale_add(struct cairnfs_rw *rw, uint64_t fh, int fd, struct dirh *d) {
  struct stale_fh *s = calloc(1, sizeof(*s));
  if (!s) return NULL;
  *s = (struct stale_fh){.fh = fh, .fd = fd, .dirh = d, .next = rw->stale};
  rw->stale = s;
  return s;
}

void rw_stale_free(struct stale_fh *s) {
  if (s->fd >= 0) close(s->fd);
  if (s->dirh) rw_dirh_free(s->dirh);
  free(s);
}

int rw_fh_make(struct cairnfs_rw *rw, int fd, int flags, uint64_t *fh) {
  if (fd < 0 || fd >= 1 << FH_FD_BITS) return -EMFILE;
  *fh = ((uint64_t)rw->epoch & FH_EPOCH_MASK) << FH_EPOCH_SHIFT |
        ((uint64_t)(unsigned)flags & FH_FLAGS_MASK) << FH_FLAGS_SHIFT | (uint64_t)fd;
  return 0;
}

bool rw_fh_ours(const struct cairnfs_rw *rw, uint64_t fh) {
  return (fh >> FH_EPOCH_SHIFT & FH_EPOCH_MASK) == (rw->epoch & FH_EPOCH_MASK);
}

/* An fd of i's upper opened with flags (O_CREAT and the like dropped).
 * Not O_APPEND: the kernel gives every write its offset (the end of the
 * file, for an append), so that a write replayed after a restart lands
 * where it did the first time instead of being appended twice. */
int rw_reopen(struct rw_inode *i, int flags) {
  char path[PBUF];
  fd_path(path, sizeof(path), i->fd, NULL);
  flags &= ~(O_CREAT | O_EXCL | O_NOCTTY | O_NOFOLLOW | O_DIRECT | O_APPEND);
  int fd = open(path, flags | O_CLOEXEC);
  return fd < 0 ? -errno : fd;
}

/* Closes what a released fh holds (a dead server's: its reopened fd or
 * listing, if any). */
void rw_fh_release(struct cairnfs *fs, uint64_t fh) {
  struct cairnfs_rw *rw = fs->rw;
  pthread_mutex_lock(&rw->mu);
  struct stale_fh **pp = &rw->stale, *s;
  while (*pp && (*pp)->fh != fh) pp = &(*pp)->next;
  if ((s = *pp)) *pp = s->next;
  pthread_mutex_unlock(&rw->mu);
  if (s) rw_stale_free(s);
}

/* A FORGET of nodeid ino, n lookups (rw_forget_nodeid), restoring it
 * first if it is an orphan's this server does not hold: a restarted
 * server restores only what a request names (and, at start, what was
 * made here), so a file of the image unlinked while open and closed with
 * no request to this server between is restored to be forgotten, its
 * orphan dropped as a held one's. */
void rw_forget_restored(struct cairnfs *fs, uint64_t ino, uint64_t n) {
  struct cairnfs_rw *rw = fs->rw;
  char name[40];
  struct stat st;
  rw_orphan_name(name, sizeof(name), ino);
  if (ino != FUSE_ROOT_ID && !rw_inode_get(rw, ino) &&
      fstatat(rw->work_fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0)
    rw_inode_restore(fs, ino, 0);
  rw_forget_nodeid(rw, ino, n);
}
