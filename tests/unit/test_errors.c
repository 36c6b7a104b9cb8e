/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_errors.c — the one error channel, cairn_errmsg: every public call
 * starts with a clean message, so a success after a failure leaves none
 * and a failure after another gives its own reason, never the earlier
 * one; and a reason with context put before it (an entry of a cut tar, the
 * file it came from) says each part once.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

static tu_store T;
static cairn_id image;
static const tu_entry base[] = {{.path = "bin", .type = 'd'}, {.path = "bin/sh", .content = "sh"}};

static void setup(void) {
  tu_store_setup(&T);
  tu_layer layers[] = {{base, TU_N(base)}};
  cr_assert_eq(tu_import(&T, "app:1", layers, 1, image), 0, "%s", cairn_errmsg(T.st));
}
static void teardown(void) { tu_store_teardown(&T); }
TestSuite(errors, .init = setup, .fini = teardown);

/* A failure whose reason the next call must not show. */
static void fail_first(void) {
  cairn_id id;
  cr_assert_eq(cairn_image_resolve(T.st, "no-such:1", id), -ENOENT);
  cr_assert_str_eq(cairn_errmsg(T.st), "no such image");
}

/* Callbacks that count what a listing gives. */
#define COUNTER(name, rec)                                                                         \
  static int name(const rec *x, void *arg) {                                                       \
    (void)x;                                                                                       \
    ++*(int *)arg;                                                                                 \
    return 0;                                                                                      \
  }
COUNTER(count_entry, cairn_entry)
COUNTER(count_image, struct cairn_image_rec)
COUNTER(count_layer, struct cairn_layer_rec)
COUNTER(count_info, struct cairn_image_info)
COUNTER(count_pin, struct cairn_pin_rec)
COUNTER(count_mount, struct cairn_mount_rec)

/* The calls that return no int, as 0 (or -ENOMEM: no string). */
static int holders(void) {
  char *who = cairn_pin_holders(T.st, CAIRN_PIN_IMAGE, image);
  free(who);
  return who ? 0 : -ENOMEM;
}
static int is_held(void) { return cn_pin_is_held(T.st, CAIRN_PIN_IMAGE, image) ? 0 : 0; }

