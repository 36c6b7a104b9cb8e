/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_rm_gc.c — rm by name, last name, id and id prefix; what rm refuses
 * (ambiguous, unknown, pinned) and what it leaves (layers other images use,
 * layers a pull pins, until gc); rm racing an import or another rm in the
 * window between counting names and deleting; gc and its dry run; fsck on
 * a clean store, on a corrupt or missing blob (and its repair, which
 * quarantines a pinned image's blob and removes nothing), and on
 * incomplete work.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "libcairn_store.h" /* cn_store_test_hook */
#include "testutil.h"

static tu_store T;
static void setup(void) { tu_store_setup(&T); }
static void teardown(void) { tu_store_teardown(&T); }
TestSuite(rm_gc, .init = setup, .fini = teardown);

static const tu_entry l1[] = {{.path = "bin", .type = 'd'},
                              {.path = "bin/sh", .content = "shared shell"}};
static const tu_entry l2[] = {{.path = "etc", .type = 'd'},
                              {.path = "etc/a", .content = "only in image a"}};
static const tu_entry l3[] = {{.path = "etc", .type = 'd'},
                              {.path = "etc/b", .content = "only in image b"}};

static void import(const char *name, const tu_entry *top, size_t n, cairn_id id) {
  tu_layer layers[] = {{l1, TU_N(l1)}, {top, n}};
  int r = tu_import(&T, name, layers, top ? 2 : 1, id);
  cr_assert_eq(r, 0, "import %s: %d %s", name, r, cairn_errmsg(T.st));
}

static bool resolves(const char *ref) {
  cairn_id id;
  return cairn_image_resolve(T.st, ref, id) == 0;
}

static void layer_ids(const char *image, cairn_id *ids, size_t max) {
  char **v;
  size_t n;
  cr_assert_eq(cn_image_layers(T.st, image, &v, &n), 0);
  cr_assert_leq(n, max);
  for (size_t i = 0; i < n; i++) snprintf(ids[i], sizeof(cairn_id), "%s", v[i]);
  cn_strv_free(v, n);
}

static char *blob_of(const char *diff_id, const char *path) {
  tu_got *g = tu_layer_get(T.st, diff_id, path);
  cr_assert(g->found && g->e.blob, "no blob for %s", path);
  char *b = strdup(g->e.blob);
  free(g);
  return b;
}

/* ---- rm ------------------------------------------------------------------- */

Test(rm_gc, rm_by_name_keeps_the_other_names) {
  cairn_id a, a2;
  import("app:1", NULL, 0, a);
  import("app:2", NULL, 0, a2);
  cr_assert_str_eq(a, a2);
  long blobs = tu_blob_count(T.dir);
  cr_assert_eq(cairn_rm(T.st, "app:1"), 0, "%s", cairn_errmsg(T.st));
  cr_expect(!resolves("app:1"));
  cr_expect(resolves("app:2"));
  cr_expect(resolves(a));
  cr_expect_eq(tu_layers_count(T.st), 1);
  cr_expect_eq(tu_blob_count(T.dir), blobs);

  cr_assert_eq(cairn_rm(T.st, "app:2"), 0, "rm of the last name: %s", cairn_errmsg(T.st));
  cr_expect(!resolves(a), "the image outlived its last name");
  cr_expect_eq(tu_images_count(T.st), 0);
  cr_expect_eq(tu_layers_count(T.st), 0);
  cr_expect_eq(tu_blob_count(T.dir), 0);
}

Test(rm_gc, rm_by_id_and_by_prefix) {
  cairn_id a, b;
  import("app:1", NULL, 0, a);
  import("app:2", NULL, 0, a);
  import("other", l3, TU_N(l3), b);
  cr_assert_eq(cairn_rm(T.st, a), 0, "%s", cairn_errmsg(T.st));
  cr_expect(!resolves("app:1") && !resolves("app:2"), "rm by id left a name");
  cr_expect(!resolves(a));
  cr_expect(resolves("other:latest"));

  char prefix[32];
  snprintf(prefix, sizeof(prefix), "%.12s", b);
  cr_assert_eq(cairn_rm(T.st, prefix), 0, "rm %s: %s", prefix, cairn_errmsg(T.st));
  cr_expect_eq(tu_images_count(T.st), 0);
  cr_expect_eq(tu_layers_count(T.st), 0);

  import("again", NULL, 0, a);
  snprintf(prefix, sizeof(prefix), "sha256:%.14s", a);
  cr_assert_eq(cairn_rm(T.st, prefix), 0, "rm %s: %s", prefix, cairn_errmsg(T.st));
  cr_expect_eq(tu_images_count(T.st), 0);
}

/* Two image rows whose ids share 12 hex digits (no sha256 search needed:
 * resolving looks at ids only). */
static void add_twin_rows(void) {
  char *db_path;
  cr_assert(asprintf(&db_path, "%s/meta.db", T.dir) > 0);
  sqlite3 *db;
  cr_assert_eq(sqlite3_open(db_path, &db), SQLITE_OK);
  sqlite3_busy_timeout(db, 10000);
  const char *sql =
      "INSERT INTO images(id, config, size, created) VALUES"
      "('abcdefabcdef0000000000000000000000000000000000000000000000000001', '{}', 0, 0),"
      "('abcdefabcdef0000000000000000000000000000000000000000000000000002', '{}', 0, 0)";
  cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK, "%s", sqlite3_errmsg(db));
  sqlite3_close(db);
  free(db_path);
}

