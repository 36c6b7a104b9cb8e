/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rw_setup.c — a writable mount's upper layer opened, and freed (rw.h says how the
 * upper is laid out and served).
 *
 * cairnfs_rw_setup gives the mount its upper: made fresh, resumed (a kept
 * one), or inherited from the supervisor that holds it across restarts;
 * then the root inode, and the upper objects the kernel may still know
 * held again. cairnfs_rw_free drops the upper only by the supervisor's
 * rule (cairn umount marked it, or it was never served).
 */
#include "rw.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- setup -------------------------------------------------------------- */

static void restore_made(uint64_t nodeid, void *arg) {
  struct cairnfs *fs = arg;
  /* After a move every recorded nodeid (its key may not be its number:
   * lookups find it by its key), and the numbers given past 2^62. */
  if (fs->rw->rebased && nodeid > fs->rw->next_id) fs->rw->next_id = nodeid;
  if ((nodeid < UPPER_BASE && !fs->rw->rebased) || rw_inode_get(fs->rw, nodeid) ||
      rw_inode_restore(fs, nodeid, 0))
    return;
  uint32_t lower;
  bool indexed;
  int fd = cairnfs_nodetab_find(fs->rw->nodes, nodeid, &lower, &indexed);
  if (fd >= 0)
    close(fd);
  else if (fd == -ESTALE) /* gone; another failure forgets nothing */
    cairnfs_nodetab_forget(fs->rw->nodes, nodeid);
}

/* Removes the copy-up staging a dead server left in work/ (tmp.N), and
 * the orphans no inode is recorded for (orphan.N). */
