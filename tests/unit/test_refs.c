/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_refs.c — STORE/refs, the copy of the images, their layers and the
 * names that a mount reads before SQLite is loaded: every import, tag and
 * rm leaves it saying what the database says; cairn_pin_image_early
 * resolves a name or an id prefix by it and takes the image's and its
 * layers' pin locks without annotations, which cairn_pin_image then
 * writes; a file that is missing or torn is not read (0, nothing taken)
 * and cairn_refs_repair writes a missing one; cairn fsck reports a file
 * that says otherwise than the database (not a missing one) and --repair
 * writes it again.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"

static tu_store T;
static cairn_id app, other;
static char **layers;
static size_t n_layers;

static const tu_entry base[] = {{.path = "bin", .type = 'd'}, {.path = "bin/sh", .content = "sh"}};
static const tu_entry top[] = {{.path = "etc", .type = 'd'}, {.path = "etc/motd", .content = "hi"}};
static const tu_entry top2[] = {{.path = "etc", .type = 'd'},
                                {.path = "etc/motd", .content = "other"}};

static void setup(void) {
  tu_store_setup(&T);
  tu_layer l1[] = {{base, 2}, {top, 2}};
  cr_assert_eq(tu_import(&T, "app:1", l1, 2, app), 0, "%s", cairn_errmsg(T.st));
  tu_layer l2[] = {{base, 2}, {top2, 2}};
  cr_assert_eq(tu_import(&T, "other:1", l2, 2, other), 0, "%s", cairn_errmsg(T.st));
  cr_assert_eq(cn_image_layers(T.st, app, &layers, &n_layers), 0);
  cr_assert_eq(n_layers, 2);
}
static void teardown(void) {
  cn_strv_free(layers, n_layers);
  tu_store_teardown(&T);
}
TestSuite(refs, .init = setup, .fini = teardown);

/* STORE/refs, whole; NULL if there is none. */
static char *refs_read(void) {
  char path[4096];
  snprintf(path, sizeof(path), "%s/refs", T.dir);
  FILE *f = fopen(path, "r");
  if (!f) return NULL;
  char *buf = calloc(1, 1 << 16);
  cr_assert(buf);
  size_t n = fread(buf, 1, (1 << 16) - 1, f);
  fclose(f);
  buf[n] = '\0';
  return buf;
}

static void refs_write(const char *text) {
  char path[4096];
  snprintf(path, sizeof(path), "%s/refs", T.dir);
  unlink(path);
  FILE *f = fopen(path, "w");
  cr_assert(f);
  fputs(text, f);
  fclose(f);
}

/* What the file must say, the images sorted by id. */
static char *refs_expected(bool with_app, const char *const *app_names, bool with_other) {
  char *buf = calloc(1, 1 << 16);
  cr_assert(buf);
  strcat(buf, "cairn-refs 1\n");
  const char *first = strcmp(app, other) < 0 ? app : other;
  for (int k = 0; k < 2; k++) {
    const char *id = (k == 0) == (first == app) ? app : other;
    if (id == app ? !with_app : !with_other) continue;
    char **ls;
    size_t n;
    cr_assert_eq(cn_image_layers(T.st, id, &ls, &n), 0);
    sprintf(buf + strlen(buf), "i %s", id);
    for (size_t i = 0; i < n; i++) sprintf(buf + strlen(buf), " %s", ls[i]);
    strcat(buf, "\n");
    cn_strv_free(ls, n);
  }
  for (size_t i = 0; with_app && app_names[i]; i++)
    sprintf(buf + strlen(buf), "n %s %s\n", app_names[i], app);
  if (with_other) sprintf(buf + strlen(buf), "n localhost/other:1 %s\n", other);
  strcat(buf, ".\n");
  return buf;
}

