/* SPDX-License-Identifier: Apache-2.0 */
/*
 * upper.c — the FUSE operations of a writable (--rw) cairnfs mount: the
 * image's merged tree (read-only, ops.c's) below a private upper layer, a
 * real directory of the store (STORE/uppers/ID/, store/upper.c), above.
 *
 * Layout of an upper (overlayfs-style, so that it can be read, backed up
 * and committed with ordinary tools):
 *   root/    the changes: real files, directories, symlinks and nodes with
 *            their own mode, owner, times and xattrs (the daemon runs as
 *            root); a whiteout (a deleted lower entry) is a character
 *            device 0/0; trusted.cairn.origin (decimal) names the tree
 *            inode an entry was copied up from.
 *   work/    copy-up staging (tmp.N, renamed into root/ once complete) and
 *            index/L: the copy-up of a lower file with several names (tree
 *            inode L), so that all its names keep one identity.
 * trusted.cairn.* is never shown to, nor settable by, users.
 *
 * Merging is by origin, not by path: a directory merges the children of
 * the tree directory it was copied up from (its origin) wherever it is
 * renamed to; a directory made here (no origin) merges nothing, so it is
 * opaque by construction. Deleting (or renaming away) a name the lower
 * directory holds leaves a whiteout.
 *
 * Inode numbers (FUSE nodeids, also st_ino): a lower entry keeps its tree
 * inode number, before and after copy-up (the origin xattr says it again
 * after a restart); an entry made here is 2^32 + its backing inode number.
 * Both are persistent, so a restarted daemon serves the same inodes (and
 * a restarted server the same nodeids: see Restarts below).
 *
 * Each inode the kernel knows holds an O_PATH fd on its upper object (or
 * -1 while it is lower only) and where it was last seen (parent, name),
 * which copy-up needs. One mutex serializes the namespace (lookups,
 * creates, copy-ups, renames, the inode table); data (read, write, fsync)
 * goes straight to the backing file's fd with no lock and no SQLite, and
 * reads of upper files are fd-backed replies spliced like the lower's.
 * The kernel checks permissions (default_permissions) and keeps locks.
 * Attributes and entries, negative ones too, are cached for 1 s only
 * (read-only mounts: a year): every change goes through this
 * mount's kernel, which drops what a create, unlink, rename, link, write
 * or setattr makes stale, and a copy-up changes no attribute the kernel
 * holds. Every handler replies exactly once.
 *
 * Restarts. The supervisor (supervisor.c) holds the upper's lock across
 * server restarts (gc never sees it unowned) and, for every server, a
 * table of the upper objects' identities (nodetab.c). What the kernel
 * holds after a server died, and how the next server serves it:
 * - a nodeid: the root is the upper's root/; a recorded one (an upper
 *   object bound to an inode: made here, copied up, or found) is opened
 *   again by its file handle; a tree inode never recorded is lower-only,
 *   found where the tree has it (resolve, so a copy-up made since shows).
 *   Objects made here that the kernel may still know are held again at
 *   start (inode_restore), so that their inode numbers (2^32 + the backing
 *   inode) are not reused by new files while the kernel caches them. A
 *   restored inode's count of kernel references is unknown: it is kept
 *   until the kernel forgets it (inode_forget), and its record stays
 *   after (the FORGET may not have been for all its lookups). Its
 *   place (parent, name) is learnt again from the kernel's next lookup
 *   (or, lower-only, from the tree when a copy-up needs it); until then
 *   ".." in its listing names the root. A place is only a hint: what
 *   acts on an object acts through its fd (objpath_get).
 * - a file handle (fh): epoch << 44 | open flags << 20 | fd, the epoch
 *   being the server's (nodetab.c); a dead server's fh is opened again
 *   from the request's nodeid and its flags (not truncating, not
 *   creating), once, and kept until released; a directory's names its
 *   listing, made again from the directory when a dead server's.
 * - a request the dead server had read, resent by the kernel
 *   (cairnfs_resent, conn.c): writes carry their offset and upper fds are
 *   never O_APPEND, so a write replayed lands where it did; a create,
 *   mkdir, mknod, symlink or link that finds the entry it makes (its type,
 *   the caller's) answers with it; an unlink, rmdir or rename whose source
 *   is gone succeeds; setattr, setxattr and fsync redo the same thing.
 *   Copy-up staging the dead server left (work/tmp.N) is removed at start.
 */
#include "cairnfs.h"
#include "nodetab.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#define UPPER_BASE (1ULL << 32)
#define XA_PREFIX "trusted.cairn."
#define XA_ORIGIN XA_PREFIX "origin"
#define XA_REBASE XA_PREFIX "rebase" /* set on the root: rebase() */
#define XA_HIDDEN XA_PREFIX "hidden" /* on work/index/L: hide_lower() */
#define RW_TIMEOUT 1.0
#define NO_FH UINT64_MAX /* a read-only open of a lower-only file */

/* An open handle that may write: its fd (fi->fh) and inode. A rebase
 * moves the fd onto the inode's copy in the fresh upper (dup2). */
struct whandle {
  int fd;
  struct inode *i;
  struct whandle *next;
};

struct inode {
  uint64_t id;    /* the nodeid */
  uint32_t lower; /* the tree inode it is (or was copied up from), 0 if none */
  int fd;         /* O_PATH on the upper object, -1 while lower only */
  bool indexed;   /* its upper is work/index/LOWER */
  uint64_t refs;  /* the kernel's lookups + children naming it as parent */
  uint64_t kids;  /* of which children */
  bool restored;  /* by inode_restore: the kernel's count is unknown */
  bool base;      /* restored, and RESTORED_REFS still counted in refs */
  bool orphan;    /* its last name went while the kernel held it: work/orphan.ID */
  struct inode *parent;
  char *name;
  struct inode *hnext;
  /* After a rebase (cairn commit): the identity lookups find it by (the
   * tree inode, or 2^32 + backing inode, it now is), which may differ from
   * the nodeid the kernel holds; 0 for none (an orphan). Else key == id. */
  uint64_t key;
  struct inode *xnext;   /* in the key table, while key != id */
  uint32_t rebase_lower; /* rebase(): its inode in the new tree, 0 if none */
  int rebase_mark;       /* rebase(): 0 unvisited, 1 done */
};

#define NBUCKETS 65536

struct cairnfs_rw {
  int lock_fd; /* the upper's directory, flocked */
  int root_fd, work_fd, index_fd;
  char path[PATH_MAX];
  cairn_id id;
  bool resumed, served; /* served: the kernel's INIT came */
  pthread_mutex_t mu;
  uint64_t tmp_seq;
  struct inode *root;
  struct inode *buckets[NBUCKETS];
  /* Rebases (cairn commit moves the mount onto its new image, rebase()):
   * the inodes whose key is not their nodeid, by key; nodeids given when
   * a key's own number is taken; the trees served before (kept: a read
   * may still use a node of one); tree_lock orders the tree's swap
   * against lower reads, which run without mu. */
  bool rebased;
  struct inode *xbuckets[NBUCKETS];
  uint64_t next_id;
  cairn_tree **old_trees;
  size_t n_old_trees;
  pthread_rwlock_t tree_lock;
  struct whandle *whandles; /* open handles that may write (under mu) */
  char dir[PATH_MAX];       /* the mountpoint, as the upper's info names it */
  cairn_store *st2;         /* the rebase's own store handle, or NULL */
  cairn_pinset *pins;       /* the server's pins of the image it rebased onto */
  /* Restarts (see "Restarts" above): */
  bool inherited;                /* the supervisor holds the upper (lock_fd is its) */
  struct cairnfs_nodetab *nodes; /* the upper objects' identities (nodetab.c), or NULL */
  uint32_t epoch;                /* this server's, in every fh it hands out */
  uint32_t *rparent;             /* tree inode -> a parent directory's (built on need) */
  struct stale_fh *stale;        /* dead servers' handles, reopened (under mu) */
};

static struct cairnfs *fs_of(fuse_req_t req) { return fuse_req_userdata(req); }

/* "/proc/self/fd/FD[/NAME]": the object an fd (O_PATH) names. */
static void fd_path(char *buf, size_t len, int fd, const char *name) {
  if (name)
    snprintf(buf, len, "/proc/self/fd/%d/%s", fd, name);
  else
    snprintf(buf, len, "/proc/self/fd/%d", fd);
}
#define PBUF 320

static bool is_whiteout(const struct stat *st) {
  return S_ISCHR(st->st_mode) && st->st_rdev == makedev(0, 0);
}

/* ---- the inode table (callers hold mu) ------------------------------- */

static struct inode *inode_get(struct cairnfs_rw *rw, uint64_t id) {
  for (struct inode *i = rw->buckets[id % NBUCKETS]; i; i = i->hnext)
    if (i->id == id) return i;
  return NULL;
}

