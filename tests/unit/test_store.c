/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_store.c — the store itself: created on first use with mode 0700
 * where the contract says, reopened with its data, its schema version
 * recorded (and a newer one refused), WAL on; image names normalized.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <limits.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"

static tu_store T;
static void setup(void) { tu_store_setup(&T); }
static void teardown(void) { tu_store_teardown(&T); }
TestSuite(store, .init = setup, .fini = teardown);

static const tu_entry layer[] = {{.path = "etc", .type = 'd'},
                                 {.path = "etc/os-release", .content = "ID=cairn\n"}};

static char *db_text(const char *dir, const char *sql) {
  char *path;
  cr_assert(asprintf(&path, "%s/meta.db", dir) > 0);
  sqlite3 *db;
  cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK, "%s", path);
  sqlite3_busy_timeout(db, 10000);
  sqlite3_stmt *q;
  cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &q, NULL), SQLITE_OK, "%s", sqlite3_errmsg(db));
  char *out = sqlite3_step(q) == SQLITE_ROW && sqlite3_column_text(q, 0)
                  ? strdup((const char *)sqlite3_column_text(q, 0))
                  : NULL;
  sqlite3_finalize(q);
  sqlite3_close(db);
  free(path);
  return out;
}

Test(store, created_with_mode_0700_on_first_use) {
  char *dir;
  cr_assert(asprintf(&dir, "%s/new/parents/store", T.root) > 0);
  struct stat sb;
  cr_assert_eq(stat(dir, &sb), -1);
  umask(022);
  cairn_store *st = tu_store_open(dir);
  cr_assert_eq(stat(dir, &sb), 0);
  cr_expect(S_ISDIR(sb.st_mode));
  cr_expect_eq(sb.st_mode & 07777, 0700, "store mode %o", sb.st_mode & 07777);
  static const char *const parts[] = {"meta.db", "blobs", "pins/image", "pins/layer"};
  for (size_t i = 0; i < TU_N(parts); i++) {
    char *p;
    cr_assert(asprintf(&p, "%s/%s", dir, parts[i]) > 0);
    cr_expect_eq(stat(p, &sb), 0, "%s missing", parts[i]);
    free(p);
  }
  char real[PATH_MAX];
  cr_assert(realpath(dir, real));
  cr_expect_str_eq(cairn_store_dir(st), real);
  cairn_store_close(st);
  free(dir);
}

Test(store, default_location_follows_the_contract) {
  char buf[PATH_MAX];
  setenv("CAIRN_STORE", "/somewhere/else", 1);
  cr_assert_eq(cairn_store_default_dir(buf, sizeof(buf)), 0);
  cr_expect_str_eq(buf, "/somewhere/else");
  unsetenv("CAIRN_STORE");
  setenv("XDG_DATA_HOME", "/xdg", 1);
  cr_assert_eq(cairn_store_default_dir(buf, sizeof(buf)), 0);
  cr_expect_str_eq(buf, geteuid() == 0 ? "/var/lib/cairn" : "/xdg/cairn");

  char *env;
  cr_assert(asprintf(&env, "%s/from-env", T.root) > 0);
  setenv("CAIRN_STORE", env, 1);
  cairn_store *st = tu_store_open(NULL);
  cr_expect_str_eq(cairn_store_dir(st), env);
  cairn_store_close(st);
  free(env);
}

Test(store, reopen_keeps_the_data) {
  tu_layer layers[] = {{layer, TU_N(layer)}};
  cairn_id id;
  cr_assert_eq(tu_import(&T, "app:1", layers, 1, id), 0, "%s", cairn_errmsg(T.st));
  tu_store_reopen(&T);
  cairn_id again;
  cr_assert_eq(cairn_image_resolve(T.st, "app:1", again), 0);
  cr_expect_str_eq(again, id);
  char **ids;
  size_t n;
  cr_assert_eq(cn_image_layers(T.st, id, &ids, &n), 0);
  cr_assert_eq(n, 1);
  tu_got *g = tu_layer_get(T.st, ids[0], "etc/os-release");
  cr_assert(g->found && g->e.blob);
  char *data = tu_blob_read(T.st, g->e.blob, NULL);
  cr_expect_str_eq(data, "ID=cairn\n");
  free(data);
  free(g);
  cn_strv_free(ids, n);
}

