/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_chunked_write.c — chunked_write.c (push --format): tars in the
 * layouts a layer meets (PAX with xattrs and long names, GNU long names,
 * a file of several chunks, links, devices, an empty file), fed in pieces
 * that cut every header and block, come out as blobs cairn's own TOC
 * parsers (toc_zstd_chunked.c, toc_estargz.c) read: every entry with its
 * metadata, every chunk decompressing alone to its digest, and the blob to
 * the tar (zstd:chunked: the same bytes; eStargz: the entries, then the
 * TOC entry, then the end of the archive).
 */
#include <archive.h>
#include <archive_entry.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysmacros.h>

#include "remote/libcairn_chunked_write.h"
#include "remote/libcairn_toc.h"
#include "testutil.h"

static tu_store T;
static void setup(void) { tu_store_setup(&T); }
static void teardown(void) { tu_store_teardown(&T); }
TestSuite(chunked_write, .init = setup, .fini = teardown);

typedef struct buf {
  unsigned char *p;
  size_t n, cap;
} buf;

static void buf_add(buf *b, const void *d, size_t n) {
  if (b->n + n > b->cap) {
    b->cap = (b->n + n) * 2;
    b->p = realloc(b->p, b->cap);
    cr_assert(b->p);
  }
  memcpy(b->p + b->n, d, n);
  b->n += n;
}

static la_ssize_t ar_write(struct archive *a, void *arg, const void *d, size_t n) {
  (void)a;
  buf_add(arg, d, n);
  return (la_ssize_t)n;
}

static int out_cb(const void *d, size_t n, void *arg) {
  buf_add(arg, d, n);
  return 0;
}

#define BIG_SIZE (CN_CHUNKED_CHUNK * 2 + 12345)
#define LONG_NAME                                                                                  \
  "long/a-directory-name-that-is-long/another-directory-name-that-is-longer/and-a-file-name-"      \
  "past-one-hundred-bytes"

static void add(struct archive *a, const char *path, unsigned type, unsigned mode, const void *data,
                size_t size, const char *link) {
  struct archive_entry *e = archive_entry_new();
  archive_entry_set_pathname(e, path);
  archive_entry_set_filetype(e, type);
  archive_entry_set_perm(e, mode);
  archive_entry_set_mtime(e, 1700000000, 123456789);
  archive_entry_set_uid(e, type == AE_IFDIR ? 0 : 1000);
  archive_entry_set_gid(e, 100);
  if (type == AE_IFREG) archive_entry_set_size(e, (la_int64_t)size);
  if (type == AE_IFLNK) archive_entry_set_symlink(e, link);
  if (type == AE_IFCHR) archive_entry_set_rdev(e, makedev(4, 5));
  if (link && type == AE_IFREG) {
    archive_entry_set_hardlink(e, link);
    archive_entry_set_size(e, 0);
  }
  if (strcmp(path, "etc/hostname") == 0)
    archive_entry_xattr_add_entry(e, "user.cairn", "toc-test", 8);
  cr_assert_eq(archive_write_header(a, e), ARCHIVE_OK, "%s: %s", path, archive_error_string(a));
  if (type == AE_IFREG && !link && size)
    cr_assert_eq(archive_write_data(a, data, size), (la_ssize_t)size);
  archive_entry_free(e);
}

/* A tar in format fmt (ARCHIVE_FORMAT_TAR_*). */
static buf make_tar(int fmt, unsigned char **big) {
  buf b = {0};
  struct archive *a = archive_write_new();
  cr_assert_eq(archive_write_set_format(a, fmt), ARCHIVE_OK);
  archive_write_set_bytes_in_last_block(a, 1);
  cr_assert_eq(archive_write_open(a, &b, NULL, ar_write, NULL), ARCHIVE_OK);
  *big = malloc(BIG_SIZE);
  unsigned x = 17;
  for (size_t i = 0; i < BIG_SIZE; i++)
    (*big)[i] = (unsigned char)((x = x * 1103515245u + 12345u) >> 16);
  unsigned char tool[3000];
  memset(tool, 't', sizeof tool);
  add(a, "etc", AE_IFDIR, 0755, NULL, 0, NULL);
  add(a, "etc/hostname", AE_IFREG, 0644, "hello\n", 6, NULL);
  add(a, "usr", AE_IFDIR, 0755, NULL, 0, NULL);
  add(a, "usr/bin", AE_IFDIR, 0755, NULL, 0, NULL);
  add(a, "usr/bin/big", AE_IFREG, 0644, *big, BIG_SIZE, NULL);
  add(a, "usr/bin/tool", AE_IFREG, 04755, tool, sizeof tool, NULL);
  add(a, "usr/bin/link", AE_IFLNK, 0777, NULL, 0, "../etc/hostname");
  add(a, "d", AE_IFDIR, 0755, NULL, 0, NULL);
  add(a, "d/hard", AE_IFREG, 0644, NULL, 0, "etc/hostname");
  add(a, "d/zero", AE_IFREG, 0644, NULL, 0, NULL);
  add(a, "d/tty", AE_IFCHR, 0620, NULL, 0, NULL);
  add(a, "long", AE_IFDIR, 0755, NULL, 0, NULL);
  add(a, LONG_NAME, AE_IFREG, 0600, "long\n", 5, NULL);
  cr_assert_eq(archive_write_close(a), ARCHIVE_OK);
  archive_write_free(a);
  return b;
}

