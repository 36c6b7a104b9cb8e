/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_lazy.c — partial layers, the store side of lazy pulls (store/lazy.c;
 * doc/lazy-pulls.md): a layer recorded from a TOC links the files the
 * store holds and keeps the others pending (read back as "sha256:HEX"), a
 * fetched file is refused unless it hashes to its sha256 and otherwise
 * names its blob in one transaction, the last one makes the layer
 * complete, and its finish (with its tar record) takes its source and kept
 * TOC away; fsck accepts a partial layer (and a complete one not finished)
 * and finds a pending row that disagrees with its entry; a store of schema
 * 6 is migrated. The pull side (store/remote/lazy.c): every file of
 * real eStargz blobs (the reference's; estargz_gen.py's, with innerOffset
 * and chunks) unpacks from its gzip members to its bytes, a corrupt byte
 * fails that file only, and the TOC's own entry is the TOC JSON.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "libcairn_store.h" /* st->db */
#include "remote/libcairn_remote_lazy.h"
#include "remote/libcairn_toc.h"
#include "testutil.h"

static tu_store T;
static void setup(void) { tu_store_setup(&T); }
static void teardown(void) { tu_store_teardown(&T); }
TestSuite(lazy, .init = setup, .fini = teardown);

#define LAYER "1111111111111111111111111111111111111111111111111111111111111111"
#define BLOB_DIGEST "sha256:2222222222222222222222222222222222222222222222222222222222222222"
static const char TOC[] = "the TOC's bytes, as the pull verified them";

static char *sql_text(const char *sql) {
  sqlite3_stmt *q;
  cr_assert_eq(sqlite3_prepare_v2(T.st->db, sql, -1, &q, NULL), SQLITE_OK, "%s",
               sqlite3_errmsg(T.st->db));
  char *v = sqlite3_step(q) == SQLITE_ROW && sqlite3_column_text(q, 0)
                ? strdup((const char *)sqlite3_column_text(q, 0))
                : NULL;
  sqlite3_finalize(q);
  return v;
}

static long sql_long(const char *sql) {
  char *v = sql_text(sql);
  long n = v ? atol(v) : -1;
  free(v);
  return n;
}

static void sha(const char *s, char out[80]) {
  char hex[65];
  tu_sha256_hex(s, strlen(s), hex);
  snprintf(out, 80, "sha256:%s", hex);
}

struct found {
  const char *path;
  char blob[80];
  bool seen;
};

static int find_entry(const cairn_entry *e, void *arg) {
  struct found *f = arg;
  if (strcmp(e->path, f->path) != 0) return 0;
  snprintf(f->blob, sizeof f->blob, "%s", e->blob ? e->blob : "");
  f->seen = true;
  return 1;
}

static char *blob_of(const char *path) {
  struct found f = {.path = path};
  cr_assert_geq(cn_layer_foreach(T.st, LAYER, find_entry, &f), 0);
  cr_assert(f.seen, "%s: no entry", path);
  return strdup(f.blob);
}

/* A layer with "a" (content the store holds: hello) and "b" (world, which
 * it does not) recorded from its TOC: one file pending. */
static void record(void) {
  static const tu_entry stored[] = {{.path = "x", .content = "hello\n"}};
  cairn_id other;
  cr_assert_eq(tu_ingest(T.st, stored, 1, TU_PLAIN, NULL, other), 0, "%s", cairn_errmsg(T.st));
  static char sha_a[80], sha_b[80];
  sha("hello\n", sha_a);
  sha("world", sha_b);
  cairn_entry e[] = {
      {.path = "", .type = CAIRN_DIR, .mode = 0755},
      {.path = "d/b", .type = CAIRN_REG, .mode = 0644, .size = 5, .blob = sha_b},
      {.path = "a", .type = CAIRN_REG, .mode = 0644, .size = 6, .blob = sha_a},
      {.path = "d", .type = CAIRN_DIR, .mode = 0755},
      {.path = "l", .type = CAIRN_SYMLINK, .mode = 0777, .target = "a"},
      {.path = "empty", .type = CAIRN_REG, .mode = 0600},
  };
  static char toc_digest[80];
  char hex[65];
  tu_sha256_hex(TOC, sizeof TOC, hex);
  snprintf(toc_digest, sizeof toc_digest, "sha256:%s", hex);
  cairn_lazy_source src = {.source = "127.0.0.1:1/r",
                           .digest = BLOB_DIGEST,
                           .media_type = "application/vnd.oci.image.layer.v1.tar+zstd",
                           .size = 1000,
                           .annotations = "{}",
                           .toc_digest = toc_digest};
  size_t pending = 0;
  cr_assert_eq(cn_layer_record_partial(T.st, LAYER, e, TU_N(e), &src, TOC, sizeof TOC, &pending),
               0, "%s", cairn_errmsg(T.st));
  cr_expect_eq(pending, 1);
}

