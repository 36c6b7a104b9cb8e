/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rw_dir.c — the directory operations of a writable mount (rw.h says how
 * the upper is laid out and served).
 *
 * A directory's fh is the address of its listing (rw_listing.c), tagged
 * with the server's epoch; the listing is made at opendir and again on a
 * rewind (offset 0), so a rewind sees what changed since. A dead server's
 * handle gets a fresh listing, kept until released. ".." is the
 * last-seen parent, the root if none. Listings are made under mu; a
 * readdir reads its own listing with no lock.
 */
#include "rw.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

/* ---- directories ------------------------------------------------------- */

/* The listing a directory's fi->fh names, NULL if a dead server's. */
static struct dirh *dirh_of(struct cairnfs *fs, const struct fuse_file_info *fi) {
  if ((fi->fh >> DH_EPOCH_SHIFT & DH_EPOCH_MASK) != (fs->rw->epoch & DH_EPOCH_MASK)) return NULL;
  return (struct dirh *)(uintptr_t)(fi->fh & DH_PTR_MASK);
}

/* The listing kept for a dead server's directory handle fh (empty when
 * new: readdir fills it). */
static struct dirh *dirh_stale(struct cairnfs *fs, uint64_t fh) {
  struct cairnfs_rw *rw = fs->rw;
  pthread_mutex_lock(&rw->mu);
  struct stale_fh *s = rw_stale_find(rw, fh);
  if (!s) {
    struct dirh *d = calloc(1, sizeof(*d));
    if (d && !(s = rw_stale_add(rw, fh, -1, d))) free(d);
  }
  pthread_mutex_unlock(&rw->mu);
  return s ? s->dirh : NULL;
}

void rw_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
  struct cairnfs *fs = fs_of(req);
  struct dirh *d = calloc(1, sizeof(*d));
  if (!d) {
    fuse_reply_err(req, ENOMEM);
    return;
  }
  LOCK(fs);
  struct rw_inode *i = rw_inode_of(fs, ino);
  int r = i ? rw_dirh_fill(fs, i, d) : -ESTALE;
  UNLOCK(fs);
  if (r < 0) {
    rw_dirh_clear(d);
    free(d);
    fuse_reply_err(req, -r);
    return;
  }
  fi->fh = ((uint64_t)fs->rw->epoch & DH_EPOCH_MASK) << DH_EPOCH_SHIFT | (uint64_t)(uintptr_t)d;
  if (fuse_reply_open(req, fi) != 0) {
    rw_dirh_clear(d);
    free(d);
  }
}

void rw_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi) {
  struct cairnfs *fs = fs_of(req);
  struct dirh *d = dirh_of(fs, fi);
  if (!d) { /* a dead server's: listed again */
    d = dirh_stale(fs, fi->fh);
    off = off > 0 ? off : 0;
    if (!d) {
      fuse_reply_err(req, ENOMEM);
      return;
    }
  }
  if (off == 0 || d->n == 0) { /* a rewind sees what changed since opendir */
    LOCK(fs);
    struct rw_inode *i = rw_inode_of(fs, ino);
    int r = i ? rw_dirh_fill(fs, i, d) : -ESTALE;
    UNLOCK(fs);
    if (r < 0) {
      fuse_reply_err(req, -r);
      return;
    }
  }
  char *buf = malloc(size);
  if (!buf) {
    fuse_reply_err(req, ENOMEM);
    return;
  }
  size_t used = 0;
  for (off_t k = off < 0 ? 0 : off; (size_t)k < d->n + 2; k++) {
    struct stat st = {0};
    const char *name;
    if (k < 2) {
      name = k == 0 ? "." : "..";
      st.st_ino = k == 0 ? d->self : d->parent;
      st.st_mode = S_IFDIR;
    } else {
      name = d->e[k - 2].name;
      st.st_ino = d->e[k - 2].ino;
      st.st_mode = d->e[k - 2].type;
    }
    size_t len = fuse_add_direntry(req, buf + used, size - used, name, &st, k + 1);
    if (len > size - used) break;
    used += len;
  }
  fuse_reply_buf(req, buf, used);
  free(buf);
}

void rw_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
  (void)ino;
  struct cairnfs *fs = fs_of(req);
  struct dirh *d = dirh_of(fs, fi);
  if (d)
    rw_dirh_free(d);
  else
    rw_fh_release(fs, fi->fh);
  fuse_reply_err(req, 0);
}

void rw_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi) {
  (void)datasync;
  (void)fi;
  struct cairnfs *fs = fs_of(req);
  LOCK(fs);
  struct rw_inode *i = rw_inode_of(fs, ino);
  int fd = i && i->fd >= 0 ? openat(i->fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
  UNLOCK(fs);
  int r = 0;
  if (fd >= 0) {
    if (fsync(fd) < 0) r = errno;
    close(fd);
  }
  fuse_reply_err(req, r);
}

void rw_statfs(fuse_req_t req, fuse_ino_t ino) {
  (void)ino;
  struct cairnfs *fs = fs_of(req);
  struct statvfs sv;
  if (statvfs(fs->rw->path, &sv) < 0) {
    fuse_reply_err(req, errno);
    return;
  }
  sv.f_flag &= ~(unsigned long)ST_RDONLY;
  sv.f_namemax = 255;
  fuse_reply_statfs(req, &sv);
}