/* After a failure, each call that succeeds leaves cairn_errmsg empty. */
#define EXPECT_CLEAN_AFTER_A_FAILURE(call)                                                         \
  do {                                                                                             \
    fail_first();                                                                                  \
    int r_ = (call);                                                                               \
    cr_expect(r_ >= 0, "%s failed: %d %s", #call, r_, cairn_errmsg(T.st));                         \
    cr_expect_str_empty(cairn_errmsg(T.st), "%s succeeded with the old reason \"%s\"", #call,      \
                        cairn_errmsg(T.st));                                                       \
  } while (0)

Test(errors, a_success_after_a_failure_leaves_no_message) {
  cairn_id id, layer;
  char **ids;
  size_t n;
  int count = 0;
  EXPECT_CLEAN_AFTER_A_FAILURE(cairn_image_resolve(T.st, "app:1", id));
  EXPECT_CLEAN_AFTER_A_FAILURE(cn_image_layers(T.st, image, &ids, &n));
  snprintf(layer, sizeof(layer), "%s", ids[0]);
  cn_strv_free(ids, n);
  EXPECT_CLEAN_AFTER_A_FAILURE(cn_layer_exists(T.st, layer));
  EXPECT_CLEAN_AFTER_A_FAILURE(cn_layer_foreach(T.st, layer, count_entry, &count));
  EXPECT_CLEAN_AFTER_A_FAILURE(cairn_images_foreach(T.st, count_image, &count));
  EXPECT_CLEAN_AFTER_A_FAILURE(cairn_layers_foreach(T.st, count_layer, &count));
  EXPECT_CLEAN_AFTER_A_FAILURE(cairn_inspect(T.st, image, count_info, &count));
  cairn_pinset *ps = cairn_pinset_new("test", true);
  cr_assert(ps);
  EXPECT_CLEAN_AFTER_A_FAILURE(cn_pin_take(T.st, ps, CAIRN_PIN_LAYER, layer));
  EXPECT_CLEAN_AFTER_A_FAILURE(cairn_pin_image(T.st, ps, image));
  EXPECT_CLEAN_AFTER_A_FAILURE(cairn_pins_foreach(T.st, NULL, count_pin, &count));
  cairn_pinset_release(T.st, ps);
  EXPECT_CLEAN_AFTER_A_FAILURE(cairn_pins_clean_stale(T.st));
  EXPECT_CLEAN_AFTER_A_FAILURE(cairn_pin_wait_free(T.st, image, 0));
  EXPECT_CLEAN_AFTER_A_FAILURE(is_held());
  EXPECT_CLEAN_AFTER_A_FAILURE(holders());
  EXPECT_CLEAN_AFTER_A_FAILURE(cairn_mount_record(T.st, "/nowhere", image, getpid(), "0:0", false));
  EXPECT_CLEAN_AFTER_A_FAILURE(cairn_mounts_foreach(T.st, count_mount, &count));
  EXPECT_CLEAN_AFTER_A_FAILURE(cairn_mount_forget(T.st, "/nowhere", getpid()));
  cairn_tree *tree = NULL;
  EXPECT_CLEAN_AFTER_A_FAILURE(cairn_tree_build(T.st, image, &tree));
  cairn_tree_free(tree);
  int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
  cr_assert(null >= 0);
  EXPECT_CLEAN_AFTER_A_FAILURE(cairn_export(T.st, image, null));
  close(null);
  char path[4096];
  EXPECT_CLEAN_AFTER_A_FAILURE(cn_blob_path(T.st, layer, path, sizeof(path)));
  EXPECT_CLEAN_AFTER_A_FAILURE(tu_ingest(T.st, base, TU_N(base), TU_PLAIN, NULL, id));
  char *config = cn_config_for_layers((const char *const *)&(const char *){layer}, 1);
  cr_assert(config);
  EXPECT_CLEAN_AFTER_A_FAILURE(cn_image_commit(
      T.st, config, strlen(config), (const char *const *)&(const char *){layer}, 1, "app:3", id));
  free(config);
  tu_layer layers[] = {{base, TU_N(base)}};
  EXPECT_CLEAN_AFTER_A_FAILURE(tu_import(&T, "app:2", layers, 1, id));
  cairn_report rep = {0};
  EXPECT_CLEAN_AFTER_A_FAILURE(cairn_gc(T.st, true, &rep));
  cairn_report_free(&rep);
  EXPECT_CLEAN_AFTER_A_FAILURE(cairn_fsck(T.st, false, &rep));
  cairn_report_free(&rep);
  EXPECT_CLEAN_AFTER_A_FAILURE(cairn_rm(T.st, "app:2"));
}

/* A failure after another says its own reason: these calls used to return
 * a bare errno and so showed the earlier "no such image". */
Test(errors, a_failure_after_another_gives_its_own_reason) {
  cairn_pinset *ps = cairn_pinset_new("test", true);
  cr_assert(ps);
  cr_assert_eq(cairn_pin_image(T.st, ps, image), 0, "%s", cairn_errmsg(T.st));
  fail_first();
  cr_expect_eq(cairn_pin_wait_free(T.st, image, 0), -ETIMEDOUT);
  char want[128];
  snprintf(want, sizeof(want), "image %.12s is still pinned or mounted after 0 ms", image);
  cr_expect_str_eq(cairn_errmsg(T.st), want);
  cairn_pinset_release(T.st, ps);

  fail_first();
  char path[8];
  cr_expect_eq(cn_blob_path(T.st, image, path, sizeof(path)), -ENAMETOOLONG);
  snprintf(want, sizeof(want), "blob %s: its path is longer than 8 bytes", image);
  cr_expect_str_eq(cairn_errmsg(T.st), want);
}

/* A layer tar cut inside a file's data: the entry and the file it came
 * from are each named once before the reason. */
Test(errors, a_cut_tar_names_its_entry_once) {
  static char big[20000];
  memset(big, 'x', sizeof(big) - 1);
  static const tu_entry e[] = {{.path = "data", .type = 'd'},
                               {.path = "data/many", .type = 'd'},
                               {.path = "data/many/f00223", .content = big}};
  void *buf;
  size_t len;
  tu_tar(e, TU_N(e), TU_PLAIN, &buf, &len);
  const char *data = memmem(buf, len, "xxxxxxxx", 8);
  cr_assert(data);
  size_t cut = (size_t)(data - (const char *)buf) + 7000;
  cairn_id id;
  fail_first();
  cr_expect_eq(tu_ingest_bytes(T.st, buf, cut, NULL, NULL, id), -EBADMSG);
  cr_expect_str_eq(cairn_errmsg(T.st), "entry data/many/f00223: Truncated tar archive");

  char *file;
  cr_assert(asprintf(&file, "%s/cut.tar", T.root) > 0);
  tu_write_file(file, buf, cut);
  fail_first();
  cr_expect_eq(cn_import_files(T.st, "cut:1", (const char *const *)&file, 1, id), -EBADMSG);
  char *want;
  cr_assert(asprintf(&want, "%s: entry data/many/f00223: Truncated tar archive", file) > 0);
  cr_expect_str_eq(cairn_errmsg(T.st), want);
  free(want);
  free(file);
  free(buf);
}
