/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rm.c — removing names and images.
 *
 * By name: the name goes; with the image's last name the image goes too.
 * The names are counted and deleted in one BEGIN IMMEDIATE transaction,
 * which also checks that the name still names the image it named when it
 * was looked up: an import adding a name, or an rm of another name, runs
 * wholly before or wholly after it, so an image never loses a name it just
 * got nor stays with none. By id: the image and all its names.
 *
 * An image goes only while this process holds the exclusive lock on its
 * pin file, no live mount is recorded for it, no containerd snapshot holds
 * one of its layers (cn_snapshot_holders) and no upper layer of a --rw
 * mount is left on it (kept by umount --keep, or by a crash: a user's
 * uncommitted changes); otherwise -EBUSY names every holder or upper (a
 * name that is not the last goes even then). CAIRN_RM_FORCE drops such
 * uppers instead, saying so ("Dropped: upper ID of DIR ..."), first. The pin lock
 * is taken before the transaction begins, as pinners lock before they
 * write their annotation. The layers it leaves unused are then swept
 * (cn_store_sweep): a layer that a pull in progress pins stays for that pull.
 * The image's index file goes after the commit, like its pin file.
 *
 * cairn_rm_report says what changed, once it is committed, as podman does:
 * "Untagged: NAME" for each name gone, "Deleted: ID" for the image, then
 * the sweep's lines for the layers it freed.
 */
#include "libcairn_image.h"
#include "libcairn_pin.h"
#include "libcairn_sweep.h"
#include "libcairn_tree.h"
#include "libcairn_upper.h"

#include <ctype.h>
#include <string.h>
#include <unistd.h>

/* A name that keeps naming other images, or keeps becoming the last one
 * after it was counted, is given up after this many attempts. */
#define RM_ATTEMPTS 100
/* How long rm waits for a pin whose holder is already gone (image_lock). */
#define RM_SETTLE_MS 10000
#define RM_SETTLE_STEP_MS 20

static int names_count(cairn_store *st, const char *id) {
  cn_autostmt sqlite3_stmt *q = NULL;
  int r = cn_db_prepare(st, &q, "SELECT count(*) FROM names WHERE image_id = ?");
  if (r < 0) return r;
  sqlite3_bind_text(q, 1, id, -1, SQLITE_STATIC);
  return sqlite3_step(q) == SQLITE_ROW ? sqlite3_column_int(q, 0) : cn_store_fail_db(st, "names");
}

static int name_delete(cairn_store *st, const char *name) {
  cn_autostmt sqlite3_stmt *d = NULL;
  int r = cn_db_prepare(st, &d, "DELETE FROM names WHERE name = ?");
  if (r < 0) return r;
  sqlite3_bind_text(d, 1, name, -1, SQLITE_STATIC);
  return sqlite3_step(d) == SQLITE_DONE ? 0 : cn_store_fail_db(st, "name delete");
}

/* Within a transaction: deletes the image row (its names and layer list
 * go with it), if fd is its pin file's exclusive lock (not -EBUSY), no
 * live mount is recorded for it and no upper layer left on it holds a
 * user's changes, unless force drops those (said in rep). */
static int image_delete_row(cairn_store *st, const char *id, int fd, unsigned flags,
                            cairn_report *rep) {
  if (fd == -EBUSY) {
    cairn_autofree char *who = cairn_pin_holders(st, CAIRN_PIN_IMAGE, id);
    return cairn_fail(st, -EBUSY, "image %.12s is pinned by %s", id,
                      who && *who ? who : "another process");
  }
  cairn_autofree char *snaps = cn_snapshot_holders(st, CAIRN_PIN_IMAGE, id);
  if (snaps) return cairn_fail(st, -EBUSY, "image %.12s is in use by %s", id, snaps);
  cairn_autofree char *mounts = NULL;
  int live = cn_mount_live_for_image(st, id, &mounts);
  if (live != 0)
    return live < 0 ? live : cairn_fail(st, -EBUSY, "image %.12s is in use by %s", id, mounts);
  bool force = flags & CAIRN_RM_FORCE;
  cairn_autofree char *uppers = NULL;
  int left = cn_uppers_of_image(st, id, force ? rep : NULL, force ? NULL : &uppers);
  if (left < 0) return left;
  if (left > 0 && !force)
    return cairn_fail(st, -EBUSY,
                      "image %.12s has uncommitted changes: %s (hint: cairn umount --discard DIR "
                      "drops them, or cairn rm --force)",
                      id, uppers);
  int r = cn_image_delete_rows(st, id);
  if (r < 0) return r;
  return sqlite3_changes(st->db) ? 0 : cairn_fail(st, -ENOENT, "no such image");
}

/* Commits the open transaction if r is 0, else rolls it back. */
static int tx_end(cairn_store *st, int r) {
  if (r == 0) return cn_db_commit_durable(st);
  cn_db_rollback(st);
  return r;
}

/* After the commit that deleted image id: its index file goes, then its
 * pin file (whose lock kept the index while it was in use), then what it
 * left unused (the sweep's lines go to rep). */
static int image_removed(cairn_store *st, const char *id, int fd, cairn_report *rep) {
  cn_index_remove(st, id);
  cn_pin_delete_unlock(st, CAIRN_PIN_IMAGE, id, fd);
  cn_report_line(rep, "Deleted: %s", id);
  size_t first = rep->n_lines;
  int r = cn_store_sweep(st, false, STORE_LOCK_EXCLUSIVE_NB, rep);
  /* after Untagged: and Deleted:, the sweep's lines as capitalised
   * (Removed layer, Kept layer); gc's stay lower case, as its others */
  for (size_t i = first; i < rep->n_lines; i++)
    rep->lines[i][0] = (char)toupper((unsigned char)rep->lines[i][0]);
  return r;
}

