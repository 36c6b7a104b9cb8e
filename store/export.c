/* SPDX-License-Identifier: Apache-2.0 */
/*
 * export.c — an image's merged root filesystem as one tar stream (pax),
 * written with libarchive from the merged tree (merge.c, the same index a
 * mount maps): what `cairn
 * export` prints. Every entry keeps its type, mode, owner, mtime (with
 * nanoseconds), xattrs, device numbers and link target; names sharing an
 * inode become one file and hardlinks to its first name, in walk order.
 * A file whose blob has holes (a sparse file imported from a sparse tar)
 * is written sparse (GNU sparse 1.0 in pax): the tar holds its data, not
 * its holes, as `tar --sparse` would write it.
 */
#include "libcairn_store.h"

#include <archive.h>
#include <archive_entry.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

struct exporter {
  cairn_store *st;
  const cairn_tree *tree;
  struct archive *out;
  char **first_name;    /* by inode number: where a hardlinked file was written */
  uint64_t done, total; /* file data written, of all there is (progress) */
  char buf[1 << 17];
};

/* "WHAT: libarchive's text", and for a failed write(2), whose text is
 * just "Write error", its errno (No space left on device, ...). */
static int output_fail(struct exporter *x, const char *what) {
  int e = archive_errno(x->out);
  if (e <= 0) return cairn_fail(x->st, -EIO, "%s: %s", what, archive_error_string(x->out));
  return cairn_fail(x->st, -EIO, "%s: %s: %s", what, archive_error_string(x->out), strerror(e));
}

static int export_nomem(struct exporter *x, const char *path) {
  return cairn_fail(x->st, -ENOMEM, "out of memory exporting %s", path[0] ? path : "/");
}

static int export_fail(struct exporter *x, const char *path) {
  cairn_autofree char *what = cn_xasprintf("writing %s", path);
  return what ? output_fail(x, what) : export_nomem(x, path);
}

void cn_next_extent(int fd, uint64_t pos, uint64_t size, uint64_t *d, uint64_t *h) {
  off_t o = lseek(fd, (off_t)pos, SEEK_DATA);
  if (o < 0) {
    *d = errno == ENXIO ? size : pos;
    *h = size;
    return;
  }
  *d = (uint64_t)o < size ? (uint64_t)o : size;
  off_t e = lseek(fd, o, SEEK_HOLE);
  *h = e < 0 || (uint64_t)e > size ? size : (uint64_t)e;
}

void cn_tar_sparse_map(struct archive_entry *e, int fd, uint64_t size) {
  uint64_t pos = 0, data = 0;
  int n = 0;
  while (pos < size) {
    uint64_t d, h;
    cn_next_extent(fd, pos, size, &d, &h);
    if (d >= size) break;
    data += h - d;
    pos = h;
  }
  if (data == size) return;
  for (pos = 0; pos < size;) {
    uint64_t d, h;
    cn_next_extent(fd, pos, size, &d, &h);
    if (d >= size) break;
    archive_entry_sparse_add_entry(e, (la_int64_t)d, (la_int64_t)(h - d));
    n++;
    pos = h;
  }
  if (n == 0) archive_entry_sparse_add_entry(e, (la_int64_t)size, 0); /* all hole */
}

/* The file's bytes, from its blob (fd): its holes as zeros, which the
 * writer leaves out of the tar if the entry has a sparse map. */
static int export_data(struct exporter *x, int fd, const char *blob, uint64_t size,
                       const char *path) {
  static const char zeros[1 << 17];
  uint64_t pos = 0;
  int r = 0;
  while (pos < size && r == 0) {
    uint64_t d, h, from = pos;
    cn_next_extent(fd, pos, size, &d, &h);
    for (; pos < d && r == 0;) { /* a hole */
      size_t k = d - pos < sizeof(zeros) ? (size_t)(d - pos) : sizeof(zeros);
      if (archive_write_data(x->out, zeros, k) != (la_ssize_t)k) r = export_fail(x, path);
      pos += k;
    }
    for (; pos < h && r == 0;) {
      ssize_t got = pread(fd, x->buf, h - pos < sizeof(x->buf) ? (size_t)(h - pos) : sizeof(x->buf),
                          (off_t)pos);
      if (got <= 0)
        r = cairn_fail(x->st, -EBADMSG, "%s: blob %s is short", path, blob);
      else if (archive_write_data(x->out, x->buf, (size_t)got) != got)
        r = export_fail(x, path);
      else
        pos += (uint64_t)got;
    }
    x->done += pos - from;
    cn_progress(x->st, "writing", x->done, x->total, true, false);
  }
  return r;
}