Test(refs, import_tag_and_rm_keep_it_what_the_database_says) {
  cairn_autofree char *after_import = refs_read();
  const char *const one[] = {"localhost/app:1", NULL};
  cairn_autofree char *want = refs_expected(true, one, true);
  cr_assert_str_eq(after_import, want);

  cairn_id id;
  cr_assert_eq(cairn_tag(T.st, "app:1", "app:2", id), 0, "%s", cairn_errmsg(T.st));
  cairn_autofree char *after_tag = refs_read();
  const char *const two[] = {"localhost/app:1", "localhost/app:2", NULL};
  cairn_autofree char *want2 = refs_expected(true, two, true);
  cr_assert_str_eq(after_tag, want2);

  cr_assert_eq(cairn_rm(T.st, "app:1"), 0, "%s", cairn_errmsg(T.st)); /* the name only */
  cairn_autofree char *after_untag = refs_read();
  const char *const left[] = {"localhost/app:2", NULL};
  cairn_autofree char *want3 = refs_expected(true, left, true);
  cr_assert_str_eq(after_untag, want3);

  cr_assert_eq(cairn_rm(T.st, "app:2"), 0, "%s", cairn_errmsg(T.st)); /* the image */
  cairn_autofree char *after_rm = refs_read();
  cairn_autofree char *want4 = refs_expected(false, left, true);
  cr_assert_str_eq(after_rm, want4);

  cr_assert_eq(cairn_rm(T.st, other), 0, "%s", cairn_errmsg(T.st)); /* by id */
  cairn_autofree char *empty = refs_read();
  cr_assert_str_eq(empty, "cairn-refs 1\n.\n");
}

Test(refs, early_pins_lock_the_image_and_its_layers_then_pin_image_annotates) {
  cairn_pinset *ps = cairn_pinset_new("mount /x", true);
  cairn_id id;
  cr_assert_eq(cairn_pin_image_early(T.st, ps, "app:1", id), 1, "%s", cairn_errmsg(T.st));
  cr_assert_str_eq(id, app);
  cr_assert(cn_pin_is_held(T.st, CAIRN_PIN_IMAGE, app));
  for (size_t i = 0; i < n_layers; i++)
    cr_assert(cn_pin_is_held(T.st, CAIRN_PIN_LAYER, layers[i]));
  cr_assert_eq(cairn_rm(T.st, "app:1"), -EBUSY, "an early pin does not keep the image");
  /* No annotation yet: who holds it is only the kernel's to say. */
  cairn_autofree char *before = cairn_pin_holders(T.st, CAIRN_PIN_IMAGE, app);
  cr_assert_null(strstr(before ? before : "", "mount /x"), "annotated early: %s", before);
  cr_assert_eq(cairn_pin_image(T.st, ps, app), 0, "%s", cairn_errmsg(T.st));
  cairn_autofree char *after = cairn_pin_holders(T.st, CAIRN_PIN_IMAGE, app);
  cr_assert_not_null(strstr(after ? after : "", "mount /x"), "not annotated: %s", after);
  cairn_autofree char *layer = cairn_pin_holders(T.st, CAIRN_PIN_LAYER, layers[1]);
  cr_assert_not_null(strstr(layer ? layer : "", "mount /x"), "layer not annotated: %s", layer);
  cairn_pinset_release(T.st, ps);
  cr_assert(!cn_pin_is_held(T.st, CAIRN_PIN_IMAGE, app));
}

Test(refs, early_pins_resolve_an_id_prefix_and_nothing_else) {
  cairn_pinset *ps = cairn_pinset_new("mount /x", true);
  char prefix[16];
  snprintf(prefix, sizeof(prefix), "%.12s", other);
  cairn_id id;
  cr_assert_eq(cairn_pin_image_early(T.st, ps, prefix, id), 1);
  cr_assert_str_eq(id, other);
  cairn_pinset_release(T.st, ps);
  ps = cairn_pinset_new("mount /x", true);
  cr_assert_eq(cairn_pin_image_early(T.st, ps, "nosuch:1", id), 0);
  cr_assert_eq(cairn_pin_image_early(T.st, ps, "app", id), 0, "app means app:latest");
  cr_assert(!cn_pin_is_held(T.st, CAIRN_PIN_IMAGE, app));
  cairn_pinset_release(T.st, ps);
}

