/*
 * sweep.h — reclaiming what nothing uses (gc.c): unreferenced, unpinned
 * layers; blob rows and files nothing references; pin files of targets
 * that are gone. Shared by rm, gc and fsck.
 */
#ifndef CAIRN_SWEEP_H
#define CAIRN_SWEEP_H
#include "internal.h"

/* Layers are swept whatever the store lock; blobs only when the store lock
 * is had in `mode` (EXCLUSIVE waits for running imports, EXCLUSIVE_NB skips
 * blobs if one runs). dry_run changes nothing and reports what would go. */
int store_sweep(cairn_store *st, bool dry_run, enum store_lock_mode mode, cairn_report *r);

#endif
