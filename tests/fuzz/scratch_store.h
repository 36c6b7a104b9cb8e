/* SPDX-License-Identifier: Apache-2.0 */
/*
 * scratch_store.h — the store the fuzz targets that import layers
 * (fuzz_import, fuzz_tarsplit) write to: a real store on tmpfs
 * (/dev/shm/cairn-fuzz-NAME-PID), made once per process by
 * scratch_store_init, made afresh by scratch_store_fresh when a target has
 * stored enough layers that it should not grow further, and removed at
 * exit. A target includes it once, after its private headers.
 */
#ifndef CAIRN_FUZZ_SCRATCH_STORE_H
#define CAIRN_FUZZ_SCRATCH_STORE_H

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static char scratch_dir[64];
static const char *scratch_name;
static cairn_store *st;
static unsigned stored; /* layers stored since the store was made */

static int scratch_remove_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  remove(path);
  return 0;
}

static void scratch_store_fresh(void) {
  if (st) cairn_store_close(st);
  nftw(scratch_dir, scratch_remove_one, 32, FTW_DEPTH | FTW_PHYS);
  if (cairn_store_open(scratch_dir, &st) < 0) {
    fprintf(stderr, "fuzz_%s: store %s: %s\n", scratch_name, scratch_dir, cairn_errmsg(st));
    abort();
  }
  stored = 0;
}

static void scratch_store_remove(void) {
  cairn_store_close(st);
  nftw(scratch_dir, scratch_remove_one, 32, FTW_DEPTH | FTW_PHYS);
}

/* Makes the store of the target name (import, tarsplit). */
static void scratch_store_init(const char *name) {
  scratch_name = name;
  snprintf(scratch_dir, sizeof(scratch_dir), "/dev/shm/cairn-fuzz-%s-%d", name, getpid());
  scratch_store_fresh();
  atexit(scratch_store_remove);
}

#endif