Test(refs, a_missing_or_torn_file_is_not_read_and_a_missing_one_is_repaired) {
  cairn_autofree char *whole = refs_read();
  cr_assert_not_null(whole);
  cairn_pinset *ps = cairn_pinset_new("mount /x", true);
  cairn_id id;
  /* Torn: the end marker missing, as after a crash mid-write. */
  char torn[1 << 16];
  snprintf(torn, sizeof(torn), "%.*s", (int)(strlen(whole) - 2), whole);
  refs_write(torn);
  cr_assert_eq(cairn_pin_image_early(T.st, ps, "app:1", id), 0);
  cr_assert(!cn_pin_is_held(T.st, CAIRN_PIN_IMAGE, app));
  cairn_refs_repair(T.st); /* there is a file: left alone */
  cairn_autofree char *still = refs_read();
  cr_assert_str_eq(still, torn);

  char path[4096];
  snprintf(path, sizeof(path), "%s/refs", T.dir);
  cr_assert_eq(unlink(path), 0);
  cr_assert_eq(cairn_pin_image_early(T.st, ps, "app:1", id), 0);
  cairn_refs_repair(T.st);
  cairn_autofree char *repaired = refs_read();
  cr_assert_str_eq(repaired, whole);
  cr_assert_eq(cairn_pin_image_early(T.st, ps, "app:1", id), 1);
  cairn_pinset_release(T.st, ps);
}

/* Whether a line of rep contains what. */
static bool report_says(const cairn_report *rep, const char *what) {
  for (size_t i = 0; i < rep->n_lines; i++)
    if (strstr(rep->lines[i], what)) return true;
  return false;
}

Test(refs, fsck_finds_a_wrong_file_and_repair_writes_it_again) {
  cairn_autofree char *whole = refs_read();
  cairn_report rep = {0};
  cr_assert_eq(cairn_fsck(T.st, false, &rep), 0, "%s", cairn_errmsg(T.st));
  cairn_report_free(&rep);

  /* app:1 said to be other's image: a mount would trust it. */
  char wrong[1 << 16], from[128], to[128];
  snprintf(from, sizeof(from), "n localhost/app:1 %s", app);
  snprintf(to, sizeof(to), "n localhost/app:1 %s", other);
  char *at = strstr(whole, from);
  cr_assert_not_null(at);
  snprintf(wrong, sizeof(wrong), "%.*s%s%s", (int)(at - whole), whole, to, at + strlen(from));
  refs_write(wrong);
  rep = (cairn_report){0};
  cr_assert_eq(cairn_fsck(T.st, false, &rep), -EBADMSG, "a wrong STORE/refs passed fsck");
  cr_assert(report_says(&rep, "STORE/refs"), "fsck does not name STORE/refs");
  cairn_report_free(&rep);
  cairn_autofree char *kept = refs_read();
  cr_assert_str_eq(kept, wrong, "fsck without --repair changed the file");

  rep = (cairn_report){0};
  cr_assert_eq(cairn_fsck(T.st, true, &rep), 0, "%s", cairn_errmsg(T.st));
  cr_assert(report_says(&rep, "repaired: rewrote STORE/refs"));
  cairn_report_free(&rep);
  cairn_autofree char *repaired = refs_read();
  cr_assert_str_eq(repaired, whole);

  /* Missing: no problem (mounts ask the database); --repair writes it. */
  char path[4096];
  snprintf(path, sizeof(path), "%s/refs", T.dir);
  cr_assert_eq(unlink(path), 0);
  rep = (cairn_report){0};
  cr_assert_eq(cairn_fsck(T.st, false, &rep), 0, "%s", cairn_errmsg(T.st));
  cairn_report_free(&rep);
  cr_assert_null(refs_read());
  rep = (cairn_report){0};
  cr_assert_eq(cairn_fsck(T.st, true, &rep), 0, "%s", cairn_errmsg(T.st));
  cairn_report_free(&rep);
  cairn_autofree char *written = refs_read();
  cr_assert_str_eq(written, whole);
}
