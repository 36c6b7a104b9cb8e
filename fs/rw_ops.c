/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rw_ops.c — the FUSE operations of a writable mount on names and files (rw.h says how the
 * upper is laid out and served).
 *
 * Every handler replies exactly once. Namespace handlers run under mu
 * (one at a time); data (read, write, fsync, fallocate) goes to the
 * backing fd with no lock but tree_lock's read side, which a rebase
 * takes to move handles. A new entry is made in the upper directory,
 * then owned by its creator (own), then bound to its inode (made_entry).
 * No entry gets a name an OCI layer cannot hold (.wh.*). A request the
 * kernel resends after a restart (cairnfs_resent) is answered with what
 * the dead server did. The table of operations (cairnfs_rw_ops) is here.
 */
#include "rw.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

/* The fd a file's fi->fh (not NO_FH) names in this server, or -errno;
 * locked: the caller holds mu. */
static int fh_fd_in(struct cairnfs *fs, fuse_ino_t ino, const struct fuse_file_info *fi,
                    bool locked) {
  struct cairnfs_rw *rw = fs->rw;
  if (rw_fh_ours(rw, fi->fh)) return (int)(fi->fh & ((1ULL << FH_FD_BITS) - 1));
  if (!locked) pthread_mutex_lock(&rw->mu);
  struct stale_fh *s = rw_stale_find(rw, fi->fh);
  int fd = s ? s->fd : -1;
  if (!s) {
    struct rw_inode *i = rw_inode_of(fs, ino);
    /* not truncated again, nor created */
    int flags = (int)(fi->fh >> FH_FLAGS_SHIFT & FH_FLAGS_MASK) & ~(O_TRUNC | O_CREAT | O_EXCL);
    /* Lower only: a file open before cairn commit moved the mount (its
     * upper copy is the new image's now), copied up again. */
    int r = i && i->fd < 0 && i->lower ? rw_ensure_upper(fs, i) : 0;
    fd = !i ? -ESTALE : r < 0 ? r : i->fd < 0 ? -EBADF : rw_reopen(i, flags);
    if (fd >= 0 && !(s = rw_stale_add(rw, fi->fh, fd, NULL))) {
      close(fd);
      fd = -ENOMEM;
    }
    if (s) s->ino = ino;
  }
  if (!locked) pthread_mutex_unlock(&rw->mu);
  return fd;
}

static int fh_fd(struct cairnfs *fs, fuse_ino_t ino, const struct fuse_file_info *fi) {
  return fh_fd_in(fs, ino, fi, false);
}

/* Replies entry e of i, which gets the kernel's reference, and unlocks mu
 * (taken); the reference is dropped again if the reply fails. */
static void reply_entry_unlock(fuse_req_t req, struct cairnfs *fs, struct rw_inode *i,
                               const struct fuse_entry_param *e) {
  i->refs++;
  UNLOCK(fs);
  if (fuse_reply_entry(req, e) != 0) {
    LOCK(fs);
    rw_inode_unref(fs->rw, i, 1);
    UNLOCK(fs);
  }
}

/* Replies with the entry of i, referenced once more for the kernel. */
static void reply_entry(fuse_req_t req, struct cairnfs *fs, struct rw_inode *i) {
  struct fuse_entry_param e;
  int r = rw_entry_of(fs, i, &e);
  if (r < 0) {
    rw_inode_drop_unused(fs->rw, i);
    UNLOCK(fs);
    fuse_reply_err(req, -r);
    return;
  }
  reply_entry_unlock(req, fs, i, &e);
}

/* ---- operations --------------------------------------------------------- */

static void rw_init(void *userdata, struct fuse_conn_info *conn) {
  struct cairnfs *fs = userdata;
  fs->rw->served = true;
  unsigned want =
      FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE | FUSE_CAP_ASYNC_READ | FUSE_CAP_PARALLEL_DIROPS;
  conn->want |= want & conn->capable;
  conn->want &= ~(FUSE_CAP_SPLICE_READ | FUSE_CAP_WRITEBACK_CACHE | FUSE_CAP_AUTO_INVAL_DATA |
                  FUSE_CAP_HANDLE_KILLPRIV | FUSE_CAP_READDIRPLUS | FUSE_CAP_NO_OPEN_SUPPORT |
                  FUSE_CAP_NO_OPENDIR_SUPPORT);
}

static void rw_lookup(fuse_req_t req, fuse_ino_t parent, const char *name) {
  struct cairnfs *fs = fs_of(req);
  LOCK(fs);
  struct rw_inode *dir = rw_inode_of(fs, parent), *i;
  int r = dir ? rw_resolve(fs, dir, name, &i) : -ESTALE;
  if (r == -ENOENT) {
    /* A negative entry, cached as long as a positive one: every create
     * comes through this kernel, which replaces it (a create's LOOKUP). */
    UNLOCK(fs);
    struct fuse_entry_param e = {.entry_timeout = RW_TIMEOUT};
    fuse_reply_entry(req, &e);
    return;
  }
  if (r < 0) {
    UNLOCK(fs);
    fuse_reply_err(req, -r);
    return;
  }
  reply_entry(req, fs, i);
}

