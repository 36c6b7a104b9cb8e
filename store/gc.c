/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gc.c — reclaiming what nothing uses (the sweep of sweep.c, plus the
 * whole-store scans only gc does). Verifying what is stored is fsck.c.
 */
#include "libcairn_blob.h"
#include "libcairn_image.h"
#include "libcairn_pin.h"
#include "libcairn_snapshot.h"
#include "libcairn_sweep.h"
#include "libcairn_tree.h"
#include "libcairn_upper.h"

#include <dirent.h>
#include <fcntl.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>

#define TMP_MAX_AGE_SECONDS 600

/* Calls gone(st, id, arg) for each file of the store's directory dir that
 * an id names and the table has no row of (sql: "SELECT 1 ... WHERE id = ?"). */
static void for_each_gone_id(cairn_store *st, const char *dir, const char *sql,
                             void (*gone)(cairn_store *st, const char *id, void *arg), void *arg) {
  cairn_autoclosedir DIR *d = cn_store_opendir(st, dir);
  cn_autostmt sqlite3_stmt *q = NULL;
  if (!d || cn_db_prepare(st, &q, sql) < 0) return;
  struct dirent *de;
  while ((de = readdir(d))) {
    if (!cn_is_hex_id(de->d_name, CAIRN_ID_LEN)) continue;
    sqlite3_bind_text(q, 1, de->d_name, -1, SQLITE_STATIC);
    bool exists = sqlite3_step(q) == SQLITE_ROW;
    sqlite3_reset(q);
    if (!exists) gone(st, de->d_name, arg);
  }
}

struct pin_sweep {
  enum cairn_pin_kind kind;
  bool dry_run;
  cairn_report *r;
};

static void pin_file_gone(cairn_store *st, const char *id, void *arg) {
  struct pin_sweep *ps = arg;
  int fd = cn_pin_lock_exclusive(st, ps->kind, id);
  if (fd < 0) return; /* pinned: a pull about to store it */
  ps->r->pins++;
  if (ps->dry_run)
    cn_pin_unlock(fd);
  else
    cn_pin_delete_unlock(st, ps->kind, id, fd);
}

/* Pin files whose target no longer exists (a pull that died, say). */
static void sweep_pin_files(cairn_store *st, bool dry_run, cairn_report *r) {
  for_each_gone_id(st, "pins/image", "SELECT 1 FROM images WHERE id = ?", pin_file_gone,
                   &(struct pin_sweep){CAIRN_PIN_IMAGE, dry_run, r});
  for_each_gone_id(st, "pins/layer", "SELECT 1 FROM layers WHERE id = ?", pin_file_gone,
                   &(struct pin_sweep){CAIRN_PIN_LAYER, dry_run, r});
}

static void index_file_gone(cairn_store *st, const char *id, void *arg) {
  if (!*(bool *)arg) cn_index_remove(st, id);
}

/* Index files of images that no longer exist (a crash between an rm's
 * commit and its unlink). An image's index is linked only after its row
 * is committed, so a file whose row is missing is never a new image's. */
static void sweep_index_files(cairn_store *st, bool dry_run) {
  for_each_gone_id(st, "index", "SELECT 1 FROM images WHERE id = ?", index_file_gone, &dry_run);
}

/* Whether no process holds a flock(2) on the file name of dfd: a
 * background fill's log stays locked for as long as the fill runs, however
 * long ago it last wrote. Removed under the lock taken here, so a process
 * that opens the name later makes a new file. */
static void tmp_unlocked_unlink(int dfd, const char *name) {
  cairn_autoclose int fd =
      openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0) unlinkat(dfd, name, 0);
}

/* Temporary files older than a few minutes that no process holds a lock
 * on belong to no running process. */
static void sweep_tmp(cairn_store *st, bool dry_run) {
  cairn_autoclosedir DIR *d = cn_store_opendir(st, "tmp");
  if (!d) return;
  int dfd = dirfd(d);
  struct dirent *de;
  struct stat sb;
  while ((de = readdir(d)))
    if (de->d_name[0] != '.' && !cn_staging_is_journal(de->d_name) &&
        fstatat(dfd, de->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(sb.st_mode) &&
        sb.st_mtime < cn_now_seconds() - TMP_MAX_AGE_SECONDS && !dry_run)
      tmp_unlocked_unlink(dfd, de->d_name);
}

int cairn_gc(cairn_store *st, bool dry_run, cairn_report *r) {
  store_errclear(st);
  cairn_autoclose int lock =
      cn_store_lock(st, dry_run ? STORE_LOCK_EXCLUSIVE_NB : STORE_LOCK_EXCLUSIVE);
  if (lock < 0 && lock != -EBUSY) return lock;
  /* Its steps, as the progress hook hears them, each finished with how
   * many things it did (layers and blobs removed, directories read, pin
   * files removed). */
  static const char *const steps[] = {CN_BLOB_UNUSED_STEP, CN_BLOB_ORPHANS_STEP,
                                      "pin, index and temporary files"};
  if (!dry_run) cn_sweep_stale_records(st);
  if (lock >= 0 && !dry_run) { /* the chain images no snapshot uses: snapshot_chain.c's */
    cn_snapshot_chain_sweep(st, CN_CHAIN_SWEEP_NO_WAIT | CN_CHAIN_SWEEP_NO_UNMOUNT);
    store_errclear(st);
  }
  cn_progress(st, steps[0], 0, 0, false, false);
  int rc = cn_sweep_unused(st, dry_run, lock >= 0, r);
  if (rc == 0) cn_progress(st, steps[0], r->layers + r->blobs, r->layers + r->blobs, false, true);
  /* The whole-store scans: files no row names, pin files of gone targets,
   * old temporary files. Only gc does them, not every rm. */
  if (rc == 0 && lock >= 0) rc = cn_blob_orphans_sweep(st, dry_run, r);
  if (rc == 0 && lock >= 0) {
    cn_progress(st, steps[1], 256, 256, false, true);
    cn_progress(st, steps[2], 0, 0, false, false);
    sweep_pin_files(st, dry_run, r);
    sweep_index_files(st, dry_run);
    sweep_tmp(st, dry_run);
    cn_progress(st, steps[2], r->pins, r->pins, false, true);
  }
  if (rc == 0) { /* the leftovers of upper layers: never a user's changes */
    int u = cn_uppers_gc(st, dry_run);
    if (u < 0) rc = u;
  }
  char size[32];
  cairn_human_size(r->bytes, size, sizeof(size));
  if (rc == 0)
    cn_report_line(r, "%s %llu layers, %llu blobs, %s", dry_run ? "would free" : "freed",
                   (unsigned long long)r->layers, (unsigned long long)r->blobs, size);
  return rc;
}
