/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rw.h — a writable (--rw) cairnfs mount, what its parts share: the
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
 * trusted.cairn.* is never shown to, nor settable by, users (root reads
 * trusted.cairn.upper on the mount's root: the id of the upper it serves).
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
 *   after (the FORGET may not have been for all its lookups); a move
 *   asks the kernel whether it still holds such a nodeid
 *   (rw_kernel_holds) and drops what it does not, and a FORGET of an
 *   orphan's nodeid not held restores it to drop it. Its
 *   place (parent, name) is learnt again from the kernel's next lookup
 *   (or, lower-only, from the tree when a copy-up needs it); until then
 *   ".." in its listing names the root. A place is only a hint: what
 *   acts on an object acts through its fd (fd_path).
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
 * - after cairn commit moved the mount (rw_rebase.c): the supervisor
 *   passes the new image and the fresh upper, and the table records what
 *   each nodeid the kernel held before the move is now (an object of the
 *   fresh upper, a tree inode of the new image that may not be its
 *   number, or nothing: ESTALE); every recorded nodeid is restored at
 *   start, with its key (rebased). Until the next move a key whose inode the
 *   kernel forgot keeps the nodeid it was given (rw_inode.c's given
 *   tables), and that nodeid its record, which a later server restores.
 *
 * The parts (fs/rw_*.c, the daemon's writable layer): rw_inode.c (the
 * inode table, resolve), rw_listing.c (merged listings), rw_copyup.c,
 * rw_attr.c, rw_restart.c (the inodes and file handles a dead
 * server handed out), rw_ops.c (the operations on names and files, and the
 * table of operations), rw_dir.c, rw_xattr.c, rw_rebase.c (after cairn
 * commit), rw_freeze.c (commit's pause of the changes from its read of
 * the upper to the move), rw_setup.c. "mu held" means the namespace
 * mutex, rw->mu.
 */
#ifndef CAIRNFS_RW_H
#define CAIRNFS_RW_H

#include "cairnfs.h"
#include "nodetab.h"

#include <limits.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#define UPPER_BASE (1ULL << 32)
#define XA_PREFIX "trusted.cairn."
#define XA_ORIGIN XA_PREFIX "origin"
#define XA_REBASE XA_PREFIX "rebase" /* set on the root: rw_rebase() */
#define XA_UPPER XA_PREFIX "upper"   /* read on the root: the upper's id */
#define XA_HIDDEN XA_PREFIX "hidden" /* on work/index/L: rw_hide_lower() */
#define RW_TIMEOUT 1.0
#define NO_FH UINT64_MAX /* a read-only open of a lower-only file */

/* An open handle that may write: its fd (fi->fh) and inode. A rebase
 * moves the fd onto the inode's copy in the fresh upper (dup2). */
struct whandle {
  int fd;
  struct rw_inode *i;
  struct whandle *next;
};

struct rw_inode {
  uint64_t id;    /* the nodeid */
  uint32_t lower; /* the tree inode it is (or was copied up from), 0 if none */
  int fd;         /* O_PATH on the upper object, -1 while lower only */
  bool indexed;   /* its upper is work/index/LOWER */
  uint64_t refs;  /* the kernel's lookups + children naming it as parent */
  uint64_t kids;  /* of which children */
  bool restored;  /* by inode_restore: the kernel's count is unknown */
  bool base;      /* restored, and RESTORED_REFS still counted in refs */
  bool orphan;    /* its last name went while the kernel held it: work/orphan.ID */
  struct rw_inode *parent;
  char *name;
  struct rw_inode *hnext;
  /* After a rebase (cairn commit): the identity lookups find it by (the
   * tree inode, or 2^32 + backing inode, it now is), which may differ from
   * the nodeid the kernel holds; 0 for none (an orphan). Else key == id. */
  uint64_t key;
  struct rw_inode *xnext;   /* in the key table, while key != id */
  uint32_t rebase_lower; /* rw_rebase(): its inode in the new tree, 0 if none */
  int rebase_mark;       /* rw_rebase(): 0 unvisited, 1 done */
  char *rebase_path;     /* rw_rebase(): another name of it, its new place */
};

#define NBUCKETS 65536

/* A nodeid given to a key not its number, kept once the kernel forgot the
 * inode (rw_inode.c), in two tables: by key and by nodeid. */
#define GIVEN_BUCKETS 4096
struct rw_given {
  uint64_t key, id;
  struct rw_given *knext, *inext;
};

struct cairnfs_rw {
  int lock_fd; /* the upper's directory, flocked */
  int root_fd, work_fd, index_fd;
  char path[PATH_MAX];
  cairn_id id;
  cairn_id image;       /* the image served (the one a rebase moved onto) */
  bool resumed, served; /* served: the kernel's INIT came */
  pthread_mutex_t mu;
  uint64_t tmp_seq;
  struct rw_inode *root;
  struct rw_inode *buckets[NBUCKETS];
  /* Rebases (cairn commit moves the mount onto its new image, rw_rebase()):
   * the inodes whose key is not their nodeid, by key; nodeids given when
   * a key's own number is taken; the trees served before (kept: a read
   * may still use a node of one); tree_lock orders the tree's swap
   * against lower reads, which run without mu. */
  bool rebased;
  struct rw_inode *xbuckets[NBUCKETS];
  /* Since the last rebase: the nodeid each key had when the kernel forgot
   * its inode, where that was not the key (rw_key_new gives it again). */
  struct rw_given *given_key[GIVEN_BUCKETS], *given_id[GIVEN_BUCKETS];
  uint64_t next_id;
  cairn_tree **old_trees;
  size_t n_old_trees;
  pthread_rwlock_t tree_lock;
  struct whandle *whandles; /* open handles that may write (under mu) */
  char dir[PATH_MAX];       /* the mountpoint, as the upper's info names it */
  cairn_store *st2;         /* the rebase's own store handle, or NULL */
  cairn_pinset *pins;       /* the server's pins of the image it rebased onto */
  pthread_t dropper;        /* removing the upper the last rebase left (rw_drop_wait) */
  bool dropping;            /* dropper runs, or ended and is not joined yet */
  /* Restarts (see "Restarts" above): */
  bool inherited;                /* the supervisor holds the upper (lock_fd is its) */
  struct cairnfs_nodetab *nodes; /* the upper objects' identities (nodetab.c), or NULL */
  uint32_t epoch;                /* this server's, in every fh it hands out */
  uint32_t *rparent;             /* tree inode -> a parent directory's (built on need) */
  struct stale_fh *stale;        /* dead servers' handles, reopened (under mu) */
  struct fuse_session *se;       /* the server's session (rw_kernel_holds), or NULL */
};

static inline struct cairnfs *fs_of(fuse_req_t req) { return fuse_req_userdata(req); }

/* "/proc/self/fd/FD[/NAME]": the object an fd (O_PATH) names. Without
 * NAME it is the path of an upper object itself for the calls that take a
 * path (*xattr, utimensat): followed, the fd's /proc link leads to its
 * object and no further, a symlink too (not its target), whatever names
 * the object has left, none included. */
static inline void fd_path(char *buf, size_t len, int fd, const char *name) {
  if (name)
    snprintf(buf, len, "/proc/self/fd/%d/%s", fd, name);
  else
    snprintf(buf, len, "/proc/self/fd/%d", fd);
}
#define PBUF 320

static inline bool is_whiteout(const struct stat *st) {
  return S_ISCHR(st->st_mode) && st->st_rdev == makedev(0, 0);
}

#define LOCK(fs) pthread_mutex_lock(&(fs)->rw->mu)
#define UNLOCK(fs) pthread_mutex_unlock(&(fs)->rw->mu)

/* A restored inode's count of the kernel's references is unknown: it is
 * kept until the kernel's FORGET of it (inode_forget). */
#define RESTORED_REFS (1ULL << 40)

/* A directory's listing (rw_listing.c): its entries, then "." and "..". */
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

/* rw_inode.c */
struct rw_inode *rw_inode_get(struct cairnfs_rw *rw, uint64_t id);
struct rw_inode *rw_inode_new(struct cairnfs_rw *rw, uint64_t id, uint32_t lower);
void rw_key_set(struct cairnfs_rw *rw, struct rw_inode *i, uint64_t key);
struct rw_inode *rw_key_find(struct cairnfs_rw *rw, uint64_t key);
struct rw_inode *rw_key_new(struct cairnfs_rw *rw, uint64_t key, uint32_t lower);
uint64_t rw_key_ino(struct cairnfs_rw *rw, uint64_t key);
void rw_given_clear(struct cairnfs_rw *rw);
void rw_orphan_keep(struct cairnfs_rw *rw, struct rw_inode *x, uint64_t held);
/* x, a file of the image with no upper object, is about to lose a name
 * while the kernel holds it (its refs above held): recorded lower only in
 * the node table, so that a later server that moves the mount (which
 * restores only what the table records) keeps it, as an orphan copy. */
void rw_lower_keep(struct cairnfs_rw *rw, struct rw_inode *x, uint64_t held);
void rw_orphan_move(struct cairnfs_rw *rw, struct rw_inode *x);
void rw_orphan_name(char *buf, size_t len, uint64_t nodeid);
int rw_orphan_copy(struct cairnfs *fs, struct rw_inode *i);
bool rw_orphan_is(struct cairnfs_rw *rw, uint64_t nodeid, int fd);
void rw_inode_unref(struct cairnfs_rw *rw, struct rw_inode *i, uint64_t n);
void rw_inode_forget(struct cairnfs_rw *rw, struct rw_inode *i, uint64_t n);
void rw_forget_nodeid(struct cairnfs_rw *rw, uint64_t ino, uint64_t n);
int rw_inode_place(struct cairnfs_rw *rw, struct rw_inode *i, struct rw_inode *parent,
                   const char *name);
void rw_inode_drop_unused(struct cairnfs_rw *rw, struct rw_inode *i);
void rw_inode_noted(struct cairnfs_rw *rw, const struct rw_inode *i);
const cairn_node *rw_lower_node(struct cairnfs *fs, const struct rw_inode *i);
const cairn_node *rw_lower_dir(struct cairnfs *fs, const struct rw_inode *i);
bool rw_lower_has(struct cairnfs *fs, const struct rw_inode *dir, const char *name);
uint32_t rw_origin_at(int dirfd, const char *name);
int rw_resolve(struct cairnfs *fs, struct rw_inode *dir, const char *name, struct rw_inode **out);

/* rw_copyup.c */
int rw_copy_meta(struct cairnfs *fs, uint32_t lower, const cairn_node *n, int dirfd,
                 const char *name);
int rw_ensure_upper(struct cairnfs *fs, struct rw_inode *i);
int rw_ensure_named(struct cairnfs *fs, struct rw_inode *i, struct rw_inode *dir, const char *name);
uint32_t rw_hidden_names(struct cairnfs_rw *rw, uint32_t lower);
int rw_hide_lower(struct cairnfs *fs, struct rw_inode *dir, const char *name);
int rw_whiteout_make(int dirfd, const char *name);

/* rw_listing.c */
void rw_dirh_clear(struct dirh *d);
void rw_dirh_free(struct dirh *d);
int rw_dirh_fill(struct cairnfs *fs, struct rw_inode *i, struct dirh *d);
int rw_dir_subdirs(struct cairnfs *fs, struct rw_inode *i);

/* rw_attr.c */
int rw_inode_stat(struct cairnfs *fs, struct rw_inode *i, struct stat *st);
int rw_entry_of(struct cairnfs *fs, struct rw_inode *i, struct fuse_entry_param *e);

void rw_inode_find_parent(struct cairnfs *fs, struct rw_inode *i);
struct rw_inode *rw_inode_restore(struct cairnfs *fs, uint64_t ino, unsigned depth);
struct rw_inode *rw_inode_of(struct cairnfs *fs, fuse_ino_t ino);
/* rw_restart.c */
struct stale_fh *rw_stale_find(struct cairnfs_rw *rw, uint64_t fh);
struct stale_fh *rw_stale_add(struct cairnfs_rw *rw, uint64_t fh, int fd, struct dirh *d);
void rw_stale_free(struct stale_fh *s);
void rw_forget_restored(struct cairnfs *fs, uint64_t ino, uint64_t n);
int rw_fh_make(struct cairnfs_rw *rw, int fd, int flags, uint64_t *fh);
bool rw_fh_ours(const struct cairnfs_rw *rw, uint64_t fh);
void rw_fh_release(struct cairnfs *fs, uint64_t fh);
int rw_reopen(struct rw_inode *i, int flags);
bool rw_kernel_holds(struct cairnfs_rw *rw, uint64_t nodeid);

/* rw_dir.c */
void rw_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void rw_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi);
void rw_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void rw_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi);
void rw_statfs(fuse_req_t req, fuse_ino_t ino);

/* rw_xattr.c */
void rw_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size);
void rw_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size);
void rw_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value, size_t size,
                 int flags);
void rw_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name);

/* rw_rebase.c */
int rw_rebase(struct cairnfs *fs, const char *value, size_t size);
void rw_drop_wait(struct cairnfs_rw *rw);

/* rw_freeze.c: cairn commit's freeze of the changes (upper: the id of the
 * upper served, else EPERM); the move under it (EBUSY if it ended). */
#define XA_FREEZE XA_PREFIX "freeze."        /* + UPPER, read on the root */
#define XA_THAW XA_PREFIX "thaw."            /* + UPPER, read on the root */
#define XA_REBASE_FROZEN XA_PREFIX "rebase." /* + UPPER.IMAGE, read on the root */
int rw_freeze(fuse_req_t req, struct cairnfs *fs, const char *upper);
int rw_thaw(struct cairnfs *fs, const char *upper);
int rw_rebase_frozen(struct cairnfs *fs, const char *upper, const char *image);

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
  uint64_t ino;      /* a file's nodeid (a rebase moves its fd, as a whandle's) */
  int fd;            /* a file's, or -1 */
  struct dirh *dirh; /* a directory's, or NULL */
  struct stale_fh *next;
};

#endif