static struct inode *inode_new(struct cairnfs_rw *rw, uint64_t id, uint32_t lower) {
  struct inode *i = calloc(1, sizeof(*i));
  if (!i) return NULL;
  i->id = id;
  i->key = id;
  i->lower = lower;
  i->fd = -1;
  i->hnext = rw->buckets[id % NBUCKETS];
  rw->buckets[id % NBUCKETS] = i;
  return i;
}

/* The key table (rebases only): inodes found by a key not their nodeid. */
static void key_unlink(struct cairnfs_rw *rw, struct inode *i) {
  if (i->key == i->id || i->key == 0) return;
  struct inode **pp = &rw->xbuckets[i->key % NBUCKETS];
  while (*pp && *pp != i) pp = &(*pp)->xnext;
  if (*pp) *pp = i->xnext;
  i->xnext = NULL;
}

static void key_set(struct cairnfs_rw *rw, struct inode *i, uint64_t key) {
  key_unlink(rw, i);
  i->key = key;
  if (key == i->id || key == 0) return;
  i->xnext = rw->xbuckets[key % NBUCKETS];
  rw->xbuckets[key % NBUCKETS] = i;
}

/* The inode the kernel knows as the entry of identity key, or NULL. */
static struct inode *key_find(struct cairnfs_rw *rw, uint64_t key) {
  if (!rw->rebased) return inode_get(rw, key);
  for (struct inode *i = rw->xbuckets[key % NBUCKETS]; i; i = i->xnext)
    if (i->key == key) return i;
  struct inode *i = inode_get(rw, key);
  return i && i->key == key ? i : NULL;
}

/* A new inode of identity key: its nodeid is key unless the kernel still
 * holds that number for another entry (after a rebase). */
static struct inode *key_new(struct cairnfs_rw *rw, uint64_t key, uint32_t lower) {
  if (!rw->rebased || !inode_get(rw, key)) return inode_new(rw, key, lower);
  uint64_t id;
  do id = ++rw->next_id;
  while (inode_get(rw, id));
  struct inode *i = inode_new(rw, id, lower);
  if (i) key_set(rw, i, key);
  return i;
}

/* The d_ino of the entry of identity key in a listing. */
static uint64_t key_ino(struct cairnfs_rw *rw, uint64_t key) {
  struct inode *i = rw->rebased ? key_find(rw, key) : NULL;
  return i ? i->id : key;
}

/* Orphans. A file whose last name goes while the kernel still holds it
 * (open, maybe) keeps a name in work/, orphan.NODEID, until the kernel
 * forgets it: a server that restarts meanwhile opens it again by its
 * file handle (the dead server's fds, which kept it, are gone), so that
 * it is still read and written through the handles open on it. Never
 * shown, never committed; a server's start removes those of nodeids with
 * no record (cairnfs_rw_setup). */
static void orphan_name(char *buf, size_t len, uint64_t nodeid) {
  snprintf(buf, len, "orphan.%" PRIu64, nodeid);
}

static void orphan_drop(struct cairnfs_rw *rw, uint64_t nodeid) {
  char name[40];
  orphan_name(name, sizeof(name), nodeid);
  unlinkat(rw->work_fd, name, 0);
}

/* Before the last name of regular file x goes: an orphan if the kernel
 * holds it (refs beyond the caller's own, held). Best effort. */
static void orphan_keep(struct cairnfs_rw *rw, struct inode *x, uint64_t held) {
  struct stat st;
  if (x->orphan || x->indexed || x->fd < 0 || x->refs <= held) return;
  if (fstatat(x->fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode) ||
      st.st_nlink != 1)
    return;
  char self[PBUF], name[40];
  fd_path(self, sizeof(self), x->fd, NULL);
  orphan_name(name, sizeof(name), x->id);
  unlinkat(rw->work_fd, name, 0); /* a dead server's, of an object now gone */
  if (linkat(AT_FDCWD, self, rw->work_fd, name, AT_SYMLINK_FOLLOW) == 0) x->orphan = true;
}