Test(rm_gc, ambiguous_and_unknown_refs) {
  cairn_id a;
  import("app:1", NULL, 0, a);
  add_twin_rows();
  cr_expect_eq(cairn_rm(T.st, "abcdefabcdef"), -EINVAL, "%s", cairn_errmsg(T.st));
  cr_expect_eq(cairn_rm(T.st, "sha256:abcdefabcdef000"), -EINVAL);
  cr_expect_eq(cairn_rm(T.st, "abc"), -EINVAL, "3 hex digits are a prefix, ambiguous here");
  cr_expect_eq(tu_images_count(T.st), 3);
  static const char *const unknown[] = {"nope:1",        "nope", "0123456789ab",
                                        "abcdefabcdef1", "ab",   "Not A Name!"};
  for (size_t i = 0; i < TU_N(unknown); i++)
    cr_expect_eq(cairn_rm(T.st, unknown[i]), -ENOENT, "rm %s", unknown[i]);
  cr_expect_eq(tu_images_count(T.st), 3);
  cr_expect(resolves("app:1"));
}

Test(rm_gc, rm_of_a_pinned_image_removes_nothing) {
  cairn_id a;
  import("app:1", l2, TU_N(l2), a);
  cairn_pinset *ps = cairn_pinset_new("mount /mnt/x", true);
  cr_assert_eq(cairn_pin_image(T.st, ps, a), 0, "%s", cairn_errmsg(T.st));
  long blobs = tu_blob_count(T.dir);
  cr_expect_eq(cairn_rm(T.st, "app:1"), -EBUSY);
  cr_expect(strstr(cairn_errmsg(T.st), "mount /mnt/x"), "%s", cairn_errmsg(T.st));
  cr_expect_eq(cairn_rm(T.st, a), -EBUSY);
  cr_expect(resolves("app:1"), "the last name of a pinned image went");
  cr_expect_eq(tu_images_count(T.st), 1);
  cr_expect_eq(tu_layers_count(T.st), 2);
  cr_expect_eq(tu_blob_count(T.dir), blobs);
  cairn_pinset_release(T.st, ps);
  cr_expect_eq(cairn_rm(T.st, "app:1"), 0, "%s", cairn_errmsg(T.st));
}

Test(rm_gc, rm_keeps_layers_another_image_uses) {
  cairn_id a, b, la[2], lb[2];
  import("a", l2, TU_N(l2), a);
  import("b", l3, TU_N(l3), b);
  layer_ids(a, la, 2);
  layer_ids(b, lb, 2);
  cr_assert_str_eq(la[0], lb[0]);
  cr_assert_eq(tu_layers_count(T.st), 3);
  cr_assert_eq(tu_blob_count(T.dir), 3);
  cr_assert_eq(cairn_rm(T.st, "a"), 0, "%s", cairn_errmsg(T.st));
  cr_expect_eq(cn_layer_exists(T.st, la[0]), 1, "the shared layer went");
  cr_expect_eq(cn_layer_exists(T.st, la[1]), 0, "a's own layer stayed");
  cr_expect_eq(cn_layer_exists(T.st, lb[1]), 1);
  cr_expect_eq(tu_blob_count(T.dir), 2);
  char *blob = blob_of(lb[0], "bin/sh");
  char *data = tu_blob_read(T.st, blob, NULL);
  cr_expect_str_eq(data, "shared shell");
  free(data);
  free(blob);
}