static bool toc_kept(void) {
  char path[4096];
  snprintf(path, sizeof path, "%s/toc/%s", T.dir, &BLOB_DIGEST[7]);
  return access(path, F_OK) == 0;
}

Test(lazy, a_partial_layer_is_recorded_and_completed) {
  record();
  cr_expect_eq(sql_long("SELECT count(*) FROM pending"), 1);
  char *state = sql_text("SELECT state FROM layers WHERE id = '" LAYER "'");
  cr_expect_str_eq(state, "partial");
  free(state);
  cr_expect(toc_kept(), "the TOC is not kept");
  char *a = blob_of("a"), *b = blob_of("d/b");
  cr_expect(!cairn_blob_is_pending(a), "a stored content was not linked: %s", a);
  char sha_b[80];
  sha("world", sha_b);
  cr_expect_str_eq(b, sha_b, "a pending file reads back as its sha256");
  free(b);

  /* a partial layer is not finished */
  cr_expect_eq(cn_lazy_layer_finished(T.st, LAYER), -EINVAL);
  cr_expect_eq(sql_long("SELECT count(*) FROM layer_sources"), 1);

  /* a file that is not the content: refused, nothing changes */
  char blob[48];
  int fd = tu_memfd("worle", 5);
  cr_expect_eq(cn_lazy_file_store(T.st, sha_b, fd, 5, blob), -EBADMSG);
  close(fd);
  cr_expect_eq(sql_long("SELECT count(*) FROM pending"), 1);

  /* the content: named, the layer complete; its source and TOC stay
   * until it is finished (its exact tar recorded) */
  fd = tu_memfd("world", 5);
  cr_assert_eq(cn_lazy_file_store(T.st, sha_b, fd, 5, blob), 0, "%s", cairn_errmsg(T.st));
  close(fd);
  cr_expect_eq(sql_long("SELECT count(*) FROM pending"), 0);
  cr_expect_eq(sql_long("SELECT count(*) FROM layer_sources"), 1);
  state = sql_text("SELECT state FROM layers WHERE id = '" LAYER "'");
  cr_expect_str_eq(state, "complete");
  free(state);
  cr_expect(toc_kept(), "the TOC of a complete layer not finished is gone");
  cairn_report rep = {0};
  cr_expect_eq(cairn_fsck(T.st, false, &rep), 0, "a complete layer not finished: %s",
               rep.n_lines ? rep.lines[0] : cairn_errmsg(T.st));
  cairn_report_free(&rep);
  cairn_lazy_file lf;
  cr_expect_eq(cn_lazy_source_get(T.st, LAYER, &lf), 2);
  cn_lazy_file_clear(&lf);
  /* finished once its tar is recorded: its source and TOC go, its size
   * is the tar's */
  cr_assert_eq(sqlite3_exec(T.st->db,
                            "INSERT INTO layer_tars(layer_id, size, data) VALUES('" LAYER
                            "', 3072, x'00')",
                            NULL, NULL, NULL),
               SQLITE_OK);
  cr_expect_eq(cn_lazy_layer_finished(T.st, LAYER), 0, "%s", cairn_errmsg(T.st));
  cr_expect_eq(sql_long("SELECT count(*) FROM layer_sources"), 0);
  cr_expect_eq(sql_long("SELECT size FROM layers WHERE id = '" LAYER "'"), 3072);
  cr_expect(!toc_kept(), "the TOC of a finished layer is kept");
  cr_expect_eq(cn_lazy_source_get(T.st, LAYER, &lf), 0);
  cr_expect_eq(cn_lazy_layer_finished(T.st, LAYER), 0, "finished twice: %s", cairn_errmsg(T.st));
  b = blob_of("d/b");
  cr_expect_str_eq(b, blob);
  char *data = tu_blob_read(T.st, b, NULL);
  cr_expect_str_eq(data, "world");
  free(data);
  free(a);
  free(b);
}

