/* SPDX-License-Identifier: Apache-2.0 */
/*
 * layer_unpack.c — a stored layer written out as a kernel overlay's lower
 * directory (cn_layer_unpack): what containerd's applier makes of the
 * layer's tar, made from the store's rows and blobs, no byte fetched. A
 * remote snapshot's files (snapshot.c): the layer containerd would have
 * downloaded, which the store holds already.
 *
 * Invariants:
 *  - every name is made below the directory given: each entry's parent is
 *    opened by openat2 with RESOLVE_BENEATH and no symlink followed, so a
 *    layer's symlink never takes a later entry elsewhere;
 *  - a directory the layer has no entry of, above one it has, is made
 *    0755 and root's, as containerd's applier makes it;
 *  - the overlayfs encoding, as containerd's applier writes it: a whiteout
 *    (.wh.NAME) is the character device 0/0 NAME, an opaque directory's
 *    marker (.wh..wh..opq) its trusted.overlay.opaque "y";
 *  - a file whose content a lazy pull has not fetched (a pending blob)
 *    stops the walk with -EAGAIN: the directory is then the caller's to
 *    remove, nothing of it is half a file the caller would keep.
 */
#include "libcairn_layer.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "cleanup.h"

struct dir_time {
  char *path;
  struct timespec t[2];
};

struct unpacker {
  cairn_store *st;
  int root;
  struct dir_time *dirs; /* set last, deepest first: their entries change them */
  size_t n_dirs, cap_dirs;
  char buf[1 << 16];
};

static int fail_at(struct unpacker *u, int err, const char *path) {
  return cairn_fail(u->st, -err, "%s: %s", *path ? path : "/", strerror(err));
}

static long beneath(int dirfd, const char *path) {
  struct open_how how = {.flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
                         .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
                                    RESOLVE_NO_XDEV};
  return syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
}

/* dir (below u->root) with the directories it lacks made, 0755 and
 * root's, as containerd's applier makes a layer's missing parents. */
static int make_parents(struct unpacker *u, char *dir) {
  int fd = fcntl(u->root, F_DUPFD_CLOEXEC, 3);
  if (fd < 0) return fail_at(u, errno, dir);
  for (char *c = dir, *next; c; c = next) {
    if ((next = strchr(c, '/'))) *next++ = '\0';
    if (mkdirat(fd, c, 0755) < 0 && errno != EEXIST) {
      int e = errno;
      close(fd);
      return fail_at(u, e, dir);
    }
    long sub = beneath(fd, c);
    int e = errno;
    close(fd);
    if (next) next[-1] = '/';
    if (sub < 0) return fail_at(u, e, dir);
    fd = (int)sub;
  }
  return fd;
}

/* The directory that holds path (below u->root) as an O_PATH fd, and its
 * last component in *base. */
static int open_parent(struct unpacker *u, const char *path, const char **base) {
  const char *slash = strrchr(path, '/');
  *base = slash ? slash + 1 : path;
  if (!slash) {
    int fd = fcntl(u->root, F_DUPFD_CLOEXEC, 3);
    return fd < 0 ? fail_at(u, errno, path) : fd;
  }
  char dir[PATH_MAX];
  if ((size_t)(slash - path) >= sizeof(dir)) return fail_at(u, ENAMETOOLONG, path);
  memcpy(dir, path, (size_t)(slash - path));
  dir[slash - path] = '\0';
  long fd = beneath(u->root, dir);
  if (fd < 0 && errno == ENOENT) return make_parents(u, dir);
  return fd < 0 ? fail_at(u, errno, dir) : (int)fd;
}

/* Owner, xattrs, mode and times of the name base in pfd, as e gives them
 * (a symlink: owner, xattrs and times). */
static int attrs(struct unpacker *u, int pfd, const char *base, const cairn_entry *e, bool mode) {
  if (fchownat(pfd, base, e->uid, e->gid, AT_SYMLINK_NOFOLLOW) < 0)
    return fail_at(u, errno, e->path);
  char p[64 + NAME_MAX];
  snprintf(p, sizeof(p), "/proc/self/fd/%d/%s", pfd, base);
  for (size_t i = 0; i < e->n_xattrs; i++)
    if (lsetxattr(p, e->xattrs[i].name, e->xattrs[i].value, e->xattrs[i].len, 0) < 0)
      return cairn_fail(u->st, -errno, "%s: xattr %s: %s", e->path, e->xattrs[i].name,
                        strerror(errno));
  if (mode && fchmodat(pfd, base, e->mode & 07777, 0) < 0) return fail_at(u, errno, e->path);
  struct timespec t[2] = {{e->mtime_sec, (long)e->mtime_nsec}, {e->mtime_sec, (long)e->mtime_nsec}};
  if (utimensat(pfd, base, t, AT_SYMLINK_NOFOLLOW) < 0) return fail_at(u, errno, e->path);
  return 0;
}