static void rw_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) {
  struct cairnfs *fs = fs_of(req);
  LOCK(fs);
  rw_forget_restored(fs, ino, nlookup);
  UNLOCK(fs);
  fuse_reply_none(req);
}

static void rw_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *f) {
  struct cairnfs *fs = fs_of(req);
  LOCK(fs);
  for (size_t k = 0; k < count; k++) rw_forget_restored(fs, f[k].ino, f[k].nlookup);
  UNLOCK(fs);
  fuse_reply_none(req);
}

static void rw_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
  (void)fi;
  struct cairnfs *fs = fs_of(req);
  struct stat st;
  LOCK(fs);
  struct rw_inode *i = rw_inode_of(fs, ino);
  int r = i ? rw_inode_stat(fs, i, &st) : -ESTALE;
  UNLOCK(fs);
  if (r < 0)
    fuse_reply_err(req, -r);
  else
    fuse_reply_attr(req, &st, RW_TIMEOUT);
}

static void rw_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int valid,
                       struct fuse_file_info *fi) {
  struct cairnfs *fs = fs_of(req);
  struct stat st;
  char path[PBUF];
  LOCK(fs);
  struct rw_inode *i = rw_inode_of(fs, ino);
  int r = i ? rw_ensure_upper(fs, i) : -ESTALE;
  if (r == 0) {
    fd_path(path, sizeof(path), i->fd, NULL);
    r = rw_inode_stat(fs, i, &st);
  }
  if (r == 0 && (valid & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID))) {
    uid_t uid = valid & FUSE_SET_ATTR_UID ? attr->st_uid : (uid_t)-1;
    gid_t gid = valid & FUSE_SET_ATTR_GID ? attr->st_gid : (gid_t)-1;
    if (fchownat(i->fd, "", uid, gid, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0) r = -errno;
  }
  if (r == 0 && (valid & FUSE_SET_ATTR_MODE) && !S_ISLNK(st.st_mode) &&
      chmod(path, attr->st_mode & 07777) < 0)
    r = -errno;
  if (r == 0 && (valid & FUSE_SET_ATTR_SIZE)) {
    if (fi && fi->fh != NO_FH) {
      int fd = fh_fd_in(fs, ino, fi, true);
      if (fd < 0 || ftruncate(fd, attr->st_size) < 0) r = fd < 0 ? fd : -errno;
    } else if (truncate(path, attr->st_size) < 0) {
      r = -errno;
    }
  }
  if (r == 0 && (valid & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME))) {
    struct timespec ts[2] = {{0, UTIME_OMIT}, {0, UTIME_OMIT}};
    if (valid & FUSE_SET_ATTR_ATIME_NOW)
      ts[0].tv_nsec = UTIME_NOW;
    else if (valid & FUSE_SET_ATTR_ATIME)
      ts[0] = attr->st_atim;
    if (valid & FUSE_SET_ATTR_MTIME_NOW)
      ts[1].tv_nsec = UTIME_NOW;
    else if (valid & FUSE_SET_ATTR_MTIME)
      ts[1] = attr->st_mtim;
    /* path (followed) is the object, a symlink too: fd_path */
    if (utimensat(AT_FDCWD, path, ts, 0) < 0) r = -errno;
  }
  if (r == 0) r = rw_inode_stat(fs, i, &st);
  UNLOCK(fs);
  if (r < 0)
    fuse_reply_err(req, -r);
  else
    fuse_reply_attr(req, &st, RW_TIMEOUT);
}

static void rw_readlink(fuse_req_t req, fuse_ino_t ino) {
  struct cairnfs *fs = fs_of(req);
  char buf[PATH_MAX + 1];
  LOCK(fs);
  struct rw_inode *i = rw_inode_of(fs, ino);
  int r = i ? 0 : -ESTALE;
  if (r == 0 && i->fd >= 0) {
    ssize_t n = readlinkat(i->fd, "", buf, sizeof(buf) - 1);
    if (n < 0)
      r = -errno;
    else
      buf[n] = '\0';
  } else if (r == 0) {
    const cairn_node *n = rw_lower_node(fs, i);
    if (!n || !S_ISLNK(n->mode) || !n->target)
      r = -EINVAL;
    else
      snprintf(buf, sizeof(buf), "%s", cairn_tree_str(fs->tree, n->target));
  }
  UNLOCK(fs);
  if (r < 0)
    fuse_reply_err(req, -r);
  else
    fuse_reply_readlink(req, buf);
}