/* The fixture's TOC is bytes, not a TOC: fsck, which parses kept TOCs
 * too, says so and nothing else. */
static void expect_only_the_toc_unparsed(const cairn_report *r) {
  for (size_t i = 0; i < r->n_lines; i++)
    cr_expect(strncmp(r->lines[i], "problem: ", 9) != 0 ||
                  strstr(r->lines[i], ": its kept TOC: ") != NULL,
              "fsck: %s", r->lines[i]);
}

Test(lazy, fsck_accepts_a_partial_layer_and_checks_its_rows) {
  record();
  cairn_report r = {0};
  cr_expect_eq(cairn_fsck(T.st, false, &r), -EBADMSG, "%s", cairn_errmsg(T.st));
  cr_expect_eq(r.problems, 1);
  expect_only_the_toc_unparsed(&r);
  cairn_report_free(&r);
  char *a = blob_of("a");
  char *sql;
  cr_assert(asprintf(&sql, "UPDATE entries SET blob = '%s' WHERE path = 'd/b'", a) > 0);
  cr_assert_eq(sqlite3_exec(T.st->db, sql, NULL, NULL, NULL), SQLITE_OK);
  free(sql);
  free(a);
  r = (cairn_report){0};
  cr_expect_eq(cairn_fsck(T.st, false, &r), -EBADMSG);
  bool said = false;
  for (size_t i = 0; i < r.n_lines; i++)
    said |= strstr(r.lines[i], "pending file d/b does not match its entry") != NULL;
  cr_expect(said, "fsck did not name the pending file");
  cairn_report_free(&r);
}

/* A layer a lazy pull recorded, its diff_id unproven, is reusable only by
 * a lazy pull of the same blob and annotations: recording that diff_id
 * again from another blob (a pull that looked before it was there) is 2,
 * nothing recorded; a full pull may not reuse it at all. */
Test(lazy, an_unproven_layer_is_reused_only_for_its_own_blob) {
  record();
  cr_expect_eq(cn_layer_reusable(T.st, LAYER, BLOB_DIGEST, "{}"), 1);
  cr_expect_eq(cn_layer_reusable(T.st, LAYER, BLOB_DIGEST, "{\"a\":\"b\"}"), 2);
  cr_expect_eq(cn_layer_reusable(T.st, LAYER, NULL, NULL), 2, "a full pull reused it");
  cairn_entry e[] = {{.path = "", .type = CAIRN_DIR, .mode = 0755}};
  cairn_lazy_source src = {.source = "127.0.0.1:2/other",
                           .digest = "sha256:3333333333333333333333333333333333333333333333333333"
                                     "333333333333",
                           .media_type = "application/vnd.oci.image.layer.v1.tar+zstd",
                           .size = 1000,
                           .annotations = "{}",
                           .toc_digest = "sha256:x"};
  size_t pending = 7;
  cr_expect_eq(cn_layer_record_partial(T.st, LAYER, e, 1, &src, TOC, sizeof TOC, &pending), 2,
               "%s", cairn_errmsg(T.st));
  cr_expect_eq(sql_long("SELECT count(*) FROM layer_sources WHERE digest = '" BLOB_DIGEST "'"), 1);
  cr_expect_eq(sql_long("SELECT count(*) FROM entries WHERE layer_id = '" LAYER "'"), 6);
}

Test(lazy, a_store_of_schema_6_is_migrated) {
  cr_assert_eq(sqlite3_exec(T.st->db,
                            "DROP TABLE layer_origins; DROP TABLE layer_refuted;"
                            " DROP TABLE pending;"
                            " DROP TABLE layer_sources;"
                            " ALTER TABLE layers DROP COLUMN state;"
                            " ALTER TABLE mounts DROP COLUMN dir_dev;" /* schema 10's */
                            " ALTER TABLE mounts DROP COLUMN dir_ino;"
                            " ALTER TABLE mounts DROP COLUMN dir_uid;"
                            " UPDATE meta SET value = '6' WHERE key = 'schema_version'",
                            NULL, NULL, NULL),
               SQLITE_OK, "%s", sqlite3_errmsg(T.st->db));
  tu_store_reopen(&T);
  cr_expect_geq(sql_long("SELECT value FROM meta WHERE key = 'schema_version'"), 7);
  record();
  cr_expect_eq(sql_long("SELECT count(*) FROM pending"), 1);
}

