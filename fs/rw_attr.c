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
 * path act on the object itself (fd_path, rw.h), never on a name that may
 * since be another object's. Callers hold mu.
 */
#include "rw.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- attributes ------------------------------------------------------- */

int rw_inode_stat(struct cairnfs *fs, struct rw_inode *i, struct stat *st) {
  if (i->fd < 0) {
    const cairn_node *n = rw_lower_node(fs, i);
    if (!n) return -ESTALE;
    cairnfs_node_stat(n, i->id, st);
    cairnfs_node_blocks(fs, n, st);
    return 0;
  }
  if (fstatat(i->fd, "", st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0) return -errno;
  st->st_ino = i->id;
  if (S_ISDIR(st->st_mode) && rw_lower_dir(fs, i)) {
    /* a merged directory: 2 + its subdirectories in the merged view */
    int n = rw_dir_subdirs(fs, i);
    if (n >= 0) st->st_nlink = 2 + (nlink_t)n;
  } else if (i->indexed) {
    const cairn_node *n = rw_lower_node(fs, i);
    /* the index's own name is no name of the file, nor are the lower
     * names the upper hides */
    uint32_t hidden = n ? rw_hidden_names(fs->rw, i->lower) : 0;
    if (n && st->st_nlink >= 1 && n->nlink + st->st_nlink - 1 >= hidden)
      st->st_nlink = n->nlink + st->st_nlink - 1 - hidden;
  } else if (i->orphan && st->st_nlink >= 1) {
    st->st_nlink--; /* work/orphan.ID is no name of the file */
  }
  return 0;
}

int rw_entry_of(struct cairnfs *fs, struct rw_inode *i, struct fuse_entry_param *e) {
  memset(e, 0, sizeof(*e));
  e->ino = i->id;
  e->generation = 1;
  e->attr_timeout = RW_TIMEOUT;
  e->entry_timeout = RW_TIMEOUT;
  return rw_inode_stat(fs, i, &e->attr);
}