static int copy_blob(struct unpacker *u, const cairn_entry *e, int out) {
  cairn_autoclose int in = cairn_blob_open(u->st, e->blob);
  if (in < 0) return cairn_fail(u->st, in, "%s: blob %s: %s", e->path, e->blob, strerror(-in));
  uint64_t left = e->size;
  while (left > 0) {
    ssize_t n = copy_file_range(in, NULL, out, NULL, left, 0);
    if (n < 0 && (errno == EXDEV || errno == ENOSYS || errno == EOPNOTSUPP || errno == EINVAL)) {
      n = read(in, u->buf, left < sizeof(u->buf) ? (size_t)left : sizeof(u->buf));
      if (n > 0 && write(out, u->buf, (size_t)n) != n) {
        if (errno == 0) errno = EIO;
        return fail_at(u, errno, e->path);
      }
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail_at(u, errno, e->path);
    if (n == 0)
      return cairn_fail(u->st, -EIO, "%s: blob %s: shorter than the file", e->path, e->blob);
    left -= (uint64_t)n;
  }
  return 0;
}

static int regular(struct unpacker *u, int pfd, const char *base, const cairn_entry *e) {
  /* a pending file's blob is "sha256:HEX" (cn_layer_foreach), a blob's name never */
  if (e->size && strncmp(e->blob, "sha256:", 7) == 0)
    return cairn_fail(u->st, -EAGAIN, "%s: not fetched yet", e->path);
  unlinkat(pfd, base, 0); /* a later entry of a name replaces it */
  cairn_autoclose int fd =
      openat(pfd, base, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return fail_at(u, errno, e->path);
  int r = e->size ? copy_blob(u, e, fd) : 0;
  return r < 0 ? r : attrs(u, pfd, base, e, true);
}

static int unpack_entry(const cairn_entry *e, void *arg) {
  struct unpacker *u = arg;
  const char *base;
  cairn_autoclose int pfd = open_parent(u, e->path, &base);
  if (pfd < 0) return pfd;
  switch (e->type) {
  case CAIRN_REG: return regular(u, pfd, base, e);
  case CAIRN_DIR: {
    const char *name = *base ? base : ".";
    if (*base && mkdirat(pfd, base, 0700) < 0 && errno != EEXIST) return fail_at(u, errno, e->path);
    int r = attrs(u, pfd, name, e, true);
    if (r < 0) return r;
    struct dir_time *g = cn_array_grow(u->dirs, u->n_dirs + 1, &u->cap_dirs, sizeof(*g));
    if (!g) return cairn_fail(u->st, -ENOMEM, "out of memory");
    u->dirs = g;
    if (!(g[u->n_dirs].path = strdup(e->path))) return cairn_fail(u->st, -ENOMEM, "out of memory");
    g[u->n_dirs].t[0] = g[u->n_dirs].t[1] = (struct timespec){e->mtime_sec, (long)e->mtime_nsec};
    u->n_dirs++;
    return 0;
  }
  case CAIRN_SYMLINK:
    unlinkat(pfd, base, 0);
    if (symlinkat(e->target, pfd, base) < 0) return fail_at(u, errno, e->path);
    return attrs(u, pfd, base, e, false);
  case CAIRN_HARDLINK: {
    const char *tbase;
    cairn_autoclose int tfd = open_parent(u, e->target, &tbase);
    if (tfd < 0) return tfd;
    unlinkat(pfd, base, 0);
    return linkat(tfd, tbase, pfd, base, 0) < 0 ? fail_at(u, errno, e->path) : 0;
  }
  case CAIRN_CHR:
  case CAIRN_BLK:
  case CAIRN_FIFO: {
    mode_t t = e->type == CAIRN_CHR ? S_IFCHR : e->type == CAIRN_BLK ? S_IFBLK : S_IFIFO;
    unlinkat(pfd, base, 0);
    if (mknodat(pfd, base, t | 0600, (dev_t)e->rdev) < 0) return fail_at(u, errno, e->path);
    return attrs(u, pfd, base, e, true);
  }
  case CAIRN_WHITEOUT: /* dir/.wh.NAME: NAME, the device 0/0 */
    if (strncmp(base, ".wh.", 4) != 0 || !base[4]) return 0;
    if (mknodat(pfd, base + 4, S_IFCHR, makedev(0, 0)) < 0 && errno != EEXIST)
      return fail_at(u, errno, e->path);
    return 0;
  case CAIRN_OPAQUE: { /* dir/.wh..wh..opq: dir is opaque */
    char p[64];
    snprintf(p, sizeof(p), "/proc/self/fd/%d", pfd);
    if (setxattr(p, "trusted.overlay.opaque", "y", 1, 0) < 0) return fail_at(u, errno, e->path);
    return 0;
  }
  case CAIRN_SOCK: /* a layer holds none (as containerd's applier) */ return 0;
  }
  return 0;
}

int cn_layer_unpack(cairn_store *st, const char *diff_id, int dirfd) {
  struct unpacker *u = calloc(1, sizeof(*u));
  if (!u) return cairn_fail(st, -ENOMEM, "out of memory");
  u->st = st;
  u->root = dirfd;
  int r = cn_layer_foreach(st, diff_id, unpack_entry, u);
  for (size_t i = u->n_dirs; i-- > 0;) {
    const char *base;
    int pfd = r < 0 ? -1 : open_parent(u, u->dirs[i].path, &base);
    if (r == 0 && pfd < 0) r = pfd;
    if (r == 0 && utimensat(pfd, *base ? base : ".", u->dirs[i].t, AT_SYMLINK_NOFOLLOW) < 0)
      r = fail_at(u, errno, u->dirs[i].path);
    if (pfd >= 0) close(pfd);
    free(u->dirs[i].path);
  }
  free(u->dirs);
  free(u);
  return r;
}