/* The tar written by fmt, fed in pieces of step bytes. */
static int write_blob(enum cn_chunked_format f, const buf *tar, size_t step, buf *out,
                      cn_chunked_result *res) {
  cn_chunked_writer *w;
  cr_assert_eq(cn_chunked_new(f, out_cb, out, &w), 0);
  int r = 0;
  for (size_t at = 0; at < tar->n && r == 0; at += step)
    r = cn_chunked_write(w, tar->p + at, tar->n - at < step ? tar->n - at : step);
  if (r == 0) r = cn_chunked_finish(w, res);
  if (r < 0) cr_log_info("%s", cn_chunked_error(w));
  cn_chunked_free(w);
  return r;
}

static const cn_toc_entry *find(const cn_toc *toc, const char *path) {
  const cn_toc_entry *e = cn_toc_find(toc, path);
  cr_assert(e, "no entry %s", path);
  return e;
}

/* What the TOC must say of the tree, and every chunk fetched alone. */
static void check_toc(const cn_toc *toc, const unsigned char *blob, const unsigned char *big,
                      bool pax) {
  const cn_toc_entry *h = find(toc, "etc/hostname");
  cr_assert_eq(h->type, CN_TOC_REG);
  cr_assert_eq(h->size, 6);
  cr_assert_eq(h->mode, 0644);
  cr_assert_eq(h->uid, 1000);
  cr_assert_eq(h->gid, 100);
  cr_assert_eq(h->mtime_sec, 1700000000);
  cr_assert_str_eq(h->digest,
                   "sha256:5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03");
  if (pax) { /* (libarchive's GNU tar format has no xattrs) */
    cr_assert_eq(h->n_xattrs, 1);
    cr_assert_str_eq(h->xattrs[0].name, "user.cairn");
    cr_assert_eq(memcmp(h->xattrs[0].value, "toc-test", 8), 0);
  }
  cr_assert_eq(find(toc, "usr/bin/tool")->mode, 04755);
  const cn_toc_entry *l = find(toc, "usr/bin/link");
  cr_assert_eq(l->type, CN_TOC_SYMLINK);
  cr_assert_str_eq(l->link, "../etc/hostname");
  const cn_toc_entry *hard = find(toc, "d/hard");
  cr_assert_eq(hard->type, CN_TOC_HARDLINK);
  cr_assert_str_eq(hard->link, "etc/hostname");
  cr_assert_eq(find(toc, "d/zero")->size, 0);
  const cn_toc_entry *tty = find(toc, "d/tty");
  cr_assert_eq(tty->type, CN_TOC_CHAR);
  cr_assert_eq(tty->dev_major, 4);
  cr_assert_eq(tty->dev_minor, 5);
  cr_assert_eq(find(toc, LONG_NAME)->size, 5);
  const cn_toc_entry *b = find(toc, "usr/bin/big");
  cr_assert_eq(b->n_chunks, 3);
  for (size_t i = 0; i < toc->n_entries; i++) {
    const cn_toc_entry *e = &toc->entries[i];
    if (e->type != CN_TOC_REG || e->size == 0) continue;
    uint64_t at = 0;
    for (size_t k = 0; k < e->n_chunks; k++) {
      const cn_toc_chunk *c = &e->chunks[k];
      cr_assert_eq(c->uoff, at);
      cr_assert_eq(c->inner, 0);
      unsigned char *o;
      size_t on;
      cr_assert_eq(cn_toc_decompress(blob + c->off, c->csize, 1 << 24, &o, &on, "chunk", T.st), 0,
                   "%s chunk %zu: %s", e->path, k, cairn_errmsg(T.st));
      cr_assert_geq(on, c->usize);
      char d[CAIRN_DIGEST_LEN + 1];
      cn_toc_sha256(o, c->usize, d);
      cr_assert_str_eq(d, c->digest[0] ? c->digest : e->digest, "%s chunk %zu", e->path, k);
      if (e == b) cr_assert_eq(memcmp(o, big + c->uoff, c->usize), 0);
      free(o);
      at += c->usize;
    }
    cr_assert_eq(at, e->size, "%s", e->path);
  }
}