/* Whether name is one an OCI layer cannot hold: .wh.NAME is a whiteout
 * there, .wh..wh..opq an opaque marker, and a tar has no escape for them.
 * Such an entry would be shown here and turned into a deletion by cairn
 * commit (a user could then delete through the committed image what the
 * rw view kept, another user's file in a sticky directory): no entry may
 * get such a name. EPERM, as for a character device 0/0 (make_node): with
 * EINVAL, mv(1) would say "cannot move to a subdirectory of itself". */
static bool name_reserved(const char *name) { return strncmp(name, ".wh.", 4) == 0; }

/* Makes room for a new entry name in dir: dir upper, name free in the
 * merged view (-EEXIST), a whiteout there removed. */
static int create_prep(struct cairnfs *fs, struct rw_inode *dir, const char *name) {
  if (name_reserved(name)) return -EPERM;
  int r = rw_ensure_upper(fs, dir);
  if (r < 0) return r;
  struct stat st;
  if (fstatat(dir->fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
    if (!is_whiteout(&st)) return -EEXIST;
    return unlinkat(dir->fd, name, 0) < 0 ? -errno : 0; /* hid a lower entry */
  }
  if (errno != ENOENT) return -errno;
  return rw_lower_has(fs, dir, name) ? -EEXIST : 0;
}

/* The inode of the entry just made at dir/name (no origin: 2^32 + its
 * backing inode), placed, with its attributes in *st (not yet referenced
 * by the kernel; inode_drop_unused if not replied). */
static int made_entry(struct cairnfs *fs, struct rw_inode *dir, const char *name,
                      struct rw_inode **out, struct stat *st) {
  struct cairnfs_rw *rw = fs->rw;
  int fd = openat(dir->fd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return -errno;
  if (fstatat(fd, "", st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0) {
    int r = -errno;
    close(fd);
    return r;
  }
  uint64_t key = UPPER_BASE + st->st_ino;
  struct rw_inode *i = rw_key_find(rw, key);
  if (!i && !(i = rw_key_new(rw, key, 0))) {
    close(fd);
    return -ENOMEM;
  }
  if (i->fd < 0) {
    i->fd = fd;
    rw_inode_noted(rw, i);
  } else {
    close(fd);
  }
  int r = rw_inode_place(rw, i, dir, name);
  if (r < 0) {
    rw_inode_drop_unused(rw, i);
    return r;
  }
  st->st_ino = i->id;
  *out = i;
  return 0;
}

/* Replies to a create of i (attributes st), referenced once more. */
static void made_entry_param(struct rw_inode *i, const struct stat *st,
                             struct fuse_entry_param *e) {
  memset(e, 0, sizeof(*e));
  e->ino = i->id;
  e->generation = 1;
  e->attr_timeout = RW_TIMEOUT;
  e->entry_timeout = RW_TIMEOUT;
  e->attr = *st;
}

/* Gives a new entry its creator as owner (the parent's group in a setgid
 * directory, as the kernel would), then the mode asked for (chown clears
 * setuid/setgid bits). */
static int own(fuse_req_t req, struct rw_inode *dir, const char *name, mode_t mode) {
  const struct fuse_ctx *ctx = fuse_req_ctx(req);
  /* Made by the daemon as its creator would have it (umask 0; a setgid
   * directory's group and bit passed on by the kernel, as for any creator
   * with CAP_FSETID): nothing to change. */
  if (ctx->uid == geteuid() && ctx->gid == getegid() && ctx->uid == 0) return 0;
  struct stat pst;
  if (fstatat(dir->fd, "", &pst, AT_EMPTY_PATH) < 0) return -errno;
  bool sgid_dir = pst.st_mode & S_ISGID;
  gid_t gid = sgid_dir ? pst.st_gid : ctx->gid;
  if (fchownat(dir->fd, name, ctx->uid, gid, AT_SYMLINK_NOFOLLOW) < 0) return -errno;
  if (S_ISLNK(mode)) return 0;
  mode_t perm = mode & 07777;
  if (S_ISDIR(mode) && sgid_dir) perm |= S_ISGID;
  if (!S_ISDIR(mode) && (perm & S_ISGID) && ctx->uid != 0 && gid != ctx->gid) {
    /* setgid for a group the creator is not in: dropped, as the kernel does */
    gid_t groups[64];
    int n = fuse_req_getgroups(req, 64, groups);
    bool member = false;
    for (int k = 0; k < n && k < 64; k++) member |= groups[k] == gid;
    if (!member) perm &= ~(mode_t)S_ISGID;
  }
  struct stat st;
  if (fstatat(dir->fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) return -errno;
  if ((st.st_mode & 07777) != perm && fchmodat(dir->fd, name, perm, 0) < 0) return -errno;
  return 0;
}

/* Whether the entry dir/name (st) is the caller's, as a replayed request
 * that made it needs: owned by the caller, or still by the daemon (the
 * dead server was killed before own() ran: it runs now). */
static bool replayed_owner(fuse_req_t req, struct rw_inode *dir, const char *name,
                           const struct stat *st, mode_t mode) {
  if (st->st_uid == fuse_req_ctx(req)->uid) return true;
  return st->st_uid == geteuid() && own(req, dir, name, mode) == 0;
}

/* A mknod, mkdir or symlink replayed after a restart (conn.c:
 * cairnfs_resent) whose entry the dead server made: dir/name of that type,
 * the caller's, is the answer. */
static int made_replayed(fuse_req_t req, struct cairnfs *fs, struct rw_inode *dir, const char *name,
                         mode_t mode, struct rw_inode **out) {
  struct rw_inode *i;
  struct stat st;
  if (rw_resolve(fs, dir, name, &i) < 0) return -EEXIST;
  if (rw_inode_stat(fs, i, &st) < 0 || (st.st_mode & S_IFMT) != (mode & S_IFMT) ||
      !replayed_owner(req, dir, name, &st, mode)) {
    rw_inode_drop_unused(fs->rw, i);
    return -EEXIST;
  }
  *out = i;
  return 0;
}

/* mknod, mkdir and symlink: makes the entry, owns it, replies. */
static void make_node(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev,
                      const char *link) {
  struct cairnfs *fs = fs_of(req);
  LOCK(fs);
  struct rw_inode *dir = rw_inode_of(fs, parent), *i = NULL;
  int r = dir ? create_prep(fs, dir, name) : -ESTALE;
  bool replayed = false;
  if (r == 0) {
    if (link)
      r = symlinkat(link, dir->fd, name);
    else if (S_ISDIR(mode))
      r = mkdirat(dir->fd, name, mode & 07777);
    else if (S_ISCHR(mode) && rdev == makedev(0, 0))
      r = (errno = EPERM, -1); /* reads as a whiteout */
    else
      r = mknodat(dir->fd, name, mode, rdev);
    r = r < 0 ? -errno : own(req, dir, name, link ? S_IFLNK : mode);
  } else if (r == -EEXIST && cairnfs_resent) {
    replayed = true;
    r = made_replayed(req, fs, dir, name, link ? S_IFLNK : mode, &i);
  }
  struct stat st;
  if (r == 0 && !replayed)
    r = made_entry(fs, dir, name, &i, &st);
  else if (r == 0)
    r = rw_inode_stat(fs, i, &st);
  if (r < 0) {
    if (replayed && i) rw_inode_drop_unused(fs->rw, i);
    UNLOCK(fs);
    fuse_reply_err(req, -r);
    return;
  }
  struct fuse_entry_param e;
  made_entry_param(i, &st, &e);
  reply_entry_unlock(req, fs, i, &e);
}

static void rw_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev) {
  make_node(req, parent, name, mode, rdev, NULL);
}

static void rw_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode) {
  make_node(req, parent, name, S_IFDIR | mode, 0, NULL);
}

static void rw_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name) {
  make_node(req, parent, name, S_IFLNK | 0777, 0, link);
}

static void rw_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname) {
  struct cairnfs *fs = fs_of(req);
  LOCK(fs);
  struct rw_inode *i = rw_inode_of(fs, ino), *dir = rw_inode_of(fs, newparent), *x = NULL;
  int r = i && dir ? rw_ensure_upper(fs, i) : -ESTALE;
  if (r == 0) r = create_prep(fs, dir, newname);
  bool replayed = r == -EEXIST && cairnfs_resent; /* made by the dead server? */
  if (r == 0 && linkat(i->fd, "", dir->fd, newname, AT_EMPTY_PATH) < 0) r = -errno;
  if (r == 0 || replayed) r = rw_resolve(fs, dir, newname, &x);
  if (replayed && r == 0 && x != i) {
    rw_inode_drop_unused(fs->rw, x);
    r = -EEXIST;
  } else if (replayed && r < 0) {
    r = -EEXIST;
  }
  if (r < 0) {
    UNLOCK(fs);
    fuse_reply_err(req, -r);
    return;
  }
  reply_entry(req, fs, x);
}

