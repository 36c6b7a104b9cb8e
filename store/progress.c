/* SPDX-License-Identifier: Apache-2.0 */
/*
 * progress.c — the progress hook of a store handle (cairn_store_set_progress):
 * the long calls (import, export, gc) say how far they have got through it;
 * a front end draws it. libcairn never prints.
 */
#include "libcairn_store.h"

void cairn_store_set_progress(cairn_store *st, cairn_progress_fn fn, void *arg) {
  st->progress = fn;
  st->progress_arg = arg;
}

void cn_progress(cairn_store *st, const char *step, uint64_t done, uint64_t total, bool bytes,
                 bool finished) {
  if (!st->progress) return;
  const cairn_progress p = {
      .step = step, .done = done, .total = total, .bytes = bytes, .finished = finished};
  st->progress(&p, st->progress_arg);
}
