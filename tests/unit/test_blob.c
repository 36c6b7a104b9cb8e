/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_blob.c — file contents are stored once across layers and images,
 * different contents never share a blob (even when a file with other bytes
 * already sits under the name, with or without a committed row), empty
 * files have none, and blobs are read-only files opened read-only.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "testutil.h"

static tu_store T;
static void setup(void) { tu_store_setup(&T); }
static void teardown(void) { tu_store_teardown(&T); }
TestSuite(blob, .init = setup, .fini = teardown);

/* The blob name a content takes when nothing is in its way: XXH3-128. */
static void content_key(const char *content, char out[33]) {
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, XXH3_128bits(content, strlen(content)));
  for (int i = 0; i < 16; i++) snprintf(out + 2 * i, 3, "%02x", c.digest[i]);
}

static char *blob_of(const char *diff_id, const char *path) {
  tu_got *g = tu_layer_get(T.st, diff_id, path);
  cr_assert(g->found, "no entry %s", path);
  char *blob = g->e.blob ? strdup(g->e.blob) : NULL;
  free(g);
  return blob;
}

static void expect_reads(const char *diff_id, const char *path, const char *content) {
  char *blob = blob_of(diff_id, path);
  cr_assert(blob, "%s has no blob", path);
  size_t len;
  char *data = tu_blob_read(T.st, blob, &len);
  cr_expect(len == strlen(content) && memcmp(data, content, len) == 0,
            "%s (blob %s) reads \"%s\", want \"%s\"", path, blob, data, content);
  free(data);
  free(blob);
}

static void first_layer(const char *image, cairn_id diff_id) {
  char **ids;
  size_t n;
  cr_assert_eq(cn_image_layers(T.st, image, &ids, &n), 0);
  cr_assert_geq(n, 1);
  snprintf(diff_id, sizeof(cairn_id), "%s", ids[0]);
  cn_strv_free(ids, n);
}

Test(blob, same_content_stored_once_across_layers_and_images) {
  static const tu_entry a[] = {{.path = "a", .content = "shared content"},
                               {.path = "only-a", .content = "only in a"}};
  static const tu_entry b[] = {{.path = "x", .type = 'd'},
                               {.path = "x/y", .content = "shared content"},
                               {.path = "z", .content = "shared content"}};
  tu_layer la[] = {{a, 2}}, lb[] = {{b, 3}};
  cairn_id ia, ib, da, db;
  cr_assert_eq(tu_import(&T, "a:1", la, 1, ia), 0, "%s", cairn_errmsg(T.st));
  cr_assert_eq(tu_import(&T, "b:1", lb, 1, ib), 0, "%s", cairn_errmsg(T.st));
  cr_assert_str_neq(ia, ib);
  first_layer(ia, da);
  first_layer(ib, db);
  cr_assert_str_neq(da, db);

  cr_expect_eq(tu_blob_count(T.dir), 2, "two distinct contents, %ld blob files",
               tu_blob_count(T.dir));
  char *ba = blob_of(da, "a"), *by = blob_of(db, "x/y"), *bz = blob_of(db, "z");
  cr_expect_str_eq(ba, by);
  cr_expect_str_eq(ba, bz);
  char key[33];
  content_key("shared content", key);
  cr_expect_str_eq(ba, key, "blob named %s, not by its XXH3-128 %s", ba, key);
  free(ba);
  free(by);
  free(bz);
  expect_reads(db, "z", "shared content");
  expect_reads(da, "only-a", "only in a");
}

Test(blob, different_contents_different_blobs) {
  /* same size, one byte apart */
  static const tu_entry e[] = {{.path = "1", .content = "content number 1"},
                               {.path = "2", .content = "content number 2"},
                               {.path = "3", .content = "content number 3"}};
  cairn_id id;
  cr_assert_eq(tu_ingest(T.st, e, 3, TU_PLAIN, NULL, id), 0, "%s", cairn_errmsg(T.st));
  cr_expect_eq(tu_blob_count(T.dir), 3);
  expect_reads(id, "1", "content number 1");
  expect_reads(id, "2", "content number 2");
  expect_reads(id, "3", "content number 3");
}

Test(blob, empty_files_have_no_blob) {
  static const tu_entry e[] = {{.path = "e1"}, {.path = "e2", .mode = 0600}, {.path = "e3"}};
  cairn_id id;
  cr_assert_eq(tu_ingest(T.st, e, 3, TU_PLAIN, NULL, id), 0, "%s", cairn_errmsg(T.st));
  cr_expect_eq(tu_layer_entries(T.st, id), 3);
  cr_expect_eq(tu_blob_count(T.dir), 0);
  char *b = blob_of(id, "e2");
  cr_expect_null(b);
  free(b);
}

/* Puts a file with these bytes under the name a content would take. */
static void plant(const char *name, const char *bytes) {
  char *dir, *path;
  cr_assert(asprintf(&dir, "%s/blobs/%.2s", T.dir, name) > 0);
  cr_assert(asprintf(&path, "%s/%s", dir, name) > 0);
  mkdir(dir, 0700);
  tu_write_file(path, bytes, strlen(bytes));
  chmod(path, 0444);
  free(dir);
  free(path);
}