/* 0 if directory d is empty in the merged view, else -ENOTEMPTY. With
 * clear, its whiteouts are removed (it is about to go). */
static int dir_empty(struct cairnfs *fs, struct rw_inode *d, bool clear) {
  if (d->fd >= 0) {
    int dfd = openat(d->fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) return -errno;
    cairn_autoclosedir DIR *dir = fdopendir(dfd);
    if (!dir) {
      close(dfd);
      return -errno;
    }
    struct dirent *e;
    struct stat st;
    while ((e = readdir(dir))) {
      if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
      if (fstatat(d->fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) return -errno;
      if (!is_whiteout(&st)) return -ENOTEMPTY;
    }
  }
  const cairn_node *ld = rw_lower_dir(fs, d);
  if (ld) {
    const cairn_dirent *c = cairn_tree_children(fs->tree, ld);
    struct stat st;
    for (uint32_t k = 0; k < ld->n_children; k++)
      if (d->fd < 0 ||
          fstatat(d->fd, cairn_tree_str(fs->tree, c[k].name), &st, AT_SYMLINK_NOFOLLOW) < 0)
        return -ENOTEMPTY;
  }
  if (clear && d->fd >= 0) {
    int dfd = openat(d->fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) return -errno;
    cairn_autoclosedir DIR *dir = fdopendir(dfd);
    if (!dir) {
      close(dfd);
      return -errno;
    }
    struct dirent *e;
    while ((e = readdir(dir)))
      if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0 &&
          unlinkat(d->fd, e->d_name, 0) < 0)
        return -errno;
  }
  return 0;
}