/* ---- unpacking eStargz files (store/remote/lazy.c) ------------------------- */

#define CORPUS CAIRN_SOURCE_DIR "/tests/fuzz/corpus/"

static unsigned char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  cr_assert_not_null(f, "%s", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *b = malloc((size_t)n);
  cr_assert_eq(fread(b, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  *len = (size_t)n;
  return b;
}

/* Unpacks e from the whole blob into a temporary file: its result, and
 * (when 0) the file's content checked against the TOC's sha256 here too. */
static int unpack_one(const cn_toc_entry *e, const unsigned char *blob) {
  int fd = open(T.dir, O_TMPFILE | O_RDWR, 0600);
  cr_assert_geq(fd, 0);
  int r = cn_lazy_unpack(e, blob, 0, fd, T.st);
  if (r == 0) {
    unsigned char *got = malloc(e->size ? e->size : 1);
    cr_assert_eq(pread(fd, got, e->size, 0), (ssize_t)e->size, "%s", e->path);
    char hex[65], want[80];
    tu_sha256_hex(got, e->size, hex);
    snprintf(want, sizeof want, "sha256:%s", hex);
    cr_expect_str_eq(want, e->digest, "%s", e->path);
    free(got);
  }
  close(fd);
  return r;
}

static void estargz_unpack(const char *name, bool inner) {
  char path[512];
  snprintf(path, sizeof path, CORPUS "toc_estargz/%s", name);
  size_t len;
  unsigned char *blob = slurp(path, &len);
  cn_toc toc;
  cn_toc_estargz_self self;
  cr_assert_eq(cn_toc_estargz_parse_self(blob, len, len, NULL, &toc, &self, T.st), 0, "%s",
               cairn_errmsg(T.st));
  /* the TOC's own tar entry: its content is the TOC JSON */
  char hex[65], d[80];
  tu_sha256_hex(self.json, self.json_len, hex);
  snprintf(d, sizeof d, "sha256:%s", hex);
  cr_expect_str_eq(d, toc.toc_digest);
  cr_expect_eq(self.json[0], '{');
  size_t files = 0, shared = 0;
  const cn_toc_entry *victim = NULL, *other = NULL;
  for (size_t i = 0; i < toc.n_entries; i++) {
    const cn_toc_entry *e = &toc.entries[i];
    if (e->type != CN_TOC_REG || e->n_chunks == 0) continue;
    cr_expect_eq(unpack_one(e, blob), 0, "%s: %s", e->path, cairn_errmsg(T.st));
    files++;
    shared += e->chunks[0].inner > 0;
    if (e->size > 1000 && !victim)
      victim = e;
    else if (e->size > 1000 && !other)
      other = e;
  }
  cr_expect_gt(files, 3);
  if (inner) cr_expect_gt(shared, 0, "no file starts inside a shared member");
  /* a corrupt byte of one file's member: that file fails, another not */
  cr_assert(victim && other);
  size_t at = (size_t)(victim->chunks[0].off + victim->chunks[0].csize / 2);
  blob[at] ^= 0x55;
  cr_expect_eq(unpack_one(victim, blob), -EBADMSG);
  cr_expect_null(strchr(cairn_errmsg(T.st), '\n'));
  cr_expect_eq(unpack_one(other, blob), 0, "%s", cairn_errmsg(T.st));
  blob[at] ^= 0x55;
  /* a TOC that claims more data than the member holds */
  cn_toc_entry e = *other;
  cn_toc_chunk c = other->chunks[0];
  c.usize += 1u << 20;
  e.chunks = &c;
  e.n_chunks = 1;
  e.size = c.usize;
  cr_expect_eq(unpack_one(&e, blob), -EBADMSG);
  cn_toc_estargz_self_free(&self);
  cn_toc_free(&toc);
  free(blob);
}

Test(lazy, estargz_files_unpack_from_the_reference_blob) {
  estargz_unpack("reference-0.12.gz", false);
}
Test(lazy, estargz_files_unpack_with_inner_offsets_and_chunks) {
  estargz_unpack("prefetch-inner.gz", true);
}

/* ---- the TOC fetch (cn_lazy_toc_fetch), from a source in memory ---------- */

struct mem_source {
  pull_source base;
  const unsigned char *blob;
  size_t len;
  int requests;
};

static int mem_ranges(pull_source *src, const pull_desc *d, const char *spec, blob_sink *s,
                      pull_range_reply *rr, cairn_store *st) {
  (void)d;
  (void)st;
  struct mem_source *m = (struct mem_source *)src;
  unsigned long long a, b;
  cr_assert_eq(sscanf(spec, "%llu-%llu", &a, &b), 2, "%s", spec);
  cr_assert(a <= b && b < m->len, "%s", spec);
  m->requests++;
  rr->status = 206;
  snprintf(rr->content_type, sizeof rr->content_type, "application/octet-stream");
  snprintf(rr->content_range, sizeof rr->content_range, "bytes %llu-%llu/%zu", a, b, m->len);
  return cn_blob_sink_write(s, m->blob + a, (size_t)(b - a + 1));
}

static const pull_source_ops mem_ops = {.ranges = mem_ranges};

Test(lazy, estargz_toc_fetch_footer_then_toc) {
  size_t len;
  unsigned char *blob = slurp(CORPUS "toc_estargz/reference-0.12.gz", &len);
  cn_toc ref;
  cr_assert_eq(cn_toc_estargz_parse(blob, len, len, NULL, &ref, T.st), 0);
  struct mem_source m = {.base = {.ops = &mem_ops}, .blob = blob, .len = len};
  pull_desc d = {.media_type = "application/vnd.oci.image.layer.v1.tar+gzip", .size = len};
  json_t *ann = json_pack("{s:s}", "containerd.io/snapshot/stargz/toc.digest", ref.toc_digest);
  d.annotations = ann;
  cn_lazy_toc lt;
  uint64_t fetched = 0;
  size_t requests = 0;
  cr_assert_eq(cn_lazy_toc_fetch(&m.base, &d, &lt, &fetched, &requests, T.st), 0, "%s",
               cairn_errmsg(T.st));
  /* the footer, then [TOC, footer): the kept bytes are the blob's tail */
  cr_expect_eq(m.requests, 2);
  cr_expect_eq(requests, 2);
  cr_expect_eq(fetched, len - ref.toc_off);
  cr_expect_eq(lt.raw_len, len - ref.toc_off);
  cr_expect_eq(memcmp(lt.raw, blob + ref.toc_off, lt.raw_len), 0);
  cr_expect_eq(lt.toc.format, CN_TOC_ESTARGZ);
  cr_expect_eq(lt.toc.n_entries, ref.n_entries);
  cr_expect_not_null(lt.self.json);
  cn_lazy_toc_free(&lt);
  /* a TOC that is not the one the manifest names */
  char bad[CAIRN_DIGEST_LEN + 1];
  strcpy(bad, ref.toc_digest);
  bad[20] = bad[20] == '0' ? '1' : '0';
  json_object_set_new(ann, "containerd.io/snapshot/stargz/toc.digest", json_string(bad));
  cr_expect_eq(cn_lazy_toc_fetch(&m.base, &d, &lt, &fetched, &requests, T.st), -EBADMSG);
  cr_expect_null(strchr(cairn_errmsg(T.st), '\n'));
  /* nothing vouches for the TOC: pulled in full, nothing fetched */
  m.requests = 0;
  json_object_clear(ann);
  cr_expect_eq(cn_lazy_toc_fetch(&m.base, &d, &lt, &fetched, &requests, T.st), 1);
  d.annotations = NULL;
  cr_expect_eq(cn_lazy_toc_fetch(&m.base, &d, &lt, &fetched, &requests, T.st), 1);
  cr_expect_eq(m.requests, 0);
  json_decref(ann);
  cn_toc_free(&ref);
  free(blob);
}
