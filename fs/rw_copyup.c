/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rw_copyup.c — copy-up: lower entries made upper objects (rw.h says how the
 * upper is laid out and served).
 *
 * A copy-up is built in work/ (tmp.N) and renamed into place complete:
 * an upper entry is never half made. It carries the node's owner, mode,
 * xattrs, times and trusted.cairn.origin (its tree inode); its
 * directory's times are put back (a copy-up changes no attribute the
 * kernel holds). Parents are copied up first. A lower file with several
 * names is copied up once, to work/index/L, so that all its names keep
 * one identity; the lower names the upper hides are counted on it
 * (trusted.cairn.hidden) for its link count. Callers hold mu.
 */
#include "rw.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

/* ---- copy-up (callers hold mu) --------------------------------------- */

/* Copies n's bytes to out, holes kept: only the blob's data ranges
 * (SEEK_DATA/SEEK_HOLE; all of it where the store's file system does not
 * say) are written, then out gets n's size. */
static int copy_data(struct cairnfs *fs, const cairn_node *n, int out) {
  const char *name;
  if (!n->blob || n->size == 0) return 0;
  int r = cairnfs_blob_name(fs, n, &name); /* a lazy pull's file: fetched first */
  if (r < 0) return r;
  cairn_autoclose int in = cairn_blob_open(fs->st, name);
  if (in < 0) return in;
  off_t size = (off_t)n->size, data = 0;
  while (data < size) {
    off_t end = size;
    data = lseek(in, data, SEEK_DATA);
    if (data < 0 && errno == ENXIO) break; /* a hole to the end */
    if (data < 0) {
      data = 0; /* no SEEK_DATA here: all of it is data */
    } else {
      end = lseek(in, data, SEEK_HOLE);
      if (end < 0 || end > size) end = size;
    }
    if (lseek(out, data, SEEK_SET) < 0) return -errno;
    while (data < end) {
      ssize_t k = sendfile(out, in, &data, (size_t)(end - data));
      if (k < 0 && errno == EINTR) continue;
      if (k < 0) return -errno;
      if (k == 0) return -EIO; /* a short blob */
    }
  }
  return ftruncate(out, size) < 0 ? -errno : 0;
}

/* Gives work/tmp the node's owner, mode, xattrs, times and origin. */
int rw_copy_meta(struct cairnfs *fs, uint32_t lower, const cairn_node *n, int dirfd,
              const char *name) {
  char path[PBUF], num[16];
  fd_path(path, sizeof(path), dirfd, name);
  /* owner first: chown drops setuid bits and security.capability */
  if (fchownat(dirfd, name, n->uid, n->gid, AT_SYMLINK_NOFOLLOW) < 0) return -errno;
  if (!S_ISLNK(n->mode) && fchmodat(dirfd, name, n->mode & 07777, 0) < 0) return -errno;
  for (size_t k = 0; k < n->n_xattrs; k++) {
    cairn_xattr x = cairn_tree_xattr(fs->tree, n, k);
    if (strncmp(x.name, XA_PREFIX, strlen(XA_PREFIX)) == 0) continue;
    if (lsetxattr(path, x.name, x.value, x.len, 0) < 0) return -errno;
  }
  if (lower) {
    snprintf(num, sizeof(num), "%" PRIu32, lower);
    if (lsetxattr(path, XA_ORIGIN, num, strlen(num), 0) < 0) return -errno;
  }
  struct timespec ts[2] = {{n->mtime_sec, n->mtime_nsec}, {n->mtime_sec, n->mtime_nsec}};
  if (utimensat(dirfd, name, ts, AT_SYMLINK_NOFOLLOW) < 0) return -errno;
  return 0;
}

/* Copies tree node lower (not its children) to dstdir/dstname, built in
 * work/ and renamed into place complete. */