/* True if dir's upper holds a real (not whiteout) entry name. */
static bool upper_has(struct rw_inode *dir, const char *name) {
  struct stat st;
  return dir->fd >= 0 && fstatat(dir->fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && !is_whiteout(&st);
}

static void remove_entry(fuse_req_t req, fuse_ino_t parent, const char *name, bool is_dir) {
  struct cairnfs *fs = fs_of(req);
  LOCK(fs);
  struct rw_inode *dir = rw_inode_of(fs, parent), *x = NULL;
  int r = dir ? rw_resolve(fs, dir, name, &x) : -ESTALE;
  struct stat st;
  if (r == 0) r = rw_inode_stat(fs, x, &st);
  if (r == 0 && is_dir && !S_ISDIR(st.st_mode)) r = -ENOTDIR;
  if (r == 0 && !is_dir && S_ISDIR(st.st_mode)) r = -EISDIR;
  if (r == 0 && is_dir) r = dir_empty(fs, x, false);
  if (r == 0) r = rw_ensure_upper(fs, dir);
  if (r == 0) r = rw_hide_lower(fs, dir, name);
  if (r == 0 && S_ISREG(st.st_mode)) rw_lower_keep(fs->rw, x, 0);
  if (r == 0 && upper_has(dir, name)) {
    if (is_dir) r = dir_empty(fs, x, true);
    if (r == 0 && !is_dir) rw_orphan_keep(fs->rw, x, 0);
    if (r == 0 && unlinkat(dir->fd, name, is_dir ? AT_REMOVEDIR : 0) < 0) r = -errno;
  }
  if (r == 0 && rw_lower_has(fs, dir, name)) r = rw_whiteout_make(dir->fd, name);
  if (x) rw_inode_drop_unused(fs->rw, x);
  if (r == -ENOENT && cairnfs_resent) r = 0; /* removed by the dead server */
  UNLOCK(fs);
  fuse_reply_err(req, -r);
}

static void rw_unlink(fuse_req_t req, fuse_ino_t parent, const char *name) {
  remove_entry(req, parent, name, false);
}

static void rw_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name) {
  remove_entry(req, parent, name, true);
}

