/*
 * sweep.h — reclaiming what nothing uses (gc.c): unreferenced, unpinned
 * layers, and the blob rows and files nothing references. Shared by rm, a
 * failed import, fsck --repair and gc (which adds the whole-store scans).
 */
#ifndef CAIRN_SWEEP_H
#define CAIRN_SWEEP_H
#include "internal.h"

/* Removes unreferenced, unpinned layers and, when the store lock is had in
 * `mode` (EXCLUSIVE waits for running imports, EXCLUSIVE_NB skips blobs if
 * one runs), the blob rows and files nothing references any more; stale
 * pin annotations and mount records go too (unless dry_run). It does
 * not scan the whole blob tree for files without rows: gc and fsck do.
 * dry_run changes nothing and reports what would go. */
int store_sweep(cairn_store *st, bool dry_run, enum store_lock_mode mode, cairn_report *r);

#endif