static int copy_node(struct cairnfs *fs, uint32_t lower, int dstdir, const char *dstname) {
  struct cairnfs_rw *rw = fs->rw;
  const cairn_node *n = cairn_tree_node(fs->tree, lower);
  if (!n) return -EIO;
  char tmp[32];
  snprintf(tmp, sizeof(tmp), "tmp.%" PRIu64, ++rw->tmp_seq);
  int r = 0;
  switch (n->mode & S_IFMT) {
  case S_IFREG: {
    cairn_autoclose int fd =
        openat(rw->work_fd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) return -errno;
    r = copy_data(fs, n, fd);
    break;
  }
  case S_IFDIR:
    if (mkdirat(rw->work_fd, tmp, 0700) < 0) return -errno;
    break;
  case S_IFLNK:
    if (symlinkat(n->target ? cairn_tree_str(fs->tree, n->target) : "", rw->work_fd, tmp) < 0)
      return -errno;
    break;
  default:
    if (mknodat(rw->work_fd, tmp, (n->mode & S_IFMT) | 0600, (dev_t)n->rdev) < 0) return -errno;
  }
  if (r == 0) r = rw_copy_meta(fs, lower, n, rw->work_fd, tmp);
  /* A copy-up is no change of its directory: its times are put back, as
   * overlayfs does. */
  struct stat pst;
  if (r == 0 && fstatat(dstdir, "", &pst, AT_EMPTY_PATH) < 0) r = -errno;
  if (r == 0 && renameat2(rw->work_fd, tmp, dstdir, dstname, RENAME_NOREPLACE) < 0) r = -errno;
  if (r == 0 && dstdir != rw->index_fd) {
    char path[PBUF];
    fd_path(path, sizeof(path), dstdir, NULL);
    struct timespec ts[2] = {pst.st_atim, pst.st_mtim};
    utimensat(AT_FDCWD, path, ts, 0); /* best effort */
  }
  if (r < 0) unlinkat(rw->work_fd, tmp, S_ISDIR(n->mode) ? AT_REMOVEDIR : 0);
  return r;
}

/* At a move (rw_rebase.c), before the switch: i, a regular file of the
 * image held by the kernel (read through no handle of its own: the tree)
 * with no place in the new view (unlinked while open), is copied into
 * work/ as an orphan (orphan_move then keeps it in the fresh upper), so
 * that it is still read after the switch and after restarts. */