/* Within a transaction: the names of id, to say they go with it. */
static int names_read(cairn_store *st, const char *id, cairn_report *names) {
  cn_autostmt sqlite3_stmt *q = NULL;
  int r = cn_db_prepare(st, &q, "SELECT name FROM names WHERE image_id = ? ORDER BY name");
  if (r < 0) return r;
  sqlite3_bind_text(q, 1, id, -1, SQLITE_STATIC);
  while ((r = sqlite3_step(q)) == SQLITE_ROW)
    cn_report_line(names, "Untagged: %s", (const char *)sqlite3_column_text(q, 0));
  return r == SQLITE_DONE ? 0 : cn_store_fail_db(st, "names");
}

/* The image's pin file locked exclusive: the fd, -EBUSY or -errno. A pin
 * with no holder left to name is one whose holder is letting go right now
 * (a daemon whose session just ended closes its pins' fds): rm waits for
 * that, RM_SETTLE_MS (10 s) at most, rather than call the image pinned by nobody;
 * a named holder answers -EBUSY at once. */
static int image_lock(cairn_store *st, const char *id) {
  for (int waited = 0;; waited += RM_SETTLE_STEP_MS) {
    int fd = cn_pin_lock_exclusive(st, CAIRN_PIN_IMAGE, id);
    if (fd != -EBUSY || waited >= RM_SETTLE_MS) return fd;
    cairn_autofree char *who = cairn_pin_holders(st, CAIRN_PIN_IMAGE, id);
    if (who && *who) return fd;
    usleep(RM_SETTLE_STEP_MS * 1000);
  }
}

static int image_remove(cairn_store *st, const char *id, unsigned flags, cairn_report *rep) {
  int fd = image_lock(st, id);
  if (fd < 0 && fd != -EBUSY) return fd;
  cairn_report names = {0};
  int lock = cn_refs_begin(st);
  int r = lock < 0 ? lock : cn_db_begin(st);
  if (r == 0) {
    r = names_read(st, id, &names);
    r = tx_end(st, r < 0 ? r : image_delete_row(st, id, fd, flags, rep));
  }
  cn_refs_end(st, lock);
  for (size_t i = 0; r == 0 && i < names.n_lines; i++) cn_report_line(rep, "%s", names.lines[i]);
  cairn_report_free(&names);
  if (r < 0) {
    cn_pin_unlock(fd);
    return r;
  }
  return image_removed(st, id, fd, rep);
}

/* Within a transaction: removes name, which named id when the caller
 * counted; only the name if other names remain, else the image (*image_gone
 * set), for which the caller tried the pin lock (locked) and got fd.
 * -EAGAIN: start again (the name moved, or became the last one unlocked). */
static int name_remove_tx(cairn_store *st, const char *name, const char *id, bool locked, int fd,
                          unsigned flags, cairn_report *rep, bool *image_gone) {
  char norm[512];
  cairn_id now;
  int r = cn_image_name_lookup(st, name, norm, sizeof(norm), now);
  if (r <= 0) return r < 0 ? r : cairn_fail(st, -ENOENT, "no such image");
  if (strcmp(now, id) != 0) return -EAGAIN;
  int count = names_count(st, id);
  if (count < 0) return count;
  if (count > 1) return name_delete(st, name);
  if (!locked) return -EAGAIN;
  *image_gone = true;
  return image_delete_row(st, id, fd, flags, rep);
}

/* rm by name: 0 or -errno; 1 if ref names no image (it may be an id). */
static int name_remove(cairn_store *st, const char *ref, unsigned flags, cairn_report *rep) {
  for (int attempt = 0; attempt < RM_ATTEMPTS; attempt++) {
    char name[512];
    cairn_id id;
    int r = cn_image_name_lookup(st, ref, name, sizeof(name), id);
    if (r <= 0) return r < 0 ? r : 1;
    int count = names_count(st, id);
    if (count < 0) return count;
    /* the last name takes the image with it: lock the pin first */
    bool last = count <= 1;
    int fd = last ? image_lock(st, id) : -1;
    if (last && fd < 0 && fd != -EBUSY) return fd;
    store_test_point(st, "rm: names counted");
    bool image_gone = false;
    int lock = cn_refs_begin(st);
    if ((r = lock < 0 ? lock : cn_db_begin(st)) == 0)
      r = tx_end(st, name_remove_tx(st, name, id, last, fd, flags, rep, &image_gone));
    cn_refs_end(st, lock);
    if (r == 0) cn_report_line(rep, "Untagged: %s", name);
    if (r == 0 && image_gone) return image_removed(st, id, fd, rep);
    cn_pin_unlock(fd);
    if (r != -EAGAIN) return r;
  }
  return cairn_fail(st, -EAGAIN, "%s: its image keeps changing; try again", ref);
}

int cairn_rm_report(cairn_store *st, const char *ref, unsigned flags, cairn_report *rep) {
  store_errclear(st);
  int r = name_remove(st, ref, flags, rep);
  if (r != 1) return r;
  cairn_id id;
  if ((r = cairn_image_resolve(st, ref, id)) < 0) return r;
  return image_remove(st, id, flags, rep);
}

int cairn_rm(cairn_store *st, const char *ref) {
  cairn_report rep = {0};
  int r = cairn_rm_report(st, ref, 0, &rep);
  cairn_report_free(&rep);
  return r;
}
