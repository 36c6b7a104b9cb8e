/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ops.c — cairnfs's FUSE low-level operations over the merged tree, which
 * is the image's index file mapped shared (include/cairn.h: every mount of
 * the image reads the same pages; nothing is allocated per entry).
 *
 * FUSE inode numbers are the tree's inode numbers (root = 1 = FUSE_ROOT_ID),
 * so every request is an array index and a binary search at most: no request
 * touches SQLite or walks layers. The tree never changes and never frees a
 * node while mounted, so lookup counts need no bookkeeping (forget is a
 * no-op). Images are immutable: entries, attributes, negative lookups,
 * directory listings and pages are cached by the kernel for a long time.
 * The kernel is told it need not open files or directories at all
 * (NO_OPEN / NO_OPENDIR: open answers ENOSYS once, then the kernel keeps
 * pages and directory listings cached with no round trip per open). So a
 * read opens the blob itself (each thread keeps its last one open): its
 * data goes to the kernel as an fd-backed buffer, which libfuse splices to
 * /dev/fuse without copying it through this process.
 * Every handler replies exactly once.
 */
#include "cairnfs.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

/* Set by the session loop (conn.c) for each request, read by the writable
 * mount's handlers (rw_*.c): here, below both (cairnfs.h). */
__thread bool cairnfs_resent;

/* The image never changes while it is mounted. */
#define CACHE_TIMEOUT (365.0 * 24 * 3600)

static struct cairnfs *fs_of(fuse_req_t req) { return fuse_req_userdata(req); }

void cairnfs_node_stat(const cairn_node *n, uint64_t ino, struct stat *st) {
  memset(st, 0, sizeof(*st));
  st->st_ino = ino;
  st->st_mode = n->mode;
  st->st_nlink = n->nlink;
  st->st_uid = n->uid;
  st->st_gid = n->gid;
  st->st_rdev = n->rdev;
  st->st_size = (off_t)n->size;
  st->st_blksize = 4096;
  st->st_blocks = (blkcnt_t)((n->size + 511) / 512);
  st->st_mtim.tv_sec = n->mtime_sec;
  st->st_mtim.tv_nsec = n->mtime_nsec;
  st->st_atim = st->st_mtim;
  st->st_ctim = st->st_mtim;
}

/* Files this large report the blocks their blob takes in the store (a
 * sparse file's, holes not counted: du, cp --sparse); smaller ones, their
 * size's (a stat of the blob for each would cost every lookup). */
#define BLOCKS_STAT_MIN (64 * 1024)

void cairnfs_node_blocks(struct cairnfs *fs, const cairn_node *n, struct stat *st) {
  if (!S_ISREG(n->mode) || !n->blob || n->size < BLOCKS_STAT_MIN) return;
  if (cairn_blob_is_pending(cairn_tree_str(fs->tree, n->blob))) return; /* not here yet */
  /* cairn_blob_open, as the one store call safe from several threads */
  cairn_autoclose int fd = cairn_blob_open(fs->st, cairn_tree_str(fs->tree, n->blob));
  struct stat sb;
  if (fd >= 0 && fstat(fd, &sb) == 0 && (uint64_t)sb.st_size == n->size)
    st->st_blocks = sb.st_blocks;
}

static void entry_fill(struct cairnfs *fs, const cairn_node *n, uint64_t ino,
                       struct fuse_entry_param *e) {
  memset(e, 0, sizeof(*e));
  e->ino = ino;
  e->generation = 1;
  e->attr_timeout = CACHE_TIMEOUT;
  e->entry_timeout = CACHE_TIMEOUT;
  cairnfs_node_stat(n, ino, &e->attr);
  cairnfs_node_blocks(fs, n, &e->attr);
}

static void cfs_init(void *userdata, struct fuse_conn_info *conn) {
  struct cairnfs *fs = userdata;
  unsigned want = FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE | FUSE_CAP_CACHE_SYMLINKS |
                  FUSE_CAP_READDIRPLUS | FUSE_CAP_PARALLEL_DIROPS | FUSE_CAP_ASYNC_READ |
                  FUSE_CAP_NO_OPENDIR_SUPPORT;
  /* Without passthrough a file needs no open (zero-message opens); with
   * it, the open's reply is what hands the kernel the blob. */
  if (!fs->passthrough) want |= FUSE_CAP_NO_OPEN_SUPPORT;
  conn->want |= want & conn->capable;
  conn->want &= ~(FUSE_CAP_SPLICE_READ | FUSE_CAP_WRITEBACK_CACHE | FUSE_CAP_AUTO_INVAL_DATA);
  fs->no_open = conn->want & FUSE_CAP_NO_OPEN_SUPPORT;
  fs->no_opendir = conn->want & FUSE_CAP_NO_OPENDIR_SUPPORT;
}