Test(rm_gc, layer_pinned_by_a_pull_survives_rm_until_gc) {
  cairn_id a, la[1];
  import("a", NULL, 0, a);
  layer_ids(a, la, 1);
  cairn_pinset *pull = cairn_pinset_new("pull registry/b:1", true);
  cr_assert_eq(cn_pin_take(T.st, pull, CAIRN_PIN_LAYER, la[0]), 0, "%s", cairn_errmsg(T.st));
  cr_assert_eq(cairn_rm(T.st, "a"), 0, "%s", cairn_errmsg(T.st));
  cr_expect_eq(tu_images_count(T.st), 0);
  cr_expect_eq(cn_layer_exists(T.st, la[0]), 1, "rm took a layer a pull pins");
  cr_expect_eq(tu_blob_count(T.dir), 1);

  cairn_report rep = {0};
  cr_assert_eq(cairn_gc(T.st, false, &rep), 0, "%s", cairn_errmsg(T.st));
  cr_expect_eq(rep.layers, 0);
  cr_expect_eq(cn_layer_exists(T.st, la[0]), 1, "gc took a layer a pull pins");
  cairn_report_free(&rep);

  cairn_pinset_release(T.st, pull);
  rep = (cairn_report){0};
  cr_assert_eq(cairn_gc(T.st, false, &rep), 0, "%s", cairn_errmsg(T.st));
  cr_expect_eq(rep.layers, 1);
  cr_expect_eq(rep.blobs, 1);
  cr_expect_eq(cn_layer_exists(T.st, la[0]), 0);
  cr_expect_eq(tu_blob_count(T.dir), 0);
  cairn_report_free(&rep);
}

/* ---- rm racing another writer -------------------------------------------- */

/* Runs the competing operation, once, when rm reaches its window between
 * counting the image's names and deleting, through a second store handle
 * (its own SQLite connection and pin locks, as another process has). */
static struct {
  int (*fn)(cairn_store *st);
  bool fired;
  int r;
} race;

static void race_hook(cairn_store *st, const char *point) {
  (void)st;
  if (race.fired || strcmp(point, "rm: names counted") != 0) return;
  race.fired = true;
  cairn_store *other = tu_store_open(T.dir);
  race.r = race.fn(other);
  cairn_store_close(other);
}

static void race_rm(const char *ref, int (*competitor)(cairn_store *st)) {
  race.fn = competitor;
  race.fired = false;
  cn_store_test_hook = race_hook;
  int r = cairn_rm(T.st, ref);
  cn_store_test_hook = NULL;
  cr_assert(race.fired, "rm never reached its window");
  cr_assert_eq(r, 0, "rm %s: %d %s", ref, r, cairn_errmsg(T.st));
  cr_assert_eq(race.r, 0, "the competing operation failed: %d", race.r);
}

static int import_app_2(cairn_store *st) {
  cairn_id id;
  tu_layer layers[] = {{l1, TU_N(l1)}, {l2, TU_N(l2)}};
  tu_store other = {.root = T.root, .dir = T.dir, .st = st};
  return tu_import(&other, "app:2", layers, 2, id);
}

Test(rm_gc, rm_of_the_last_name_racing_an_import_of_another_keeps_the_image) {
  cairn_id a;
  import("app:1", l2, TU_N(l2), a);
  long blobs = tu_blob_count(T.dir);
  race_rm("app:1", import_app_2);
  cr_expect(!resolves("app:1"));
  cr_expect(resolves("app:2"), "the import reported success, but its name is gone");
  cr_expect(resolves(a), "the image went under the name an import just gave it");
  cr_expect_eq(tu_images_count(T.st), 1);
  cr_expect_eq(tu_layers_count(T.st), 2);
  cr_expect_eq(tu_blob_count(T.dir), blobs);
}

static int rm_app_2(cairn_store *st) { return cairn_rm(st, "app:2"); }

Test(rm_gc, rm_of_two_names_racing_leaves_no_image_without_names) {
  cairn_id a;
  import("app:1", l2, TU_N(l2), a);
  import("app:2", l2, TU_N(l2), a);
  race_rm("app:1", rm_app_2);
  cr_expect(!resolves("app:1") && !resolves("app:2"));
  cr_expect(!resolves(a), "the image outlived both its names");
  cr_expect_eq(tu_images_count(T.st), 0);
  cr_expect_eq(tu_layers_count(T.st), 0);
  cr_expect_eq(tu_blob_count(T.dir), 0);
}