/* Ingests "f" holding real, whose key's name holds other bytes: the
 * content must go to the name KEY-1 and read back as real. */
static void expect_stored_beside(const char *key, const char *real, cairn_id id) {
  const tu_entry e[] = {{.path = "f", .content = real}};
  cr_assert_eq(tu_ingest(T.st, e, 1, TU_PLAIN, NULL, id), 0, "%s", cairn_errmsg(T.st));
  char want[48], *blob = blob_of(id, "f");
  snprintf(want, sizeof(want), "%s-1", key);
  cr_expect_str_eq(blob, want, "stored as %s, want %s", blob, want);
  free(blob);
  expect_reads(id, "f", real);
}

Test(blob, orphan_with_other_bytes_is_not_a_dedup_hit) {
  const char *real = "the real content", *fake = "a forged content"; /* same size */
  cr_assert_eq(strlen(real), strlen(fake));
  char key[33];
  content_key(real, key);
  plant(key, fake);
  cairn_id id;
  expect_stored_beside(key, real, id);
  cr_expect_eq(tu_blob_count(T.dir), 2);
}

Test(blob, orphan_with_the_same_bytes_is_a_dedup_hit) {
  const char *real = "the real content";
  char key[33];
  content_key(real, key);
  plant(key, real);
  static const tu_entry e[] = {{.path = "f", .content = "the real content"}};
  tu_layer l[] = {{e, 1}};
  cairn_id image, id;
  cr_assert_eq(tu_import(&T, "app:1", l, 1, image), 0, "%s", cairn_errmsg(T.st));
  first_layer(image, id);
  char *blob = blob_of(id, "f");
  cr_expect_str_eq(blob, key);
  free(blob);
  cr_expect_eq(tu_blob_count(T.dir), 1);
  /* now the blob has a committed row: gc keeps it */
  cairn_report rep = {0};
  cr_assert_eq(cairn_gc(T.st, false, &rep), 0, "%s", cairn_errmsg(T.st));
  cairn_report_free(&rep);
  expect_reads(id, "f", real);
}

Test(blob, committed_row_with_other_bytes_is_not_a_dedup_hit) {
  const char *real = "the real content", *fake = "a forged content";
  char key[33], fake_sha[65];
  content_key(real, key);
  tu_sha256_hex(fake, strlen(fake), fake_sha);
  plant(key, fake);
  char *db_path, *sql;
  cr_assert(asprintf(&db_path, "%s/meta.db", T.dir) > 0);
  cr_assert(asprintf(&sql, "INSERT INTO blobs(name, size, sha256) VALUES('%s', %zu, '%s')", key,
                     strlen(fake), fake_sha) > 0);
  sqlite3 *db;
  cr_assert_eq(sqlite3_open(db_path, &db), SQLITE_OK);
  sqlite3_busy_timeout(db, 10000);
  cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK, "%s", sqlite3_errmsg(db));
  sqlite3_close(db);
  free(db_path);
  free(sql);

  cairn_id id;
  expect_stored_beside(key, real, id);
}

Test(blob, same_content_twice_in_one_layer_stored_once) {
  static const tu_entry e[] = {{.path = "a", .content = "twice"},
                               {.path = "b", .content = "twice"}};
  cairn_id id;
  cr_assert_eq(tu_ingest(T.st, e, 2, TU_PLAIN, NULL, id), 0, "%s", cairn_errmsg(T.st));
  cr_expect_eq(tu_blob_count(T.dir), 1);
  expect_reads(id, "b", "twice");
}

Test(blob, blobs_are_read_only) {
  static const tu_entry e[] = {{.path = "f", .content = "read only"}};
  cairn_id id;
  cr_assert_eq(tu_ingest(T.st, e, 1, TU_PLAIN, NULL, id), 0, "%s", cairn_errmsg(T.st));
  char *blob = blob_of(id, "f");
  char path[4096];
  cr_assert_eq(cn_blob_path(T.st, blob, path, sizeof(path)), 0);
  cr_expect_eq(strncmp(path, T.dir, strlen(T.dir)), 0, "%s is outside the store", path);
  struct stat sb;
  cr_assert_eq(stat(path, &sb), 0, "%s: %s", path, strerror(errno));
  cr_expect(S_ISREG(sb.st_mode));
  cr_expect_eq(sb.st_mode & 0222, 0, "blob mode %o is writable", sb.st_mode & 07777);

  int fd = cairn_blob_open(T.st, blob);
  cr_assert_geq(fd, 0);
  cr_expect_eq(fcntl(fd, F_GETFL) & O_ACCMODE, O_RDONLY);
  cr_expect(fcntl(fd, F_GETFD) & FD_CLOEXEC);
  cr_expect_eq(write(fd, "x", 1), -1);
  cr_expect_eq(errno, EBADF);
  close(fd);
  cr_expect_eq(cairn_blob_open(T.st, "00000000000000000000000000000000"), -ENOENT);
  free(blob);
}