static void cfs_lookup(fuse_req_t req, fuse_ino_t parent, const char *name) {
  const cairn_tree *t = fs_of(req)->tree;
  const cairn_node *dir = cairn_tree_node(t, parent);
  if (!dir) {
    fuse_reply_err(req, ESTALE);
    return;
  }
  if (!S_ISDIR(dir->mode)) {
    fuse_reply_err(req, ENOTDIR);
    return;
  }
  struct fuse_entry_param e;
  const cairn_dirent *de = cairn_tree_lookup(t, dir, name);
  if (!de) { /* ino 0: the kernel caches the miss for entry_timeout */
    memset(&e, 0, sizeof(e));
    e.entry_timeout = CACHE_TIMEOUT;
    fuse_reply_entry(req, &e);
    return;
  }
  const cairn_node *n = cairn_tree_node(t, de->ino);
  if (!n) { /* a corrupt index (cairn_tree_open checks each node) */
    fuse_reply_err(req, EIO);
    return;
  }
  entry_fill(fs_of(req), n, de->ino, &e);
  fuse_reply_entry(req, &e);
}

static void cfs_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) {
  (void)ino;
  (void)nlookup;
  fuse_reply_none(req);
}

static void cfs_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *f) {
  (void)count;
  (void)f;
  fuse_reply_none(req);
}

static void cfs_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
  (void)fi;
  struct cairnfs *fs = fs_of(req);
  const cairn_node *n = cairn_tree_node(fs->tree, ino);
  if (!n) {
    fuse_reply_err(req, ESTALE);
    return;
  }
  struct stat st;
  cairnfs_node_stat(n, ino, &st);
  cairnfs_node_blocks(fs, n, &st);
  fuse_reply_attr(req, &st, CACHE_TIMEOUT);
}

static void cfs_readlink(fuse_req_t req, fuse_ino_t ino) {
  const cairn_tree *t = fs_of(req)->tree;
  const cairn_node *n = cairn_tree_node(t, ino);
  if (!n || !S_ISLNK(n->mode) || !n->target)
    fuse_reply_err(req, n ? EINVAL : ESTALE);
  else
    fuse_reply_readlink(req, cairn_tree_str(t, n->target));
}

/* Without NO_OPEN support in the kernel, opens are answered (no state is
 * kept per open: reads open the blob); with it, ENOSYS stops them. */
static void cfs_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
  struct cairnfs *fs = fs_of(req);
  const cairn_node *n = cairn_tree_node(fs->tree, ino);
  if (!n) {
    fuse_reply_err(req, ESTALE);
  } else if (S_ISDIR(n->mode)) {
    fuse_reply_err(req, EISDIR);
  } else if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) {
    fuse_reply_err(req, EROFS);
  } else if (fs->no_open) {
    fuse_reply_err(req, ENOSYS);
  } else {
    fi->noflush = 1;
    bool passthrough = false;
    if (fs->backing) {
      /* Registered from a blob fd of its own (the kernel keeps the file),
       * if it has the size the index says; else read the old way (EIO). */
      const char *name = NULL;
      cairn_autoclose int fd =
          cairnfs_blob_name(fs, n, &name) == 0 && name ? cairn_blob_open(fs->st, name) : -1;
      struct stat sb;
      bool good = fd >= 0 && fstat(fd, &sb) == 0 && (uint64_t)sb.st_size == n->size;
      passthrough = cairnfs_passthrough_open(fs, ino, good ? fd : -1);
    }
    fi->keep_cache = !passthrough; /* the backing file's page cache is the cache */
    fuse_reply_open(req, fi);
  }
}

/* Each worker thread keeps the blob it read last open: a sequential read
 * arrives as many requests for one file, mostly on the same thread. Blobs
 * never change, so a kept fd is never stale; it is closed when the thread
 * moves to another blob or exits. */
struct last_blob {
  const char *blob; /* the tree's string: compared by address */
  int fd;
};

static pthread_key_t last_blob_key;
static pthread_once_t last_blob_once = PTHREAD_ONCE_INIT;

static void last_blob_free(void *p) {
  struct last_blob *lb = p;
  close(lb->fd);
  free(lb);
}

static void last_blob_key_make(void) { pthread_key_create(&last_blob_key, last_blob_free); }

/* An fd on the blob, owned by the calling thread's cache: do not close.
 * A blob that is not a regular file of the node's size is -EIO (a short
 * one would read as a silently truncated file). */