Test(rm_gc, an_import_committing_after_rm_removed_its_image_makes_it_again) {
  cairn_id a, la[2];
  import("app:1", l2, TU_N(l2), a);
  layer_ids(a, la, 2);
  /* an import of app:2: its layers are stored (again) and pinned ... */
  cairn_pinset *ps = cairn_pinset_new("import app:2", true);
  cairn_id ids[2];
  cr_assert_eq(tu_ingest(T.st, l1, TU_N(l1), TU_PLAIN, ps, ids[0]), 0, "%s", cairn_errmsg(T.st));
  cr_assert_eq(tu_ingest(T.st, l2, TU_N(l2), TU_PLAIN, ps, ids[1]), 0, "%s", cairn_errmsg(T.st));
  /* ... rm removes the image, but not the layers the import pins ... */
  cr_assert_eq(cairn_rm(T.st, "app:1"), 0, "%s", cairn_errmsg(T.st));
  cr_assert_eq(tu_images_count(T.st), 0);
  cr_assert_eq(tu_layers_count(T.st), 2, "rm took layers an import pins");
  /* ... and the import's commit makes the image again, whole */
  const char *const diff_ids[] = {ids[0], ids[1]};
  char *config = cn_config_for_layers(diff_ids, 2);
  cairn_id b;
  cr_assert_eq(cn_image_commit(T.st, config, strlen(config), diff_ids, 2, "app:2", b), 0, "%s",
               cairn_errmsg(T.st));
  cairn_pinset_release(T.st, ps);
  free(config);
  cr_expect_str_eq(b, a);
  cr_expect(resolves("app:2"));
  cairn_id lb[2];
  layer_ids(b, lb, 2);
  cr_expect_str_eq(lb[0], la[0]);
  cr_expect_str_eq(lb[1], la[1]);
  char *blob = blob_of(lb[1], "etc/a"), *data = tu_blob_read(T.st, blob, NULL);
  cr_expect_str_eq(data, "only in image a");
  free(data);
  free(blob);
  cairn_report rep = {0};
  cr_expect_eq(cairn_fsck(T.st, false, &rep), 0, "%s", cairn_errmsg(T.st));
  cairn_report_free(&rep);
}

/* ---- gc ------------------------------------------------------------------- */

static void plant_orphan(const char *name) {
  char *dir, *path;
  cr_assert(asprintf(&dir, "%s/blobs/%.2s", T.dir, name) > 0);
  cr_assert(asprintf(&path, "%s/%s", dir, name) > 0);
  mkdir(dir, 0700);
  tu_write_file(path, "left by a crash", 15);
  free(dir);
  free(path);
}

#define ORPHAN "abababababababababababababababab"

Test(rm_gc, gc_dry_run_reports_and_changes_nothing) {
  cairn_id kept, loose;
  import("kept", NULL, 0, kept);
  cr_assert_eq(tu_ingest(T.st, l2, TU_N(l2), TU_PLAIN, NULL, loose), 0, "%s", cairn_errmsg(T.st));
  plant_orphan(ORPHAN);
  char *before = tu_blob_names(T.dir);
  cr_assert_eq(tu_layers_count(T.st), 2);

  cairn_report rep = {0};
  cr_assert_eq(cairn_gc(T.st, true, &rep), 0, "%s", cairn_errmsg(T.st));
  cr_expect_eq(rep.layers, 1);
  cr_expect_eq(rep.blobs, 2, "the loose layer's blob and the orphan: %llu",
               (unsigned long long)rep.blobs);
  cr_expect_gt(rep.n_lines, 0);
  cairn_report_free(&rep);
  char *after = tu_blob_names(T.dir);
  cr_expect_str_eq(after, before, "a dry run removed blob files");
  cr_expect_eq(tu_layers_count(T.st), 2, "a dry run removed a layer");
  cr_expect_eq(cn_layer_exists(T.st, loose), 1);
  free(after);

  rep = (cairn_report){0};
  cr_assert_eq(cairn_gc(T.st, false, &rep), 0, "%s", cairn_errmsg(T.st));
  cr_expect_eq(rep.layers, 1);
  cr_expect_eq(rep.blobs, 2);
  cairn_report_free(&rep);
  cr_expect_eq(cn_layer_exists(T.st, loose), 0);
  cr_expect_eq(tu_layers_count(T.st), 1);
  cr_expect_eq(tu_blob_count(T.dir), 1, "the kept image's blob is all that stays");
  cr_expect(resolves("kept"));
  free(before);
}