static void round_trip_zstd(int fmt, size_t step) {
  unsigned char *big;
  buf tar = make_tar(fmt, &big), blob = {0};
  cn_chunked_result res;
  cr_assert_eq(write_blob(CN_CHUNKED_ZSTD, &tar, step, &blob, &res), 0);
  /* the manifest's annotations find and vouch for the TOC */
  cn_toc_zstd_pos pos;
  cr_assert_eq(cn_toc_zstd_position(res.position, res.checksum, NULL, NULL, blob.n, &pos, T.st), 0,
               "%s", cairn_errmsg(T.st));
  cn_toc_zstd_pos fpos;
  cr_assert_eq(cn_toc_zstd_footer(blob.p, blob.n, blob.n, &fpos, T.st), 0, "%s",
               cairn_errmsg(T.st));
  cr_assert_eq(fpos.off, pos.off);
  cr_assert_eq(fpos.len, pos.len);
  cn_toc toc;
  cr_assert_eq(cn_toc_zstd_chunked_parse(blob.p + pos.off, pos.len, &pos, blob.n, &toc, T.st), 0,
               "%s", cairn_errmsg(T.st));
  check_toc(&toc, blob.p, big, fmt == ARCHIVE_FORMAT_TAR_PAX_RESTRICTED);
  cn_toc_free(&toc);
  /* the blob is the tar, byte for byte */
  unsigned char *all;
  size_t all_n;
  cr_assert_eq(cn_toc_decompress(blob.p, blob.n, 64 << 20, &all, &all_n, "blob", T.st), 0, "%s",
               cairn_errmsg(T.st));
  cr_assert_eq(all_n, tar.n);
  cr_assert_eq(memcmp(all, tar.p, tar.n), 0);
  char d[CAIRN_DIGEST_LEN + 1];
  cn_toc_sha256(tar.p, tar.n, d);
  cr_assert_str_eq(res.diff_id, d);
  free(all);
  free(big);
  free(tar.p);
  free(blob.p);
}

Test(chunked_write, zstd_chunked_pax) { round_trip_zstd(ARCHIVE_FORMAT_TAR_PAX_RESTRICTED, 1000); }
Test(chunked_write, zstd_chunked_gnu) { round_trip_zstd(ARCHIVE_FORMAT_TAR_GNUTAR, 1 << 20); }
Test(chunked_write, zstd_chunked_byte_by_byte) {
  round_trip_zstd(ARCHIVE_FORMAT_TAR_PAX_RESTRICTED, 7);
}

Test(chunked_write, estargz) {
  unsigned char *big;
  buf tar = make_tar(ARCHIVE_FORMAT_TAR_PAX_RESTRICTED, &big), blob = {0};
  cn_chunked_result res;
  cr_assert_eq(write_blob(CN_CHUNKED_ESTARGZ, &tar, 4096, &blob, &res), 0);
  uint64_t toc_off;
  cr_assert_eq(cn_toc_estargz_footer(blob.p + blob.n - 51, 51, blob.n, &toc_off, T.st), 0, "%s",
               cairn_errmsg(T.st));
  cn_toc toc;
  cr_assert_eq(
      cn_toc_estargz_parse(blob.p + toc_off, blob.n - toc_off, blob.n, res.toc_digest, &toc, T.st),
      0, "%s", cairn_errmsg(T.st));
  check_toc(&toc, blob.p, big, true);
  cr_assert_null(cn_toc_find(&toc, "stargz.index.json"));
  cn_toc_free(&toc);
  /* the tar's entries as they were, the TOC entry, the end of the archive */
  unsigned char *all;
  size_t all_n;
  cr_assert_eq(cn_toc_decompress(blob.p, blob.n, 64 << 20, &all, &all_n, "blob", T.st), 0, "%s",
               cairn_errmsg(T.st));
  static const unsigned char zero[512];
  size_t body = tar.n;
  while (body >= 512 && memcmp(tar.p + body - 512, zero, 512) == 0) body -= 512;
  cr_assert_gt(all_n, body);
  cr_assert_eq(memcmp(all, tar.p, body), 0);
  cr_assert_str_eq((char *)all + body, "stargz.index.json");
  char d[CAIRN_DIGEST_LEN + 1];
  cn_toc_sha256(all, all_n, d);
  cr_assert_str_eq(res.diff_id, d);
  free(all);
  free(big);
  free(tar.p);
  free(blob.p);
}

static int pick_fwd(const void *d, size_t n, void *arg) { return cn_chunked_write(arg, d, n); }

/* An access list (cairn push with one): eStargz gets its regular files
 * first (a PAX long name among them; a hardlink stays), then
 * .prefetch.landmark, then the rest; every listed file its rank. */
