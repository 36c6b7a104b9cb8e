/* SPDX-License-Identifier: Apache-2.0 */
/*
 * snapshot_chain.c — the chain mounts' bookkeeping of containerd's
 * snapshots (snapshot.c): a chain image's mount point, its users (the
 * table snapshot_mounts), the chain lock, the end of a chain's mount and
 * gc's and Cleanup's sweep of the chain images no snapshot uses. Apart
 * from snapshot.c so that gc's link (the slim cairn's) takes none of the
 * lazy Prepare, which refers to pull, the registry and the TOC code.
 */
#include "libcairn_image.h"
#include "libcairn_pin.h"
#include "libcairn_snapshot_chain.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "cleanup.h"

int cn_snapshot_fail_step(cairn_store *st, int rc, const char *what) {
  return rc == SQLITE_FULL ? cn_store_fail_nospace(st) : cn_store_fail_db(st, what);
}

void cn_snapshot_chain_dir(cairn_store *st, const char *image_id, char *buf, size_t len) {
  snprintf(buf, len, "%s/snapshot-mounts/%s", st->dir, image_id);
}

int cn_snapshot_chain_lock(cairn_store *st) {
  int fd = cn_lock_file(st, "snapshot-mounts.lock", LOCK_EX);
  return fd < 0 ? cairn_fail(st, fd, "%s/snapshot-mounts.lock: %s", st->dir, strerror(-fd)) : fd;
}

int64_t cn_snapshot_chain_users(cairn_store *st, const char *image_id) {
  cn_autostmt sqlite3_stmt *q = NULL;
  if (cn_db_prepare(st, &q, "SELECT count(*) FROM snapshot_mounts WHERE image_id = ?") < 0)
    return -1;
  sqlite3_bind_text(q, 1, image_id, -1, SQLITE_STATIC);
  return sqlite3_step(q) == SQLITE_ROW ? sqlite3_column_int64(q, 0) : -1;
}

/* How long cn_snapshot_chain_end waits for the chain image's pins to go
 * (its cairnfs ending after the unmount) before it leaves the image to
 * gc. */
#define CHAIN_END_SETTLE_MS 1000

/* With the chain lock held, and no snapshot using it: the chain image's
 * mount ends (lazily: a container's overlay that still has it keeps it)
 * and its rows go, unless it stays pinned CHAIN_END_SETTLE_MS (its
 * background fill runs: snapshot.c's chain_fill): then they stay, and gc
 * removes them once nothing pins it. With CN_CHAIN_SWEEP_NO_WAIT, a pinned one is left
 * at once; with CN_CHAIN_SWEEP_NO_UNMOUNT, its mount is not ended, and
 * one a live mount serves is left. */
static void chain_end_locked(cairn_store *st, const char *image_id, unsigned flags) {
  if (!(flags & CN_CHAIN_SWEEP_NO_UNMOUNT)) {
    char dir[PATH_MAX];
    cn_snapshot_chain_dir(st, image_id, dir, sizeof(dir));
    if (cairn_mountpoint_state(dir) != CAIRN_MP_NONE) cairn_mountpoint_unmount(dir, true);
    rmdir(dir);
  }
  int fd = cn_pin_lock_exclusive(st, CAIRN_PIN_IMAGE, image_id);
  for (int waited = 0;
       fd == -EBUSY && !(flags & CN_CHAIN_SWEEP_NO_WAIT) && waited < CHAIN_END_SETTLE_MS;
       waited += 50) {
    usleep(50 * 1000);
    fd = cn_pin_lock_exclusive(st, CAIRN_PIN_IMAGE, image_id);
  }
  cairn_autofree char *live = NULL;
  if (fd >= 0 &&
      (!(flags & CN_CHAIN_SWEEP_NO_UNMOUNT) || cn_mount_live_for_image(st, image_id, &live) == 0))
    cn_image_delete(st, image_id);
  cn_pin_unlock(fd);
  store_errclear(st);
}

void cn_snapshot_chain_end(cairn_store *st, const char *image_id) {
  int lock = cn_snapshot_chain_lock(st);
  if (lock >= 0 && cn_snapshot_chain_users(st, image_id) == 0) {
    store_test_point(st, "snapshot: chain unused"); /* a crash here leaves it mounted */
    chain_end_locked(st, image_id, 0);
  }
  if (lock >= 0) close(lock);
  store_errclear(st);
}

/* Whether a snapshotter made the table snapshot_mounts. */
static bool mounts_table_exists(cairn_store *st) {
  cn_autostmt sqlite3_stmt *q = NULL;
  return cn_db_prepare(st, &q,
                       "SELECT 1 FROM sqlite_master WHERE type = 'table'"
                       " AND name = 'snapshot_mounts'") == 0 &&
         sqlite3_step(q) == SQLITE_ROW;
}

/* The chain images no name names. */
#define CHAINS_UNNAMED                                                                             \
  "SELECT id FROM images WHERE instr(config, '" CN_CHAIN_IMAGE_KEY ":true') = 2"                   \
  " AND NOT EXISTS (SELECT 1 FROM names WHERE image_id = images.id)"

int cn_snapshot_chain_sweep(cairn_store *st, unsigned flags) {
  bool nowait = flags & CN_CHAIN_SWEEP_NO_WAIT;
  cairn_autoclose int lock =
      nowait ? openat(st->dirfd, "snapshot-mounts.lock", O_RDWR | O_NOFOLLOW | O_CLOEXEC)
             : cn_snapshot_chain_lock(st);
  if (nowait && (lock < 0 || flock(lock, LOCK_EX | LOCK_NB) < 0))
    return 0; /* held, or no snapshotter ever made a chain image */
  if (lock < 0) return lock;
  /* the chain images (their config starts with the key) no name names and
   * no snapshot uses */
  const char *sql = mounts_table_exists(st) ? CHAINS_UNNAMED
                        " AND id NOT IN (SELECT image_id FROM snapshot_mounts)"
                                            : CHAINS_UNNAMED;
  char **ids = NULL;
  size_t n = 0, cap = 0;
  int r = 0;
  {
    cn_autostmt sqlite3_stmt *q = NULL;
    if ((r = cn_db_prepare(st, &q, sql)) < 0) return r;
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
      char **g = cn_array_grow(ids, n + 1, &cap, sizeof(*g));
      char *id = g ? strdup((const char *)sqlite3_column_text(q, 0)) : NULL;
      if (g) ids = g;
      if (!id) {
        cn_strv_free(ids, n);
        return cairn_fail(st, -ENOMEM, "out of memory");
      }
      ids[n++] = id;
    }
    if (rc != SQLITE_DONE) {
      cn_strv_free(ids, n);
      return cn_snapshot_fail_step(st, rc, "snapshot_mounts");
    }
  }
  for (size_t i = 0; i < n; i++) chain_end_locked(st, ids[i], flags);
  cn_strv_free(ids, n);
  if (flags & CN_CHAIN_SWEEP_NO_UNMOUNT) return 0;
  /* a mount point of no chain image a snapshot uses */
  char top[PATH_MAX];
  snprintf(top, sizeof(top), "%s/snapshot-mounts", st->dir);
  cairn_autoclosedir DIR *d = opendir(top);
  if (!d) return errno == ENOENT ? 0 : cairn_fail(st, -errno, "%s: %s", top, strerror(errno));
  struct dirent *e;
  while ((e = readdir(d)))
    if (strlen(e->d_name) == CAIRN_ID_LEN && cn_snapshot_chain_users(st, e->d_name) == 0)
      chain_end_locked(st, e->d_name, 0);
  return 0;
}