static int do_rename(struct cairnfs *fs, struct rw_inode *dir, const char *name,
                     struct rw_inode *ndir, const char *newname, unsigned flags) {
  if (flags & ~(unsigned)(RENAME_NOREPLACE | RENAME_EXCHANGE)) return -EINVAL;
  if (name_reserved(newname)) return -EPERM;
  struct rw_inode *src = NULL, *dst = NULL;
  int r = rw_resolve(fs, dir, name, &src);
  if (r < 0) return r;
  src->refs++; /* kept while dst is resolved */
  r = rw_resolve(fs, ndir, newname, &dst);
  if (r == -ENOENT) {
    dst = NULL;
    r = (flags & RENAME_EXCHANGE) ? -ENOENT : 0;
  } else if (r == 0 && (flags & RENAME_NOREPLACE)) {
    r = -EEXIST;
  }
  if (dst) dst->refs++;
  struct stat sst, dst_st;
  if (r == 0) r = rw_inode_stat(fs, src, &sst);
  if (r == 0 && dst) r = rw_inode_stat(fs, dst, &dst_st);
  if (r == 0 && dst && !(flags & RENAME_EXCHANGE)) {
    if (S_ISDIR(sst.st_mode) && !S_ISDIR(dst_st.st_mode))
      r = -ENOTDIR;
    else if (!S_ISDIR(sst.st_mode) && S_ISDIR(dst_st.st_mode))
      r = -EISDIR;
    else if (S_ISDIR(dst_st.st_mode))
      r = dir_empty(fs, dst, false);
  }
  if (r == 0 && src == dst) goto out; /* two names of one file: nothing to do */
  if (r == 0) r = rw_ensure_upper(fs, dir);
  if (r == 0) r = rw_ensure_upper(fs, ndir);
  if (r == 0) r = rw_ensure_named(fs, src, dir, name);
  if (r == 0 && dst && (flags & RENAME_EXCHANGE)) r = rw_ensure_named(fs, dst, ndir, newname);
  if (r == 0 && dst && !(flags & RENAME_EXCHANGE) && S_ISDIR(dst_st.st_mode) &&
      upper_has(ndir, newname))
    r = dir_empty(fs, dst, true);
  if (r == 0 && dst && !(flags & RENAME_EXCHANGE)) r = rw_hide_lower(fs, ndir, newname);
  if (r == 0 && dst && !(flags & RENAME_EXCHANGE) && S_ISREG(dst_st.st_mode))
    rw_lower_keep(fs->rw, dst, 1);
  struct stat st;
  if (r == 0 && !(flags & RENAME_EXCHANGE) &&
      fstatat(ndir->fd, newname, &st, AT_SYMLINK_NOFOLLOW) == 0 && is_whiteout(&st) &&
      unlinkat(ndir->fd, newname, 0) < 0)
    r = -errno;
  if (r == 0 && dst && !(flags & RENAME_EXCHANGE) && !S_ISDIR(dst_st.st_mode) &&
      upper_has(ndir, newname))
    rw_orphan_keep(fs->rw, dst, 1); /* its last name may go */
  if (r == 0 && renameat2(dir->fd, name, ndir->fd, newname, flags & RENAME_EXCHANGE) < 0)
    r = -errno;
  if (r == 0 && !(flags & RENAME_EXCHANGE) && rw_lower_has(fs, dir, name))
    r = rw_whiteout_make(dir->fd, name);
  if (r == 0) r = rw_inode_place(fs->rw, src, ndir, newname);
  if (r == 0 && dst && (flags & RENAME_EXCHANGE)) r = rw_inode_place(fs->rw, dst, dir, name);
out:
  rw_inode_unref(fs->rw, src, 1);
  if (dst) rw_inode_unref(fs->rw, dst, 1);
  return r;
}

static void rw_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
                      const char *newname, unsigned int flags) {
  struct cairnfs *fs = fs_of(req);
  LOCK(fs);
  struct rw_inode *dir = rw_inode_of(fs, parent), *ndir = rw_inode_of(fs, newparent);
  int r = dir && ndir ? do_rename(fs, dir, name, ndir, newname, flags) : -ESTALE;
  if (r == -ENOENT && cairnfs_resent) { /* renamed by the dead server? */
    struct rw_inode *x;
    if (rw_resolve(fs, ndir, newname, &x) == 0) {
      rw_inode_drop_unused(fs->rw, x);
      r = 0;
    }
  }
  UNLOCK(fs);
  fuse_reply_err(req, -r);
}

/* Records an open handle of i that may write (mu held; best effort: an
 * untracked handle is one a rebase cannot move). */
static void handle_track(struct cairnfs *fs, const struct fuse_file_info *fi, struct rw_inode *i,
                         int fd) {
  if (fi->fh == NO_FH || (fi->flags & O_ACCMODE) == O_RDONLY) return;
  struct whandle *h = malloc(sizeof(*h));
  if (!h) return;
  *h = (struct whandle){fd, i, fs->rw->whandles};
  fs->rw->whandles = h;
}

/* Forgets a handle handle_track recorded, of fd (takes mu). */
static void handle_untrack(struct cairnfs *fs, const struct fuse_file_info *fi, int fd) {
  if (fi->fh == NO_FH || (fi->flags & O_ACCMODE) == O_RDONLY) return;
  LOCK(fs);
  for (struct whandle **pp = &fs->rw->whandles; *pp; pp = &(*pp)->next) {
    if ((*pp)->fd != fd) continue;
    struct whandle *h = *pp;
    *pp = h->next;
    free(h);
    break;
  }
  UNLOCK(fs);
}

static void rw_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
  struct cairnfs *fs = fs_of(req);
  LOCK(fs);
  struct rw_inode *i = rw_inode_of(fs, ino);
  int r = i ? 0 : -ESTALE;
  bool writes = (fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC);
  if (r == 0 && writes) r = rw_ensure_upper(fs, i);
  if (r == 0 && i->fd >= 0) {
    r = rw_reopen(i, fi->flags);
    if (r >= 0) {
      int fd = r;
      r = rw_fh_make(fs->rw, fd, fi->flags, &fi->fh);
      if (r < 0)
        close(fd);
      else
        handle_track(fs, fi, i, fd);
    }
  } else if (r == 0) {
    fi->fh = NO_FH;
    fi->keep_cache = 1;
  }
  fi->noflush = 1; /* flush does nothing here (locks are the kernel's) */
  UNLOCK(fs);
  if (r < 0) {
    fuse_reply_err(req, -r);
  } else if (fuse_reply_open(req, fi) != 0 && fi->fh != NO_FH) {
    int fd = fh_fd(fs, ino, fi);
    handle_untrack(fs, fi, fd);
    if (fd >= 0) close(fd);
  }
}