Test(chunked_write, estargz_access_list) {
  unsigned char *big;
  buf tar = make_tar(ARCHIVE_FORMAT_TAR_PAX_RESTRICTED, &big), blob = {0};
  cn_chunked_writer *w;
  cr_assert_eq(cn_chunked_new(CN_CHUNKED_ESTARGZ, out_cb, &blob, &w), 0);
  const char *list[] = {"/" LONG_NAME, "d/hard", "usr/bin/big", "./etc/hostname", "none"};
  cr_assert_eq(cn_chunked_prefetch(w, list, 5), 0);
  size_t moved = 0;
  for (int pass = 0; pass < 2; pass++) {
    cn_tar_pick *pk;
    cr_assert_eq(cn_tar_pick_new(w, pass == 0, pick_fwd, w, &pk), 0);
    for (size_t at = 0; at < tar.n; at += 777)
      cr_assert_eq(cn_tar_pick_write(pk, tar.p + at, tar.n - at < 777 ? tar.n - at : 777), 0, "%s",
                   cn_chunked_error(w));
    if (pass == 0) {
      moved = cn_tar_pick_count(pk);
      cr_assert_eq(cn_chunked_landmark(w), 0);
    }
    cn_tar_pick_free(pk);
  }
  cr_assert_eq(moved, 3);
  cn_chunked_result res;
  cr_assert_eq(cn_chunked_finish(w, &res), 0, "%s", cn_chunked_error(w));
  cr_assert_eq(cn_chunked_prefetched(w), 3);
  cn_chunked_free(w);
  uint64_t toc_off;
  cr_assert_eq(cn_toc_estargz_footer(blob.p + blob.n - 51, 51, blob.n, &toc_off, T.st), 0);
  cn_toc toc;
  cr_assert_eq(
      cn_toc_estargz_parse(blob.p + toc_off, blob.n - toc_off, blob.n, res.toc_digest, &toc, T.st),
      0, "%s", cairn_errmsg(T.st));
  check_toc(&toc, blob.p, big, true); /* every entry, every chunk */
  cr_assert_eq(toc.prefetch, 3);
  cr_assert_str_eq(toc.entries[0].path, "etc/hostname"); /* the layer's order */
  cr_assert_str_eq(toc.entries[1].path, "usr/bin/big");
  cr_assert_str_eq(toc.entries[2].path, LONG_NAME);
  cr_assert_str_eq(toc.entries[3].path, ".prefetch.landmark");
  cr_assert_eq(find(&toc, LONG_NAME)->prefetch_rank, 1);
  cr_assert_eq(find(&toc, "usr/bin/big")->prefetch_rank, 3);
  cr_assert_eq(find(&toc, "etc/hostname")->prefetch_rank, 4);
  cr_assert_eq(find(&toc, "d/hard")->prefetch_rank, 0); /* a hardlink: not a file's data */
  cr_assert_eq(toc.n_ranked, 3);
  cn_toc_free(&toc);
  free(big);
  free(tar.p);
  free(blob.p);
}

Test(chunked_write, refused) {
  unsigned char *big;
  buf tar = make_tar(ARCHIVE_FORMAT_TAR_PAX_RESTRICTED, &big), out = {0};
  cn_chunked_result res;
  /* cut inside the big file's data */
  buf cutoff = {.p = tar.p, .n = 512 * 20};
  cr_assert_eq(write_blob(CN_CHUNKED_ZSTD, &cutoff, 512, &out, &res), -EBADMSG);
  /* a header's checksum */
  tar.p[0] ^= 1;
  out.n = 0;
  cr_assert_eq(write_blob(CN_CHUNKED_ESTARGZ, &tar, 512, &out, &res), -EBADMSG);
  tar.p[0] ^= 1;
  free(out.p);
  free(big);
  free(tar.p);
  /* a GNU sparse file */
  buf s = {0};
  struct archive *a = archive_write_new();
  archive_write_set_format_pax_restricted(a);
  archive_write_open(a, &s, NULL, ar_write, NULL);
  struct archive_entry *e = archive_entry_new();
  archive_entry_set_pathname(e, "sparse");
  archive_entry_set_filetype(e, AE_IFREG);
  archive_entry_set_perm(e, 0644);
  archive_entry_set_size(e, 1 << 20);
  archive_entry_sparse_add_entry(e, 0, 512);
  archive_write_header(a, e);
  char blk[512] = "x";
  archive_write_data(a, blk, sizeof blk);
  archive_entry_free(e);
  archive_write_close(a);
  archive_write_free(a);
  buf o2 = {0};
  cr_assert_eq(write_blob(CN_CHUNKED_ZSTD, &s, 512, &o2, &res), -ENOTSUP);
  free(o2.p);
  free(s.p);
}