static void work_clean(struct cairnfs_rw *rw) {
  int dfd = openat(rw->work_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
  if (!d) {
    if (dfd >= 0) close(dfd);
    return;
  }
  struct dirent *e;
  while ((e = readdir(d))) {
    if (strncmp(e->d_name, "tmp.", 4) == 0 && unlinkat(dfd, e->d_name, 0) < 0)
      unlinkat(dfd, e->d_name, AT_REMOVEDIR); /* an empty directory's */
    if (strncmp(e->d_name, "orphan.", 7) == 0 &&
        !cairnfs_nodetab_has(rw->nodes, strtoull(e->d_name + 7, NULL, 10)))
      unlinkat(dfd, e->d_name, 0);
  }
  closedir(d);
}

int cairnfs_rw_setup(struct cairnfs *fs, const char *image_id, const char *dir,
                     const struct cairnfs_rw_held *held) {
  const char *resume = held->upper;
  struct cairnfs_rw *rw = calloc(1, sizeof(*rw));
  if (!rw) return -ENOMEM;
  rw->lock_fd = rw->root_fd = rw->work_fd = rw->index_fd = -1;
  pthread_mutex_init(&rw->mu, NULL);
  pthread_rwlock_init(&rw->tree_lock, NULL);
  snprintf(rw->dir, sizeof(rw->dir), "%s", dir);
  snprintf(rw->image, sizeof(rw->image), "%s", image_id);
  fs->rw = rw;
  umask(0);
  int r;
  if (held->lock_fd >= 0) {
    /* The supervisor made or opened the upper and holds its lock: it
     * outlives this server, so gc never sees the upper unowned. */
    rw->inherited = true;
    rw->resumed = !held->fresh;
    snprintf(rw->id, sizeof(rw->id), "%.64s", resume ? resume : "");
    r = snprintf(rw->path, sizeof(rw->path), "%s/uppers/%s", cairn_store_dir(fs->st), rw->id) <
                (int)sizeof(rw->path)
            ? 0
            : -ENAMETOOLONG;
    rw->lock_fd = fcntl(held->lock_fd, F_DUPFD_CLOEXEC, 3);
    if (r == 0 && rw->lock_fd < 0) r = -errno;
    if (r < 0) return cairn_fail(fs->st, r, "upper %.12s: %s", rw->id, strerror(-r));
    if (held->nodes_fd >= 0 &&
        (r = cairnfs_nodetab_open(held->nodes_fd, rw->lock_fd, &rw->nodes)) < 0)
      return cairn_fail(fs->st, r, "upper %.12s: the node table: %s", rw->id, strerror(-r));
    rw->epoch = cairnfs_nodetab_epoch(rw->nodes);
    /* cairn commit moved the mount: the supervisor passed the image and
     * upper it is on now, and the table says what each nodeid the kernel
     * held before the move is in it. */
    if (held->nodes_fd >= 0 && cairnfs_nodetab_final(held->nodes_fd, NULL)) {
      rw->rebased = true;
      rw->next_id = 1ULL << 62;
    }
  } else if (resume) {
    rw->resumed = true;
    cairn_id image;
    snprintf(rw->id, sizeof(rw->id), "%.64s", resume);
    r = cairn_upper_open(fs->st, resume, image, rw->path, sizeof(rw->path), &rw->lock_fd);
    if (r == 0 && strcmp(image, image_id) != 0)
      r = cairn_fail(fs->st, -EINVAL, "upper %.12s is of image %.12s", resume, image);
  } else {
    r = cairn_upper_create(fs->st, image_id, dir, rw->id, rw->path, sizeof(rw->path), &rw->lock_fd);
  }
  if (r < 0) return r;
  rw->root_fd = openat(rw->lock_fd, "root", O_PATH | O_DIRECTORY | O_CLOEXEC);
  rw->work_fd = openat(rw->lock_fd, "work", O_PATH | O_DIRECTORY | O_CLOEXEC);
  rw->index_fd = openat(rw->lock_fd, "work/index", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (rw->root_fd < 0 || rw->work_fd < 0 || rw->index_fd < 0)
    return cairn_fail(fs->st, -errno, "%s: %s", rw->path, strerror(errno));
  /* The upper's root is the image's root: same owner, mode, times. */
  const cairn_node *n = cairn_tree_node(fs->tree, FUSE_ROOT_ID);
  if (!n) return cairn_fail(fs->st, -EIO, "%s: no root in the image's index", image_id);
  r = rw->resumed ? 0 : rw_copy_meta(fs, 0, n, rw->lock_fd, "root");
  if (r < 0) return cairn_fail(fs->st, r, "%s/root: %s", rw->path, strerror(-r));
  rw->root = rw_inode_new(rw, FUSE_ROOT_ID, FUSE_ROOT_ID);
  if (!rw->root) return cairn_fail(fs->st, -ENOMEM, "out of memory");
  rw->root->fd = dup(rw->root_fd);
  rw->root->refs = 1;
  if (rw->root->fd < 0) return cairn_fail(fs->st, -errno, "dup: %s", strerror(errno));
  if (rw->inherited && !held->fresh) work_clean(rw);
  /* The objects made here that the kernel may still know, held again
   * (their fds keep their inode numbers, thus nodeids, from being reused
   * while the kernel caches them). */
  cairnfs_nodetab_foreach(rw->nodes, restore_made, fs);
  return 0;
}

void cairnfs_rw_free(struct cairnfs *fs) {
  struct cairnfs_rw *rw = fs->rw;
  if (!rw) return;
  /* The supervisor's rule (supervisor.c's upper_release) for an upper of
   * our own: dropped (cairn umount, or gc, removes its files) only if
   * cairn umount marked it so, else kept. */
  if (rw->lock_fd >= 0 && !rw->inherited && rw->served)
    cairn_upper_session_end(fs->st, rw->id, rw->lock_fd);
  else if (rw->lock_fd >= 0 && !rw->inherited && !rw->resumed)
    cairn_upper_discard(fs->st, rw->id);
  for (size_t b = 0; b < NBUCKETS; b++) {
    for (struct rw_inode *i = rw->buckets[b], *next; i; i = next) {
      next = i->hnext;
      if (i->fd >= 0) close(i->fd);
      free(i->name);
      free(i);
    }
  }
  rw_given_clear(rw);
  for (struct stale_fh *s = rw->stale, *next; s; s = next) {
    next = s->next;
    rw_stale_free(s);
  }
  cairnfs_nodetab_free(rw->nodes);
  free(rw->rparent);
  if (rw->root_fd >= 0) close(rw->root_fd);
  if (rw->work_fd >= 0) close(rw->work_fd);
  if (rw->index_fd >= 0) close(rw->index_fd);
  if (rw->lock_fd >= 0) close(rw->lock_fd);
  for (size_t k = 0; k < rw->n_old_trees; k++) cairn_tree_free(rw->old_trees[k]);
  for (struct whandle *h = rw->whandles, *next; h; h = next) {
    next = h->next;
    free(h);
  }
  free(rw->old_trees);
  rw_drop_wait(rw);
  if (rw->pins) cairn_pinset_release(rw->st2, rw->pins);
  if (rw->st2) cairn_store_close(rw->st2);
  pthread_rwlock_destroy(&rw->tree_lock);
  pthread_mutex_destroy(&rw->mu);
  free(rw);
  fs->rw = NULL;
}