/* A create replayed after a restart (conn.c: cairnfs_resent) whose file the
 * dead server made: the regular file dir/name, the caller's, opened. */
static int create_replayed(fuse_req_t req, struct cairnfs *fs, struct rw_inode *dir,
                           const char *name, mode_t mode, int flags, struct rw_inode **out,
                           int *fd) {
  struct rw_inode *i;
  struct stat st;
  int r = rw_resolve(fs, dir, name, &i);
  if (r < 0) return -EEXIST;
  r = rw_inode_stat(fs, i, &st);
  if (r == 0 && (!S_ISREG(st.st_mode) || !replayed_owner(req, dir, name, &st, S_IFREG | mode)))
    r = -EEXIST;
  if (r == 0) r = rw_ensure_upper(fs, i);
  if (r == 0) r = *fd = rw_reopen(i, flags);
  if (r < 0) {
    rw_inode_drop_unused(fs->rw, i);
    return r;
  }
  *out = i;
  return 0;
}

static void rw_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                      struct fuse_file_info *fi) {
  struct cairnfs *fs = fs_of(req);
  LOCK(fs);
  struct rw_inode *dir = rw_inode_of(fs, parent), *i = NULL;
  int fd = -1;
  int r = dir ? create_prep(fs, dir, name) : -ESTALE;
  bool replayed = r == -EEXIST && cairnfs_resent;
  if (replayed) r = create_replayed(req, fs, dir, name, mode, fi->flags, &i, &fd);
  if (r == 0 && !replayed) {
    int flags = (fi->flags | O_CREAT | O_EXCL | O_CLOEXEC) & ~(O_NOFOLLOW | O_DIRECT | O_APPEND);
    fd = openat(dir->fd, name, flags, mode & 07777);
    if (fd < 0) r = -errno;
  }
  if (r == 0 && !replayed) r = own(req, dir, name, S_IFREG | mode);
  struct stat st;
  if (r == 0 && !replayed)
    r = made_entry(fs, dir, name, &i, &st);
  else if (r == 0)
    r = rw_inode_stat(fs, i, &st);
  if (r == 0) r = rw_fh_make(fs->rw, fd, fi->flags, &fi->fh);
  struct fuse_entry_param e;
  if (r == 0) made_entry_param(i, &st, &e);
  if (r < 0) {
    if (i) rw_inode_drop_unused(fs->rw, i);
    UNLOCK(fs);
    if (fd >= 0) close(fd);
    fuse_reply_err(req, -r);
    return;
  }
  i->refs++;
  fi->noflush = 1;
  handle_track(fs, fi, i, fd);
  UNLOCK(fs);
  if (fuse_reply_create(req, &e, fi) != 0) {
    handle_untrack(fs, fi, fd);
    close(fd);
    LOCK(fs);
    rw_inode_unref(fs->rw, i, 1);
    UNLOCK(fs);
  }
}

/* A lower-only file's node, with tree_lock's read side held (the caller
 * unlocks it) so that n stays fs->tree's while it is served. */
static const cairn_node *lower_held(struct cairnfs *fs, fuse_ino_t ino, int *orphan_fd) {
  LOCK(fs);
  struct rw_inode *i = rw_inode_of(fs, ino);
  const cairn_node *n = i ? rw_lower_node(fs, i) : NULL;
  /* A file of the image unlinked while open when cairn commit moved the
   * mount: its copy (orphan_copy). */
  *orphan_fd = i && !n && i->orphan && i->fd >= 0 ? rw_reopen(i, O_RDONLY) : -1;
  pthread_rwlock_rdlock(&fs->rw->tree_lock);
  UNLOCK(fs);
  return n;
}

static void rw_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                    struct fuse_file_info *fi) {
  struct cairnfs *fs = fs_of(req);
  if (fi->fh == NO_FH) {
    int ofd;
    const cairn_node *n = lower_held(fs, ino, &ofd);
    if (ofd >= 0)
      cairnfs_reply_fd(req, ofd, off, size);
    else
      cairnfs_read_lower(req, fs, n, size, off);
    pthread_rwlock_unlock(&fs->rw->tree_lock);
    if (ofd >= 0) close(ofd);
    return;
  }
  int fd = fh_fd(fs, ino, fi);
  if (fd < 0) {
    fuse_reply_err(req, -fd);
    return;
  }
  cairnfs_reply_fd(req, fd, off, size);
}

