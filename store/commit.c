/* SPDX-License-Identifier: Apache-2.0 */
/*
 * commit.c — cairn commit: the upper layer of a writable mount (upper.c,
 * laid out by fs/rw.h) turned into an OCI layer and a new image.
 *
 * The layer is a pax tar written by a thread of its own into a pipe and
 * stored as it comes by the one layer import (cn_layer_ingest: dedup of
 * blobs, diff_id from the bytes; ingest_layer). It is the view the mount shows (the upper's
 * root/ over the base tree, merged by fs/rw.h's rules: by origin, not
 * by path) against the base, in the OCI rules:
 * - every upper entry as it is (directories, files, symlinks, devices,
 *   fifos, with mode, owner, mtime, xattrs but trusted.cairn.*), upper
 *   hardlinks as tar hardlinks;
 * - a whiteout (character device 0/0) of a base name as DIR/.wh.NAME;
 * - a directory at a path where the base has a directory other than its
 *   origin (made anew, or renamed from elsewhere) gets DIR/.wh..wh..opq;
 *   below it (and below a directory the base lacks) everything the view
 *   shows is written, its origin's lower children in full;
 * - a lower file with several names: its copy-up (work/index/INO), or the
 *   tree's node when one of its names is written in full, is written at
 *   every name the view shows, one tar hardlink group.
 * The new image is the base image's layers plus this one; its config is
 * the base's with rootfs.diff_ids extended and a history entry added,
 * after placeholders for base layers the history has no entry for (a
 * config without history, or too short a one), one entry per layer.
 * The image's layers and blobs are never changed; the upper is only read
 * (a write racing with the commit may or may not be in the layer).
 *
 * What a layer cannot hold is said, naming the file: a socket is left out
 * (as podman's commit does; a whiteout if it hides a base entry), said in
 * the report; sparse files whose holes come to more than a layer holds
 * fail the commit before anything is written, naming the file that
 * crossed the bound and its owner.
 */
#include "libcairn_layer.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <pwd.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>

#define XA_PREFIX "trusted.cairn."
#define XA_ORIGIN XA_PREFIX "origin"
/* kernel overlayfs's own (a containerd snapshot's upper): never a file's */
#define XA_OVERLAY "trusted.overlay."
#define XA_OPAQUE XA_OVERLAY "opaque"

struct hl {
  dev_t dev;
  ino_t ino;
  char *path;
};

#define F_INDEXED 1 /* by tree inode: copied up to work/index */
#define F_GROUP 2   /* every name the view shows is written */

struct committer {
  cairn_store *st;
  const cairn_tree *tree;
  struct archive *out;
  int root_fd, index_fd;
  bool emit;           /* the second pass: writing */
  atomic_bool stop;    /* the reader failed: the writer ends (-ECANCELED) */
  bool any_group;      /* some flags[] has F_GROUP */
  cairn_report *rep;   /* what was left out (sockets); may be NULL */
  uint64_t holes;      /* the upper files' holes so far (planning pass) */
  uint8_t *flags;      /* by tree inode: F_* */
  char path[PATH_MAX]; /* the view's path being walked */
  char **lower_first;  /* by tree inode: where a lower file was written */
  struct hl *hls;      /* upper files with several names: first path */
  size_t n_hls, cap_hls;
  char buf[1 << 17];
};

static int out_fail(struct committer *c, const char *path) {
  return cairn_fail(c->st, -EIO, "writing %s: %s", path, archive_error_string(c->out));
}

static uint32_t origin_of(const char *path) {
  char buf[16];
  ssize_t n = lgetxattr(path, XA_ORIGIN, buf, sizeof(buf) - 1);
  if (n <= 0) return 0;
  buf[n] = '\0';
  return (uint32_t)strtoul(buf, NULL, 10);
}

static void proc_path(char *buf, size_t len, int dirfd, const char *name) {
  snprintf(buf, len, "/proc/self/fd/%d/%s", dirfd, name);
}

/* An empty regular file entry (whiteouts, opaque markers). */
static int write_marker(struct committer *c, const char *path) {
  struct archive_entry *e = archive_entry_new();
  if (!e) return cairn_fail(c->st, -ENOMEM, "out of memory");
  archive_entry_set_pathname(e, path);
  archive_entry_set_mode(e, S_IFREG | 0644);
  archive_entry_set_size(e, 0);
  int r = archive_write_header(c->out, e) == ARCHIVE_OK ? 0 : out_fail(c, path);
  archive_entry_free(e);
  return r;
}

/* The entry's size bytes from fd, whose holes cn_tar_sparse_map gave the
 * entry before its header: a hole is written as zeros, which the writer
 * drops (the tar holds the data only, the blob keeps the hole). Bytes the
 * file no longer has (a write racing with the commit shrank it) are
 * zeros too. */