int rw_orphan_copy(struct cairnfs *fs, struct rw_inode *i) {
  struct cairnfs_rw *rw = fs->rw;
  char name[40];
  rw_orphan_name(name, sizeof(name), i->id);
  unlinkat(rw->work_fd, name, 0);
  int r = copy_node(fs, i->lower, rw->work_fd, name);
  if (r < 0) return r;
  i->fd = openat(rw->work_fd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
  if (i->fd < 0) return -errno;
  i->orphan = true;
  return 0;
}

/* Makes i an upper object (copying it up, its parents first). */
int rw_ensure_upper(struct cairnfs *fs, struct rw_inode *i) {
  struct cairnfs_rw *rw = fs->rw;
  if (i->fd >= 0) return 0;
  const cairn_node *n = rw_lower_node(fs, i);
  if (!n) return -EIO;
  int dirfd;
  char name[16];
  const char *at;
  if (!S_ISDIR(n->mode) && n->nlink > 1) {
    snprintf(name, sizeof(name), "%" PRIu32, i->lower);
    dirfd = rw->index_fd;
    at = name;
    i->indexed = true;
  } else {
    if (!i->parent) rw_inode_find_parent(fs, i);
    if (!i->parent) return -EIO;
    int r = rw_ensure_upper(fs, i->parent);
    if (r < 0) return r;
    dirfd = i->parent->fd;
    at = i->name;
  }
  struct stat st;
  if (fstatat(dirfd, at, &st, AT_SYMLINK_NOFOLLOW) < 0 || rw_origin_at(dirfd, at) != i->lower) {
    int r = copy_node(fs, i->lower, dirfd, at);
    if (r < 0) {
      i->indexed = false;
      return r;
    }
  }
  i->fd = openat(dirfd, at, O_PATH | O_NOFOLLOW | O_CLOEXEC);
  if (i->fd < 0) {
    i->indexed = false;
    return -errno;
  }
  rw_inode_noted(rw, i);
  return 0;
}

/* Gives an upper i (indexed) a name in its current place (a rename's
 * source must be a name in the upper directory). */
int rw_ensure_named(struct cairnfs *fs, struct rw_inode *i, struct rw_inode *dir, const char *name) {
  int r = rw_ensure_upper(fs, i);
  if (r < 0 || !i->indexed) return r;
  struct stat st;
  if (fstatat(dir->fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && !is_whiteout(&st)) return 0;
  if (fstatat(dir->fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0) unlinkat(dir->fd, name, 0);
  r = rw_hide_lower(fs, dir, name);
  if (r < 0) return r;
  return linkat(i->fd, "", dir->fd, name, AT_EMPTY_PATH) < 0 ? -errno : 0;
}

/* How many names of the lower file with several names L (indexed) the
 * upper hides: rw_hide_lower() counts them on its copy-up. */
uint32_t rw_hidden_names(struct cairnfs_rw *rw, uint32_t lower) {
  char path[PBUF], idx[16], buf[16];
  snprintf(idx, sizeof(idx), "%" PRIu32, lower);
  fd_path(path, sizeof(path), rw->index_fd, idx);
  ssize_t n = lgetxattr(path, XA_HIDDEN, buf, sizeof(buf) - 1);
  if (n <= 0) return 0;
  buf[n] = '\0';
  return (uint32_t)strtoul(buf, NULL, 10);
}

/* Called before the upper gets an entry at dir/name (a whiteout, a link,
 * a rename's target): if it has none there yet and the lower name there
 * is one of a file with several names, that name stops being shown; the
 * file is copied up to work/index (if not yet) and its count of hidden
 * names goes up, so that its link count is that of the names the view
 * shows (inode_stat). */
int rw_hide_lower(struct cairnfs *fs, struct rw_inode *dir, const char *name) {
  struct cairnfs_rw *rw = fs->rw;
  struct stat st;
  if (dir->fd >= 0 && fstatat(dir->fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0) return 0;
  const cairn_node *ld = rw_lower_dir(fs, dir);
  const cairn_dirent *de = ld ? cairn_tree_lookup(fs->tree, ld, name) : NULL;
  const cairn_node *n = de ? cairn_tree_node(fs->tree, de->ino) : NULL;
  if (!n || S_ISDIR(n->mode) || n->nlink <= 1) return 0;
  char idx[16], path[PBUF], num[16];
  snprintf(idx, sizeof(idx), "%" PRIu32, de->ino);
  if (fstatat(rw->index_fd, idx, &st, AT_SYMLINK_NOFOLLOW) < 0) {
    int r = errno == ENOENT ? copy_node(fs, de->ino, rw->index_fd, idx) : -errno;
    if (r < 0) return r;
  }
  snprintf(num, sizeof(num), "%" PRIu32, rw_hidden_names(rw, de->ino) + 1);
  fd_path(path, sizeof(path), rw->index_fd, idx);
  if (lsetxattr(path, XA_HIDDEN, num, strlen(num), 0) < 0) return -errno;
  struct rw_inode *i = rw_key_find(rw, de->ino);
  if (i && i->fd < 0 && i->lower == de->ino) { /* known, lower only: now the copy-up */
    i->fd = openat(rw->index_fd, idx, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (i->fd >= 0) {
      i->indexed = true;
      rw_inode_noted(rw, i);
    }
  }
  return 0;
}

int rw_whiteout_make(int dirfd, const char *name) {
  return mknodat(dirfd, name, S_IFCHR | 0000, makedev(0, 0)) < 0 ? -errno : 0;
}
