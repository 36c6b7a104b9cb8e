/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_toc.c — the TOC parsers of lazily-pullable layers (store/remote/libcairn_toc.h)
 * on real blobs: a zstd:chunked layer podman 4.3.1 pushed (with the
 * manifest annotations it wrote), an eStargz layer the reference
 * implementation wrote (containerd's estargz 0.12, as Debian packages it)
 * and eStargz layers written by tests/helpers/estargz_gen.py, all in
 * tests/fuzz/corpus/toc_*. Each file's records are checked against what
 * the tree held, and every chunk is fetched from the blob at the recorded
 * offsets, decompressed and compared with its digest: what a lazy pull
 * will do. Then truncated, corrupt and hostile inputs: each is refused
 * with -EBADMSG (exit 5) and a one-line reason, nothing crashes.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "remote/libcairn_toc.h"
#include "testutil.h"

#define CORPUS CAIRN_SOURCE_DIR "/tests/fuzz/corpus/"

/* podman 4.3.1's push of tests/fuzz/corpus/toc_zstd_chunked/podman-4.3.zst:
 * the layer's annotations in the manifest. */
#define ZC_POSITION "301273:835:3516:1"
#define ZC_CHECKSUM "sha256:70863ddaa086e290020cdaadf31c01dcb61d7c864617247e1b636bb17e787a06"

static tu_store T;
static void setup(void) { tu_store_setup(&T); }
static void teardown(void) { tu_store_teardown(&T); }
TestSuite(toc, .init = setup, .fini = teardown);

/* Every chunk of every file, fetched from the blob as a lazy pull will:
 * its bytes decompress to its digest, and the whole to the file's. */
static void check_chunks(const cn_toc *toc, const unsigned char *blob, bool want_chunked) {
  size_t n_chunked = 0;
  for (size_t i = 0; i < toc->n_entries; i++) {
    const cn_toc_entry *e = &toc->entries[i];
    if (e->type != CN_TOC_REG || e->size == 0) {
      cr_assert_eq(e->n_chunks, 0, "%s", e->path);
      continue;
    }
    cr_assert_gt(e->n_chunks, 0, "%s", e->path);
    n_chunked += e->n_chunks > 1;
    unsigned char *file = malloc(e->size);
    cr_assert(file);
    uint64_t at = 0;
    for (size_t k = 0; k < e->n_chunks; k++) {
      const cn_toc_chunk *c = &e->chunks[k];
      cr_assert_eq(c->uoff, at, "%s chunk %zu", e->path, k);
      cr_assert_leq(c->off + c->csize, toc->data_end);
      unsigned char *out;
      size_t out_len;
      cr_assert_eq(
          cn_toc_decompress(blob + c->off, c->csize, 1 << 24, &out, &out_len, "chunk", T.st), 0,
          "%s chunk %zu: %s", e->path, k, cairn_errmsg(T.st));
      cr_assert_geq(out_len, c->inner + c->usize, "%s chunk %zu", e->path, k);
      if (c->digest[0]) {
        char d[CAIRN_DIGEST_LEN + 1];
        cn_toc_sha256(out + c->inner, c->usize, d);
        cr_assert_str_eq(d, c->digest, "%s chunk %zu", e->path, k);
      }
      memcpy(file + c->uoff, out + c->inner, c->usize);
      free(out);
      at += c->usize;
    }
    cr_assert_eq(at, e->size);
    char d[CAIRN_DIGEST_LEN + 1];
    cn_toc_sha256(file, e->size, d);
    cr_assert_str_eq(d, e->digest, "%s", e->path);
    free(file);
  }
  if (want_chunked) cr_assert_gt(n_chunked, 0, "no file in several chunks");
}

static const cn_toc_entry *find(const cn_toc *toc, const char *path) {
  const cn_toc_entry *e = cn_toc_find(toc, path);
  cr_assert(e, "no entry %s", path);
  return e;
}

/* What both fixtures' trees hold. */
static void check_common(const cn_toc *toc) {
  /* etc/hostname, or the hardlink to it that came first in the tar */
  const cn_toc_entry *h = find(toc, "etc/hostname");
  if (h->type == CN_TOC_HARDLINK) h = find(toc, h->link);
  cr_assert_eq(h->type, CN_TOC_REG);
  cr_assert_eq(h->size, 6);
  cr_assert_eq(h->mode, 0644);
  cr_assert_str_eq(h->digest,
                   "sha256:5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03");
  cr_assert_eq(h->n_xattrs, 1);
  cr_assert_str_eq(h->xattrs[0].name, "user.cairn");
  cr_assert_eq(h->xattrs[0].len, 8);
  cr_assert_eq(memcmp(h->xattrs[0].value, "toc-test", 8), 0);
  const cn_toc_entry *t = find(toc, "usr/bin/tool");
  cr_assert_eq(t->mode, 04755);
  cr_assert_eq(t->size, 3000);
  const cn_toc_entry *l = find(toc, "usr/bin/link");
  cr_assert_eq(l->type, CN_TOC_SYMLINK);
  cr_assert_str_eq(l->link, "../etc/hostname");
  cr_assert_eq(find(toc, "d/zero")->size, 0);
  cr_assert_eq(find(toc, "empty")->type, CN_TOC_DIR);
  cr_assert_null(cn_toc_find(toc, "nope"));
}

Test(toc, zstd_chunked_podman) {
  size_t len;
  unsigned char *blob = tu_read_file(CORPUS "toc_zstd_chunked/podman-4.3.zst", &len);
  cn_toc_zstd_pos pos, fpos;
  cr_assert_eq(cn_toc_zstd_position(ZC_POSITION, ZC_CHECKSUM, NULL, NULL, len, &pos, T.st), 0, "%s",
               cairn_errmsg(T.st));
  /* the footer says the same (without the checksum) */
  cr_assert_eq(cn_toc_zstd_footer(blob + len - 100, 100, len, &fpos, T.st), 0, "%s",
               cairn_errmsg(T.st));
  cr_assert_eq(fpos.off, pos.off);
  cr_assert_eq(fpos.len, pos.len);
  cr_assert_eq(fpos.ulen, pos.ulen);
  cn_toc toc;
  cr_assert_eq(cn_toc_zstd_chunked_parse(blob + pos.off, pos.len, &pos, len, &toc, T.st), 0, "%s",
               cairn_errmsg(T.st));
  cr_assert_eq(toc.format, CN_TOC_ZSTD_CHUNKED);
  cr_assert_eq(find(&toc, "")->type, CN_TOC_DIR); /* "./" */
  cr_assert_eq(toc.n_entries, 13);
  check_common(&toc);
  const cn_toc_entry *hard = find(&toc, "d/e/hard");
  cr_assert_eq(hard->type, CN_TOC_HARDLINK);
  cr_assert_str_eq(hard->link, "etc/hostname");
  const cn_toc_entry *big = find(&toc, "usr/bin/blobby");
  cr_assert_eq(big->size, 300000);
  cr_assert_eq(big->n_chunks, 4);
  cr_assert_eq(big->chunks[0].off, 587);
  cr_assert_eq(big->chunks[0].csize, 214603 - 587);
  cr_assert_eq(big->chunks[3].off + big->chunks[3].csize, 300645); /* its endOffset */
  cr_assert_eq(toc.entries[0].mtime_sec, 1796354226); /* 2026-12-04T03:17:06.968109658Z */
  cr_assert_eq(toc.entries[0].mtime_nsec, 968109658);
  check_chunks(&toc, blob, true);
  cn_toc_free(&toc);

  /* from the manifest's annotations object, either prefix */
  json_t *ann = json_pack("{s:s,s:s}", "io.containers.zstd-chunked.manifest-position", ZC_POSITION,
                          "io.containers.zstd-chunked.manifest-checksum", ZC_CHECKSUM);
  cn_toc_zstd_pos apos;
  cr_assert_eq(cn_toc_zstd_annotations(ann, len, &apos, T.st), 0, "%s", cairn_errmsg(T.st));
  cr_assert_eq(memcmp(&apos, &pos, sizeof pos), 0);
  json_decref(ann);
  ann = json_pack("{s:s,s:s}", "io.github.containers.zstd-chunked.manifest-position", ZC_POSITION,
                  "io.github.containers.zstd-chunked.manifest-checksum", ZC_CHECKSUM);
  cr_assert_eq(cn_toc_zstd_annotations(ann, len, &apos, T.st), 0, "%s", cairn_errmsg(T.st));
  cr_assert_str_eq(apos.digest, ZC_CHECKSUM);
  json_decref(ann);
  cr_assert_eq(cn_toc_zstd_annotations(NULL, len, &apos, T.st), -ENOENT);

  /* a newer producer's tar-split position is read too */
  cr_assert_eq(
      cn_toc_zstd_position(ZC_POSITION, ZC_CHECKSUM, "1000:10:20", ZC_CHECKSUM, len, &pos, T.st), 0,
      "%s", cairn_errmsg(T.st));
  cr_assert_eq(pos.ts_len, 10);
  free(blob);
}

Test(toc, zstd_chunked_refused) {
  size_t len;
  unsigned char *blob = tu_read_file(CORPUS "toc_zstd_chunked/podman-4.3.zst", &len);
  cn_toc_zstd_pos pos;
  cn_toc toc;
  cr_assert_eq(cn_toc_zstd_position(NULL, NULL, NULL, NULL, len, &pos, T.st), -ENOENT);
  const char *bad_pos[] = {"301273:835:3516",
                           "301273:835:3516:2",
                           "x:835:3516:1",
                           "301273:0:3516:1",
                           "301273:9999:3516:1",
                           "301273:835:3516:1:",
                           "18446744073709551615:2:1:1",
                           "99999999999999999999:1:1:1",
                           ""};
  for (size_t i = 0; i < sizeof bad_pos / sizeof *bad_pos; i++) {
    int r = cn_toc_zstd_position(bad_pos[i], ZC_CHECKSUM, NULL, NULL, len, &pos, T.st);
    cr_assert_eq(r, -EBADMSG, "%s: %d", bad_pos[i], r);
    cr_assert_eq(cairn_exit_code(r), CAIRN_EXIT_INTEGRITY);
    cr_assert_null(strchr(cairn_errmsg(T.st), '\n'));
  }
  cr_assert_eq(cn_toc_zstd_position(ZC_POSITION, "sha256:00", NULL, NULL, len, &pos, T.st),
               -EBADMSG);
  /* a wrong checksum */
  cr_assert_eq(cn_toc_zstd_position(ZC_POSITION,
                                    "sha256:0000000000000000000000000000000000000000000000000000"
                                    "000000000000",
                                    NULL, NULL, len, &pos, T.st),
               0);
  cr_assert_eq(cn_toc_zstd_chunked_parse(blob + pos.off, pos.len, &pos, len, &toc, T.st), -EBADMSG);
  cr_assert(strstr(cairn_errmsg(T.st), "digest"), "%s", cairn_errmsg(T.st));
  /* truncated: fewer bytes than the position says */
  cr_assert_eq(cn_toc_zstd_position(ZC_POSITION, ZC_CHECKSUM, NULL, NULL, len, &pos, T.st), 0);
  cr_assert_eq(cn_toc_zstd_chunked_parse(blob + pos.off, pos.len - 1, &pos, len, &toc, T.st),
               -EBADMSG);
  /* corrupt, with no checksum to catch it: the decompressor does */
  cn_toc_zstd_pos nock = pos;
  nock.digest[0] = '\0';
  unsigned char *copy = malloc(pos.len);
  memcpy(copy, blob + pos.off, pos.len);
  copy[pos.len / 2] ^= 0x55;
  cr_assert_eq(cn_toc_zstd_chunked_parse(copy, pos.len, &nock, len, &toc, T.st), -EBADMSG);
  /* a wrong uncompressed length */
  nock.ulen = pos.ulen - 1;
  cr_assert_eq(cn_toc_zstd_chunked_parse(blob + pos.off, pos.len, &nock, len, &toc, T.st), -EFBIG);
  free(copy);
  /* the blob cut short: the TOC's chunks would reach past it */
  cr_assert_eq(cn_toc_zstd_position(ZC_POSITION, ZC_CHECKSUM, NULL, NULL, 301273 + 835, &pos, T.st),
               0);
  cr_assert_eq(cn_toc_zstd_position(ZC_POSITION, ZC_CHECKSUM, NULL, NULL, 301273 + 834, &pos, T.st),
               -EBADMSG);
  /* no footer in the last bytes */
  cr_assert_eq(cn_toc_zstd_footer(blob, 100, len, &pos, T.st), -EBADMSG);
  free(blob);
}

static void estargz_fixture(const char *name, bool landmark_prefetch) {
  char path[512];
  snprintf(path, sizeof path, CORPUS "toc_estargz/%s", name);
  size_t len;
  unsigned char *blob = tu_read_file(path, &len);
  /* footer first (what a lazy pull fetches first), then the TOC */
  uint64_t toc_off;
  cr_assert_eq(cn_toc_estargz_footer(blob + len - 51, 51, len, &toc_off, T.st), 0, "%s",
               cairn_errmsg(T.st));
  cn_toc toc;
  cr_assert_eq(cn_toc_estargz_parse(blob + toc_off - 1, len - toc_off + 1, len, NULL, &toc, T.st),
               0, "%s", cairn_errmsg(T.st));
  cr_assert_eq(toc.toc_off, toc_off);
  cr_assert_eq(toc.data_end, toc_off);
  check_common(&toc);
  const cn_toc_entry *big = find(&toc, "usr/bin/big");
  cr_assert_eq(big->size, 100000);
  cr_assert_eq(big->n_chunks, landmark_prefetch ? 4 : 1);
  cr_assert_eq(find(&toc, "d/hard")->type + find(&toc, "etc/hostname")->type,
               CN_TOC_HARDLINK + CN_TOC_REG);
  cr_assert_eq(find(&toc, "usr/bin/tool")->mtime_sec, 1767323045); /* 2026-01-02 03:04:05Z */
  if (landmark_prefetch) {
    /* etc/hostname and usr/bin/tool, then the landmark */
    cr_assert_eq(toc.prefetch, 2);
    cr_assert_str_eq(toc.entries[2].path, ".prefetch.landmark");
    cr_assert(toc.entries[2].flags & CN_TOC_F_LANDMARK);
    cr_assert(!toc.no_prefetch);
    /* d/a and d/b share the member of the file before them */
    const cn_toc_entry *a = find(&toc, "d/a"), *b = find(&toc, "d/b");
    cr_assert_eq(a->chunks[0].off, b->chunks[0].off);
    cr_assert_gt(b->chunks[0].inner, a->chunks[0].inner);
  } else {
    cr_assert_eq(toc.prefetch, 0);
    cr_assert(toc.no_prefetch);
  }
  check_chunks(&toc, blob, landmark_prefetch);
  char want[CAIRN_DIGEST_LEN + 1];
  strcpy(want, toc.toc_digest);
  cn_toc_free(&toc);
  /* the manifest's TOC digest is checked */
  cr_assert_eq(cn_toc_estargz_parse(blob, len, len, want, &toc, T.st), 0);
  cn_toc_free(&toc);
  want[10] ^= 1;
  cr_assert_eq(cn_toc_estargz_parse(blob, len, len, want, &toc, T.st), -EBADMSG);
  /* too few bytes to reach the TOC */
  cr_assert_eq(cn_toc_estargz_parse(blob + toc_off + 1, len - toc_off - 1, len, NULL, &toc, T.st),
               -ERANGE);
  /* truncated: the footer is gone */
  cr_assert_eq(cn_toc_estargz_parse(blob, len - 1, len - 1, NULL, &toc, T.st), -EBADMSG);
  /* corrupt: a byte of the TOC member */
  blob[toc_off + (len - toc_off - 51) / 2] ^= 0x10;
  cr_assert_eq(cn_toc_estargz_parse(blob, len, len, NULL, &toc, T.st), -EBADMSG);
  cr_assert_null(strchr(cairn_errmsg(T.st), '\n'));
  blob[toc_off + (len - toc_off - 51) / 2] ^= 0x10;
  /* a footer whose offset points past the blob */
  memcpy(blob + len - 51 + 16, "7fffffffffffffff", 16);
  cr_assert_eq(cn_toc_estargz_footer(blob + len - 51, 51, len, &toc_off, T.st), -EBADMSG);
  memcpy(blob + len - 51 + 16, "000000000000000g", 16);
  cr_assert_eq(cn_toc_estargz_footer(blob + len - 51, 51, len, &toc_off, T.st), -EBADMSG);
  free(blob);
}

Test(toc, estargz_prefetch_inner) { estargz_fixture("prefetch-inner.gz", true); }
Test(toc, estargz_no_prefetch) { estargz_fixture("no-prefetch.gz", false); }

/* Written by the reference, containerd's estargz package 0.12 (Debian's
 * golang-github-containerd-stargz-snapshotter-dev, through
 * tests/helpers/estargz_ref/main.go) from a tar of the same tree, with
 * usr/bin/tool prioritised and 32 KiB chunks. */
Test(toc, estargz_reference) {
  size_t len;
  unsigned char *blob = tu_read_file(CORPUS "toc_estargz/reference-0.12.gz", &len);
  cn_toc toc;
  cr_assert_eq(cn_toc_estargz_parse(blob, len, len, NULL, &toc, T.st), 0, "%s", cairn_errmsg(T.st));
  check_common(&toc);
  cr_assert_eq(find(&toc, "")->type, CN_TOC_DIR); /* "./" */
  cr_assert_str_eq(find(&toc, "etc/hostname")->link, "d/hard");
  /* the prioritised file, then the landmark */
  cr_assert_str_eq(toc.entries[3].path, "usr/bin/tool");
  cr_assert_eq(toc.prefetch, 4);
  cr_assert_str_eq(toc.entries[4].path, ".prefetch.landmark");
  const cn_toc_entry *big = find(&toc, "usr/bin/big");
  cr_assert_eq(big->n_chunks, 4);
  cr_assert_eq(big->chunks[3].usize, 100000 - 3 * 32768); /* "chunkSize" 0: the rest */
  check_chunks(&toc, blob, true);
  cn_toc_free(&toc);
  free(blob);
}

Test(toc, estargz_toc_digest_is_the_json) {
  size_t len, jlen;
  unsigned char *blob = tu_read_file(CORPUS "toc_estargz/prefetch-inner.gz", &len);
  unsigned char *js = tu_read_file(CORPUS "toc_estargz/prefetch-inner-toc.json", &jlen);
  char d[CAIRN_DIGEST_LEN + 1];
  cn_toc_sha256(js, jlen, d);
  cn_toc toc;
  cr_assert_eq(cn_toc_estargz_parse(blob, len, len, d, &toc, T.st), 0, "%s", cairn_errmsg(T.st));
  cn_toc_free(&toc);
  free(js);
  free(blob);
}

/* ---- hostile entries --------------------------------------------------- */

#define DG "sha256:5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03"

/* Parses a JSON entries array with the file data ending at 1000. */
static int entries(const char *json, cn_toc *toc) {
  json_error_t e;
  json_t *j = json_loads(json, 0, &e);
  cr_assert(j, "%s: %s", json, e.text);
  memset(toc, 0, sizeof *toc);
  toc->data_end = 1000;
  int r = cn_toc_entries_parse(j, toc, T.st);
  json_decref(j);
  return r;
}

/* A file whose content is itself compressed (a .gz in a layer) comes out
 * of its frame as those bytes, decompressed once: the filter is chosen by
 * the frame's magic, not bid for again on what it gives. */
Test(toc, decompress_once) {
  static const char text[] = "the content of sed.info, before gzip";
  for (unsigned outer = TU_GZIP; outer <= TU_ZSTD; outer++)
    for (unsigned inner = TU_GZIP; inner <= TU_ZSTD; inner++) {
      void *gz = NULL, *frame = NULL;
      size_t gz_len = 0, frame_len = 0;
      tu_compress(text, sizeof text, inner, &gz, &gz_len);
      tu_compress(gz, gz_len, outer, &frame, &frame_len);
      unsigned char *u = NULL;
      size_t ulen = 0;
      cr_assert_eq(cn_toc_decompress(frame, frame_len, gz_len, &u, &ulen, "x.gz", T.st), 0,
                   "outer %u inner %u: %s", outer, inner, cairn_errmsg(T.st));
      cr_assert_eq(ulen, gz_len, "outer %u inner %u", outer, inner);
      cr_assert_eq(memcmp(u, gz, gz_len), 0);
      free(u);
      free(gz);
      free(frame);
    }
}

Test(toc, paths_normalised) {
  char out[CN_TOC_PATH_MAX + 1];
  cr_assert_eq(cn_toc_path_normalize("./a//b/./c/", out, NULL), 0);
  cr_assert_str_eq(out, "a/b/c");
  cr_assert_eq(cn_toc_path_normalize("/etc/x", out, NULL), 0);
  cr_assert_str_eq(out, "etc/x");
  cr_assert_eq(cn_toc_path_normalize("./", out, NULL), 0);
  cr_assert_str_eq(out, "");
  cr_assert_eq(cn_toc_path_normalize("a/../../etc", out, NULL), -EBADMSG);
  cr_assert_eq(cn_toc_path_normalize("..", out, NULL), -EBADMSG);
  char long_name[300];
  memset(long_name, 'x', 299);
  long_name[299] = '\0';
  cr_assert_eq(cn_toc_path_normalize(long_name, out, NULL), -EBADMSG);
  char *deep = malloc(8000);
  for (int i = 0; i < 4000; i++) memcpy(deep + 2 * i, "a/", 2);
  deep[7999] = '\0';
  cr_assert_eq(cn_toc_path_normalize(deep, out, NULL), -EBADMSG);
  free(deep);
}

Test(toc, duplicates_later_wins) {
  cn_toc toc;
  cr_assert_eq(entries("[{\"type\":\"dir\",\"name\":\"./\"},"
                       "{\"type\":\"reg\",\"name\":\"a\",\"size\":6,\"digest\":\"" DG
                       "\",\"offset\":10},"
                       "{\"type\":\"symlink\",\"name\":\"./a\",\"linkName\":\"b\"}]",
                       &toc),
               0, "%s", cairn_errmsg(T.st));
  cr_assert_eq(toc.n_entries, 2);
  cr_assert_eq(find(&toc, "a")->type, CN_TOC_SYMLINK);
  cn_toc_free(&toc);
}

Test(toc, hostile_entries) {
  static const struct {
    const char *json, *why;
  } cases[] = {
      {"[{\"type\":\"reg\",\"name\":\"../x\"}]", "\"..\""},
      {"[{\"type\":\"reg\",\"name\":\"a/../../x\"}]", "\"..\""},
      {"[{\"type\":\"reg\",\"name\":\"/\"}]", "root"},
      {"[{\"type\":\"sock\",\"name\":\"a\"}]", "type"},
      {"[{\"name\":\"a\"}]", "type"},
      {"[{\"type\":\"reg\"}]", "name"},
      {"[1]", "object"},
      {"[{\"type\":\"reg\",\"name\":\"a\",\"size\":-1}]", "size"},
      {"[{\"type\":\"reg\",\"name\":\"a\",\"size\":1.5}]", "size"},
      {"[{\"type\":\"reg\",\"name\":\"a\",\"uid\":4294967296}]", "uid"},
      {"[{\"type\":\"reg\",\"name\":\"a\",\"size\":6,\"offset\":10}]", "digest"},
      {"[{\"type\":\"reg\",\"name\":\"a\",\"size\":6,\"digest\":\"sha256:12\",\"offset\":10}]",
       "digest"},
      {"[{\"type\":\"reg\",\"name\":\"a\",\"size\":6,\"digest\":\"" DG "\"}]", "offset"},
      /* data past the end of the file data, or reaching it by overflow */
      {"[{\"type\":\"reg\",\"name\":\"a\",\"size\":6,\"digest\":\"" DG "\",\"offset\":1000}]",
       "past"},
      {"[{\"type\":\"reg\",\"name\":\"a\",\"size\":6,\"digest\":\"" DG
       "\",\"offset\":10,\"endOffset\":1001}]",
       "past"},
      {"[{\"type\":\"reg\",\"name\":\"a\",\"size\":6,\"digest\":\"" DG
       "\",\"offset\":9223372036854775807}]",
       "past"},
      {"[{\"type\":\"reg\",\"name\":\"a\",\"size\":6,\"digest\":\"" DG
       "\",\"offset\":10,\"innerOffset\":1152921504606846975}]",
       "innerOffset"},
      {"[{\"type\":\"reg\",\"name\":\"a\",\"size\":6,\"digest\":\"" DG
       "\",\"offset\":10,\"endOffset\":5}]",
       "ends before"},
      /* chunks */
      {"[{\"type\":\"chunk\",\"name\":\"a\",\"offset\":10}]", "follows no"},
      {"[{\"type\":\"reg\",\"name\":\"a\",\"size\":6,\"digest\":\"" DG
       "\",\"offset\":10,\"chunkSize\":3},{\"type\":\"chunk\",\"name\":\"b\",\"offset\":20,"
       "\"chunkOffset\":3}]",
       "another file"},
      {"[{\"type\":\"reg\",\"name\":\"a\",\"size\":6,\"digest\":\"" DG
       "\",\"offset\":10,\"chunkSize\":3},{\"type\":\"chunk\",\"name\":\"a\",\"offset\":20,"
       "\"chunkOffset\":4}]",
       "chunkOffset"},
      {"[{\"type\":\"reg\",\"name\":\"a\",\"size\":6,\"digest\":\"" DG
       "\",\"offset\":10,\"chunkSize\":3}]",
       "cover"},
      {"[{\"type\":\"reg\",\"name\":\"a\",\"size\":6,\"digest\":\"" DG
       "\",\"offset\":10,\"chunkSize\":3},{\"type\":\"chunk\",\"name\":\"a\",\"offset\":20,"
       "\"chunkOffset\":3},{\"type\":\"chunk\",\"name\":\"a\",\"offset\":30,\"chunkOffset\":6}]",
       "past the file"},
      {"[{\"type\":\"reg\",\"name\":\"a\",\"size\":6,\"digest\":\"" DG
       "\",\"offset\":10,\"chunkSize\":3,\"endOffset\":40},{\"type\":\"chunk\",\"name\":\"a\","
       "\"offset\":5,\"chunkOffset\":3}]",
       "ends before"},
      /* links and parents */
      {"[{\"type\":\"hardlink\",\"name\":\"a\",\"linkName\":\"b\"}]", "hardlink"},
      {"[{\"type\":\"hardlink\",\"name\":\"a\",\"linkName\":\"a\"}]", "hardlink"},
      {"[{\"type\":\"hardlink\",\"name\":\"a\",\"linkName\":\"b\"},{\"type\":\"reg\",\"name\":"
       "\"b\"}]",
       "before it"},
      {"[{\"type\":\"dir\",\"name\":\"d\"},{\"type\":\"hardlink\",\"name\":\"a\",\"linkName\":"
       "\"d\"}]",
       "directory"},
      {"[{\"type\":\"hardlink\",\"name\":\"a\",\"linkName\":\"../etc/shadow\"}]", "\"..\""},
      {"[{\"type\":\"symlink\",\"name\":\"a\"}]", "linkName"},
      {"[{\"type\":\"reg\",\"name\":\"a\"},{\"type\":\"reg\",\"name\":\"a/b\"}]", "parent"},
      {"[{\"type\":\"reg\",\"name\":\"a\",\"modtime\":\"yesterday\"}]", "modtime"},
      /* extended attributes */
      {"[{\"type\":\"reg\",\"name\":\"a\",\"xattrs\":{\"user.x\":\"%%%%\"}}]", "base64"},
      {"[{\"type\":\"reg\",\"name\":\"a\",\"xattrs\":{\"user.x\":\"abc\"}}]", "base64"},
      {"[{\"type\":\"reg\",\"name\":\"a\",\"xattrs\":{\"user.x\":1}}]", "string"},
      {"[{\"type\":\"reg\",\"name\":\"a\",\"xattrs\":[]}]", "object"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    cn_toc toc;
    int r = entries(cases[i].json, &toc);
    cr_expect_eq(r, -EBADMSG, "case %zu %s: %d", i, cases[i].json, r);
    cr_expect(strstr(cairn_errmsg(T.st), cases[i].why), "case %zu: \"%s\" lacks \"%s\"", i,
              cairn_errmsg(T.st), cases[i].why);
    cr_expect_null(strchr(cairn_errmsg(T.st), '\n'));
    cn_toc_free(&toc);
  }
}

Test(toc, bounded) {
  /* more entries than the bound: refused before any is read */
  size_t n = CN_TOC_ENTRIES_MAX + 1;
  json_t *arr = json_array();
  json_t *o = json_pack("{s:s,s:s}", "type", "dir", "name", "d");
  for (size_t i = 0; i < n; i++) json_array_append(arr, o);
  json_decref(o);
  cn_toc toc = {0};
  toc.data_end = 1000;
  cr_assert_eq(cn_toc_entries_parse(arr, &toc, T.st), -EFBIG);
  cn_toc_free(&toc);
  json_decref(arr);
  /* a decompression bomb stops at the bound */
  size_t len;
  unsigned char *blob = tu_read_file(CORPUS "toc_zstd_chunked/podman-4.3.zst", &len);
  unsigned char *out;
  size_t out_len;
  cr_assert_eq(cn_toc_decompress(blob + 301273, 835, 100, &out, &out_len, "TOC", T.st), -EFBIG);
  free(blob);
}

/* A later producer's layout (written with the zstd tool by the test's
 * author, tests/fuzz/corpus/toc_zstd_chunked/tarsplit-footer.zst): the
 * 72-byte footer with the tar-split's position, which is read, checked
 * and decompressed. */
Test(toc, zstd_chunked_tarsplit_footer) {
  size_t len;
  unsigned char *blob = tu_read_file(CORPUS "toc_zstd_chunked/tarsplit-footer.zst", &len);
  cn_toc_zstd_pos pos;
  cr_assert_eq(cn_toc_zstd_footer(blob, len, len, &pos, T.st), 0, "%s", cairn_errmsg(T.st));
  cr_assert_gt(pos.ts_len, 0);
  cn_toc toc;
  cr_assert_eq(cn_toc_zstd_chunked_parse(blob + pos.off, pos.len, &pos, len, &toc, T.st), 0, "%s",
               cairn_errmsg(T.st));
  cr_assert_eq(toc.n_entries, 3);
  cr_assert_eq(toc.data_end, pos.off);
  cr_assert_str_eq(find(&toc, "b")->link, "a");
  cn_toc_free(&toc);
  /* the tar-split, checked against the manifest's checksum */
  char sum[CAIRN_DIGEST_LEN + 1];
  cn_toc_sha256(blob + pos.ts_off, pos.ts_len, sum);
  char position[64];
  snprintf(position, sizeof position, "%llu:%llu:%llu:1", (unsigned long long)pos.off,
           (unsigned long long)pos.len, (unsigned long long)pos.ulen);
  char ts_position[64];
  snprintf(ts_position, sizeof ts_position, "%llu:%llu:%llu", (unsigned long long)pos.ts_off,
           (unsigned long long)pos.ts_len, (unsigned long long)pos.ts_ulen);
  cr_assert_eq(cn_toc_zstd_position(position, NULL, ts_position, sum, len, &pos, T.st), 0, "%s",
               cairn_errmsg(T.st));
  unsigned char *ts;
  size_t ts_len;
  cr_assert_eq(cn_toc_zstd_tarsplit(blob + pos.ts_off, pos.ts_len, &pos, &ts, &ts_len, T.st), 0,
               "%s", cairn_errmsg(T.st));
  cr_assert_eq(ts_len, pos.ts_ulen);
  cr_assert_eq(memcmp(ts, "{\"type\":1", 9), 0);
  free(ts);
  sum[20] ^= 1;
  cr_assert_eq(cn_toc_zstd_position(position, NULL, ts_position, sum, len, &pos, T.st), 0);
  cr_assert_eq(cn_toc_zstd_tarsplit(blob + pos.ts_off, pos.ts_len, &pos, &ts, &ts_len, T.st),
               -EBADMSG);
  /* a tar-split overlapping the TOC is refused */
  char overlap[64];
  snprintf(overlap, sizeof overlap, "%llu:%llu:%llu", (unsigned long long)pos.off,
           (unsigned long long)pos.len, (unsigned long long)pos.ulen);
  cr_assert_eq(cn_toc_zstd_position(position, NULL, overlap, sum, len, &pos, T.st), -EBADMSG);
  cr_assert(strstr(cairn_errmsg(T.st), "overlaps"), "%s", cairn_errmsg(T.st));
  free(blob);
}