static int copy_fd(struct committer *c, int fd, uint64_t size, const char *path) {
  static const char zeros[1 << 17];
  uint64_t pos = 0;
  if (atomic_load(&c->stop)) return -ECANCELED;
  while (pos < size) {
    uint64_t d, h;
    cn_next_extent(fd, pos, size, &d, &h);
    if (h <= pos) h = size;
    bool eof = false;
    while (pos < h) {
      const char *p = zeros;
      size_t k = h - pos < sizeof(c->buf) ? (size_t)(h - pos) : sizeof(c->buf);
      if (pos >= d && !eof) {
        ssize_t got = pread(fd, c->buf, k, (off_t)pos);
        if (got < 0) return cairn_fail(c->st, -errno, "%s: %s", path, strerror(errno));
        if (got == 0) eof = true;
        if (got > 0) p = c->buf, k = (size_t)got;
      } else if (pos < d && d - pos < k) {
        k = (size_t)(d - pos);
      }
      if (archive_write_data(c->out, p, k) != (la_ssize_t)k) return out_fail(c, path);
      pos += k;
    }
  }
  return 0;
}

/* The upper entry dirfd/name (stat st) at tar path. */
static int write_upper(struct committer *c, int dirfd, const char *name, const struct stat *st,
                       const char *path) {
  char pp[PATH_MAX];
  proc_path(pp, sizeof(pp), dirfd, name);
  struct archive_entry *e = archive_entry_new();
  if (!e) return cairn_fail(c->st, -ENOMEM, "out of memory");
  archive_entry_set_pathname(e, path);
  archive_entry_set_mode(e, st->st_mode);
  archive_entry_set_uid(e, st->st_uid);
  archive_entry_set_gid(e, st->st_gid);
  archive_entry_set_mtime(e, st->st_mtim.tv_sec, st->st_mtim.tv_nsec);
  char names[4096];
  ssize_t len = llistxattr(pp, names, sizeof(names));
  for (ssize_t k = 0; k < len; k += (ssize_t)strlen(names + k) + 1) {
    if (strncmp(names + k, XA_PREFIX, strlen(XA_PREFIX)) == 0) continue;
    if (strncmp(names + k, XA_OVERLAY, strlen(XA_OVERLAY)) == 0) continue;
    ssize_t vl = lgetxattr(pp, names + k, c->buf, sizeof(c->buf));
    if (vl >= 0) archive_entry_xattr_add_entry(e, names + k, c->buf, (size_t)vl);
  }
  bool data = false;
  const char *first = NULL;
  if (!S_ISDIR(st->st_mode) && st->st_nlink > 1) {
    for (size_t k = 0; k < c->n_hls && !first; k++)
      if (c->hls[k].dev == st->st_dev && c->hls[k].ino == st->st_ino) first = c->hls[k].path;
    if (!first) {
      struct hl *h = cn_array_grow(c->hls, c->n_hls, &c->cap_hls, sizeof(*h));
      char *copy = strdup(path);
      if (!h || !copy) {
        free(copy);
        if (h) c->hls = h;
        archive_entry_free(e);
        return cairn_fail(c->st, -ENOMEM, "out of memory");
      }
      c->hls = h;
      c->hls[c->n_hls++] = (struct hl){st->st_dev, st->st_ino, copy};
    }
  }
  if (first) {
    archive_entry_set_hardlink(e, first);
    archive_entry_set_size(e, 0);
  } else if (S_ISLNK(st->st_mode)) {
    char target[PATH_MAX];
    ssize_t n = readlinkat(dirfd, name, target, sizeof(target) - 1);
    target[n < 0 ? 0 : n] = '\0';
    archive_entry_set_symlink(e, target);
  } else if (S_ISCHR(st->st_mode) || S_ISBLK(st->st_mode)) {
    archive_entry_set_rdevmajor(e, major(st->st_rdev));
    archive_entry_set_rdevminor(e, minor(st->st_rdev));
  } else if (S_ISREG(st->st_mode)) {
    archive_entry_set_size(e, st->st_size);
    data = true;
  }
  cairn_autoclose int fd = data ? openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC) : -1;
  if (data && fd < 0) {
    archive_entry_free(e);
    return cairn_fail(c->st, -errno, "%s: %s", path, strerror(errno));
  }
  if (data) cn_tar_sparse_map(e, fd, (uint64_t)st->st_size);
  int r = archive_write_header(c->out, e) == ARCHIVE_OK ? 0 : out_fail(c, path);
  archive_entry_free(e);
  if (r == 0 && data) r = copy_fd(c, fd, (uint64_t)st->st_size, path);
  return r;
}

/* Tree node ino (not its children) at tar path, as export does; a node
 * with several names is a tar hardlink to the first name written. */
