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
 * 6 is migrated.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h" /* st->db */
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
  cr_assert_geq(cairn_layer_foreach(T.st, LAYER, find_entry, &f), 0);
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
  cr_assert_eq(cairn_layer_record_partial(T.st, LAYER, e, TU_N(e), &src, TOC, sizeof TOC, &pending),
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
  cr_expect_eq(cairn_lazy_layer_finished(T.st, LAYER), -EINVAL);
  cr_expect_eq(sql_long("SELECT count(*) FROM layer_sources"), 1);

  /* a file that is not the content: refused, nothing changes */
  char blob[48];
  int fd = tu_memfd("worle", 5);
  cr_expect_eq(cairn_lazy_file_store(T.st, sha_b, fd, 5, blob), -EBADMSG);
  close(fd);
  cr_expect_eq(sql_long("SELECT count(*) FROM pending"), 1);

  /* the content: named, the layer complete; its source and TOC stay
   * until it is finished (its exact tar recorded) */
  fd = tu_memfd("world", 5);
  cr_assert_eq(cairn_lazy_file_store(T.st, sha_b, fd, 5, blob), 0, "%s", cairn_errmsg(T.st));
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
  cr_expect_eq(cairn_lazy_source_get(T.st, LAYER, &lf), 2);
  cairn_lazy_file_clear(&lf);
  /* finished once its tar is recorded: its source and TOC go, its size
   * is the tar's */
  cr_assert_eq(sqlite3_exec(T.st->db,
                            "INSERT INTO layer_tars(layer_id, size, data) VALUES('" LAYER
                            "', 3072, x'00')",
                            NULL, NULL, NULL),
               SQLITE_OK);
  cr_expect_eq(cairn_lazy_layer_finished(T.st, LAYER), 0, "%s", cairn_errmsg(T.st));
  cr_expect_eq(sql_long("SELECT count(*) FROM layer_sources"), 0);
  cr_expect_eq(sql_long("SELECT size FROM layers WHERE id = '" LAYER "'"), 3072);
  cr_expect(!toc_kept(), "the TOC of a finished layer is kept");
  cr_expect_eq(cairn_lazy_source_get(T.st, LAYER, &lf), 0);
  cr_expect_eq(cairn_lazy_layer_finished(T.st, LAYER), 0, "finished twice: %s", cairn_errmsg(T.st));
  b = blob_of("d/b");
  cr_expect_str_eq(b, blob);
  char *data = tu_blob_read(T.st, b, NULL);
  cr_expect_str_eq(data, "world");
  free(data);
  free(a);
  free(b);
}

Test(lazy, fsck_accepts_a_partial_layer_and_checks_its_rows) {
  record();
  cairn_report r = {0};
  cr_expect_eq(cairn_fsck(T.st, false, &r), 0, "%s", cairn_errmsg(T.st));
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

Test(lazy, a_store_of_schema_6_is_migrated) {
  cr_assert_eq(sqlite3_exec(T.st->db,
                            "DROP TABLE pending; DROP TABLE layer_sources;"
                            " ALTER TABLE layers DROP COLUMN state;"
                            " UPDATE meta SET value = '6' WHERE key = 'schema_version'",
                            NULL, NULL, NULL),
               SQLITE_OK, "%s", sqlite3_errmsg(T.st->db));
  tu_store_reopen(&T);
  cr_expect_geq(sql_long("SELECT value FROM meta WHERE key = 'schema_version'"), 7);
  record();
  cr_expect_eq(sql_long("SELECT count(*) FROM pending"), 1);
}