Test(store, schema_version_and_wal) {
  char *v = db_text(T.dir, "SELECT value FROM meta WHERE key = 'schema_version'");
  cr_assert(v, "no schema version in meta");
  int version = atoi(v);
  cr_expect_geq(version, 1);
  free(v);
  char *mode = db_text(T.dir, "PRAGMA journal_mode");
  cr_expect_str_eq(mode, "wal");
  free(mode);
  tu_store_reopen(&T);
  v = db_text(T.dir, "SELECT value FROM meta WHERE key = 'schema_version'");
  cr_expect_eq(atoi(v), version, "reopening changed the version");
  free(v);
}

Test(store, newer_schema_refused) {
  free(db_text(T.dir, "UPDATE meta SET value = '999999' WHERE key = 'schema_version'"));
  cairn_store_close(T.st);
  T.st = NULL;
  cairn_store *st = NULL;
  int r = cairn_store_open(T.dir, &st);
  cr_expect_lt(r, 0, "a store from a newer cairn opened");
  cr_expect(strstr(cairn_errmsg(st), "newer"), "message: %s", cairn_errmsg(st));
  cairn_store_close(st);
}

Test(store, open_fails_on_a_file) {
  char *file;
  cr_assert(asprintf(&file, "%s/plain-file", T.root) > 0);
  tu_write_file(file, "x", 1);
  cairn_store *st = NULL;
  cr_expect_lt(cairn_store_open(file, &st), 0);
  cr_expect(st && strlen(cairn_errmsg(st)) > 0);
  cairn_store_close(st);
  free(file);
}

Test(store, two_handles_see_each_other) {
  cairn_store *other = tu_store_open(T.dir);
  tu_layer layers[] = {{layer, TU_N(layer)}};
  cairn_id id, seen;
  cr_assert_eq(tu_import(&T, "app:1", layers, 1, id), 0, "%s", cairn_errmsg(T.st));
  cr_expect_eq(cairn_image_resolve(other, "app:1", seen), 0);
  cr_expect_eq(cairn_rm(other, "app:1"), 0, "%s", cairn_errmsg(other));
  cr_expect_eq(cairn_image_resolve(T.st, "app:1", seen), -ENOENT);
  cairn_store_close(other);
}

Test(store, exit_codes) {
  cr_expect_eq(cairn_exit_code(0), 0);
  cr_expect_eq(cairn_exit_code(-EINVAL), 2);
  cr_expect_eq(cairn_exit_code(-ENOENT), 3);
  cr_expect_eq(cairn_exit_code(-EBUSY), 4);
  cr_expect_eq(cairn_exit_code(-EBADMSG), 5);
  cr_expect_eq(cairn_exit_code(-EIO), 1);
}

/* ---- names ---------------------------------------------------------------- */

static void normalizes(const char *in, const char *want) {
  char out[512];
  int r = cairn_name_normalize(in, out, sizeof(out));
  cr_expect_eq(r, 0, "%s refused (%d)", in, r);
  if (r == 0) cr_expect_str_eq(out, want, "%s became %s, want %s", in, out, want);
}

Test(store, names_normalized) {
  /* as podman: no registry host is localhost/, docker.io's one component
   * is under library/ */
  normalizes("app", "localhost/app:latest");
  normalizes("app:1", "localhost/app:1");
  normalizes("team/app", "localhost/team/app:latest");
  normalizes("registry:5000/team/app:1", "registry:5000/team/app:1");
  normalizes("registry:5000/team/app", "registry:5000/team/app:latest");
  normalizes("localhost/app:v1.2-rc_3", "localhost/app:v1.2-rc_3");
  normalizes("Registry.Example.com/a/b/c:_x", "Registry.Example.com/a/b/c:_x");
  normalizes("a.b_c-d", "localhost/a.b_c-d:latest");
  normalizes("docker.io/alpine", "docker.io/library/alpine:latest");
  normalizes("docker.io/team/app:1", "docker.io/team/app:1");
  normalizes("localhost:5000/app", "localhost:5000/app:latest");
}

