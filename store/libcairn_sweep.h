/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libcairn_sweep.h — reclaiming what nothing uses (sweep.c), part of the layers
 * layer: unreferenced, unpinned layers, and the blob rows and files nothing
 * references. Shared by rm, a failed import, fsck --repair and gc (which
 * adds the whole-store scans).
 */
#ifndef LIBCAIRN_SWEEP_H
#define LIBCAIRN_SWEEP_H
#include "libcairn_store.h"

/* Removes unreferenced, unpinned layers and, when the store lock is had in
 * `mode` (EXCLUSIVE waits for running imports, EXCLUSIVE_NB skips blobs if
 * one runs), the blob rows and files nothing references any more; stale
 * pin annotations and mount records go too (unless dry_run). It does
 * not scan the whole blob tree for files without rows: gc and fsck do.
 * dry_run changes nothing and reports what would go. */
int cn_store_sweep(cairn_store *st, bool dry_run, enum store_lock_mode mode, cairn_report *r);
/* The parts of cn_store_sweep, for callers that hold the store lock already:
 * the transaction over layers and (have_lock) blob rows, then their files;
 * and the stale annotations and mount records. */
int cn_sweep_unused(cairn_store *st, bool dry_run, bool have_lock, cairn_report *r);
void cn_sweep_stale_records(cairn_store *st);

/* Exclusive pin locks on targets whose rows a transaction deletes, held
 * until it ends. */
struct held {
  enum cairn_pin_kind kind;
  char id[CAIRN_ID_LEN + 1];
  int fd;
};
struct held_set {
  struct held *v;
  size_t n, cap;
};
/* Adds a lock to the set (or, failing that, drops it): 0 or -ENOMEM. */
int cn_held_add(cairn_store *st, struct held_set *h, enum cairn_pin_kind kind, const char *id,
                int fd);
bool cn_held_has(const struct held_set *h, enum cairn_pin_kind kind, const char *id);
/* Once the transaction ended: if it deleted the targets (committed), their
 * pin files go (an image's index file first); otherwise the locks are only
 * dropped. */
void cn_held_release(cairn_store *st, struct held_set *h, bool deleted);

#endif
