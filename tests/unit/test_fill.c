/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_fill.c — the fill's plan (store/remote/libcairn_fill.h) without a network:
 * the order (the files before a prefetch landmark first, every layer's,
 * then layer and TOC order), which files are one range, where a request's
 * batch ends; and the lock of one file's fetch across handles
 * (cn_lazy_lock, store/lazy_lock.c).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "remote/libcairn_fill.h"
#include "testutil.h"

static tu_store T;
static void setup(void) { tu_store_setup(&T); }
static void teardown(void) { tu_store_teardown(&T); }
TestSuite(fill, .init = setup, .fini = teardown);

static cn_fill_item item(size_t layer, size_t entry, bool prefetch, uint64_t lo, uint64_t hi) {
  return (cn_fill_item){.layer = layer, .entry = entry, .prefetch = prefetch, .lo = lo, .hi = hi};
}

Test(fill, prefetch_files_first_then_layer_and_toc_order) {
  cn_fill_item v[] = {item(1, 7, false, 0, 1), item(0, 9, false, 0, 1), item(1, 2, true, 0, 1),
                      item(0, 3, false, 0, 1), item(0, 5, true, 0, 1),  item(1, 1, true, 0, 1)};
  cn_fill_sort(v, 6);
  size_t want[][2] = {{0, 5}, {1, 1}, {1, 2}, {0, 3}, {0, 9}, {1, 7}};
  for (size_t i = 0; i < 6; i++) {
    cr_expect_eq(v[i].layer, want[i][0], "item %zu: layer %zu", i, v[i].layer);
    cr_expect_eq(v[i].entry, want[i][1], "item %zu: entry %zu", i, v[i].entry);
  }
  cr_expect_eq(v[0].prefetch && v[1].prefetch && v[2].prefetch && !v[3].prefetch, true);
}

Test(fill, neighbours_in_the_blob_are_one_range) {
  cn_fill_item a = item(0, 1, false, 100, 600), b = item(0, 2, false, 700, 900);
  cr_expect(cn_fill_merges(&a, 100, &b), "a header's gap apart: merged");
  cn_fill_item far = item(0, 2, false, 600 + FILL_MERGE_GAP + 1, 700 + FILL_MERGE_GAP);
  cr_expect(!cn_fill_merges(&a, 100, &far), "more than the gap apart: a range of its own");
  cn_fill_item other = item(1, 2, false, 700, 900);
  cr_expect(!cn_fill_merges(&a, 100, &other), "another layer's blob");
  cn_fill_item before = item(0, 0, false, 0, 100);
  cr_expect(!cn_fill_merges(&a, 100, &before), "not after it in the blob");
  cn_fill_item big = item(0, 2, false, 700, 100 + FILL_RANGE_MAX + 1);
  cr_expect(!cn_fill_merges(&a, 100, &big), "a range stays under FILL_RANGE_MAX");
}

Test(fill, a_batch_is_one_layer_bounded_in_files_and_bytes) {
  static cn_fill_item v[300];
  for (size_t i = 0; i < 300; i++) v[i] = item(i < 250 ? 0 : 1, i, false, i * 1000, i * 1000 + 900);
  cr_expect_eq(cn_fill_batch_end(v, 300, 0, 1u << 30), FILL_BATCH_FILES);
  cr_expect_eq(cn_fill_batch_end(v, 300, 200, 1u << 30), 250, "a batch ends with its layer");
  cr_expect_eq(cn_fill_batch_end(v, 300, 0, 9000), 10, "at most max_bytes");
  cr_expect_eq(cn_fill_batch_end(v, 300, 0, 10), 1, "a file larger than max_bytes alone");
  cr_expect_eq(cn_fill_batch_end(v, 300, 299, 9000), 300);
}

#define HEX "2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae"
#define SHA "sha256:" HEX

Test(fill, batches_grow_from_small_and_shrink_beside_first_reads) {
  uint64_t per = FILL_BATCH_MAX;
  cr_expect_eq(cn_fill_batch_max(per, 0, false), FILL_TRICKLE_BYTES, "small at the start");
  cr_expect_eq(cn_fill_batch_max(per, FILL_RAMP_MS - 1, false), FILL_TRICKLE_BYTES);
  cr_expect_eq(cn_fill_batch_max(per, FILL_RAMP_MS, false), 2 * FILL_TRICKLE_BYTES, "doubling");
  cr_expect_eq(cn_fill_batch_max(per, 60000, false), per, "up to per");
  cr_expect_eq(cn_fill_batch_max(per, 60000, true), FILL_TRICKLE_BYTES, "small beside reads");
  cr_expect_eq(cn_fill_batch_max(FILL_BATCH_MIN, 0, true), FILL_BATCH_MIN, "never above per");
  cr_expect_eq(cn_fill_batch_max(per, -5, false), FILL_TRICKLE_BYTES);
}

Test(fill, one_fetch_lock_per_content_across_handles) {
  cairn_store *other = NULL;
  cr_assert_eq(cairn_store_open_lazy(T.dir, &other), 0);
  int a = cn_lazy_lock(T.st, SHA, false);
  cr_assert_geq(a, 0, "%s", cairn_errmsg(T.st));
  cr_expect_eq(cn_lazy_lock(other, SHA, false), -EWOULDBLOCK, "held: busy");
  cr_expect_eq(cn_lazy_lock(other, HEX, false), -EWOULDBLOCK, "HEX alone names it too");
  int b = cn_lazy_lock(other,
                          "sha256:"
                          "0000000000000000000000000000000000000000000000000000000000000000",
                          false);
  cr_expect_geq(b, 0, "another content's lock is free");
  cn_lazy_unlock(other,
                    "sha256:0000000000000000000000000000000000000000000000000000000000000000", b);
  cn_lazy_unlock(T.st, SHA, a);
  char path[4096];
  struct stat sb;
  snprintf(path, sizeof path, "%s/tmp/fetch-%s.lock", T.dir, HEX);
  cr_expect_neq(stat(path, &sb), 0, "the lock file is gone once released");
  int c = cn_lazy_lock(other, SHA, false);
  cr_expect_geq(c, 0, "free again once released");
  cn_lazy_unlock(other, SHA, c);
  cr_expect_lt(cn_lazy_lock(T.st, "sha256:xyz", true), 0, "not a sha256");
  cairn_store_close(other);
}
