/* SPDX-License-Identifier: Apache-2.0 */
/*
 * blob.c — file contents stored once, named by their XXH3-128 hash, under
 * STORE/blobs/XX/NAME.
 *
 * A writer streams into an anonymous O_TMPFILE in the blobs directory while
 * computing XXH3-128 and sha256, then links it under its name; a content
 * of up to BLOB_HELD bytes waits in memory until its name is known, so a
 * duplicate of a blob with a row, or of a file already at its name (an
 * earlier copy in the same layer), costs no file. A name, once
 * linked, never changes content until a sweep (under the exclusive store
 * lock) removes it: linkat() refuses to replace. A dedup hit must prove the
 * content equal: same size and same sha256, taken from the committed row
 * or, for a file with no row yet, by reading it. A different content with
 * the same XXH3 key (a collision) gets the name KEY-1, KEY-2, ...
 *
 * A sparse file's holes stay holes (cn_blob_writer_hole), and a run of
 * zeros in the data becomes one (cn_blob_writer_write): the file reads
 * as the same bytes, and its name is the hash of those bytes, zeros and
 * all, so a sparse and a dense copy of one content are one blob.
 *
 * Durability: blobs are not fsynced one by one; the importer calls
 * syncfs() once before it commits the rows that reference them (a lazy
 * pull's fetched file, one blob a commit, fdatasyncs it and its directory
 * entries instead: store/lazy.c). A crash
 * before that leaves only files with no row, which sweeps discard.
 * Deletion is the mirror image: the commit that deletes the rows is made
 * durable (cn_db_commit_durable) before cn_blob_files_remove unlinks a file, so
 * a power cut cannot bring rows back whose files are gone.
 */
#include "libcairn_blob.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <openssl/evp.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>

/* A content of up to BLOB_HELD bytes is held in memory until its name is
 * known: a blob the store has already (a duplicate) costs no file. */
#define BLOB_HELD (256u << 10)

struct blob_writer {
  cairn_store *st;
  int fd; /* the O_TMPFILE, once the content outgrew held or is to be linked */
  XXH3_state_t *xxh;
  EVP_MD_CTX *sha;
  uint64_t size;
  unsigned char *held; /* the first size bytes while fd < 0 */
  size_t held_cap;
};

void cn_blob_name_path(const char *name, char *rel, size_t len) {
  snprintf(rel, len, "%.2s/%s", name, name);
}

int cn_blob_writer_new(cairn_store *st, blob_writer **out) {
  blob_writer *w = calloc(1, sizeof(*w));
  if (!w) return cairn_fail(st, -ENOMEM, "out of memory starting a blob");
  w->st = st;
  w->fd = -1;
  w->xxh = XXH3_createState();
  w->sha = EVP_MD_CTX_new();
  if (!w->xxh || !w->sha || XXH3_128bits_reset(w->xxh) != XXH_OK ||
      EVP_DigestInit_ex(w->sha, EVP_sha256(), NULL) != 1) {
    cn_blob_writer_free(w);
    return cairn_fail(st, -ENOMEM, "out of memory starting a blob");
  }
  *out = w;
  return 0;
}

void cn_blob_writer_free(blob_writer *w) {
  if (!w) return;
  if (w->fd >= 0) close(w->fd);
  free(w->held);
  XXH3_freeState(w->xxh);
  EVP_MD_CTX_free(w->sha);
  free(w);
}

/* 1 if the n bytes at p are all zero. */
static bool all_zero(const unsigned char *p, size_t n) {
  return n == 0 || (p[0] == 0 && memcmp(p, p + 1, n - 1) == 0);
}

