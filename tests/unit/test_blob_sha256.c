/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_blob_sha256.c — a stored file is found by the sha256 of its
 * content, as a layer's TOC names it (cn_blob_find_sha256,
 * cn_blob_by_sha256: how a partial pull will know which files the store
 * holds): every file of an imported tar (GNU tar, a sparse file among
 * them, its sha256 the dense content's, taken by sha256sum), nothing for
 * an unknown or malformed digest, nothing once rm and gc removed the
 * blob, the same in a store whose schema predates the index; fsck checks
 * the recorded sha256 against the content and --repair sets it right.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "libcairn_blob.h"
#include "libcairn_store.h" /* st->db */
#include "testutil.h"

static tu_store T;
static void setup(void) { tu_store_setup(&T); }
static void teardown(void) { tu_store_teardown(&T); }
TestSuite(blob_sha256, .init = setup, .fini = teardown);

/* The files of the tree make_tar builds, relative to src. */
static const char *const files[] = {"a", "big", "sparse", "d/b", "d/copy-of-a"};

static void shell(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void shell(const char *fmt, ...) {
  char *cmd;
  va_list ap;
  va_start(ap, fmt);
  cr_assert(vasprintf(&cmd, fmt, ap) > 0);
  va_end(ap);
  int rc = system(cmd);
  cr_assert_eq(rc, 0, "failed: %s", cmd);
  free(cmd);
}

/* T.root/src, and T.root/NAME.tar of it by GNU tar (holes kept). */
static void make_tar(const char *name) {
  shell("set -e; cd '%s'; rm -rf src; mkdir -p src/d; printf 'hello\\n' > src/a;"
        " head -c 300000 /dev/urandom > src/big; truncate -s 3M src/sparse;"
        " printf data | dd of=src/sparse bs=1 seek=1M conv=notrunc status=none;"
        " printf other > src/d/b; cp src/a src/d/copy-of-a; printf '' > src/empty;"
        " tar --sparse --format=posix -cf %s.tar -C src .",
        T.root, name);
}

static void import_tar(const char *name, cairn_id image_id) {
  char *path;
  cr_assert(asprintf(&path, "%s/%s.tar", T.root, name) > 0);
  const char *paths[] = {path};
  cr_assert_eq(cn_import_files(T.st, name, paths, 1, image_id), 0, "%s", cairn_errmsg(T.st));
  free(path);
}

/* sha256sum of T.root/src/REL. */
static void sha256sum(const char *rel, char out[65]) {
  char *cmd;
  cr_assert(asprintf(&cmd, "sha256sum '%s/src/%s'", T.root, rel) > 0);
  FILE *p = popen(cmd, "r");
  cr_assert(p);
  cr_assert_eq(fscanf(p, "%64s", out), 1);
  cr_assert_eq(pclose(p), 0);
  free(cmd);
}

static char *layer_of(const char *image) {
  char **ids;
  size_t n;
  cr_assert_eq(cn_image_layers(T.st, image, &ids, &n), 0, "%s", cairn_errmsg(T.st));
  cr_assert_eq(n, 1);
  char *id = strdup(ids[0]);
  cn_strv_free(ids, n);
  return id;
}

static int lookup(const char *sha, char blob[48], uint64_t *size) {
  return cn_blob_find_sha256(T.st, sha, blob, 48, size);
}

Test(blob_sha256, finds_each_imported_file) {
  cairn_id image;
  make_tar("img");
  import_tar("img", image);
  char *layer = layer_of(image);
  for (size_t i = 0; i < TU_N(files); i++) {
    char sha[65], blob[48];
    uint64_t size = 0;
    sha256sum(files[i], sha);
    cr_assert_eq(lookup(sha, blob, &size), 1, "%s (sha256 %s) not found: %s", files[i], sha,
                 cairn_errmsg(T.st));
    tu_got *g = tu_layer_get(T.st, layer, files[i]);
    cr_assert(g->found && g->e.blob, "no blob for %s", files[i]);
    cr_expect_str_eq(blob, g->e.blob, "%s: found blob %s, its entry names %s", files[i], blob,
                     g->e.blob);
    cr_expect_eq(size, g->e.size, "%s: size %llu, entry %llu", files[i], (unsigned long long)size,
                 (unsigned long long)g->e.size);
    size_t len;
    char *data = tu_blob_read(T.st, blob, &len);
    char got[65];
    tu_sha256_hex(data, len, got);
    cr_expect_str_eq(got, sha, "%s: the blob found holds other bytes", files[i]);
    free(data);
    free(g);

    /* as a TOC writes it, and through the internal lookup */
    char digest[72], name[48];
    snprintf(digest, sizeof(digest), "sha256:%s", sha);
    cr_expect_eq(lookup(digest, name, NULL), 1);
    cr_expect_str_eq(name, blob);
    cr_expect_eq(cn_blob_by_sha256(T.st, sha, name, NULL), 1);
    cr_expect_str_eq(name, blob);
  }
  /* the sparse file stays sparse and is found by its dense sha256 */
  char sha[65], blob[48], path[4096];
  sha256sum("sparse", sha);
  cr_assert_eq(lookup(sha, blob, NULL), 1);
  cr_assert_eq(cn_blob_path(T.st, blob, path, sizeof(path)), 0);
  struct stat sb;
  cr_assert_eq(stat(path, &sb), 0);
  cr_expect_eq(sb.st_size, 3 << 20);
  cr_expect_lt((long long)sb.st_blocks * 512, 1 << 20, "the sparse blob takes %lld bytes",
               (long long)sb.st_blocks * 512);
  free(layer);
}

Test(blob_sha256, unknown_and_malformed_digests) {
  cairn_id image;
  make_tar("img");
  import_tar("img", image);
  char blob[48] = "unchanged", sha[65];
  tu_sha256_hex("not stored", 10, sha);
  cr_expect_eq(lookup(sha, blob, NULL), 0, "%s", cairn_errmsg(T.st));
  cr_expect_str_eq(blob, "unchanged");
  /* an empty file has no blob */
  tu_sha256_hex("", 0, sha);
  cr_expect_eq(lookup(sha, blob, NULL), 0);
  cr_expect_eq(lookup("abc", blob, NULL), -EINVAL);
  cr_expect(strstr(cairn_errmsg(T.st), "not a sha256 digest"), "%s", cairn_errmsg(T.st));
  sha256sum("a", sha);
  for (char *c = sha; *c; c++)
    if (*c >= 'a' && *c <= 'f') *c = (char)(*c - 'a' + 'A');
  cr_expect_eq(lookup(sha, blob, NULL), -EINVAL, "upper-case hex is no digest of ours");
  cr_expect_eq(lookup("md5:d41d8cd98f00b204e9800998ecf8427e", blob, NULL), -EINVAL);
  /* a buffer too small for the name */
  sha256sum("a", sha);
  char small[8];
  cr_expect_eq(cn_blob_find_sha256(T.st, sha, small, sizeof(small), NULL), -ENAMETOOLONG);
}

static long rows_with_sha256(const char *sha) {
  sqlite3_stmt *q;
  cr_assert_eq(
      sqlite3_prepare_v2(T.st->db, "SELECT count(*) FROM blobs WHERE sha256 = ?", -1, &q, NULL),
      SQLITE_OK);
  sqlite3_bind_text(q, 1, sha, -1, SQLITE_STATIC);
  cr_assert_eq(sqlite3_step(q), SQLITE_ROW);
  long n = sqlite3_column_int64(q, 0);
  sqlite3_finalize(q);
  return n;
}

Test(blob_sha256, gone_after_rm_and_gc) {
  cairn_id one, two;
  make_tar("one");
  import_tar("one", one);
  /* a second image with one file in common ("hello\n") */
  shell("set -e; cd '%s'; rm -rf src; mkdir src; printf 'hello\\n' > src/same;"
        " printf 'two only' > src/mine; tar -cf two.tar -C src .",
        T.root);
  import_tar("two", two);
  char hello[65], big[65], blob[48];
  tu_sha256_hex("hello\n", 6, hello);
  shell("cd '%s' && tar -xf one.tar -C src ./big", T.root);
  sha256sum("big", big);
  cr_assert_eq(lookup(hello, blob, NULL), 1);
  cr_assert_eq(lookup(big, blob, NULL), 1);

  cr_assert_eq(cairn_rm(T.st, "one"), 0, "%s", cairn_errmsg(T.st));
  cr_expect_eq(lookup(big, blob, NULL), 0, "a removed image's blob is still found");
  cr_expect_eq(rows_with_sha256(big), 0);
  cr_expect_eq(lookup(hello, blob, NULL), 1, "the blob image two uses is gone");

  cr_assert_eq(cairn_rm(T.st, "two"), 0, "%s", cairn_errmsg(T.st));
  cairn_report r = {0};
  cr_assert_eq(cairn_gc(T.st, false, &r), 0, "%s", cairn_errmsg(T.st));
  cairn_report_free(&r);
  cr_expect_eq(lookup(hello, blob, NULL), 0);
  cr_expect_eq(rows_with_sha256(hello), 0);
  sqlite3_stmt *q;
  cr_assert_eq(sqlite3_prepare_v2(T.st->db, "SELECT count(*) FROM blobs", -1, &q, NULL), SQLITE_OK);
  cr_assert_eq(sqlite3_step(q), SQLITE_ROW);
  cr_expect_eq(sqlite3_column_int(q, 0), 0);
  sqlite3_finalize(q);
}

/* A blob whose file fsck --repair quarantined (unlinked) is not held. */
Test(blob_sha256, a_blob_without_its_file_is_not_found) {
  cairn_id image;
  make_tar("img");
  import_tar("img", image);
  char sha[65], blob[48], path[4096];
  sha256sum("big", sha);
  cr_assert_eq(lookup(sha, blob, NULL), 1);
  cr_assert_eq(cn_blob_path(T.st, blob, path, sizeof(path)), 0);
  cr_assert_eq(unlink(path), 0);
  cr_expect_eq(lookup(sha, blob, NULL), 0);
  /* an import of the same content heals it, and it is found again */
  shell("cd '%s' && printf x > src/extra && tar -cf again.tar -C src big extra", T.root);
  import_tar("again", image);
  cr_expect_eq(lookup(sha, blob, NULL), 1);
}

static void exec_sql(const char *sql) {
  char *path;
  cr_assert(asprintf(&path, "%s/meta.db", T.dir) > 0);
  sqlite3 *db;
  cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
  sqlite3_busy_timeout(db, 10000);
  cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK, "%s: %s", sql,
               sqlite3_errmsg(db));
  sqlite3_close(db);
  free(path);
}

/* A store of schema 5 (before the index): opened, it is migrated, and
 * its blobs, stored before, are found. */
Test(blob_sha256, a_store_from_before_the_index) {
  cairn_id image;
  make_tar("img");
  import_tar("img", image);
  cairn_store_close(T.st);
  T.st = NULL;
  exec_sql("DROP TABLE layer_origins;" /* schema 9's */
           " DROP TABLE layer_refuted; DROP INDEX blobs_sha256; DROP TABLE pending;"
           " DROP TABLE layer_sources;"
           " ALTER TABLE layers DROP COLUMN state;"   /* schema 7's */
           " ALTER TABLE mounts DROP COLUMN dir_dev;" /* schema 10's */
           " ALTER TABLE mounts DROP COLUMN dir_ino; ALTER TABLE mounts DROP COLUMN dir_uid;"
           " UPDATE meta SET value = '5' WHERE key = 'schema_version'");
  T.st = tu_store_open(T.dir);
  struct cairn_store_info info;
  cr_assert_eq(cairn_store_info(T.st, &info), 0, "%s", cairn_errmsg(T.st));
  cr_expect_geq(info.schema_version, 6);
  sqlite3_stmt *q;
  cr_assert_eq(sqlite3_prepare_v2(T.st->db,
                                  "EXPLAIN QUERY PLAN SELECT name FROM blobs WHERE sha256 = 'x'",
                                  -1, &q, NULL),
               SQLITE_OK);
  bool indexed = false;
  while (sqlite3_step(q) == SQLITE_ROW)
    indexed |= strstr((const char *)sqlite3_column_text(q, 3), "blobs_sha256") != NULL;
  sqlite3_finalize(q);
  cr_expect(indexed, "the lookup scans the blobs");
  for (size_t i = 0; i < TU_N(files); i++) {
    char sha[65], blob[48];
    sha256sum(files[i], sha);
    cr_expect_eq(lookup(sha, blob, NULL), 1, "%s not found after the migration", files[i]);
  }
}

static bool has_line(const cairn_report *r, const char *what) {
  for (size_t i = 0; i < r->n_lines; i++)
    if (strstr(r->lines[i], what)) return true;
  return false;
}

/* A row whose sha256 is not its content's (the bytes being right by their
 * name): fsck says so, --repair records the right one and keeps the
 * image. */
Test(blob_sha256, fsck_checks_the_recorded_sha256) {
  cairn_id image;
  make_tar("img");
  import_tar("img", image);
  char sha[65], blob[48];
  sha256sum("big", sha);
  cr_assert_eq(lookup(sha, blob, NULL), 1);
  char *sql;
  cr_assert(asprintf(&sql, "UPDATE blobs SET sha256 = '%064d' WHERE name = '%s'", 0, blob) > 0);
  cr_assert_eq(sqlite3_exec(T.st->db, sql, NULL, NULL, NULL), SQLITE_OK);
  free(sql);
  cr_expect_eq(lookup(sha, blob, NULL), 0);

  cairn_report r = {0};
  cr_expect_eq(cairn_fsck(T.st, false, &r), -EBADMSG);
  cr_expect_eq(r.problems, 1);
  cr_expect(has_line(&r, "its recorded sha256 does not match its content"));
  cairn_report_free(&r);

  r = (cairn_report){0};
  cr_expect_eq(cairn_fsck(T.st, true, &r), 0, "%s", cairn_errmsg(T.st));
  cr_expect(has_line(&r, "repaired: recorded the sha256 of blob"));
  cairn_report_free(&r);
  cr_expect_eq(lookup(sha, blob, NULL), 1);
  cr_expect_eq(tu_images_count(T.st), 1, "the repair removed the image");

  r = (cairn_report){0};
  cr_expect_eq(cairn_fsck(T.st, false, &r), 0, "%s", cairn_errmsg(T.st));
  cr_expect_eq(r.problems, 0);
  cairn_report_free(&r);
}