static void rw_write_buf(fuse_req_t req, fuse_ino_t ino, struct fuse_bufvec *in, off_t off,
                         struct fuse_file_info *fi) {
  int fd = fi->fh == NO_FH ? -EBADF : fh_fd(fs_of(req), ino, fi);
  if (fd < 0) {
    fuse_reply_err(req, -fd);
    return;
  }
  struct fuse_bufvec out = FUSE_BUFVEC_INIT(fuse_buf_size(in));
  out.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
  out.buf[0].fd = fd;
  out.buf[0].pos = off;
  struct cairnfs_rw *rw = fs_of(req)->rw;
  pthread_rwlock_rdlock(&rw->tree_lock); /* a rebase moves fi->fh meanwhile */
  ssize_t n = fuse_buf_copy(&out, in, 0);
  pthread_rwlock_unlock(&rw->tree_lock);
  if (n < 0)
    fuse_reply_err(req, (int)-n);
  else
    fuse_reply_write(req, (size_t)n);
}

/* SEEK_DATA and SEEK_HOLE (the kernel answers the others): a lower-only
 * file's from its blob, an upper one's from its fd (reads and writes give
 * their offsets, so the fd's own is no one's). */
static void rw_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence,
                     struct fuse_file_info *fi) {
  struct cairnfs *fs = fs_of(req);
  if (fi->fh == NO_FH) {
    int ofd;
    const cairn_node *n = lower_held(fs, ino, &ofd);
    off_t r = ofd >= 0 ? lseek(ofd, off, whence) : 0;
    if (ofd >= 0 && r < 0)
      fuse_reply_err(req, errno);
    else if (ofd >= 0)
      fuse_reply_lseek(req, r);
    else
      cairnfs_lseek_lower(req, fs, n, off, whence);
    pthread_rwlock_unlock(&fs->rw->tree_lock);
    if (ofd >= 0) close(ofd);
    return;
  }
  pthread_rwlock_rdlock(&fs->rw->tree_lock); /* a rebase moves fi->fh meanwhile */
  int fd = fh_fd(fs, ino, fi);
  off_t r = fd < 0 ? fd : lseek(fd, off, whence);
  if (fd >= 0 && r < 0) r = -errno;
  pthread_rwlock_unlock(&fs->rw->tree_lock);
  if (r < 0)
    fuse_reply_err(req, (int)-r);
  else
    fuse_reply_lseek(req, r);
}

static void rw_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
  (void)ino;
  (void)fi;
  fuse_reply_err(req, 0);
}

static void rw_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
  struct cairnfs *fs = fs_of(req);
  if (fi->fh != NO_FH && rw_fh_ours(fs->rw, fi->fh)) {
    int fd = fh_fd(fs, ino, fi);
    handle_untrack(fs, fi, fd); /* before the close: the fd number is free after */
    close(fd);
  } else if (fi->fh != NO_FH) {
    rw_fh_release(fs, fi->fh);
  }
  fuse_reply_err(req, 0);
}

static void rw_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi) {
  int r = 0, fd = fi->fh == NO_FH ? -1 : fh_fd(fs_of(req), ino, fi);
  if (fi->fh != NO_FH) r = fd < 0 ? -fd : (datasync ? fdatasync(fd) : fsync(fd)) < 0 ? errno : 0;
  fuse_reply_err(req, r);
}

static void rw_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len,
                         struct fuse_file_info *fi) {
  struct cairnfs_rw *rw = fs_of(req)->rw;
  pthread_rwlock_rdlock(&rw->tree_lock);
  int fd = fi->fh == NO_FH ? -EBADF : fh_fd(fs_of(req), ino, fi);
  int r = fd < 0 ? -fd : fallocate(fd, mode, off, len) < 0 ? errno : 0;
  pthread_rwlock_unlock(&rw->tree_lock);
  fuse_reply_err(req, r);
}

const struct fuse_lowlevel_ops cairnfs_rw_ops = {
    .init = rw_init,
    .lookup = rw_lookup,
    .forget = rw_forget,
    .forget_multi = rw_forget_multi,
    .getattr = rw_getattr,
    .setattr = rw_setattr,
    .readlink = rw_readlink,
    .mknod = rw_mknod,
    .mkdir = rw_mkdir,
    .symlink = rw_symlink,
    .link = rw_link,
    .unlink = rw_unlink,
    .rmdir = rw_rmdir,
    .rename = rw_rename,
    .open = rw_open,
    .create = rw_create,
    .read = rw_read,
    .write_buf = rw_write_buf,
    .lseek = rw_lseek,
    .flush = rw_flush,
    .release = rw_release,
    .fsync = rw_fsync,
    .fallocate = rw_fallocate,
    .opendir = rw_opendir,
    .readdir = rw_readdir,
    .releasedir = rw_releasedir,
    .fsyncdir = rw_fsyncdir,
    .statfs = rw_statfs,
    .getxattr = rw_getxattr,
    .listxattr = rw_listxattr,
    .setxattr = rw_setxattr,
    .removexattr = rw_removexattr,
};
