/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fill.c — filling an image a lazy pull left partial (cairn_fill,
 * doc/lazy-pulls.md "What is fetched when", item 3): every pending file
 * of the image fetched and stored, each through cairn_lazy_fetch
 * (lazy.c), under the image's pins.
 *
 * Built on cairn.h alone, like the rest of store/pull/.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cairn.h"

int cairn_fill(cairn_store *st, const char *image_ref, const cairn_fill_opts *opts,
               cairn_id image_id) {
  cairn_fail(st, 0, "%s", "");
  cairn_fill_opts o = opts ? *opts : (cairn_fill_opts){0};
  char *purpose = NULL;
  if (asprintf(&purpose, "fill %s", image_ref) < 0) return cairn_fail(st, -ENOMEM, "out of memory");
  cairn_pinset *ps = cairn_pinset_new(purpose, true);
  free(purpose);
  if (!ps) return cairn_fail(st, -ENOMEM, "out of memory");
  int r = cairn_image_resolve(st, image_ref, image_id);
  if (r == 0) r = cairn_pin_image(st, ps, image_id);
  char **todo = NULL;
  size_t n = 0;
  if (r == 0) r = cairn_lazy_pending_list(st, image_id, &todo, &n);
  uint64_t files = 0, bytes = 0;
  if (r == 0) r = cairn_image_pending(st, image_id, &files, &bytes);
  size_t failed = 0;
  int first_err = 0;
  char why[1024] = "";
  for (size_t i = 0; r == 0 && i < n; i++) {
    if (o.progress) o.progress(i, n, o.arg);
    char blob[48];
    int k = cairn_lazy_fetch(st, todo[i], blob);
    if (k < 0) {
      if (!failed++) {
        first_err = k;
        snprintf(why, sizeof why, "%s", cairn_errmsg(st));
      }
      if (o.log) {
        char line[1200];
        snprintf(line, sizeof line, "%s: %s", todo[i], cairn_errmsg(st));
        o.log(line, o.arg);
      }
    }
  }
  if (r == 0 && o.progress) o.progress(n, n, o.arg);
  cairn_strv_free(todo, n);
  cairn_pinset_release(st, ps);
  if (r < 0) return r;
  if (failed)
    return cairn_fail(st, first_err, "%zu of %zu files not fetched (first: %s)", failed, n, why);
  return 0;
}
