/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rw_attr.c — attributes of a writable mount's inodes (rw.h says how the
 * upper is laid out and served).
 *
 * An inode's attributes are its upper object's (fstat of its fd) or,
 * lower only, its tree node's; st_ino is always the nodeid. Link counts
 * are those of the merged view: a merged directory's counts its merged
 * subdirectories, an indexed file's its lower names less those hidden
 * plus its upper ones, an orphan's not its work/ name. Calls that take a
 * path act on the object itself (objpath_get), never on a name that may
 * since be another object's. Callers hold mu.
 */
#include "rw.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- attributes ------------------------------------------------------- */

/* A path naming upper inode i itself, for the calls that take a path
 * (*xattr, utimensat): its fd's /proc link (followed: nofollow false), or
 * for a symlink, which no fd can be read or written through, a name of it
 * (not followed): its recorded place while that still names it, else a
 * link made for the call in work/ (tmp, removed by objpath_put). Never
 * the place alone: an unlink of that name (the object keeping another)
 * leaves it stale, and a later entry there is another object, maybe
 * another user's. -ENOENT if the symlink has no name left. */

int objpath_get(struct cairnfs_rw *rw, struct inode *i, struct objpath *o) {
  struct stat st, at;
  o->tmp[0] = '\0';
  if (fstatat(i->fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0) return -errno;
  o->nofollow = S_ISLNK(st.st_mode);
  if (!o->nofollow) {
    fd_path(o->path, sizeof(o->path), i->fd, NULL);
    return 0;
  }
  if (i->parent && i->parent->fd >= 0 && i->name &&
      fstatat(i->parent->fd, i->name, &at, AT_SYMLINK_NOFOLLOW) == 0 && at.st_ino == st.st_ino &&
      at.st_dev == st.st_dev) {
    fd_path(o->path, sizeof(o->path), i->parent->fd, i->name);
    return 0;
  }
  char self[PBUF];
  fd_path(self, sizeof(self), i->fd, NULL); /* followed once: the symlink itself */
  snprintf(o->tmp, sizeof(o->tmp), "tmp.%" PRIu64, ++rw->tmp_seq);
  if (linkat(AT_FDCWD, self, rw->work_fd, o->tmp, AT_SYMLINK_FOLLOW) < 0) {
    o->tmp[0] = '\0';
    return -errno;
  }
  fd_path(o->path, sizeof(o->path), rw->work_fd, o->tmp);
  return 0;
}

void objpath_put(struct cairnfs_rw *rw, struct objpath *o) {
  if (o->tmp[0]) unlinkat(rw->work_fd, o->tmp, 0);
  o->tmp[0] = '\0';
}

int inode_stat(struct cairnfs *fs, struct inode *i, struct stat *st) {
  if (i->fd < 0) {
    const cairn_node *n = lower_node(fs, i);
    if (!n) return -ESTALE;
    cairnfs_node_stat(n, i->id, st);
    cairnfs_node_blocks(fs, n, st);
    return 0;
  }
  if (fstatat(i->fd, "", st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0) return -errno;
  st->st_ino = i->id;
  if (S_ISDIR(st->st_mode) && lower_dir(fs, i)) {
    /* a merged directory: 2 + its subdirectories in the merged view */
    int n = dir_subdirs(fs, i);
    if (n >= 0) st->st_nlink = 2 + (nlink_t)n;
  } else if (i->indexed) {
    const cairn_node *n = lower_node(fs, i);
    /* the index's own name is no name of the file, nor are the lower
     * names the upper hides */
    uint32_t hidden = n ? hidden_names(fs->rw, i->lower) : 0;
    if (n && st->st_nlink >= 1 && n->nlink + st->st_nlink - 1 >= hidden)
      st->st_nlink = n->nlink + st->st_nlink - 1 - hidden;
  } else if (i->orphan && st->st_nlink >= 1) {
    st->st_nlink--; /* work/orphan.ID is no name of the file */
  }
  return 0;
}

int entry_of(struct cairnfs *fs, struct inode *i, struct fuse_entry_param *e) {
  memset(e, 0, sizeof(*e));
  e->ino = i->id;
  e->generation = 1;
  e->attr_timeout = RW_TIMEOUT;
  e->entry_timeout = RW_TIMEOUT;
  return inode_stat(fs, i, &e->attr);
}