Test(rm_gc, gc_keeps_what_images_use) {
  cairn_id a;
  import("a", l2, TU_N(l2), a);
  char *before = tu_blob_names(T.dir);
  cairn_report rep = {0};
  cr_assert_eq(cairn_gc(T.st, false, &rep), 0, "%s", cairn_errmsg(T.st));
  cr_expect_eq(rep.layers + rep.blobs, 0);
  cairn_report_free(&rep);
  char *after = tu_blob_names(T.dir);
  cr_expect_str_eq(after, before);
  cr_expect_eq(tu_layers_count(T.st), 2);
  free(before);
  free(after);
}

/* ---- fsck ----------------------------------------------------------------- */

static int fsck(bool repair, cairn_report *rep) {
  *rep = (cairn_report){0};
  return cairn_fsck(T.st, repair, rep);
}

Test(rm_gc, fsck_clean_store) {
  cairn_report rep;
  cr_expect_eq(fsck(false, &rep), 0, "%s", cairn_errmsg(T.st));
  cr_expect_eq(rep.problems, 0);
  cairn_report_free(&rep);
  cairn_id a;
  import("a", l2, TU_N(l2), a);
  cr_expect_eq(fsck(false, &rep), 0, "%s", cairn_errmsg(T.st));
  cr_expect_eq(rep.problems, 0);
  cr_expect_eq(rep.layers + rep.blobs, 0, "fsck discarded parts of a clean store");
  cairn_report_free(&rep);
  cr_expect_eq(tu_blob_count(T.dir), 2);
}

/* Overwrites a blob's bytes in place (same size), as disk rot would. */
static void corrupt(const char *blob) {
  char path[4096];
  cr_assert_eq(cn_blob_path(T.st, blob, path, sizeof(path)), 0);
  cr_assert_eq(chmod(path, 0644), 0);
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  cr_assert_geq(fd, 0, "%s: %s", path, strerror(errno));
  cr_assert_eq(pwrite(fd, "XX", 2, 0), 2);
  close(fd);
}

static bool report_has(const cairn_report *rep, const char *what) {
  for (size_t i = 0; i < rep->n_lines; i++)
    if (strstr(rep->lines[i], what)) return true;
  return false;
}

Test(rm_gc, fsck_finds_a_corrupt_blob_and_repair_removes_its_users) {
  cairn_id a, b, la[2];
  import("a", l2, TU_N(l2), a);
  import("b", NULL, 0, b); /* shares a's bottom layer only */
  layer_ids(a, la, 2);
  char *bad = blob_of(la[1], "etc/a");
  corrupt(bad);

  cairn_report rep;
  cr_expect_eq(fsck(false, &rep), -EBADMSG);
  cr_expect_gt(rep.problems, 0);
  cr_expect(report_has(&rep, bad), "the report does not name the blob");
  cairn_report_free(&rep);
  cr_expect(resolves("a"), "fsck without repair removed something");

  cr_expect_eq(fsck(true, &rep), 0, "%s", cairn_errmsg(T.st));
  cairn_report_free(&rep);
  cr_expect(!resolves("a"), "repair kept the image using the corrupt blob");
  cr_expect_eq(cn_layer_exists(T.st, la[1]), 0);
  cr_expect(resolves("b"), "repair removed an image that does not use the blob");
  cr_expect_eq(cn_layer_exists(T.st, la[0]), 1);
  cr_expect_eq(tu_blob_count(T.dir), 1, "only b's blob stays");
  char *shell = blob_of(la[0], "bin/sh"), *data = tu_blob_read(T.st, shell, NULL);
  cr_expect_str_eq(data, "shared shell");
  free(data);
  free(shell);
  char pin[4096];
  struct stat sb;
  snprintf(pin, sizeof(pin), "%s/pins/image/%s", T.dir, a);
  cr_expect_eq(stat(pin, &sb), -1, "the removed image's pin file stayed");

  cr_expect_eq(fsck(false, &rep), 0, "not clean after repair: %s", cairn_errmsg(T.st));
  cr_expect_eq(rep.problems, 0);
  cairn_report_free(&rep);
  free(bad);
}