/* Writes len bytes at the file's offset, all of them. */
static int write_all(blob_writer *w, const unsigned char *p, size_t len) {
  while (len > 0) {
    ssize_t n = write(w->fd, p, len);
    if (n < 0) {
      if (errno == EINTR) continue;
      return cairn_fail(w->st, -errno, "writing blob: %s", strerror(errno));
    }
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

/* Content is hashed as given, but the file is written in pieces that end
 * at multiples of BLOB_ZERO_BLOCK, and a piece of zeros is skipped, not
 * written: bytes never written read as zeros, a block never written is a
 * hole, and finish sets the size past a last one. A run of zeros costs
 * no disk, however it came (a layer of 33 KB of zstd can hold a GiB of
 * them) and however the caller's buffers cut it. */
#define BLOB_ZERO_BLOCK 4096
static int file_write(blob_writer *w, const void *buf, size_t len);

/* The file the content goes to from now on, the bytes held written to it. */
static int spill(blob_writer *w) {
  if (w->fd >= 0) return 0;
  cairn_store *st = w->st;
  w->fd = openat(st->blobs_fd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0444);
  if (w->fd < 0)
    return cairn_fail(st, -errno, "%s/blobs: temporary file: %s", st->dir, strerror(errno));
  uint64_t n = w->size;
  w->size = 0;
  int r = n ? file_write(w, w->held, (size_t)n) : 0;
  free(w->held);
  w->held = NULL;
  w->held_cap = 0;
  return r;
}

int cn_blob_writer_write(blob_writer *w, const void *buf, size_t len) {
  XXH3_128bits_update(w->xxh, buf, len);
  EVP_DigestUpdate(w->sha, buf, len);
  if (w->fd < 0 && len <= BLOB_HELD - w->size) {
    if (w->size + len > w->held_cap) {
      size_t cap = w->held_cap ? w->held_cap : 16384;
      while (cap < w->size + len) cap *= 2;
      unsigned char *h = realloc(w->held, cap);
      if (!h) return cairn_fail(w->st, -ENOMEM, "out of memory writing a blob");
      w->held = h;
      w->held_cap = cap;
    }
    memcpy(w->held + w->size, buf, len);
    w->size += len;
    return 0;
  }
  int r = spill(w);
  return r < 0 ? r : file_write(w, buf, len);
}

/* len bytes into the file at w->size, a piece of zeros skipped. */
static int file_write(blob_writer *w, const void *buf, size_t len) {
  const unsigned char *p = buf, *run = p; /* run: the start of the bytes to write */
  bool skipped = false;
  while (len > 0) {
    size_t k = BLOB_ZERO_BLOCK - (size_t)(w->size % BLOB_ZERO_BLOCK);
    if (k > len) k = len;
    if (all_zero(p, k)) {
      int r;
      if (p > run && (r = write_all(w, run, (size_t)(p - run))) < 0) return r;
      run = p + k;
      skipped = true;
    } else if (skipped) {
      /* the data after a hole: the file offset moves past it first */
      if (lseek(w->fd, (off_t)w->size, SEEK_SET) < 0)
        return cairn_fail(w->st, -errno, "writing blob: %s", strerror(errno));
      skipped = false;
    }
    p += k;
    len -= k;
    w->size += k;
  }
  if (skipped) {
    if (lseek(w->fd, (off_t)w->size, SEEK_SET) < 0)
      return cairn_fail(w->st, -errno, "writing blob: %s", strerror(errno));
    return 0;
  }
  return p > run ? write_all(w, run, (size_t)(p - run)) : 0;
}

/* A run of len zero bytes that the file does not hold (a hole in a sparse
 * tar entry): hashed as the zeros it reads as, but skipped over in the file,
 * whose size finish sets; the disk pays only for the bytes written. */
int cn_blob_writer_hole(blob_writer *w, uint64_t len) {
  static const unsigned char zeros[64 * 1024];
  if (len > (uint64_t)INT64_MAX - w->size)
    return cairn_fail(w->st, -EFBIG, "writing blob: a hole past the largest file size");
  int r = spill(w);
  if (r < 0) return r;
  for (uint64_t left = len; left > 0;) {
    size_t k = left < sizeof(zeros) ? (size_t)left : sizeof(zeros);
    XXH3_128bits_update(w->xxh, zeros, k);
    EVP_DigestUpdate(w->sha, zeros, k);
    left -= k;
  }
  if (lseek(w->fd, (off_t)(w->size + len), SEEK_SET) < 0)
    return cairn_fail(w->st, -errno, "writing blob: %s", strerror(errno));
  w->size += len;
  return 0;
}

/* sha256 of a stored file; -errno if unreadable. */
static int file_sha256(int fd, char out[65], uint64_t *size) {
  EVP_MD_CTX *ctx = EVP_MD_CTX_new();
  if (!ctx) return -ENOMEM;
  EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
  char buf[1 << 16];
  ssize_t n;
  *size = 0;
  while ((n = read(fd, buf, sizeof(buf))) != 0) {
    if (n < 0) {
      if (errno == EINTR) continue;
      EVP_MD_CTX_free(ctx);
      return -errno;
    }
    EVP_DigestUpdate(ctx, buf, (size_t)n);
    *size += (uint64_t)n;
  }
  cn_sha256_final_hex(ctx, out);
  EVP_MD_CTX_free(ctx);
  return 0;
}

/* 1 if the committed row or the file at name holds exactly this content,
 * 0 if the name is free (the file was linked), 2 if the name holds other
 * content, negative on error. A committed row whose file is missing (fsck
 * --repair quarantined it, its image being pinned) gets this content, the
 * same, linked under its name: that heals it. */
static int blob_place(blob_writer *w, const char *name, const char *sha) {
  cairn_store *st = w->st;
  char rel[128], sub[3] = {name[0], name[1], 0}, proc[64];
  cn_blob_name_path(name, rel, sizeof(rel));
  cn_autostmt sqlite3_stmt *q = NULL;
  int r = cn_db_prepare(st, &q, "SELECT size, sha256 FROM blobs WHERE name = ?");
  if (r < 0) return r;
  sqlite3_bind_text(q, 1, name, -1, SQLITE_STATIC);
  if (sqlite3_step(q) == SQLITE_ROW) {
    if ((uint64_t)sqlite3_column_int64(q, 0) != w->size ||
        strcmp((const char *)sqlite3_column_text(q, 1), sha) != 0)
      return 2;
    struct stat sb;
    if (fstatat(st->blobs_fd, rel, &sb, AT_SYMLINK_NOFOLLOW) == 0 || errno != ENOENT) return 1;
  }
  if (mkdirat(st->blobs_fd, sub, 0700) < 0 && errno != EEXIST)
    return cairn_fail(st, -errno, "%s/blobs/%s: %s", st->dir, sub, strerror(errno));
  /* Linked under an O_NOFOLLOW fd of blobs/XX: a symlink there (planted
   * in a store another user owns) is refused, never linked through. */
  cairn_autoclose int subfd =
      openat(st->blobs_fd, sub, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (subfd < 0)
    return cairn_fail(st, -errno, "%s/blobs/%s: %s", st->dir, sub,
                      errno == ELOOP || errno == ENOTDIR ? "not a directory: refused"
                                                         : strerror(errno));
  if (w->fd < 0) {
    /* Content still held, whose name a file with no row has already (an
     * earlier file of this import, another import's, a crash's): its
     * bytes decide, before a file is made for this copy. */
    cairn_autoclose int fd = openat(subfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    char other[65];
    uint64_t size;
    if (fd >= 0 && file_sha256(fd, other, &size) == 0)
      return size == w->size && strcmp(other, sha) == 0 ? 1 : 2;
  }
  if ((r = spill(w)) < 0 || (r = cn_staging_note(st, rel)) < 0) return r;
  /* a hole at the end: the file's size, not a byte written */
  struct stat fb;
  if (fstat(w->fd, &fb) < 0 ||
      ((uint64_t)fb.st_size < w->size && ftruncate(w->fd, (off_t)w->size) < 0))
    return cairn_fail(st, -errno, "writing blob: %s", strerror(errno));
  snprintf(proc, sizeof(proc), "/proc/self/fd/%d", w->fd);
  if (linkat(AT_FDCWD, proc, subfd, name, AT_SYMLINK_FOLLOW) == 0) return 0;
  if (errno != EEXIST)
    return cairn_fail(st, -errno, "%s/blobs/%s: %s", st->dir, rel, strerror(errno));
  /* A file with no row: another import's, not yet committed, or one left
   * by a crash. Its bytes decide. */
  cairn_autoclose int fd = openat(st->blobs_fd, rel, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return cairn_fail(st, -errno, "%s/blobs/%s: %s", st->dir, rel, strerror(errno));
  char other[65];
  uint64_t size;
  if ((r = file_sha256(fd, other, &size)) < 0)
    return cairn_fail(st, r, "%s/blobs/%s: %s", st->dir, rel, strerror(-r));
  return size == w->size && strcmp(other, sha) == 0 ? 1 : 2;
}

int cn_blob_writer_finish(blob_writer *w, char *name_out, uint64_t *size_out,
                          char sha256_hex_out[65]) {
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, XXH3_128bits_digest(w->xxh));
  char key[33];
  cn_hex_encode(c.digest, sizeof(c.digest), key);
  cn_sha256_final_hex(w->sha, sha256_hex_out);
  *size_out = w->size;
  for (unsigned suffix = 0; suffix < 1000; suffix++) {
    if (suffix == 0)
      snprintf(name_out, 48, "%s", key);
    else
      snprintf(name_out, 48, "%s-%u", key, suffix);
    int r = blob_place(w, name_out, sha256_hex_out);
    if (r < 0) return r;
    if (r != 2) return 0;
  }
  return cairn_fail(w->st, -EIO, "blob %s: too many key collisions", key);
}

int cn_blob_path(cairn_store *st, const char *blob, char *path, size_t len) {
  store_errclear(st);
  char rel[128];
  cn_blob_name_path(blob, rel, sizeof(rel));
  int n = snprintf(path, len, "%s/blobs/%s", st->dir, rel);
  if (n < 0 || (size_t)n >= len)
    return cairn_fail(st, -ENAMETOOLONG, "blob %s: its path is longer than %zu bytes", blob, len);
  return 0;
}

int cairn_blob_open(cairn_store *st, const char *blob) {
  char rel[128];
  cn_blob_name_path(blob, rel, sizeof(rel));
  int fd = openat(st->blobs_fd, rel, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  return fd < 0 ? -errno : fd;
}

int cn_blob_by_sha256(cairn_store *st, const char *sha256, char name_out[48], uint64_t *size_out) {
  const char *hex = strncmp(sha256, "sha256:", 7) == 0 ? sha256 + 7 : sha256;
  if (!cn_is_hex_id(hex, 64)) return cairn_fail(st, -EINVAL, "%s: not a sha256 digest", sha256);
  cn_autostmt sqlite3_stmt *q = NULL;
  int r = cn_db_prepare(st, &q, "SELECT name, size FROM blobs WHERE sha256 = ? ORDER BY name");
  if (r < 0) return r;
  sqlite3_bind_text(q, 1, hex, -1, SQLITE_STATIC);
  while ((r = sqlite3_step(q)) == SQLITE_ROW) {
    const char *name = (const char *)sqlite3_column_text(q, 0);
    char rel[128];
    struct stat sb;
    cn_blob_name_path(name, rel, sizeof(rel));
    /* a quarantined blob (fsck --repair unlinked its file) is not held */
    if (fstatat(st->blobs_fd, rel, &sb, AT_SYMLINK_NOFOLLOW) < 0) {
      if (errno == ENOENT) continue;
      return cairn_fail(st, -errno, "%s/blobs/%s: %s", st->dir, rel, strerror(errno));
    }
    snprintf(name_out, 48, "%s", name);
    if (size_out) *size_out = (uint64_t)sqlite3_column_int64(q, 1);
    return 1;
  }
  return r == SQLITE_DONE ? 0 : cn_store_fail_db(st, "blob lookup by sha256");
}

int cairn_blob_find_sha256(cairn_store *st, const char *sha256, char blob[48]) {
  return cn_blob_find_sha256(st, sha256, blob, 48, NULL);
}

int cn_blob_find_sha256(cairn_store *st, const char *sha256, char *blob, size_t len,
                         uint64_t *size) {
  store_errclear(st);
  char name[48];
  int r = cn_blob_by_sha256(st, sha256, name, size);
  if (r <= 0) return r;
  if (strlen(name) >= len)
    return cairn_fail(st, -ENAMETOOLONG, "blob %s: its name is longer than %zu bytes", name, len);
  memcpy(blob, name, strlen(name) + 1);
  return 1;
}

/* Within the caller's transaction: deletes (or, dry, counts) the rows of
 * blobs no entry references; their names are appended to names. */
int cn_blob_rows_unreferenced(cairn_store *st, bool dry_run, struct strv *names, cairn_report *r) {
  cn_autostmt sqlite3_stmt *q = NULL, *d = NULL;
  int rc;
  if ((rc = cn_db_prepare(st, &q,
                          "SELECT name, size FROM blobs WHERE NOT EXISTS"
                          " (SELECT 1 FROM entries WHERE entries.blob = blobs.name)")) < 0 ||
      (rc = cn_db_prepare(st, &d, "DELETE FROM blobs WHERE name = ?")) < 0)
    return rc;
  while (sqlite3_step(q) == SQLITE_ROW) {
    if (cn_strv_push(names, (const char *)sqlite3_column_text(q, 0)) < 0)
      return cairn_fail(st, -ENOMEM, "out of memory listing unused blobs");
    r->blobs++;
    r->bytes += (uint64_t)sqlite3_column_int64(q, 1);
  }
  if (dry_run) return 0;
  for (size_t i = 0; i < names->n; i++) {
    sqlite3_bind_text(d, 1, names->v[i], -1, SQLITE_STATIC);
    if (sqlite3_step(d) != SQLITE_DONE) return cn_store_fail_db(st, "blob delete");
    sqlite3_reset(d);
  }
  return 0;
}

/* After the durable commit that deleted their rows: the files go. */
int cn_blob_files_remove(cairn_store *st, const struct strv *names) {
  for (size_t i = 0; i < names->n; i++) {
    char rel[128];
    cn_progress(st, CN_BLOB_UNUSED_STEP, i, names->n, false, false);
    cn_blob_name_path(names->v[i], rel, sizeof(rel));
    if (unlinkat(st->blobs_fd, rel, 0) < 0 && errno != ENOENT)
      return cairn_fail(st, -errno, "%s/blobs/%s: %s", st->dir, rel, strerror(errno));
  }
  return 0;
}

/* Files with no row: blobs of imports that crashed before they committed.
 * Needs the store lock exclusive (no import running). */
int cn_blob_orphans_sweep(cairn_store *st, bool dry_run, cairn_report *r) {
  cn_autostmt sqlite3_stmt *q = NULL;
  int rc = cn_db_prepare(st, &q, "SELECT 1 FROM blobs WHERE name = ?");
  if (rc < 0) return rc;
  for (int hi = 0; hi < 256; hi++) {
    char sub[3];
    cn_progress(st, CN_BLOB_ORPHANS_STEP, (uint64_t)hi, 256, false, false);
    snprintf(sub, sizeof(sub), "%02x", hi);
    cairn_autoclosedir DIR *d = cn_opendirat(st->blobs_fd, sub);
    if (!d) continue;
    int dfd = dirfd(d);
    struct dirent *de;
    while ((de = readdir(d))) {
      if (de->d_name[0] == '.') continue;
      sqlite3_bind_text(q, 1, de->d_name, -1, SQLITE_STATIC);
      bool known = sqlite3_step(q) == SQLITE_ROW;
      sqlite3_reset(q);
      if (known) continue;
      struct stat sb;
      if (fstatat(dfd, de->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0) r->bytes += (uint64_t)sb.st_size;
      if (!dry_run) unlinkat(dfd, de->d_name, 0);
      r->blobs++;
    }
  }
  return 0;
}