static int write_lower(struct committer *c, uint32_t ino, const char *path) {
  const cairn_node *n = cairn_tree_node(c->tree, ino);
  if (!n) return cairn_fail(c->st, -EIO, "%s: bad node in the image's index", path);
  struct archive_entry *e = archive_entry_new();
  if (!e) return cairn_fail(c->st, -ENOMEM, "out of memory");
  archive_entry_set_pathname(e, path);
  archive_entry_set_mode(e, n->mode);
  archive_entry_set_uid(e, n->uid);
  archive_entry_set_gid(e, n->gid);
  archive_entry_set_mtime(e, n->mtime_sec, n->mtime_nsec);
  for (size_t i = 0; i < n->n_xattrs; i++) {
    cairn_xattr xa = cairn_tree_xattr(c->tree, n, i);
    archive_entry_xattr_add_entry(e, xa.name, xa.value, xa.len);
  }
  bool data = false;
  if (!S_ISDIR(n->mode) && c->lower_first[ino]) {
    archive_entry_set_hardlink(e, c->lower_first[ino]);
    archive_entry_set_size(e, 0);
  } else {
    if (!S_ISDIR(n->mode) && n->nlink > 1 && !(c->lower_first[ino] = strdup(path))) {
      archive_entry_free(e);
      return cairn_fail(c->st, -ENOMEM, "out of memory");
    }
    if (S_ISLNK(n->mode)) archive_entry_set_symlink(e, cairn_tree_str(c->tree, n->target));
    if (S_ISCHR(n->mode) || S_ISBLK(n->mode)) {
      archive_entry_set_rdevmajor(e, major(n->rdev));
      archive_entry_set_rdevminor(e, minor(n->rdev));
    }
    if (S_ISREG(n->mode)) {
      archive_entry_set_size(e, (la_int64_t)n->size);
      data = n->blob != 0;
    }
  }
  cairn_autoclose int fd = data ? cairn_blob_open(c->st, cairn_tree_str(c->tree, n->blob)) : -1;
  if (data && fd < 0) {
    archive_entry_free(e);
    return cairn_fail(c->st, fd, "%s: blob: %s", path, strerror(-fd));
  }
  if (data) cn_tar_sparse_map(e, fd, n->size);
  int r = archive_write_header(c->out, e) == ARCHIVE_OK ? 0 : out_fail(c, path);
  archive_entry_free(e);
  if (r == 0 && data) r = copy_fd(c, fd, n->size, path);
  return r;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* c->path + len extended by "/name" (or "name" at the root); the new
 * length, or -ENAMETOOLONG. */
static int path_push(struct committer *c, size_t len, const char *name) {
  int n = snprintf(c->path + len, sizeof(c->path) - len, "%s%s", len ? "/" : "", name);
  if (n < 0 || (size_t)n >= sizeof(c->path) - len)
    return cairn_fail(c->st, -ENAMETOOLONG, "%.200s/%s: path too long", c->path, name);
  return (int)(len + (size_t)n);
}

/* A lower non-directory in the view at c->path: the copy-up in
 * work/index if it has one (all its names share it), else the tree's. In
 * the planning pass, only noted: a node with several names written in
 * full makes all its names be written (one hardlink group in the layer). */
static int view_lower_file(struct committer *c, uint32_t ino) {
  const cairn_node *n = cairn_tree_node(c->tree, ino);
  if (!n) return cairn_fail(c->st, -EIO, "%s: bad node in the image's index", c->path);
  if (!c->emit) {
    if (n->nlink > 1) c->flags[ino] |= F_GROUP;
    return 0;
  }
  if (!(c->flags[ino] & F_INDEXED)) return write_lower(c, ino, c->path);
  char idx[16];
  snprintf(idx, sizeof(idx), "%" PRIu32, ino);
  struct stat st;
  if (fstatat(c->index_fd, idx, &st, AT_SYMLINK_NOFOLLOW) < 0)
    return cairn_fail(c->st, -errno, "upper work/index/%s: %s", idx, strerror(errno));
  st.st_nlink = 2; /* one identity for all its names in the tar */
  return write_upper(c, c->index_fd, idx, &st, c->path);
}

static int view_dir(struct committer *c, int dirfd, uint32_t origin, size_t len, bool diff);

/* The holes of the upper file dirfd/name (stat st, at c->path), added to
 * c->holes: past what a layer holds, the commit fails here, naming the
 * file and its owner (a user's file no commit can take). */
static int count_holes(struct committer *c, int dirfd, const char *name, const struct stat *st) {
  uint64_t size = (uint64_t)st->st_size;
  if ((uint64_t)st->st_blocks * 512 >= size) return 0; /* no hole */
  cairn_autoclose int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return 0; /* the writing pass says why */
  uint64_t data = 0, pos = 0, d, h;
  while (pos < size) {
    cn_next_extent(fd, pos, size, &d, &h);
    if (d >= size || h <= d) break;
    data += h - d;
    pos = h;
  }
  uint64_t holes = size - data;
  if (holes <= CN_LAYER_HOLES_MAX - c->holes) {
    c->holes += holes;
    return 0;
  }
  char owner[128], pwbuf[1024];
  struct passwd pw, *found = NULL;
  getpwuid_r(st->st_uid, &pw, pwbuf, sizeof(pwbuf), &found);
  if (found)
    snprintf(owner, sizeof(owner), "%s (uid %u)", found->pw_name, (unsigned)st->st_uid);
  else
    snprintf(owner, sizeof(owner), "uid %u", (unsigned)st->st_uid);
  return cairn_fail(c->st, -EBADMSG,
                    "/%s, owned by %s: a sparse file with %llu GiB of holes; with the other "
                    "files' (%llu GiB) more than a layer holds (%llu GiB): nothing committed "
                    "(remove or shrink it in the mount)",
                    c->path, owner, (unsigned long long)(holes >> 30),
                    (unsigned long long)(c->holes >> 30),
                    (unsigned long long)(CN_LAYER_HOLES_MAX >> 30));
}

/* A lower-only entry of the view (tree node ino, not shadowed by the
 * upper) at c->path. In full mode it is written (and, a directory, all
 * below it); in diff mode (its directory is the base's) the base has it
 * already: only names of hardlink groups written elsewhere are. */
static int view_lower(struct committer *c, uint32_t ino, size_t len, bool diff) {
  const cairn_node *n = cairn_tree_node(c->tree, ino);
  if (!n) return cairn_fail(c->st, -EIO, "%s: bad node in the image's index", c->path);
  if (!S_ISDIR(n->mode))
    return !diff || (c->emit && (c->flags[ino] & F_GROUP)) ? view_lower_file(c, ino) : 0;
  if (diff && (!c->emit || !c->any_group)) return 0; /* nothing below can differ */
  int r = !diff && c->emit ? write_lower(c, ino, c->path) : 0;
  return r < 0 ? r : view_dir(c, -1, ino, len, diff);
}

/* The children of the view's directory at c->path (length len): the upper
 * directory dirfd (-1 if none) over the tree directory origin (0 if none)
 * it merges, by fs/rw.h's rules: an upper entry hides the lower one of
 * its name, a whiteout (0/0) hides it and shows nothing. diff: the base
 * image has this same directory (origin) here, so the layer holds what
 * differs (whiteouts for base names the view lacks); else everything the
 * view has here is written (the directory is new or opaque in the layer). */
static int view_dir(struct committer *c, int dirfd, uint32_t origin, size_t len, bool diff) {
  const cairn_node *od = origin ? cairn_tree_node(c->tree, origin) : NULL;
  if (od && !S_ISDIR(od->mode)) od = NULL;
  cn_autostrv struct strv names = {0};
  if (dirfd >= 0) {
    int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd < 0 ? NULL : fdopendir(fd);
    if (!d) {
      if (fd >= 0) close(fd);
      return cairn_fail(c->st, -errno, "upper %s: %s", c->path, strerror(errno));
    }
    struct dirent *de;
    int r = 0;
    while (r == 0 && (de = readdir(d)))
      if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
        r = cn_strv_push(&names, de->d_name);
    closedir(d);
    if (r < 0) return cairn_fail(c->st, r, "out of memory");
    if (names.n) qsort(names.v, names.n, sizeof(char *), cmp_str);
  }
  int r = 0;
  for (size_t k = 0; k < names.n && r == 0; k++) {
    const char *name = names.v[k];
    struct stat st;
    if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) continue;
    int sub_len = path_push(c, len, name);
    if (sub_len < 0) return sub_len;
    const cairn_dirent *bd = diff && od ? cairn_tree_lookup(c->tree, od, name) : NULL;
    if (S_ISCHR(st.st_mode) && st.st_rdev == makedev(0, 0)) {
      /* a whiteout: the base's entry (if any) goes */
      if (bd && c->emit) {
        c->path[len] = '\0';
        cairn_autofree char *wh =
            len ? cn_xasprintf("%s/.wh.%s", c->path, name) : cn_xasprintf(".wh.%s", name);
        r = wh ? write_marker(c, wh) : cairn_fail(c->st, -ENOMEM, "out of memory");
      }
      continue;
    }
    if (S_ISSOCK(st.st_mode)) {
      /* no tar can hold one: left out, as podman's commit does; the
       * base's entry of its name (if any) goes, as in the view */
      if (c->emit && c->rep) cn_report_line(c->rep, "/%s: a socket, not committed", c->path);
      c->path[len] = '\0';
      if (bd && c->emit) {
        cairn_autofree char *wh =
            len ? cn_xasprintf("%s/.wh.%s", c->path, name) : cn_xasprintf(".wh.%s", name);
        r = wh ? write_marker(c, wh) : cairn_fail(c->st, -ENOMEM, "out of memory");
      }
      continue;
    }
    if (!c->emit && S_ISREG(st.st_mode)) r = count_holes(c, dirfd, name, &st);
    if (c->emit) r = write_upper(c, dirfd, name, &st, c->path);
    if (r < 0 || !S_ISDIR(st.st_mode)) continue;
    char pp[PATH_MAX];
    proc_path(pp, sizeof(pp), dirfd, name);
    uint32_t sub_origin = origin_of(pp);
    const cairn_node *bn = bd ? cairn_tree_node(c->tree, bd->ino) : NULL;
    bool base_dir = bn && S_ISDIR(bn->mode);
    bool sub_diff = base_dir && sub_origin == bd->ino;
    if (base_dir && !sub_diff && c->emit) {
      /* the base's directory here is not the one the view merges (a new
       * one, or one renamed here): none of its children stays */
      cairn_autofree char *opq = cn_xasprintf("%s/.wh..wh..opq", c->path);
      r = opq ? write_marker(c, opq) : cairn_fail(c->st, -ENOMEM, "out of memory");
    }
    int sub = openat(dirfd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (r == 0 && sub < 0) r = cairn_fail(c->st, -errno, "upper %s: %s", c->path, strerror(errno));
    if (r == 0) r = view_dir(c, sub, sub_origin, (size_t)sub_len, sub_diff);
    if (sub >= 0) close(sub);
  }
  /* The origin's children no upper entry (or whiteout) shadows. */
  if (r == 0 && od) {
    const cairn_dirent *ch = cairn_tree_children(c->tree, od);
    for (uint32_t i = 0; i < od->n_children && r == 0; i++) {
      const char *name = cairn_tree_str(c->tree, ch[i].name);
      struct stat st;
      if (dirfd >= 0 && fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0) continue;
      int sub_len = path_push(c, len, name);
      r = sub_len < 0 ? sub_len : view_lower(c, ch[i].ino, (size_t)sub_len, diff);
    }
  }
  c->path[len] = '\0';
  return r;
}

/* The layer's first pass over the view (upper root/ over the base tree,
 * against the base): finds the lower files with several names of which
 * one is written in full (under a renamed or opaque directory) and the
 * copied-up ones (work/index), and counts the upper files' holes (a
 * commit past what a layer holds fails here, before anything is
 * written). */
static int plan_layer(struct committer *c, int upper_fd) {
  c->root_fd = openat(upper_fd, "root", O_PATH | O_DIRECTORY | O_CLOEXEC);
  c->index_fd = openat(upper_fd, "work/index", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (c->root_fd < 0) return cairn_fail(c->st, -errno, "upper root: %s", strerror(errno));
  size_t count = cairn_tree_count(c->tree);
  if (c->index_fd >= 0) {
    cairn_autoclosedir DIR *d = cn_opendirat(c->index_fd, ".");
    struct dirent *de;
    while (d && (de = readdir(d))) {
      char *end;
      unsigned long ino = strtoul(de->d_name, &end, 10);
      if (ino && *end == '\0' && ino <= count) c->flags[ino] |= F_INDEXED | F_GROUP;
    }
  }
  c->emit = false;
  c->path[0] = '\0';
  int r = view_dir(c, c->root_fd, 1, 0, true);
  for (size_t k = 1; k <= count && r == 0 && !c->any_group; k++)
    c->any_group = c->flags[k] & F_GROUP;
  return r;
}

/* The layer's tar goes through a pipe, written by a thread of its own
 * (emit_layer) while the store reads it (cn_layer_ingest_written): on two
 * cores, reading the upper and writing the tar overlap with hashing and
 * storing its files, and no copy of the whole layer is written to
 * STORE/tmp and read back. The writer has a store handle of its own (its
 * error is said after the join); the reader asks how it ended once it has
 * read the tar's end: a writer that failed fails the ingest, whatever it
 * had written, so nothing of it is committed. */
struct layer_writer {
  struct committer *c;
  int upper_fd, out_fd;
  pthread_t thread;
  bool joined;
  int r;
};

/* The second pass: the layer's entries as a tar into out_fd, every
 * visible name of the files plan_layer marked among them, so that their
 * names stay one file in the new image. */
static int emit_layer(struct committer *c, int upper_fd, int out_fd) {
  c->emit = true;
  c->out = archive_write_new();
  if (!c->out) return cairn_fail(c->st, -ENOMEM, "out of memory");
  archive_write_set_format_pax(c->out);
  archive_write_set_bytes_in_last_block(c->out, 1);
  int r = archive_write_open_fd(c->out, out_fd) == ARCHIVE_OK ? 0 : out_fail(c, "layer");
  struct stat st;
  if (r == 0 && fstatat(c->root_fd, "", &st, AT_EMPTY_PATH) == 0) {
    /* the root's own attributes: "./" */
    int dfd = openat(upper_fd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
    r = dfd < 0 ? -errno : write_upper(c, dfd, "root", &st, "./");
    if (dfd >= 0) close(dfd);
  }
  if (r == 0) r = view_dir(c, c->root_fd, 1, 0, true);
  if (archive_write_close(c->out) != ARCHIVE_OK && r == 0) r = out_fail(c, "layer");
  archive_write_free(c->out);
  return r;
}

static void *layer_writer_run(void *arg) {
  struct layer_writer *w = arg;
  w->r = emit_layer(w->c, w->upper_fd, w->out_fd);
  close(w->out_fd);
  return NULL;
}

/* cn_layer_ingest_written's question: how the writer ended. */
static int layer_writer_done(void *arg) {
  struct layer_writer *w = arg;
  if (!w->joined) pthread_join(w->thread, NULL);
  w->joined = true;
  return w->r;
}

/* Writes the planned layer (c) through a pipe into the store. */
static int ingest_layer(cairn_store *st, struct committer *c, int upper_fd, cairn_pinset *ps,
                        cairn_id layer_out) {
  cairn_store *wst = NULL;
  int r = cairn_store_open_lazy(cairn_store_dir(st), &wst);
  if (r < 0) return cairn_fail(st, r, "%s: %s", cairn_store_dir(st), strerror(-r));
  int p[2];
  if (pipe2(p, O_CLOEXEC) < 0) {
    r = cairn_fail(st, -errno, "pipe: %s", strerror(errno));
    cairn_store_close(wst);
    return r;
  }
  fcntl(p[1], F_SETPIPE_SZ, 1 << 20); /* fewer switches; the default if refused */
  c->st = wst;
  struct layer_writer w = {.c = c, .upper_fd = upper_fd, .out_fd = p[1]};
  if ((r = -pthread_create(&w.thread, NULL, layer_writer_run, &w)) < 0) {
    close(p[0]);
    close(p[1]);
    c->st = st;
    cairn_store_close(wst);
    return cairn_fail(st, r, "thread: %s", strerror(-r));
  }
  r = cn_layer_ingest_written(st, p[0], layer_writer_done, &w, ps, layer_out);
  if (r < 0 && !w.joined) { /* the writer ends at its next file; the rest goes nowhere */
    atomic_store(&c->stop, true);
    char sink[1 << 16];
    while (read(p[0], sink, sizeof(sink)) > 0) continue;
  }
  layer_writer_done(&w);
  close(p[0]);
  c->st = st;
  if (w.r < 0 && w.r != -ECANCELED) r = cairn_fail(st, w.r, "%s", cairn_errmsg(wst));
  cairn_store_close(wst);
  return r;
}

/* ---- a kernel overlay's upper directory as a layer (cn_dir_layer) ---- */

/* c->path[0..len) + "/" + marker + name, for a whiteout or opaque marker. */
static int write_marker_in(struct committer *c, size_t len, const char *marker, const char *name) {
  char path[PATH_MAX];
  int n =
      snprintf(path, sizeof(path), "%.*s%s%s%s", (int)len, c->path, len ? "/" : "", marker, name);
  if (n < 0 || (size_t)n >= sizeof(path))
    return cairn_fail(c->st, -ENAMETOOLONG, "%.200s/%s: path too long", c->path, name);
  return write_marker(c, path);
}

/* The entries below dirfd (at c->path, len long), by name: a whiteout
 * (character device 0/0) as .wh.NAME, a directory marked opaque with its
 * .wh..wh..opq, everything else as it is. */
static int dir_walk(struct committer *c, int dirfd, size_t len, int depth) {
  if (depth > 512) return cairn_fail(c->st, -ELOOP, "%.200s: too deep", c->path);
  cairn_autoclosedir DIR *d = cn_opendirat(dirfd, ".");
  if (!d) return cairn_fail(c->st, -errno, "%s: %s", len ? c->path : ".", strerror(errno));
  char **names = NULL;
  size_t n = 0, cap = 0;
  int r = 0;
  for (struct dirent *de; (de = readdir(d));) {
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
    char **g = cn_array_grow(names, n + 1, &cap, sizeof(*g));
    if (!g || !(g[n] = strdup(de->d_name))) {
      if (g) names = g;
      r = cairn_fail(c->st, -ENOMEM, "out of memory");
      break;
    }
    names = g;
    n++;
  }
  if (n) qsort(names, n, sizeof(*names), cmp_str);
  for (size_t i = 0; r == 0 && i < n; i++) {
    struct stat sb;
    if (fstatat(dirfd, names[i], &sb, AT_SYMLINK_NOFOLLOW) < 0) {
      if (errno == ENOENT) continue;
      r = cairn_fail(c->st, -errno, "%s: %s", names[i], strerror(errno));
      break;
    }
    if (S_ISCHR(sb.st_mode) && sb.st_rdev == makedev(0, 0)) {
      r = write_marker_in(c, len, ".wh.", names[i]);
      continue;
    }
    int nl = path_push(c, len, names[i]);
    if (nl < 0) {
      r = nl;
      break;
    }
    if (S_ISSOCK(sb.st_mode)) { /* as commit: a layer holds none */
      c->path[len] = '\0';
      continue;
    }
    r = write_upper(c, dirfd, names[i], &sb, c->path);
    if (r == 0 && S_ISDIR(sb.st_mode)) {
      cairn_autoclose int sub =
          openat(dirfd, names[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      char v[4];
      if (sub < 0) {
        r = cairn_fail(c->st, -errno, "%s: %s", c->path, strerror(errno));
      } else {
        if (fgetxattr(sub, XA_OPAQUE, v, sizeof(v)) == 1 && v[0] == 'y')
          r = write_marker_in(c, (size_t)nl, ".wh..wh..opq", "");
        if (r == 0) r = dir_walk(c, sub, (size_t)nl, depth + 1);
      }
    }
    c->path[len] = '\0';
  }
  for (size_t i = 0; i < n; i++) free(names[i]);
  free(names);
  return r;
}

int cn_dir_layer(cairn_store *st, int parent_fd, const char *name, cairn_pinset *ps,
                 cairn_id layer_out) {
  struct committer *c = calloc(1, sizeof(*c));
  if (!c) return cairn_fail(st, -ENOMEM, "out of memory");
  c->st = st;
  c->root_fd = c->index_fd = -1;
  int out_fd = cn_store_tmpfile(st, 0600); /* through STORE/tmp's fd: no symlink followed */
  int r = out_fd < 0 ? out_fd : 0;
  cairn_autoclose int dfd =
      r < 0 ? -1 : openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (r == 0 && dfd < 0) r = cairn_fail(st, -errno, "%s: %s", name, strerror(errno));
  if (r == 0 && !(c->out = archive_write_new())) r = cairn_fail(st, -ENOMEM, "out of memory");
  if (r == 0) {
    archive_write_set_format_pax(c->out);
    archive_write_set_bytes_in_last_block(c->out, 1);
    r = archive_write_open_fd(c->out, out_fd) == ARCHIVE_OK ? 0 : out_fail(c, "layer");
    struct stat sb; /* the root's own attributes: "./" */
    if (r == 0 && fstat(dfd, &sb) < 0) r = cairn_fail(st, -errno, "%s", strerror(errno));
    if (r == 0) r = write_upper(c, parent_fd, name, &sb, "./");
    if (r == 0) r = dir_walk(c, dfd, 0, 0);
    if (archive_write_close(c->out) != ARCHIVE_OK && r == 0) r = out_fail(c, "layer");
    archive_write_free(c->out);
  }
  if (r == 0 && lseek(out_fd, 0, SEEK_SET) < 0) r = cairn_fail(st, -errno, "%s", strerror(errno));
  if (r == 0) r = cn_layer_ingest(st, out_fd, NULL, ps, layer_out);
  if (out_fd >= 0) close(out_fd);
  for (size_t k = 0; k < c->n_hls; k++) free(c->hls[k].path);
  free(c->hls);
  free(c);
  return r;
}

struct base_config {
  char *config;
  int64_t stored; /* when the base image entered the store */
};

static int keep_config(const struct cairn_image_info *info, void *arg) {
  struct base_config *b = arg;
  b->config = strdup(info->config);
  b->stored = info->image.created;
  return b->config ? 0 : -ENOMEM;
}

/* Prepends to history, an array, a placeholder entry for each of the
 * base's layers that no entry made (not "empty_layer": the OCI rule
 * matches the k-th such entry with the k-th layer): one per layer for a
 * config without history, so that the commit's entry
 * names the new top layer. 0 or -ENOMEM. */
static int pad_history(json_t *cfg, json_t *history, size_t n_layers, int64_t stored) {
  size_t made = 0;
  for (size_t i = 0; i < json_array_size(history); i++)
    if (!json_is_true(json_object_get(json_array_get(history, i), "empty_layer"))) made++;
  /* their time: the base config's, else when the base entered the store */
  const char *created = json_string_value(json_object_get(cfg, "created"));
  char when[32];
  if (!created) {
    time_t t = (time_t)stored;
    struct tm tm;
    strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&t, &tm));
    created = when;
  }
  for (; made < n_layers; made++) {
    json_t *p = json_pack("{s:s, s:s}", "created", created, "comment", "history not recorded");
    if (!p || json_array_insert_new(history, 0, p) < 0) return -ENOMEM;
  }
  return 0;
}

/* The base config with diff_id appended and history entries: the
 * commit's, and placeholders for base layers without one (pad_history). */
static char *new_config(const char *base, int64_t stored, const char *diff_id,
                        const char *comment) {
  json_error_t err;
  json_t *cfg = json_loads(base, 0, &err);
  if (!cfg || !json_is_object(cfg)) {
    json_decref(cfg);
    return NULL;
  }
  json_t *rootfs = json_object_get(cfg, "rootfs");
  json_t *ids = rootfs ? json_object_get(rootfs, "diff_ids") : NULL;
  cairn_autofree char *did = cn_xasprintf("sha256:%s", diff_id);
  char created[32];
  time_t now = (time_t)cn_now_seconds();
  struct tm tm;
  strftime(created, sizeof(created), "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&now, &tm));
  json_t *history = json_object_get(cfg, "history");
  if (!history) {
    history = json_array();
    json_object_set_new(cfg, "history", history);
  }
  json_t *h = json_pack("{s:s, s:s}", "created", created, "created_by", "cairn commit");
  if (h && comment && comment[0]) json_object_set_new(h, "comment", json_string(comment));
  char *out = NULL;
  if (ids && json_is_array(ids) && did && h && json_is_array(history) &&
      pad_history(cfg, history, json_array_size(ids), stored) == 0 &&
      json_array_append_new(ids, json_string(did)) == 0 && json_array_append_new(history, h) == 0) {
    h = NULL;
    json_object_set_new(cfg, "created", json_string(created));
    out = json_dumps(cfg, JSON_COMPACT);
  }
  json_decref(h);
  json_decref(cfg);
  return out;
}

int cairn_commit(cairn_store *st, const char *upper_id, const char *name, const char *comment,
                 cairn_id image_out, cairn_id layer_out) {
  return cairn_commit_report(st, upper_id, name, comment, image_out, layer_out, NULL);
}

int cairn_commit_report(cairn_store *st, const char *upper_id, const char *name,
                        const char *comment, cairn_id image_out, cairn_id layer_out,
                        cairn_report *rep) {
  store_errclear(st);
  cairn_autoclose int ufd = cn_store_openat(st, "uppers", O_PATH | O_DIRECTORY, 0);
  cairn_autoclose int upper_fd =
      ufd < 0 ? -1 : openat(ufd, upper_id, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (upper_fd < 0) return cairn_fail(st, -ENOENT, "upper %.12s: no such upper", upper_id);
  char info[512] = {0};
  {
    cairn_autoclose int fd = openat(upper_fd, "info", O_RDONLY | O_CLOEXEC);
    if (fd < 0 || read(fd, info, sizeof(info) - 1) < 6 || strncmp(info, "image ", 6) != 0)
      return cairn_fail(st, -EBADMSG, "upper %.12s: no info", upper_id);
  }
  cairn_id base;
  snprintf(base, sizeof(base), "%.64s", info + 6);
  cairn_autofree char *purpose = cn_xasprintf("commit %.12s", upper_id);
  cairn_pinset *ps = purpose ? cairn_pinset_new(purpose, true) : NULL;
  if (!ps) return cairn_fail(st, -ENOMEM, "out of memory");
  cairn_tree *tree = NULL;
  struct committer *c = NULL;
  char **layers = NULL;
  size_t n_layers = 0;
  struct base_config bc = {0};
  cairn_autofree char *config = NULL;
  int r = cairn_pin_image(st, ps, base);
  if (r == 0) r = cairn_tree_build(st, base, &tree);
  if (r == 0 && !(c = calloc(1, sizeof(*c)))) r = cairn_fail(st, -ENOMEM, "out of memory");
  if (r == 0) {
    c->st = st;
    c->tree = tree;
    c->rep = rep;
    c->root_fd = c->index_fd = -1;
    c->lower_first = calloc(cairn_tree_count(tree) + 1, sizeof(char *));
    c->flags = calloc(cairn_tree_count(tree) + 1, 1);
    if (!c->lower_first || !c->flags) r = cairn_fail(st, -ENOMEM, "out of memory");
  }
  if (r == 0) r = plan_layer(c, upper_fd);
  if (r == 0) r = ingest_layer(st, c, upper_fd, ps, layer_out);
  if (r == 0) r = cairn_inspect(st, base, keep_config, &bc);
  if (r == 0) r = cn_image_layers(st, base, &layers, &n_layers);
  if (r == 0) {
    char **more = realloc(layers, (n_layers + 1) * sizeof(char *));
    if (!more || !(more[n_layers] = strdup(layer_out))) {
      if (more) layers = more;
      r = cairn_fail(st, -ENOMEM, "out of memory");
    } else {
      layers = more;
      n_layers++;
    }
  }
  if (r == 0 && !(config = new_config(bc.config, bc.stored, layer_out, comment)))
    r = cairn_fail(st, -EBADMSG, "image %.12s: its config cannot be extended", base);
  if (r == 0)
    r = cn_image_commit(st, config, strlen(config), (const char *const *)layers, n_layers, name,
                           image_out);
  if (c) {
    for (size_t k = 0; c->lower_first && k <= cairn_tree_count(tree); k++) free(c->lower_first[k]);
    free(c->lower_first);
    free(c->flags);
    for (size_t k = 0; k < c->n_hls; k++) free(c->hls[k].path);
    free(c->hls);
    if (c->root_fd >= 0) close(c->root_fd);
    if (c->index_fd >= 0) close(c->index_fd);
    free(c);
  }
  if (layers) cn_strv_free(layers, n_layers);
  free(bc.config);
  cairn_tree_free(tree);
  cairn_pinset_release(st, ps);
  return r;
}