static const tu_entry two_files[] = {{.path = "etc", .type = 'd'},
                                     {.path = "etc/one", .content = "the first file"},
                                     {.path = "etc/two", .content = "the second file"}};

Test(rm_gc, repair_of_a_pinned_image_keeps_it_and_quarantines_the_blob) {
  cairn_id a, la[2];
  import("a", two_files, TU_N(two_files), a);
  layer_ids(a, la, 2);
  char *bad = blob_of(la[1], "etc/one"), *good = blob_of(la[1], "etc/two");
  cairn_pinset *ps = cairn_pinset_new("mount /mnt/x", true);
  cr_assert_eq(cairn_pin_image(T.st, ps, a), 0, "%s", cairn_errmsg(T.st));
  corrupt(bad);

  cairn_report rep;
  cr_expect_eq(fsck(true, &rep), -EBUSY, "%s", cairn_errmsg(T.st));
  char holder[64];
  snprintf(holder, sizeof(holder), "pinned by pid %d ", (int)getpid());
  cr_expect(strstr(cairn_errmsg(T.st), holder) && strstr(cairn_errmsg(T.st), "mount /mnt/x"),
            "the error does not name the holder: %s", cairn_errmsg(T.st));
  cr_expect(report_has(&rep, "quarantined"), "no quarantine reported");
  cairn_report_free(&rep);
  cr_expect(resolves("a"), "repair removed a pinned image");
  cr_expect_eq(tu_layers_count(T.st), 2);
  cr_expect_eq(cairn_blob_open(T.st, bad), -ENOENT, "the corrupt blob is still readable");
  char *data = tu_blob_read(T.st, good, NULL);
  cr_expect_str_eq(data, "the second file", "a healthy blob of the pinned layer went");
  free(data);
  cr_expect_eq(fsck(false, &rep), -EBADMSG, "fsck does not report the quarantined blob");
  cr_expect(report_has(&rep, "missing"));
  cairn_report_free(&rep);

  /* the same content stored again heals the blob */
  cairn_id again;
  cr_assert_eq(tu_ingest(T.st, two_files, TU_N(two_files), TU_PLAIN, NULL, again), 0, "%s",
               cairn_errmsg(T.st));
  cr_assert_str_eq(again, la[1]);
  data = tu_blob_read(T.st, bad, NULL);
  cr_expect_str_eq(data, "the first file", "the import did not heal the blob");
  free(data);
  cr_expect_eq(fsck(false, &rep), 0, "not clean once healed: %s", cairn_errmsg(T.st));
  cairn_report_free(&rep);

  /* once the pin is gone, a repair removes what uses the blob */
  corrupt(bad);
  cairn_pinset_release(T.st, ps);
  cr_expect_eq(fsck(true, &rep), 0, "%s", cairn_errmsg(T.st));
  cairn_report_free(&rep);
  cr_expect(!resolves("a"));
  cr_expect_eq(tu_layers_count(T.st), 0);
  cr_expect_eq(tu_blob_count(T.dir), 0);
  cr_expect_eq(fsck(false, &rep), 0, "%s", cairn_errmsg(T.st));
  cairn_report_free(&rep);
  free(bad);
  free(good);
}

Test(rm_gc, fsck_finds_a_missing_blob) {
  cairn_id a, la[2];
  import("a", l2, TU_N(l2), a);
  layer_ids(a, la, 2);
  char *blob = blob_of(la[1], "etc/a");
  char path[4096];
  cr_assert_eq(cn_blob_path(T.st, blob, path, sizeof(path)), 0);
  cr_assert_eq(unlink(path), 0);
  cairn_report rep;
  cr_expect_eq(fsck(false, &rep), -EBADMSG);
  cr_expect_eq(rep.problems, 1);
  cairn_report_free(&rep);
  free(blob);
}

Test(rm_gc, fsck_discards_incomplete_work_without_repair) {
  cairn_id a;
  import("a", l2, TU_N(l2), a);
  plant_orphan(ORPHAN);
  cr_assert_eq(tu_blob_count(T.dir), 3);
  cairn_report rep;
  cr_expect_eq(fsck(false, &rep), 0, "%s", cairn_errmsg(T.st));
  cr_expect_eq(rep.problems, 0);
  cr_expect_eq(rep.blobs, 1);
  cairn_report_free(&rep);
  cr_expect_eq(tu_blob_count(T.dir), 2, "the orphan blob file stayed");
  cr_expect(resolves("a"));
}