static int export_node(struct exporter *x, uint64_t ino, const char *path) {
  const cairn_node *n = cairn_tree_node(x->tree, ino);
  struct archive_entry *e = archive_entry_new();
  if (!e) return export_nomem(x, path);
  archive_entry_set_pathname(e, path[0] ? path : "./");
  archive_entry_set_mode(e, n->mode);
  archive_entry_set_uid(e, n->uid);
  archive_entry_set_gid(e, n->gid);
  archive_entry_set_mtime(e, n->mtime_sec, n->mtime_nsec);
  for (size_t i = 0; i < n->n_xattrs; i++) {
    cairn_xattr xa = cairn_tree_xattr(x->tree, n, i);
    archive_entry_xattr_add_entry(e, xa.name, xa.value, xa.len);
  }
  bool data = false;
  int fd = -1;
  const char *blob = NULL;
  if (!S_ISDIR(n->mode) && n->nlink > 1 && x->first_name[ino]) {
    archive_entry_set_hardlink(e, x->first_name[ino]);
    archive_entry_set_size(e, 0);
  } else {
    if (!S_ISDIR(n->mode) && n->nlink > 1 && !(x->first_name[ino] = strdup(path))) {
      archive_entry_free(e);
      return export_nomem(x, path);
    }
    if (S_ISLNK(n->mode)) archive_entry_set_symlink(e, cairn_tree_str(x->tree, n->target));
    if (S_ISCHR(n->mode) || S_ISBLK(n->mode)) {
      archive_entry_set_rdevmajor(e, major(n->rdev));
      archive_entry_set_rdevminor(e, minor(n->rdev));
    }
    if (S_ISREG(n->mode)) {
      archive_entry_set_size(e, (la_int64_t)n->size);
      blob = cairn_tree_str(x->tree, n->blob);
      data = blob != NULL;
    }
  }
  if (data && (fd = cairn_blob_open(x->st, blob)) < 0) {
    archive_entry_free(e);
    return cairn_fail(x->st, fd, "%s: blob %s: %s", path, blob, strerror(-fd));
  }
  if (data) cn_tar_sparse_map(e, fd, n->size);
  int r = archive_write_header(x->out, e) == ARCHIVE_OK ? 0 : export_fail(x, path);
  archive_entry_free(e);
  if (r == 0 && data) r = export_data(x, fd, blob, n->size, path);
  if (fd >= 0) close(fd);
  if (r < 0 || !S_ISDIR(n->mode)) return r;
  const cairn_dirent *c = cairn_tree_children(x->tree, n);
  for (size_t i = 0; i < n->n_children && r == 0; i++) {
    const char *name = cairn_tree_str(x->tree, c[i].name);
    cairn_autofree char *child = path[0] ? cn_xasprintf("%s/%s", path, name) : strdup(name);
    r = child ? export_node(x, c[i].ino, child) : export_nomem(x, path);
  }
  return r;
}

static int export_pinned(cairn_store *st, const char *image_id, int fd) {
  cairn_tree *tree;
  int r = cairn_tree_build(st, image_id, &tree);
  if (r < 0) return r;
  struct exporter *x = calloc(1, sizeof(*x));
  size_t count = cairn_tree_count(tree);
  if (!x || !(x->first_name = calloc(count + 1, sizeof(char *)))) {
    free(x);
    cairn_tree_free(tree);
    return cairn_fail(st, -ENOMEM, "out of memory exporting image %.12s", image_id);
  }
  x->st = st;
  x->tree = tree;
  for (size_t ino = 1; ino <= count; ino++) /* each file's data is written once */
    if (S_ISREG(cairn_tree_node(tree, ino)->mode)) x->total += cairn_tree_node(tree, ino)->size;
  x->out = archive_write_new();
  archive_write_set_format_pax(x->out);
  archive_write_set_bytes_in_last_block(x->out, 1);
  if (archive_write_open_fd(x->out, fd) != ARCHIVE_OK) {
    r = output_fail(x, "output");
  } else {
    r = export_node(x, 1, "");
    if (archive_write_close(x->out) != ARCHIVE_OK && r == 0) r = output_fail(x, "output");
    if (r == 0) cn_progress(st, "writing", x->done, x->total, true, true);
  }
  archive_write_free(x->out);
  for (size_t i = 0; i <= count; i++) free(x->first_name[i]);
  free(x->first_name);
  free(x);
  cairn_tree_free(tree);
  return r;
}

int cairn_export(cairn_store *st, const char *image_id, int fd) {
  store_errclear(st);
  cairn_autofree char *purpose = cn_xasprintf("export %.12s", image_id);
  cairn_pinset *ps = purpose ? cairn_pinset_new(purpose, true) : NULL;
  if (!ps) return cairn_fail(st, -ENOMEM, "out of memory exporting image %.12s", image_id);
  int r = cairn_pin_image(st, ps, image_id);
  if (r == 0) { /* a lazy pull's image whose files are not all here */
    cn_autostmt sqlite3_stmt *q = NULL;
    if ((r = cn_db_prepare(st, &q,
                           "SELECT count(*) FROM pending p JOIN image_layers l"
                           " ON l.layer_id = p.layer_id WHERE l.image_id = ?")) == 0) {
      sqlite3_bind_text(q, 1, image_id, -1, SQLITE_STATIC);
      if (sqlite3_step(q) == SQLITE_ROW && sqlite3_column_int64(q, 0) > 0)
        r = cairn_fail(st, -ENODATA,
                       "%lld files not fetched yet (a lazy pull); cairn fill it first",
                       (long long)sqlite3_column_int64(q, 0));
    }
  }
  if (r == 0) r = export_pinned(st, image_id, fd);
  cairn_pinset_release(st, ps);
  return r;
}