static int blob_fd(struct cairnfs *fs, const char *blob, uint64_t size) {
  pthread_once(&last_blob_once, last_blob_key_make);
  struct last_blob *lb = pthread_getspecific(last_blob_key);
  if (lb && lb->blob == blob) return lb->fd;
  cairn_autoclose int fd = cairn_blob_open(fs->st, blob);
  if (fd < 0) return fd;
  struct stat sb;
  if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode) || (uint64_t)sb.st_size != size) return -EIO;
  if (!lb) {
    lb = malloc(sizeof(*lb));
    if (!lb || pthread_setspecific(last_blob_key, lb) != 0) {
      free(lb);
      return -ENOMEM;
    }
  } else {
    close(lb->fd);
  }
  lb->blob = blob;
  lb->fd = fd;
  fd = -1; /* the cache owns it now */
  return lb->fd;
}

/* The kernel reads ahead on a FUSE mount by the mount's own bdi: 128 KiB,
 * which INIT can lower but not raise, so a sequential read reached the
 * daemon as 128 KiB requests. sysfs raises it (root only; otherwise the
 * default stays), once INIT is done (its reply would lower it again):
 * right after the first server's reply (conn.c), before anything is
 * opened, as a file keeps the readahead it was opened with (a fresh
 * mount's first big read, cold: 410 ms against 640 raised at its first
 * read); else (a resumed server) the first read. 512 KiB requests still
 * fit libfuse's splice pipe (1 MiB, the default pipe-max-size, holds
 * 512 KiB and the header); 1 MiB
 * ones would not, and libfuse would copy them through a buffer instead. */
#define READAHEAD_KB "512"

void cairnfs_readahead_raise(struct cairnfs *fs) {
  if (__atomic_load_n(&fs->readahead_raised, __ATOMIC_RELAXED) ||
      __atomic_exchange_n(&fs->readahead_raised, true, __ATOMIC_RELAXED))
    return;
  char path[64];
  snprintf(path, sizeof(path), "/sys/class/bdi/%s/read_ahead_kb", fs->dev);
  cairn_autoclose int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd >= 0 && write(fd, READAHEAD_KB, strlen(READAHEAD_KB)) < 0) {
    /* Best effort: the default readahead stays. */
  }
}

static void cfs_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                     struct fuse_file_info *fi) {
  (void)fi;
  struct cairnfs *fs = fs_of(req);
  cairnfs_readahead_raise(fs);
  cairnfs_read_lower(req, fs, cairn_tree_node(fs->tree, ino), size, off);
}

void cairnfs_read_lower(fuse_req_t req, struct cairnfs *fs, const cairn_node *n, size_t size,
                        off_t off) {
  if (!n || !n->blob || off < 0 || (uint64_t)off >= n->size) {
    fuse_reply_buf(req, NULL, 0);
    return;
  }
  if (fs->access) cairnfs_access_note(fs, n);
  if ((uint64_t)off + size > n->size) size = (size_t)(n->size - (uint64_t)off);
  if (cairnfs_read_park(req, fs, n, off, size)) return; /* answered once fetched */
  const char *name;
  int fd = cairnfs_blob_name(fs, n, &name);
  if (fd == 0) fd = blob_fd(fs, name, n->size);
  if (fd < 0) {
    fuse_reply_err(req, fd == -ENOMEM ? ENOMEM : EIO);
    return;
  }
  cairnfs_reply_fd(req, fd, off, size);
}

void cairnfs_lseek_lower(fuse_req_t req, struct cairnfs *fs, const cairn_node *n, off_t off,
                         int whence) {
  if (whence != SEEK_DATA && whence != SEEK_HOLE) {
    fuse_reply_err(req, EINVAL);
    return;
  }
  if (!n || off < 0 || (uint64_t)off >= n->size) {
    fuse_reply_err(req, ENXIO);
    return;
  }
  const char *name = NULL;
  int fd = n->blob ? cairnfs_blob_name(fs, n, &name) : -EIO;
  if (fd == 0) fd = blob_fd(fs, name, n->size);
  if (fd < 0) {
    fuse_reply_err(req, fd == -ENOMEM ? ENOMEM : EIO);
    return;
  }
  /* The thread's own fd (blob_fd): its offset is no one else's. */
  off_t r = lseek(fd, off, whence);
  if (r < 0)
    fuse_reply_err(req, errno);
  else
    fuse_reply_lseek(req, r);
}

static void cfs_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence,
                      struct fuse_file_info *fi) {
  (void)fi;
  struct cairnfs *fs = fs_of(req);
  cairnfs_lseek_lower(req, fs, cairn_tree_node(fs->tree, ino), off, whence);
}

static void cfs_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
  (void)fi;
  cairnfs_passthrough_release(fs_of(req), ino);
  fuse_reply_err(req, 0);
}

static void cfs_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
  struct cairnfs *fs = fs_of(req);
  const cairn_node *n = cairn_tree_node(fs->tree, ino);
  if (!n || !S_ISDIR(n->mode)) {
    fuse_reply_err(req, n ? ENOTDIR : ESTALE);
  } else if (fs->no_opendir) {
    fuse_reply_err(req, ENOSYS);
  } else {
    fi->cache_readdir = 1;
    fi->keep_cache = 1;
    fuse_reply_open(req, fi);
  }
}