Test(store, invalid_names_refused) {
  char tag129[140] = "app:";
  memset(tag129 + 4, 't', 129);
  tag129[133] = '\0';
  static const char *const bad[] = {
      "",
      "App",
      "team/App:1",
      "app:",
      ":1",
      "app@sha256:0123",
      "a//b",
      "/app",
      "app/",
      "-app",
      "app-",
      "app:-x",
      "app:.x",
      "a b",
      "app:1:2",
      ":",
      "team/-a:1",
      "app:tag!",
      /* capitals are a host's only: a first component with no . or : is a path */
      "Team/app:1",
      "lateamW/app/team/app:11.0",
  };
  char out[512];
  for (size_t i = 0; i < TU_N(bad); i++)
    cr_expect_eq(cairn_name_normalize(bad[i], out, sizeof(out)), -EINVAL, "\"%s\" accepted",
                 bad[i]);
  cr_expect_eq(cairn_name_normalize(tag129, out, sizeof(out)), -EINVAL, "a 129-char tag");
  tag129[132] = '\0';
  cr_expect_eq(cairn_name_normalize(tag129, out, sizeof(out)), 0, "a 128-char tag");
  cr_expect_eq(cairn_name_normalize(NULL, out, sizeof(out)), -EINVAL);

  /* an invalid name is not imported */
  tu_layer layers[] = {{layer, TU_N(layer)}};
  cairn_id id;
  cr_expect_eq(tu_import(&T, "Bad Name", layers, 1, id), -EINVAL);
  cr_expect_eq(tu_images_count(T.st), 0);
}

/* cairn_names_foreach: what the NAMES column of pin and mount listings
 * shows. */
static int names_collect(const char *target, const char *name, void *out) {
  FILE *f = out;
  fprintf(f, "%.12s %s\n", target, name);
  return 0;
}

Test(store, names_foreach_names_images_and_the_layers_in_them) {
  static const tu_entry other[] = {{.path = "etc", .type = 'd'},
                                   {.path = "etc/hostname", .content = "b\n"}};
  tu_layer la[] = {{layer, TU_N(layer)}}, lb[] = {{layer, TU_N(layer)}, {other, TU_N(other)}};
  cairn_id a, a2, b;
  cr_assert_eq(tu_import(&T, "a:1", la, 1, a), 0, "%s", cairn_errmsg(T.st));
  cr_assert_eq(tu_import(&T, "a:2", la, 1, a2), 0, "%s", cairn_errmsg(T.st));
  cr_assert_str_eq(a, a2);
  cr_assert_eq(tu_import(&T, "b:1", lb, 2, b), 0, "%s", cairn_errmsg(T.st));
  char **layers_b;
  size_t n_b;
  cr_assert_eq(cn_image_layers(T.st, b, &layers_b, &n_b), 0);
  cr_assert_eq(n_b, 2);
  /* an image with one layer twice: its name once for that layer */
  tu_layer lc[] = {{other, TU_N(other)}, {other, TU_N(other)}};
  cairn_id c;
  cr_assert_eq(tu_import(&T, "c:1", lc, 2, c), 0, "%s", cairn_errmsg(T.st));

  char *got = NULL, *want = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&got, &len);
  cr_assert_eq(cairn_names_foreach(T.st, names_collect, f), 0, "%s", cairn_errmsg(T.st));
  fclose(f);
  /* by target, then name: the shared layer has every image's names */
  struct {
    const char *target, *name;
  } rows[] = {{a, "localhost/a:1"},           {a, "localhost/a:2"},
              {b, "localhost/b:1"},           {layers_b[0], "localhost/a:1"},
              {layers_b[0], "localhost/a:2"}, {layers_b[0], "localhost/b:1"},
              {layers_b[1], "localhost/b:1"}, {c, "localhost/c:1"},
              {layers_b[1], "localhost/c:1"}};
  size_t n_rows = sizeof(rows) / sizeof(rows[0]);
  for (size_t i = 0; i < n_rows; i++) /* sort the expectation by target, then name */
    for (size_t j = i + 1; j < n_rows; j++) {
      int c = strcmp(rows[i].target, rows[j].target);
      if (c > 0 || (c == 0 && strcmp(rows[i].name, rows[j].name) > 0)) {
        __typeof__(rows[0]) t = rows[i];
        rows[i] = rows[j];
        rows[j] = t;
      }
    }
  f = open_memstream(&want, &len);
  for (size_t i = 0; i < n_rows; i++) fprintf(f, "%.12s %s\n", rows[i].target, rows[i].name);
  fclose(f);
  cr_assert_str_eq(got, want);
  free(got);
  free(want);
  cn_strv_free(layers_b, n_b);
}