/* Whether fd (a restored inode's object) is the orphan of nodeid. */
static bool orphan_is(struct cairnfs_rw *rw, uint64_t nodeid, int fd) {
  char name[40];
  struct stat a, b;
  orphan_name(name, sizeof(name), nodeid);
  return fstatat(rw->work_fd, name, &a, AT_SYMLINK_NOFOLLOW) == 0 &&
         fstatat(fd, "", &b, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == 0 && a.st_ino == b.st_ino &&
         a.st_dev == b.st_dev;
}

/* Drops n references of i (kid: a child's), and i if it was the last. */
static void inode_unref_as(struct cairnfs_rw *rw, struct inode *i, uint64_t n, bool kid) {
  while (i) {
    if (kid && i->kids) i->kids--;
    if (i->refs > n) {
      i->refs -= n;
      return;
    }
    struct inode **pp = &rw->buckets[i->id % NBUCKETS];
    while (*pp != i) pp = &(*pp)->hnext;
    *pp = i->hnext;
    key_unlink(rw, i);
    struct inode *parent = i->parent;
    /* A restored inode's count was a guess: the kernel may still hold it,
     * so its record stays, for inode_restore to find it again; unless it
     * is an orphan with no other name, which no lookup can give again. */
    struct stat st;
    bool sure = !i->restored ||
                (i->orphan && fstatat(i->fd, "", &st, AT_EMPTY_PATH) == 0 && st.st_nlink == 1);
    if (i->fd >= 0 && sure) cairnfs_nodetab_forget(rw->nodes, i->id);
    if (i->orphan && sure) orphan_drop(rw, i->id);
    if (i->fd >= 0) close(i->fd);
    free(i->name);
    free(i);
    i = parent;
    n = 1;
    kid = true;
  }
}

static void inode_unref(struct cairnfs_rw *rw, struct inode *i, uint64_t n) {
  inode_unref_as(rw, i, n, false);
}

/* The kernel forgot n lookups of i (a FORGET). Never more than it has
 * (refs less its children's, which stay while they name i as parent). A
 * restored inode's count is unknown: its first FORGET is taken as all
 * its lookups, though it may be fewer (a single FORGET of one lookup the
 * kernel could not use, or one queued before the restart, reaching this
 * server after it handed the nodeid out again): if the kernel still
 * holds it, its record (kept: inode_unref_as) restores it again. */
static void inode_forget(struct cairnfs_rw *rw, struct inode *i, uint64_t n) {
  if (i->base) {
    i->base = false;
    n = UINT64_MAX;
  }
  uint64_t lookups = i->refs > i->kids ? i->refs - i->kids : 0;
  if (n > lookups) n = lookups;
  if (n) inode_unref(rw, i, n);
}

/* A FORGET of nodeid ino, n lookups. One of an inode this server does not
 * hold changes nothing: it was dropped on a FORGET already (a restored
 * one's, whose record stays, since the kernel may still hold it). */
static void forget_nodeid(struct cairnfs_rw *rw, uint64_t ino, uint64_t n) {
  struct inode *i = inode_get(rw, ino);
  if (i && i != rw->root) inode_forget(rw, i, n);
}

/* Records where i was seen: parent's directory, under name. */
static int inode_place(struct cairnfs_rw *rw, struct inode *i, struct inode *parent,
                       const char *name) {
  if (i == rw->root) return 0;
  if (i->parent == parent && i->name && strcmp(i->name, name) == 0) return 0;
  char *copy = strdup(name);
  if (!copy) return -ENOMEM;
  parent->refs++;
  parent->kids++;
  struct inode *old = i->parent;
  free(i->name);
  i->name = copy;
  i->parent = parent;
  if (old) inode_unref_as(rw, old, 1, true);
  return 0;
}

/* A fresh inode with no reference is dropped again (a failed request). */
static void inode_drop_unused(struct cairnfs_rw *rw, struct inode *i) {
  if (i && i->refs == 0 && i != rw->root) {
    i->refs = 1;
    inode_unref(rw, i, 1);
  }
}

/* Records i's upper object for later servers (nodetab.c). */
static void inode_noted(struct cairnfs_rw *rw, const struct inode *i) {
  cairnfs_nodetab_note(rw->nodes, i->id, i->lower, i->indexed, i->fd);
}

static const cairn_node *lower_node(struct cairnfs *fs, const struct inode *i) {
  return i->lower ? cairn_tree_node(fs->tree, i->lower) : NULL;
}

/* The tree directory merged below directory i (its origin), or NULL. */
static const cairn_node *lower_dir(struct cairnfs *fs, const struct inode *i) {
  const cairn_node *n = lower_node(fs, i);
  return n && S_ISDIR(n->mode) ? n : NULL;
}

static bool lower_has(struct cairnfs *fs, const struct inode *dir, const char *name) {
  const cairn_node *ld = lower_dir(fs, dir);
  return ld && cairn_tree_lookup(fs->tree, ld, name);
}

static uint32_t origin_at(int dirfd, const char *name) {
  char path[PBUF], buf[16];
  fd_path(path, sizeof(path), dirfd, name);
  ssize_t n = lgetxattr(path, XA_ORIGIN, buf, sizeof(buf) - 1);
  if (n <= 0) return 0;
  buf[n] = '\0';
  unsigned long v = strtoul(buf, NULL, 10);
  return v <= UINT32_MAX ? (uint32_t)v : 0;
}

/* The entry name of directory dir in the merged view: *out (not yet
 * referenced by the kernel; inode_drop_unused if not replied), or -ENOENT. */
static int resolve(struct cairnfs *fs, struct inode *dir, const char *name, struct inode **out) {
  struct cairnfs_rw *rw = fs->rw;
  struct inode *i;
  if (dir->fd >= 0) {
    struct stat st;
    if (fstatat(dir->fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
      if (is_whiteout(&st)) return -ENOENT;
      uint32_t origin = origin_at(dir->fd, name);
      uint64_t id = origin ? origin : UPPER_BASE + st.st_ino;
      i = key_find(rw, id);
      if (!i && !(i = key_new(rw, id, origin))) return -ENOMEM;
      if (i->fd < 0) {
        i->fd = openat(dir->fd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
        if (i->fd < 0) {
          int r = -errno;
          inode_drop_unused(rw, i);
          return r;
        }
        inode_noted(rw, i);
      }
      int r = inode_place(rw, i, dir, name);
      if (r < 0) {
        inode_drop_unused(rw, i);
        return r;
      }
      *out = i;
      return 0;
    }
    if (errno != ENOENT) return -errno;
  }
  const cairn_node *ld = lower_dir(fs, dir);
  const cairn_dirent *de = ld ? cairn_tree_lookup(fs->tree, ld, name) : NULL;
  if (!de) return -ENOENT;
  const cairn_node *n = cairn_tree_node(fs->tree, de->ino);
  if (!n) return -EIO;
  i = key_find(rw, de->ino);
  if (!i && !(i = key_new(rw, de->ino, de->ino))) return -ENOMEM;
  if (i->fd < 0 && !S_ISDIR(n->mode) && n->nlink > 1) {
    char idx[16];
    snprintf(idx, sizeof(idx), "%" PRIu32, de->ino);
    int fd = openat(rw->index_fd, idx, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) {
      i->fd = fd;
      i->indexed = true;
      inode_noted(rw, i);
    }
  }
  int r = inode_place(rw, i, dir, name);
  if (r < 0) {
    inode_drop_unused(rw, i);
    return r;
  }
  *out = i;
  return 0;
}

/* ---- copy-up (callers hold mu) --------------------------------------- */

static int copy_data(struct cairnfs *fs, const cairn_node *n, int out) {
  if (!n->blob || n->size == 0) return 0;
  cairn_autoclose int in = cairn_blob_open(fs->st, cairn_tree_str(fs->tree, n->blob));
  if (in < 0) return in;
  off_t off = 0;
  while ((uint64_t)off < n->size) {
    ssize_t k = sendfile(out, in, &off, (size_t)(n->size - (uint64_t)off));
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) return -errno;
    if (k == 0) return -EIO; /* a short blob */
  }
  return 0;
}

/* Gives work/tmp the node's owner, mode, xattrs, times and origin. */
static int copy_meta(struct cairnfs *fs, uint32_t lower, const cairn_node *n, int dirfd,
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
  if (r == 0) r = copy_meta(fs, lower, n, rw->work_fd, tmp);
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

static void inode_find_parent(struct cairnfs *fs, struct inode *i);

/* Makes i an upper object (copying it up, its parents first). */
static int ensure_upper(struct cairnfs *fs, struct inode *i) {
  struct cairnfs_rw *rw = fs->rw;
  if (i->fd >= 0) return 0;
  const cairn_node *n = lower_node(fs, i);
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
    if (!i->parent) inode_find_parent(fs, i);
    if (!i->parent) return -EIO;
    int r = ensure_upper(fs, i->parent);
    if (r < 0) return r;
    dirfd = i->parent->fd;
    at = i->name;
  }
  struct stat st;
  if (fstatat(dirfd, at, &st, AT_SYMLINK_NOFOLLOW) < 0 || origin_at(dirfd, at) != i->lower) {
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
  inode_noted(rw, i);
  return 0;
}

static int hide_lower(struct cairnfs *fs, struct inode *dir, const char *name);

/* Gives an upper i (indexed) a name in its current place (a rename's
 * source must be a name in the upper directory). */
static int ensure_named(struct cairnfs *fs, struct inode *i, struct inode *dir, const char *name) {
  int r = ensure_upper(fs, i);
  if (r < 0 || !i->indexed) return r;
  struct stat st;
  if (fstatat(dir->fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && !is_whiteout(&st)) return 0;
  if (fstatat(dir->fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0) unlinkat(dir->fd, name, 0);
  r = hide_lower(fs, dir, name);
  if (r < 0) return r;
  return linkat(i->fd, "", dir->fd, name, AT_EMPTY_PATH) < 0 ? -errno : 0;
}

/* How many names of the lower file with several names L (indexed) the
 * upper hides: hide_lower() counts them on its copy-up. */
static uint32_t hidden_names(struct cairnfs_rw *rw, uint32_t lower) {
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
static int hide_lower(struct cairnfs *fs, struct inode *dir, const char *name) {
  struct cairnfs_rw *rw = fs->rw;
  struct stat st;
  if (dir->fd >= 0 && fstatat(dir->fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0) return 0;
  const cairn_node *ld = lower_dir(fs, dir);
  const cairn_dirent *de = ld ? cairn_tree_lookup(fs->tree, ld, name) : NULL;
  const cairn_node *n = de ? cairn_tree_node(fs->tree, de->ino) : NULL;
  if (!n || S_ISDIR(n->mode) || n->nlink <= 1) return 0;
  char idx[16], path[PBUF], num[16];
  snprintf(idx, sizeof(idx), "%" PRIu32, de->ino);
  if (fstatat(rw->index_fd, idx, &st, AT_SYMLINK_NOFOLLOW) < 0) {
    int r = errno == ENOENT ? copy_node(fs, de->ino, rw->index_fd, idx) : -errno;
    if (r < 0) return r;
  }
  snprintf(num, sizeof(num), "%" PRIu32, hidden_names(rw, de->ino) + 1);
  fd_path(path, sizeof(path), rw->index_fd, idx);
  if (lsetxattr(path, XA_HIDDEN, num, strlen(num), 0) < 0) return -errno;
  struct inode *i = key_find(rw, de->ino);
  if (i && i->fd < 0 && i->lower == de->ino) { /* known, lower only: now the copy-up */
    i->fd = openat(rw->index_fd, idx, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (i->fd >= 0) {
      i->indexed = true;
      inode_noted(rw, i);
    }
  }
  return 0;
}

static int whiteout_make(int dirfd, const char *name) {
  return mknodat(dirfd, name, S_IFCHR | 0000, makedev(0, 0)) < 0 ? -errno : 0;
}

/* ---- attributes ------------------------------------------------------- */

/* A path naming upper inode i itself, for the calls that take a path
 * (*xattr, utimensat): its fd's /proc link (followed: nofollow false), or
 * for a symlink, which no fd can be read or written through, a name of it
 * (not followed): its recorded place while that still names it, else a
 * link made for the call in work/ (tmp, removed by objpath_put). Never
 * the place alone: an unlink of that name (the object keeping another)
 * leaves it stale, and a later entry there is another object, maybe
 * another user's. -ENOENT if the symlink has no name left. */
struct objpath {
  char path[PBUF];
  bool nofollow;
  char tmp[32]; /* the link in work/, or "" */
};

static int objpath_get(struct cairnfs_rw *rw, struct inode *i, struct objpath *o) {
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

static void objpath_put(struct cairnfs_rw *rw, struct objpath *o) {
  if (o->tmp[0]) unlinkat(rw->work_fd, o->tmp, 0);
  o->tmp[0] = '\0';
}

static int dir_subdirs(struct cairnfs *fs, struct inode *i);

static int inode_stat(struct cairnfs *fs, struct inode *i, struct stat *st) {
  if (i->fd < 0) {
    const cairn_node *n = lower_node(fs, i);
    if (!n) return -ESTALE;
    cairnfs_node_stat(n, i->id, st);
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

static int entry_of(struct cairnfs *fs, struct inode *i, struct fuse_entry_param *e) {
  memset(e, 0, sizeof(*e));
  e->ino = i->id;
  e->generation = 1;
  e->attr_timeout = RW_TIMEOUT;
  e->entry_timeout = RW_TIMEOUT;
  return inode_stat(fs, i, &e->attr);
}

/* ---- restarts: inodes and handles a dead server handed out ------------- */

/* A restored inode's count of the kernel's references is unknown: it is
 * kept until the kernel's FORGET of it (inode_forget). */
#define RESTORED_REFS (1ULL << 40)

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

static struct inode *inode_restore(struct cairnfs *fs, uint64_t ino, unsigned depth);

static struct inode *inode_lookup(struct cairnfs *fs, uint64_t ino, unsigned depth) {
  if (ino == FUSE_ROOT_ID) return fs->rw->root;
  struct inode *i = inode_get(fs->rw, ino);
  return i ? i : inode_restore(fs, ino, depth);
}

/* The directory inode that holds tree inode ino where the tree has it,
 * and its name there in *name; NULL if there is none. */
static struct inode *tree_place(struct cairnfs *fs, uint32_t ino, unsigned depth,
                                const char **name) {
  uint32_t p = tree_parent(fs, ino);
  *name = p ? tree_name(fs, p, ino) : NULL;
  return *name ? inode_lookup(fs, p, depth) : NULL;
}

/* Gives a restored lower-only inode the place the tree says it has. */
static void inode_find_parent(struct cairnfs *fs, struct inode *i) {
  const char *name;
  struct inode *dir = i->lower ? tree_place(fs, i->lower, 1, &name) : NULL;
  if (dir) inode_place(fs->rw, i, dir, name);
}

/* Rebuilds inode ino that an earlier server handed out to the kernel: an
 * upper object recorded in nodetab, else a tree inode found where the
 * tree has it (through resolve: it may have been copied up since), else
 * a lower-only inode with no place yet (inode_find_parent). */
static struct inode *inode_restore(struct cairnfs *fs, uint64_t ino, unsigned depth) {
  struct cairnfs_rw *rw = fs->rw;
  if (depth > 4096) return NULL;
  uint32_t lower = 0;
  bool indexed = false;
  int fd = cairnfs_nodetab_find(rw->nodes, ino, &lower, &indexed);
  struct inode *i;
  if (fd >= 0) {
    if (!(i = inode_new(rw, ino, lower))) {
      close(fd);
      return NULL;
    }
    i->fd = fd;
    i->indexed = indexed;
    i->orphan = !indexed && orphan_is(rw, ino, fd);
    i->refs = RESTORED_REFS;
    i->restored = i->base = true;
    return i;
  }
  if (fd != -ENOENT || ino >= UPPER_BASE) return NULL;
  const cairn_node *n = cairn_tree_node(fs->tree, ino);
  if (!n) return NULL;
  const char *name;
  struct inode *dir = tree_place(fs, (uint32_t)ino, depth + 1, &name);
  if (dir && resolve(fs, dir, name, &i) == 0) {
    if (i->id == ino) {
      i->refs += RESTORED_REFS;
      i->restored = i->base = true;
      return i;
    }
    inode_drop_unused(rw, i);
  }
  if (!(i = inode_new(rw, ino, (uint32_t)ino))) return NULL;
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

/* The inode the kernel names ino (mu held), or NULL. */
static struct inode *inode_of(struct cairnfs *fs, fuse_ino_t ino) {
  return inode_lookup(fs, ino, 0);
}

/* File handles. A file's fh is epoch (19 bits) << 44 | its open flags (24
 * bits) << 20 | the fd; a directory's, epoch (15 bits) << 48 | the address
 * of its listing. A handle of another epoch is a dead server's: reopened
 * from the request's nodeid and the flags (a listing made again), once,
 * and kept in rw->stale until released. */
#define FH_FD_BITS 20
#define FH_FLAGS_SHIFT 20
#define FH_FLAGS_MASK ((1ULL << 24) - 1)
#define FH_EPOCH_SHIFT 44
#define FH_EPOCH_MASK ((1ULL << 19) - 1)
#define DH_EPOCH_SHIFT 48
#define DH_EPOCH_MASK ((1ULL << 15) - 1)
#define DH_PTR_MASK ((1ULL << DH_EPOCH_SHIFT) - 1)

struct stale_fh {
  uint64_t fh;
  int fd;            /* a file's, or -1 */
  struct dirh *dirh; /* a directory's, or NULL */
  struct stale_fh *next;
};

struct dirh;
static void dirh_free(struct dirh *d);

/* The record of a dead server's handle fh (mu held), or NULL. */
static struct stale_fh *stale_find(struct cairnfs_rw *rw, uint64_t fh) {
  struct stale_fh *s = rw->stale;
  while (s && s->fh != fh) s = s->next;
  return s;
}

/* Records fh (mu held), with what it holds: fd, or a listing. */
static struct stale_fh *stale_add(struct cairnfs_rw *rw, uint64_t fh, int fd, struct dirh *d) {
  struct stale_fh *s = calloc(1, sizeof(*s));
  if (!s) return NULL;
  *s = (struct stale_fh){.fh = fh, .fd = fd, .dirh = d, .next = rw->stale};
  rw->stale = s;
  return s;
}

static void stale_free(struct stale_fh *s) {
  if (s->fd >= 0) close(s->fd);
  if (s->dirh) dirh_free(s->dirh);
  free(s);
}

static int fh_make(struct cairnfs_rw *rw, int fd, int flags, uint64_t *fh) {
  if (fd < 0 || fd >= 1 << FH_FD_BITS) return -EMFILE;
  *fh = ((uint64_t)rw->epoch & FH_EPOCH_MASK) << FH_EPOCH_SHIFT |
        ((uint64_t)(unsigned)flags & FH_FLAGS_MASK) << FH_FLAGS_SHIFT | (uint64_t)fd;
  return 0;
}

static bool fh_ours(const struct cairnfs_rw *rw, uint64_t fh) {
  return (fh >> FH_EPOCH_SHIFT & FH_EPOCH_MASK) == (rw->epoch & FH_EPOCH_MASK);
}

static int reopen(struct inode *i, int flags);

/* The fd a file's fi->fh (not NO_FH) names in this server, or -errno;
 * locked: the caller holds mu. */
static int fh_fd_in(struct cairnfs *fs, fuse_ino_t ino, const struct fuse_file_info *fi,
                    bool locked) {
  struct cairnfs_rw *rw = fs->rw;
  if (fh_ours(rw, fi->fh)) return (int)(fi->fh & ((1ULL << FH_FD_BITS) - 1));
  if (!locked) pthread_mutex_lock(&rw->mu);
  struct stale_fh *s = stale_find(rw, fi->fh);
  int fd = s ? s->fd : -1;
  if (!s) {
    struct inode *i = inode_of(fs, ino);
    /* not truncated again, nor created */
    int flags = (int)(fi->fh >> FH_FLAGS_SHIFT & FH_FLAGS_MASK) & ~(O_TRUNC | O_CREAT | O_EXCL);
    fd = !i ? -ESTALE : i->fd < 0 ? -EBADF : reopen(i, flags);
    if (fd >= 0 && !stale_add(rw, fi->fh, fd, NULL)) {
      close(fd);
      fd = -ENOMEM;
    }
  }
  if (!locked) pthread_mutex_unlock(&rw->mu);
  return fd;
}

static int fh_fd(struct cairnfs *fs, fuse_ino_t ino, const struct fuse_file_info *fi) {
  return fh_fd_in(fs, ino, fi, false);
}

/* Closes what a released fh holds (a dead server's: its reopened fd or
 * listing, if any). */
static void fh_release(struct cairnfs *fs, uint64_t fh) {
  struct cairnfs_rw *rw = fs->rw;
  pthread_mutex_lock(&rw->mu);
  struct stale_fh **pp = &rw->stale, *s;
  while (*pp && (*pp)->fh != fh) pp = &(*pp)->next;
  if ((s = *pp)) *pp = s->next;
  pthread_mutex_unlock(&rw->mu);
  if (s) stale_free(s);
}

#define LOCK(fs) pthread_mutex_lock(&(fs)->rw->mu)
#define UNLOCK(fs) pthread_mutex_unlock(&(fs)->rw->mu)

/* Replies entry e of i, which gets the kernel's reference, and unlocks mu
 * (taken); the reference is dropped again if the reply fails. */
static void reply_entry_unlock(fuse_req_t req, struct cairnfs *fs, struct inode *i,
                               const struct fuse_entry_param *e) {
  i->refs++;
  UNLOCK(fs);
  if (fuse_reply_entry(req, e) != 0) {
    LOCK(fs);
    inode_unref(fs->rw, i, 1);
    UNLOCK(fs);
  }
}

/* Replies with the entry of i, referenced once more for the kernel. */
static void reply_entry(fuse_req_t req, struct cairnfs *fs, struct inode *i) {
  struct fuse_entry_param e;
  int r = entry_of(fs, i, &e);
  if (r < 0) {
    inode_drop_unused(fs->rw, i);
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
  struct inode *dir = inode_of(fs, parent), *i;
  int r = dir ? resolve(fs, dir, name, &i) : -ESTALE;
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
  forget_nodeid(fs->rw, ino, nlookup);
  UNLOCK(fs);
  fuse_reply_none(req);
}

static void rw_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *f) {
  struct cairnfs *fs = fs_of(req);
  LOCK(fs);
  for (size_t k = 0; k < count; k++) forget_nodeid(fs->rw, f[k].ino, f[k].nlookup);
  UNLOCK(fs);
  fuse_reply_none(req);
}

static void rw_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
  (void)fi;
  struct cairnfs *fs = fs_of(req);
  struct stat st;
  LOCK(fs);
  struct inode *i = inode_of(fs, ino);
  int r = i ? inode_stat(fs, i, &st) : -ESTALE;
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
  struct inode *i = inode_of(fs, ino);
  int r = i ? ensure_upper(fs, i) : -ESTALE;
  if (r == 0) {
    fd_path(path, sizeof(path), i->fd, NULL);
    r = inode_stat(fs, i, &st);
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
    struct objpath o;
    r = objpath_get(fs->rw, i, &o);
    if (r == 0) {
      if (utimensat(AT_FDCWD, o.path, ts, o.nofollow ? AT_SYMLINK_NOFOLLOW : 0) < 0) r = -errno;
      objpath_put(fs->rw, &o);
    }
  }
  if (r == 0) r = inode_stat(fs, i, &st);
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
  struct inode *i = inode_of(fs, ino);
  int r = i ? 0 : -ESTALE;
  if (r == 0 && i->fd >= 0) {
    ssize_t n = readlinkat(i->fd, "", buf, sizeof(buf) - 1);
    if (n < 0)
      r = -errno;
    else
      buf[n] = '\0';
  } else if (r == 0) {
    const cairn_node *n = lower_node(fs, i);
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
static int create_prep(struct cairnfs *fs, struct inode *dir, const char *name) {
  if (name_reserved(name)) return -EPERM;
  int r = ensure_upper(fs, dir);
  if (r < 0) return r;
  struct stat st;
  if (fstatat(dir->fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
    if (!is_whiteout(&st)) return -EEXIST;
    return unlinkat(dir->fd, name, 0) < 0 ? -errno : 0; /* hid a lower entry */
  }
  if (errno != ENOENT) return -errno;
  return lower_has(fs, dir, name) ? -EEXIST : 0;
}

/* The inode of the entry just made at dir/name (no origin: 2^32 + its
 * backing inode), placed, with its attributes in *st (not yet referenced
 * by the kernel; inode_drop_unused if not replied). */
static int made_entry(struct cairnfs *fs, struct inode *dir, const char *name, struct inode **out,
                      struct stat *st) {
  struct cairnfs_rw *rw = fs->rw;
  int fd = openat(dir->fd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return -errno;
  if (fstatat(fd, "", st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0) {
    int r = -errno;
    close(fd);
    return r;
  }
  uint64_t key = UPPER_BASE + st->st_ino;
  struct inode *i = key_find(rw, key);
  if (!i && !(i = key_new(rw, key, 0))) {
    close(fd);
    return -ENOMEM;
  }
  if (i->fd < 0) {
    i->fd = fd;
    inode_noted(rw, i);
  } else {
    close(fd);
  }
  int r = inode_place(rw, i, dir, name);
  if (r < 0) {
    inode_drop_unused(rw, i);
    return r;
  }
  st->st_ino = i->id;
  *out = i;
  return 0;
}

/* Replies to a create of i (attributes st), referenced once more. */
static void made_entry_param(struct inode *i, const struct stat *st, struct fuse_entry_param *e) {
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
static int own(fuse_req_t req, struct inode *dir, const char *name, mode_t mode) {
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
static bool replayed_owner(fuse_req_t req, struct inode *dir, const char *name,
                           const struct stat *st, mode_t mode) {
  if (st->st_uid == fuse_req_ctx(req)->uid) return true;
  return st->st_uid == geteuid() && own(req, dir, name, mode) == 0;
}

/* A mknod, mkdir or symlink replayed after a restart (conn.c:
 * cairnfs_resent) whose entry the dead server made: dir/name of that type,
 * the caller's, is the answer. */
static int made_replayed(fuse_req_t req, struct cairnfs *fs, struct inode *dir, const char *name,
                         mode_t mode, struct inode **out) {
  struct inode *i;
  struct stat st;
  if (resolve(fs, dir, name, &i) < 0) return -EEXIST;
  if (inode_stat(fs, i, &st) < 0 || (st.st_mode & S_IFMT) != (mode & S_IFMT) ||
      !replayed_owner(req, dir, name, &st, mode)) {
    inode_drop_unused(fs->rw, i);
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
  struct inode *dir = inode_of(fs, parent), *i = NULL;
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
    r = inode_stat(fs, i, &st);
  if (r < 0) {
    if (replayed && i) inode_drop_unused(fs->rw, i);
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
  struct inode *i = inode_of(fs, ino), *dir = inode_of(fs, newparent), *x = NULL;
  int r = i && dir ? ensure_upper(fs, i) : -ESTALE;
  if (r == 0) r = create_prep(fs, dir, newname);
  bool replayed = r == -EEXIST && cairnfs_resent; /* made by the dead server? */
  if (r == 0 && linkat(i->fd, "", dir->fd, newname, AT_EMPTY_PATH) < 0) r = -errno;
  if (r == 0 || replayed) r = resolve(fs, dir, newname, &x);
  if (replayed && r == 0 && x != i) {
    inode_drop_unused(fs->rw, x);
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
static int dir_empty(struct cairnfs *fs, struct inode *d, bool clear) {
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
  const cairn_node *ld = lower_dir(fs, d);
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
static bool upper_has(struct inode *dir, const char *name) {
  struct stat st;
  return dir->fd >= 0 && fstatat(dir->fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && !is_whiteout(&st);
}

static void remove_entry(fuse_req_t req, fuse_ino_t parent, const char *name, bool is_dir) {
  struct cairnfs *fs = fs_of(req);
  LOCK(fs);
  struct inode *dir = inode_of(fs, parent), *x = NULL;
  int r = dir ? resolve(fs, dir, name, &x) : -ESTALE;
  struct stat st;
  if (r == 0) r = inode_stat(fs, x, &st);
  if (r == 0 && is_dir && !S_ISDIR(st.st_mode)) r = -ENOTDIR;
  if (r == 0 && !is_dir && S_ISDIR(st.st_mode)) r = -EISDIR;
  if (r == 0 && is_dir) r = dir_empty(fs, x, false);
  if (r == 0) r = ensure_upper(fs, dir);
  if (r == 0) r = hide_lower(fs, dir, name);
  if (r == 0 && upper_has(dir, name)) {
    if (is_dir) r = dir_empty(fs, x, true);
    if (r == 0 && !is_dir) orphan_keep(fs->rw, x, 0);
    if (r == 0 && unlinkat(dir->fd, name, is_dir ? AT_REMOVEDIR : 0) < 0) r = -errno;
  }
  if (r == 0 && lower_has(fs, dir, name)) r = whiteout_make(dir->fd, name);
  if (x) inode_drop_unused(fs->rw, x);
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

static int do_rename(struct cairnfs *fs, struct inode *dir, const char *name, struct inode *ndir,
                     const char *newname, unsigned flags) {
  if (flags & ~(unsigned)(RENAME_NOREPLACE | RENAME_EXCHANGE)) return -EINVAL;
  if (name_reserved(newname)) return -EPERM;
  struct inode *src = NULL, *dst = NULL;
  int r = resolve(fs, dir, name, &src);
  if (r < 0) return r;
  src->refs++; /* kept while dst is resolved */
  r = resolve(fs, ndir, newname, &dst);
  if (r == -ENOENT) {
    dst = NULL;
    r = (flags & RENAME_EXCHANGE) ? -ENOENT : 0;
  } else if (r == 0 && (flags & RENAME_NOREPLACE)) {
    r = -EEXIST;
  }
  if (dst) dst->refs++;
  struct stat sst, dst_st;
  if (r == 0) r = inode_stat(fs, src, &sst);
  if (r == 0 && dst) r = inode_stat(fs, dst, &dst_st);
  if (r == 0 && dst && !(flags & RENAME_EXCHANGE)) {
    if (S_ISDIR(sst.st_mode) && !S_ISDIR(dst_st.st_mode))
      r = -ENOTDIR;
    else if (!S_ISDIR(sst.st_mode) && S_ISDIR(dst_st.st_mode))
      r = -EISDIR;
    else if (S_ISDIR(dst_st.st_mode))
      r = dir_empty(fs, dst, false);
  }
  if (r == 0 && src == dst) goto out; /* two names of one file: nothing to do */
  if (r == 0) r = ensure_upper(fs, dir);
  if (r == 0) r = ensure_upper(fs, ndir);
  if (r == 0) r = ensure_named(fs, src, dir, name);
  if (r == 0 && dst && (flags & RENAME_EXCHANGE)) r = ensure_named(fs, dst, ndir, newname);
  if (r == 0 && dst && !(flags & RENAME_EXCHANGE) && S_ISDIR(dst_st.st_mode) &&
      upper_has(ndir, newname))
    r = dir_empty(fs, dst, true);
  if (r == 0 && dst && !(flags & RENAME_EXCHANGE)) r = hide_lower(fs, ndir, newname);
  struct stat st;
  if (r == 0 && !(flags & RENAME_EXCHANGE) &&
      fstatat(ndir->fd, newname, &st, AT_SYMLINK_NOFOLLOW) == 0 && is_whiteout(&st) &&
      unlinkat(ndir->fd, newname, 0) < 0)
    r = -errno;
  if (r == 0 && dst && !(flags & RENAME_EXCHANGE) && !S_ISDIR(dst_st.st_mode) &&
      upper_has(ndir, newname))
    orphan_keep(fs->rw, dst, 1); /* its last name may go */
  if (r == 0 && renameat2(dir->fd, name, ndir->fd, newname, flags & RENAME_EXCHANGE) < 0)
    r = -errno;
  if (r == 0 && !(flags & RENAME_EXCHANGE) && lower_has(fs, dir, name))
    r = whiteout_make(dir->fd, name);
  if (r == 0) r = inode_place(fs->rw, src, ndir, newname);
  if (r == 0 && dst && (flags & RENAME_EXCHANGE)) r = inode_place(fs->rw, dst, dir, name);
out:
  inode_unref(fs->rw, src, 1);
  if (dst) inode_unref(fs->rw, dst, 1);
  return r;
}

static void rw_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
                      const char *newname, unsigned int flags) {
  struct cairnfs *fs = fs_of(req);
  LOCK(fs);
  struct inode *dir = inode_of(fs, parent), *ndir = inode_of(fs, newparent);
  int r = dir && ndir ? do_rename(fs, dir, name, ndir, newname, flags) : -ESTALE;
  if (r == -ENOENT && cairnfs_resent) { /* renamed by the dead server? */
    struct inode *x;
    if (resolve(fs, ndir, newname, &x) == 0) {
      inode_drop_unused(fs->rw, x);
      r = 0;
    }
  }
  UNLOCK(fs);
  fuse_reply_err(req, -r);
}

/* Records an open handle of i that may write (mu held; best effort: an
 * untracked handle is one a rebase cannot move). */
static void handle_track(struct cairnfs *fs, const struct fuse_file_info *fi, struct inode *i,
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

/* An fd of i's upper opened with flags (O_CREAT and the like dropped).
 * Not O_APPEND: the kernel gives every write its offset (the end of the
 * file, for an append), so that a write replayed after a restart lands
 * where it did the first time instead of being appended twice. */
static int reopen(struct inode *i, int flags) {
  char path[PBUF];
  fd_path(path, sizeof(path), i->fd, NULL);
  flags &= ~(O_CREAT | O_EXCL | O_NOCTTY | O_NOFOLLOW | O_DIRECT | O_APPEND);
  int fd = open(path, flags | O_CLOEXEC);
  return fd < 0 ? -errno : fd;
}

static void rw_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
  struct cairnfs *fs = fs_of(req);
  LOCK(fs);
  struct inode *i = inode_of(fs, ino);
  int r = i ? 0 : -ESTALE;
  bool writes = (fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC);
  if (r == 0 && writes) r = ensure_upper(fs, i);
  if (r == 0 && i->fd >= 0) {
    r = reopen(i, fi->flags);
    if (r >= 0) {
      int fd = r;
      r = fh_make(fs->rw, fd, fi->flags, &fi->fh);
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
static int create_replayed(fuse_req_t req, struct cairnfs *fs, struct inode *dir, const char *name,
                           mode_t mode, int flags, struct inode **out, int *fd) {
  struct inode *i;
  struct stat st;
  int r = resolve(fs, dir, name, &i);
  if (r < 0) return -EEXIST;
  r = inode_stat(fs, i, &st);
  if (r == 0 && (!S_ISREG(st.st_mode) || !replayed_owner(req, dir, name, &st, S_IFREG | mode)))
    r = -EEXIST;
  if (r == 0) r = ensure_upper(fs, i);
  if (r == 0) r = *fd = reopen(i, flags);
  if (r < 0) {
    inode_drop_unused(fs->rw, i);
    return r;
  }
  *out = i;
  return 0;
}

static void rw_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                      struct fuse_file_info *fi) {
  struct cairnfs *fs = fs_of(req);
  LOCK(fs);
  struct inode *dir = inode_of(fs, parent), *i = NULL;
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
    r = inode_stat(fs, i, &st);
  if (r == 0) r = fh_make(fs->rw, fd, fi->flags, &fi->fh);
  struct fuse_entry_param e;
  if (r == 0) made_entry_param(i, &st, &e);
  if (r < 0) {
    if (i) inode_drop_unused(fs->rw, i);
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
    inode_unref(fs->rw, i, 1);
    UNLOCK(fs);
  }
}

static void rw_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                    struct fuse_file_info *fi) {
  struct cairnfs *fs = fs_of(req);
  if (fi->fh == NO_FH) {
    LOCK(fs);
    struct inode *i = inode_of(fs, ino);
    const cairn_node *n = i ? lower_node(fs, i) : NULL;
    pthread_rwlock_rdlock(&fs->rw->tree_lock); /* n stays fs->tree's */
    UNLOCK(fs);
    cairnfs_read_lower(req, fs, n, size, off);
    pthread_rwlock_unlock(&fs->rw->tree_lock);
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

static void rw_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
  (void)ino;
  (void)fi;
  fuse_reply_err(req, 0);
}

static void rw_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
  struct cairnfs *fs = fs_of(req);
  if (fi->fh != NO_FH && fh_ours(fs->rw, fi->fh)) {
    int fd = fh_fd(fs, ino, fi);
    handle_untrack(fs, fi, fd); /* before the close: the fd number is free after */
    close(fd);
  } else if (fi->fh != NO_FH) {
    fh_release(fs, fi->fh);
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

/* ---- directories ------------------------------------------------------- */

struct dent {
  char *name;
  uint64_t ino;
  mode_t type;
};

struct dirh {
  struct dent *e;
  size_t n, cap;
  uint64_t self, parent;
};

static void dirh_clear(struct dirh *d) {
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

static void dirh_free(struct dirh *d) {
  dirh_clear(d);
  free(d);
}

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
  struct stale_fh *s = stale_find(rw, fh);
  if (!s) {
    struct dirh *d = calloc(1, sizeof(*d));
    if (d && !(s = stale_add(rw, fh, -1, d))) free(d);
  }
  pthread_mutex_unlock(&rw->mu);
  return s ? s->dirh : NULL;
}

/* The merged listing of directory i: upper entries, then the lower ones no
 * upper entry (or whiteout) hides. */
static int dirh_fill(struct cairnfs *fs, struct inode *i, struct dirh *d) {
  dirh_clear(d);
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
        uint32_t origin = origin_at(i->fd, e->d_name);
        r = dirh_add(d, e->d_name, key_ino(fs->rw, origin ? origin : UPPER_BASE + st.st_ino),
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
  const cairn_node *ld = r == 0 ? lower_dir(fs, i) : NULL;
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
      r = dirh_add(d, name, key_ino(fs->rw, c[k].ino), n->mode & S_IFMT);
    }
  }
  for (size_t k = 0; k < n_seen; k++) free(seen[k]);
  return r;
}

/* How many subdirectories directory i has in the merged view. */
static int dir_subdirs(struct cairnfs *fs, struct inode *i) {
  struct dirh d = {0};
  int r = dirh_fill(fs, i, &d);
  int n = 0;
  for (size_t k = 0; r == 0 && k < d.n; k++) n += d.e[k].type == S_IFDIR;
  dirh_clear(&d);
  return r < 0 ? r : n;
}

static void rw_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
  struct cairnfs *fs = fs_of(req);
  struct dirh *d = calloc(1, sizeof(*d));
  if (!d) {
    fuse_reply_err(req, ENOMEM);
    return;
  }
  LOCK(fs);
  struct inode *i = inode_of(fs, ino);
  int r = i ? dirh_fill(fs, i, d) : -ESTALE;
  UNLOCK(fs);
  if (r < 0) {
    dirh_clear(d);
    free(d);
    fuse_reply_err(req, -r);
    return;
  }
  fi->fh = ((uint64_t)fs->rw->epoch & DH_EPOCH_MASK) << DH_EPOCH_SHIFT | (uint64_t)(uintptr_t)d;
  if (fuse_reply_open(req, fi) != 0) {
    dirh_clear(d);
    free(d);
  }
}

static void rw_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                       struct fuse_file_info *fi) {
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
    struct inode *i = inode_of(fs, ino);
    int r = i ? dirh_fill(fs, i, d) : -ESTALE;
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

static void rw_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
  (void)ino;
  struct cairnfs *fs = fs_of(req);
  struct dirh *d = dirh_of(fs, fi);
  if (d)
    dirh_free(d);
  else
    fh_release(fs, fi->fh);
  fuse_reply_err(req, 0);
}

static void rw_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi) {
  (void)datasync;
  (void)fi;
  struct cairnfs *fs = fs_of(req);
  LOCK(fs);
  struct inode *i = inode_of(fs, ino);
  int fd = i && i->fd >= 0 ? openat(i->fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
  UNLOCK(fs);
  int r = 0;
  if (fd >= 0) {
    if (fsync(fd) < 0) r = errno;
    close(fd);
  }
  fuse_reply_err(req, r);
}

static void rw_statfs(fuse_req_t req, fuse_ino_t ino) {
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

/* ---- extended attributes ----------------------------------------------- */

static int rebase(struct cairnfs *fs, const char *value, size_t size);

static bool xattr_ours(const char *name) {
  return strncmp(name, XA_PREFIX, strlen(XA_PREFIX)) == 0;
}

static void rw_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size) {
  struct cairnfs *fs = fs_of(req);
  if (xattr_ours(name)) {
    fuse_reply_err(req, ENODATA);
    return;
  }
  LOCK(fs);
  struct inode *i = inode_of(fs, ino);
  if (!i) {
    UNLOCK(fs);
    fuse_reply_err(req, ESTALE);
    return;
  }
  if (i->fd < 0) {
    const cairn_node *n = lower_node(fs, i);
    for (size_t k = 0; n && k < n->n_xattrs; k++) {
      cairn_xattr x = cairn_tree_xattr(fs->tree, n, k);
      if (strcmp(x.name, name) != 0) continue;
      UNLOCK(fs);
      if (size == 0)
        fuse_reply_xattr(req, x.len);
      else if (size < x.len)
        fuse_reply_err(req, ERANGE);
      else
        fuse_reply_buf(req, x.value, x.len);
      return;
    }
    UNLOCK(fs);
    fuse_reply_err(req, ENODATA);
    return;
  }
  struct objpath o;
  int r = objpath_get(fs->rw, i, &o);
  char *buf = size ? malloc(size) : NULL;
  ssize_t n = r < 0          ? (errno = -r, -1)
              : size && !buf ? (errno = ENOMEM, -1)
              : o.nofollow   ? lgetxattr(o.path, name, buf, size)
                             : getxattr(o.path, name, buf, size);
  int err = errno;
  if (r == 0) objpath_put(fs->rw, &o);
  UNLOCK(fs);
  if (n < 0)
    fuse_reply_err(req, err);
  else if (size == 0)
    fuse_reply_xattr(req, (size_t)n);
  else
    fuse_reply_buf(req, buf, (size_t)n);
  free(buf);
}

static void rw_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
  struct cairnfs *fs = fs_of(req);
  LOCK(fs);
  struct inode *i = inode_of(fs, ino);
  char *list = NULL;
  ssize_t len = 0;
  int err = 0;
  if (!i) {
    err = ESTALE;
  } else if (i->fd < 0) {
    const cairn_node *n = lower_node(fs, i);
    for (size_t k = 0; n && k < n->n_xattrs; k++)
      len += (ssize_t)strlen(cairn_tree_xattr(fs->tree, n, k).name) + 1;
    list = malloc(len ? (size_t)len : 1);
    if (!list) err = ENOMEM;
    size_t used = 0;
    for (size_t k = 0; list && n && k < n->n_xattrs; k++) {
      const char *x = cairn_tree_xattr(fs->tree, n, k).name;
      memcpy(list + used, x, strlen(x) + 1);
      used += strlen(x) + 1;
    }
  } else {
    struct objpath o;
    int r = objpath_get(fs->rw, i, &o);
    bool nf = o.nofollow;
    len = r < 0 ? (errno = -r, -1) : nf ? llistxattr(o.path, NULL, 0) : listxattr(o.path, NULL, 0);
    if (len >= 0) list = malloc((size_t)len + 1);
    if (len >= 0 && list)
      len = nf ? llistxattr(o.path, list, (size_t)len) : listxattr(o.path, list, (size_t)len);
    if (len < 0)
      err = errno;
    else if (!list)
      err = ENOMEM;
    if (r == 0) objpath_put(fs->rw, &o);
  }
  UNLOCK(fs);
  /* trusted.cairn.* is ours */
  size_t kept = 0;
  for (ssize_t k = 0; !err && k < len;) {
    size_t l = strlen(list + k) + 1;
    if (!xattr_ours(list + k)) {
      memmove(list + kept, list + k, l);
      kept += l;
    }
    k += (ssize_t)l;
  }
  if (err)
    fuse_reply_err(req, err);
  else if (size == 0)
    fuse_reply_xattr(req, kept);
  else if (size < kept)
    fuse_reply_err(req, ERANGE);
  else
    fuse_reply_buf(req, list, kept);
  free(list);
}

static void rw_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
                        size_t size, int flags) {
  struct cairnfs *fs = fs_of(req);
  if (ino == FUSE_ROOT_ID && strcmp(name, XA_REBASE) == 0) {
    fuse_reply_err(req, -rebase(fs, value, size));
    return;
  }
  if (xattr_ours(name)) {
    fuse_reply_err(req, EPERM);
    return;
  }
  LOCK(fs);
  struct inode *i = inode_of(fs, ino);
  int r = i ? ensure_upper(fs, i) : -ESTALE;
  struct objpath o;
  if (r == 0) r = objpath_get(fs->rw, i, &o);
  if (r == 0) {
    if ((o.nofollow ? lsetxattr(o.path, name, value, size, flags)
                    : setxattr(o.path, name, value, size, flags)) < 0)
      r = -errno;
    objpath_put(fs->rw, &o);
  }
  UNLOCK(fs);
  fuse_reply_err(req, -r);
}

static void rw_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name) {
  struct cairnfs *fs = fs_of(req);
  if (xattr_ours(name)) {
    fuse_reply_err(req, ENODATA);
    return;
  }
  LOCK(fs);
  struct inode *i = inode_of(fs, ino);
  int r = i ? ensure_upper(fs, i) : -ESTALE;
  struct objpath o;
  if (r == 0) r = objpath_get(fs->rw, i, &o);
  if (r == 0) {
    if ((o.nofollow ? lremovexattr(o.path, name) : removexattr(o.path, name)) < 0) r = -errno;
    objpath_put(fs->rw, &o);
  }
  UNLOCK(fs);
  fuse_reply_err(req, -r);
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

/* ---- rebase: after cairn commit ------------------------------------------
 *
 * cairn commit, once the upper is a new image (its base plus the upper as
 * one layer), sets trusted.cairn.rebase = "UPPER_ID IMAGE_ID" on the
 * mount's root (only root may set trusted.*, and only who can read the
 * store's uppers/ knows the upper's random id). The server then serves
 * IMAGE's tree below a fresh, empty upper, and drops the old upper, whose
 * changes IMAGE now holds: later writes go to the fresh one.
 *
 * Under mu (no namespace request runs). Every inode the kernel holds keeps
 * its nodeid: one still
 * at its place (parent, name) in the old view becomes the new tree's entry
 * at that path (lower only, its key the new tree inode); one that is not
 * (unlinked, or below an unlinked directory) is an orphan served from its
 * old upper object, if it had one. Lookups find inodes by key; a new
 * entry whose key is a nodeid the kernel still holds for another entry
 * gets a number from 2^62 up. Read-only handles on old upper files keep
 * reading those (same bytes as committed; a later write through another
 * handle is not seen by them, as with overlayfs before 4.19). The old tree
 * stays allocated (a read may hold one of its nodes); the tree is swapped
 * under tree_lock, which lower reads hold. A handle that may write (an fd
 * on the old upper) is moved: its file is copied up into the fresh upper
 * with what the old copy holds now, and that fd dup2'ed over the handle's
 * fd number, under tree_lock, which writes hold: no write is lost. */

/* The identity (key) of dir/name in the current view, 0 if none. */
static uint64_t key_at(struct cairnfs *fs, struct inode *dir, const char *name) {
  struct stat st;
  if (dir->fd >= 0 && fstatat(dir->fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
    if (is_whiteout(&st)) return 0;
    uint32_t origin = origin_at(dir->fd, name);
    return origin ? origin : UPPER_BASE + st.st_ino;
  }
  const cairn_node *ld = lower_dir(fs, dir);
  const cairn_dirent *de = ld ? cairn_tree_lookup(fs->tree, ld, name) : NULL;
  return de ? de->ino : 0;
}

/* The inode of i's place in tree (new), 0 if i is not at its place. */
static uint32_t rebase_place(struct cairnfs *fs, struct inode *i, const cairn_tree *tree) {
  if (i == fs->rw->root) return FUSE_ROOT_ID;
  if (i->rebase_mark) return i->rebase_lower;
  i->rebase_mark = 1;
  i->rebase_lower = 0;
  if (!i->parent || !i->name) return 0;
  uint32_t pl = rebase_place(fs, i->parent, tree);
  if (!pl || key_at(fs, i->parent, i->name) != i->key) return 0;
  const cairn_node *pn = cairn_tree_node(tree, pl);
  const cairn_dirent *de = pn && S_ISDIR(pn->mode) ? cairn_tree_lookup(tree, pn, i->name) : NULL;
  i->rebase_lower = de ? de->ino : 0;
  return i->rebase_lower;
}

/* Moves handle h onto a copy of its file in the (fresh) upper. */
static int move_handle(struct cairnfs *fs, struct whandle *h) {
  struct stat st;
  if (fstat(h->fd, &st) < 0) return -errno;
  int r = ensure_upper(fs, h->i);
  if (r < 0) return r;
  int flags = fcntl(h->fd, F_GETFL);
  char path[PBUF];
  fd_path(path, sizeof(path), h->fd, NULL);
  cairn_autoclose int src = open(path, O_RDONLY | O_CLOEXEC); /* h->fd may be write-only */
  if (src < 0) return -errno;
  int fd = reopen(h->i, O_RDWR);
  if (fd < 0) return fd;
  r = ftruncate(fd, st.st_size) < 0 ? -errno : 0;
  for (loff_t in = 0, out = 0; r == 0 && in < st.st_size;) {
    ssize_t k = copy_file_range(src, &in, fd, &out, (size_t)(st.st_size - in), 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) r = k < 0 ? -errno : -EIO;
  }
  if (r == 0 && flags >= 0) fcntl(fd, F_SETFL, flags & (O_APPEND | O_NONBLOCK | O_NOATIME));
  if (r == 0 && dup2(fd, h->fd) < 0) r = -errno;
  close(fd);
  return r;
}

static int rebase(struct cairnfs *fs, const char *value, size_t size) {
  struct cairnfs_rw *rw = fs->rw;
  char buf[2 * CAIRN_ID_LEN + 2];
  if (size != sizeof(buf) - 1) return -EINVAL;
  memcpy(buf, value, size);
  buf[size] = '\0';
  if (buf[CAIRN_ID_LEN] != ' ') return -EINVAL;
  buf[CAIRN_ID_LEN] = '\0';
  const char *upper = buf, *image = buf + CAIRN_ID_LEN + 1;
  for (const char *c = image; *c; c++)
    if (!((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f'))) return -EINVAL;
  LOCK(fs);
  int r = strcmp(upper, rw->id) == 0 ? 0 : -EPERM;
  /* The new image: pinned by this server for as long as it serves it. */
  if (r == 0 && !rw->st2) r = cairn_store_open(cairn_store_dir(fs->st), &rw->st2);
  cairn_pinset *pins = r == 0 ? cairn_pinset_new("mount (rebased by cairn commit)", true) : NULL;
  if (r == 0 && !pins) r = -ENOMEM;
  if (r == 0) r = cairn_pin_image(rw->st2, pins, image);
  cairn_tree *tree = NULL;
  if (r == 0) r = cairn_tree_build(rw->st2, image, &tree);
  cairn_tree **olds = r == 0 ? realloc(rw->old_trees, (rw->n_old_trees + 1) * sizeof(*olds)) : NULL;
  if (r == 0 && !olds) r = -ENOMEM;
  if (olds) rw->old_trees = olds;
  /* The fresh upper. */
  cairn_id id;
  char path[PATH_MAX];
  int lock_fd = -1, root_fd = -1, work_fd = -1, index_fd = -1;
  if (r == 0) r = cairn_upper_create(rw->st2, image, rw->dir, id, path, sizeof(path), &lock_fd);
  if (r == 0) {
    root_fd = openat(lock_fd, "root", O_PATH | O_DIRECTORY | O_CLOEXEC);
    work_fd = openat(lock_fd, "work", O_PATH | O_DIRECTORY | O_CLOEXEC);
    index_fd = openat(lock_fd, "work/index", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (root_fd < 0 || work_fd < 0 || index_fd < 0) r = -errno;
  }
  if (r < 0) {
    if (lock_fd >= 0) cairn_upper_drop(rw->st2, id);
    for (int *fd = (int[]){lock_fd, root_fd, work_fd, index_fd}, k = 0; k < 4; k++)
      if (fd[k] >= 0) close(fd[k]);
    cairn_tree_free(tree);
    if (pins) cairn_pinset_release(rw->st2, pins);
    UNLOCK(fs);
    return r;
  }
  /* Where each inode the kernel holds is in the new tree (the old view
   * still served), then the switch. */
  for (size_t b = 0; b < NBUCKETS; b++)
    for (struct inode *i = rw->buckets[b]; i; i = i->hnext) i->rebase_mark = 0;
  for (size_t b = 0; b < NBUCKETS; b++)
    for (struct inode *i = rw->buckets[b]; i; i = i->hnext) rebase_place(fs, i, tree);
  pthread_rwlock_wrlock(&rw->tree_lock);
  rw->old_trees[rw->n_old_trees++] = fs->tree;
  fs->tree = tree;
  pthread_rwlock_unlock(&rw->tree_lock);
  rw->rebased = true;
  if (!rw->next_id) rw->next_id = 1ULL << 62;
  for (size_t b = 0; b < NBUCKETS; b++) {
    for (struct inode *i = rw->buckets[b]; i; i = i->hnext) {
      if (i == rw->root) continue;
      uint32_t l = i->rebase_lower;
      if (l) { /* at its place: the new tree's entry there, lower only */
        if (i->fd >= 0) close(i->fd);
        i->fd = -1;
        i->indexed = false;
        i->lower = l;
        key_set(rw, i, l);
      } else { /* an orphan: its old upper object (if any), nothing merged */
        i->lower = 0;
        i->indexed = false;
        key_set(rw, i, 0);
      }
    }
  }
  /* The root: the fresh upper's, with the new image's root attributes. */
  const cairn_node *n = cairn_tree_node(fs->tree, FUSE_ROOT_ID);
  r = n ? copy_meta(fs, 0, n, lock_fd, "root") : -EIO; /* the new tree is served anyway */
  close(rw->root->fd);
  rw->root->fd = dup(root_fd);
  if (rw->root->fd < 0 && r == 0) r = -errno;
  cairn_id old;
  snprintf(old, sizeof(old), "%s", rw->id);
  close(rw->root_fd);
  close(rw->work_fd);
  close(rw->index_fd);
  close(rw->lock_fd);
  rw->root_fd = root_fd;
  rw->work_fd = work_fd;
  rw->index_fd = index_fd;
  rw->lock_fd = lock_fd;
  snprintf(rw->id, sizeof(rw->id), "%s", id);
  snprintf(rw->path, sizeof(rw->path), "%s", path);
  rw->resumed = false;
  /* The fresh upper is this server's own, and no later server could serve
   * this tree (the supervisor holds the old upper and the old image's
   * pins): the mount is not restarted from here on (nodetab.c's final). */
  rw->inherited = false;
  cairnfs_nodetab_set_final(rw->nodes, id);
  /* Handles that may write: onto a copy in the fresh upper of what their
   * file holds now (writes since the commit read it included), with no
   * write running meanwhile. */
  pthread_rwlock_wrlock(&rw->tree_lock);
  for (struct whandle *h = rw->whandles; h; h = h->next)
    if (h->i->lower) move_handle(fs, h); /* an orphan's stays; a failed move too */
  pthread_rwlock_unlock(&rw->tree_lock);
  if (rw->pins) cairn_pinset_release(rw->st2, rw->pins);
  rw->pins = pins;
  UNLOCK(fs);
  cairn_upper_drop(rw->st2, old); /* its changes are the new image's now */
  return r;
}

/* ---- setup -------------------------------------------------------------- */

static void restore_made(uint64_t nodeid, void *arg) {
  struct cairnfs *fs = arg;
  if (nodeid < UPPER_BASE || inode_get(fs->rw, nodeid) || inode_restore(fs, nodeid, 0)) return;
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
  r = rw->resumed ? 0 : copy_meta(fs, 0, n, rw->lock_fd, "root");
  if (r < 0) return cairn_fail(fs->st, r, "%s/root: %s", rw->path, strerror(-r));
  rw->root = inode_new(rw, FUSE_ROOT_ID, FUSE_ROOT_ID);
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
    for (struct inode *i = rw->buckets[b], *next; i; i = next) {
      next = i->hnext;
      if (i->fd >= 0) close(i->fd);
      free(i->name);
      free(i);
    }
  }
  for (struct stale_fh *s = rw->stale, *next; s; s = next) {
    next = s->next;
    stale_free(s);
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
  if (rw->pins) cairn_pinset_release(rw->st2, rw->pins);
  if (rw->st2) cairn_store_close(rw->st2);
  pthread_rwlock_destroy(&rw->tree_lock);
  pthread_mutex_destroy(&rw->mu);
  free(rw);
  fs->rw = NULL;
}