/* Offsets: 0 and 1 are "." and "..", 2 + i is the directory's i-th entry;
 * an entry's d_off is the offset of the one after it. */
static void readdir_common(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, bool plus) {
  const cairn_tree *t = fs_of(req)->tree;
  const cairn_node *dir = cairn_tree_node(t, ino);
  if (!dir || !S_ISDIR(dir->mode)) {
    fuse_reply_err(req, dir ? ENOTDIR : ESTALE);
    return;
  }
  char *buf = malloc(size);
  if (!buf) {
    fuse_reply_err(req, ENOMEM);
    return;
  }
  size_t used = 0;
  const cairn_dirent *children = cairn_tree_children(t, dir);
  for (off_t i = off < 0 ? 0 : off; (size_t)i < dir->n_children + 2; i++) {
    const char *name;
    uint64_t child;
    if (i < 2) {
      name = i == 0 ? "." : "..";
      child = i == 0 ? ino : dir->parent;
    } else {
      name = cairn_tree_str(t, children[i - 2].name);
      child = children[i - 2].ino;
    }
    const cairn_node *n = cairn_tree_node(t, child);
    if (!n) { /* a corrupt index (cairn_tree_open checks each node) */
      free(buf);
      fuse_reply_err(req, EIO);
      return;
    }
    size_t len;
    if (plus) {
      struct fuse_entry_param e;
      entry_fill(fs_of(req), n, child, &e);
      len = fuse_add_direntry_plus(req, buf + used, size - used, name, &e, i + 1);
    } else {
      struct stat st = {.st_ino = child, .st_mode = n->mode};
      len = fuse_add_direntry(req, buf + used, size - used, name, &st, i + 1);
    }
    if (len > size - used) break;
    used += len;
  }
  fuse_reply_buf(req, buf, used);
  free(buf);
}

static void cfs_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                        struct fuse_file_info *fi) {
  (void)fi;
  readdir_common(req, ino, size, off, false);
}

static void cfs_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                            struct fuse_file_info *fi) {
  (void)fi;
  readdir_common(req, ino, size, off, true);
}

static void cfs_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
  (void)ino;
  (void)fi;
  fuse_reply_err(req, 0);
}

static void cfs_statfs(fuse_req_t req, fuse_ino_t ino) {
  (void)ino;
  struct cairnfs *fs = fs_of(req);
  struct statvfs sv = {
      .f_bsize = 4096,
      .f_frsize = 4096,
      .f_blocks = cairn_tree_blocks(fs->tree),
      .f_files = cairn_tree_count(fs->tree),
      .f_namemax = 255,
      .f_flag = ST_RDONLY,
  };
  fuse_reply_statfs(req, &sv);
}

/* CAIRN_XATTR_SUPERVISOR on the root: the pid of the mount's
 * supervisor (our parent), in decimal, so that cairn umount finds whose
 * pins to wait for without the store's database. Root only (trusted.*). */
static bool reply_supervisor(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size) {
  if (ino != FUSE_ROOT_ID || strcmp(name, CAIRN_XATTR_SUPERVISOR) != 0) return false;
  char pid[16];
  size_t len = (size_t)snprintf(pid, sizeof(pid), "%d", (int)getppid());
  if (size == 0)
    fuse_reply_xattr(req, len);
  else if (size < len)
    fuse_reply_err(req, ERANGE);
  else
    fuse_reply_buf(req, pid, len);
  return true;
}

static void cfs_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size) {
  const cairn_tree *t = fs_of(req)->tree;
  const cairn_node *n = cairn_tree_node(t, ino);
  if (!n)
    fuse_reply_err(req, ESTALE);
  else if (!reply_supervisor(req, ino, name, size))
    cairnfs_reply_getxattr(req, t, n, name, size);
}

static void cfs_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
  const cairn_tree *t = fs_of(req)->tree;
  const cairn_node *n = cairn_tree_node(t, ino);
  if (!n)
    fuse_reply_err(req, ESTALE);
  else
    cairnfs_reply_listxattr(req, t, n, size);
}

const struct fuse_lowlevel_ops cairnfs_ops = {
    .init = cfs_init,
    .lookup = cfs_lookup,
    .forget = cfs_forget,
    .forget_multi = cfs_forget_multi,
    .getattr = cfs_getattr,
    .readlink = cfs_readlink,
    .open = cfs_open,
    .read = cfs_read,
    .lseek = cfs_lseek,
    .release = cfs_release,
    .opendir = cfs_opendir,
    .readdir = cfs_readdir,
    .readdirplus = cfs_readdirplus,
    .releasedir = cfs_releasedir,
    .statfs = cfs_statfs,
    .getxattr = cfs_getxattr,
    .listxattr = cfs_listxattr,
};
