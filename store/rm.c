/*
 * rm.c — removing names and images.
 *
 * By name: the name goes; with the image's last name the image goes too.
 * By id: the image and all its names. An image goes only while this
 * process holds the exclusive lock on its pin file and no live mount is
 * recorded for it; otherwise -EBUSY names every holder. The layers it
 * leaves unused are then swept (store_sweep): a layer that a pull in
 * progress pins stays for that pull.
 */
#include "internal.h"
#include "sweep.h"

#include <string.h>

int layer_delete_rows(cairn_store *st, const char *diff_id) {
  _cleanup_stmt_ sqlite3_stmt *e = NULL, *l = NULL;
  int r;
  if ((r = db_prepare(st, &e, "DELETE FROM entries WHERE layer_id = ?")) < 0 ||
      (r = db_prepare(st, &l, "DELETE FROM layers WHERE id = ?")) < 0)
    return r;
  sqlite3_bind_text(e, 1, diff_id, -1, SQLITE_STATIC);
  sqlite3_bind_text(l, 1, diff_id, -1, SQLITE_STATIC);
  if (sqlite3_step(e) != SQLITE_DONE || sqlite3_step(l) != SQLITE_DONE)
    return store_fail_db(st, "layer delete");
  return 0;
}

/* Deletes one name; 1 if it was the image's last (nothing deleted then). */
static int name_remove_unless_last(cairn_store *st, const char *name, const char *id) {
  _cleanup_stmt_ sqlite3_stmt *q = NULL;
  int r = db_prepare(st, &q, "SELECT count(*) FROM names WHERE image_id = ?");
  if (r < 0) return r;
  sqlite3_bind_text(q, 1, id, -1, SQLITE_STATIC);
  if (sqlite3_step(q) != SQLITE_ROW) return store_fail_db(st, "names");
  int count = sqlite3_column_int(q, 0);
  sqlite3_reset(q); /* ends the read: a write on a stale snapshot is SQLITE_BUSY at once */
  if (count <= 1) return 1;
  _cleanup_stmt_ sqlite3_stmt *d = NULL;
  if ((r = db_prepare(st, &d, "DELETE FROM names WHERE name = ?")) < 0) return r;
  sqlite3_bind_text(d, 1, name, -1, SQLITE_STATIC);
  return sqlite3_step(d) == SQLITE_DONE ? 0 : store_fail_db(st, "name delete");
}

static int image_remove(cairn_store *st, const char *id) {
  int fd = pin_lock_exclusive(st, CAIRN_PIN_IMAGE, id);
  if (fd == -EBUSY) {
    _cleanup_free_ char *who = cairn_pin_holders(st, CAIRN_PIN_IMAGE, id);
    return store_fail(st, -EBUSY, "image %.12s is pinned by %s", id,
                      who && *who ? who : "another process");
  }
  if (fd < 0) return fd;
  _cleanup_free_ char *mounts = NULL;
  int live = mount_live_for_image(st, id, &mounts);
  if (live != 0) {
    pin_unlock(fd);
    return live < 0 ? live : store_fail(st, -EBUSY, "image %.12s is in use by %s", id, mounts);
  }
  int r = db_begin(st);
  if (r < 0) {
    pin_unlock(fd);
    return r;
  }
  _cleanup_stmt_ sqlite3_stmt *d = NULL;
  if ((r = db_prepare(st, &d, "DELETE FROM images WHERE id = ?")) == 0) {
    sqlite3_bind_text(d, 1, id, -1, SQLITE_STATIC);
    if (sqlite3_step(d) != SQLITE_DONE)
      r = store_fail_db(st, "image delete");
    else if (sqlite3_changes(st->db) == 0)
      r = store_fail(st, -ENOENT, "no such image");
  }
  if (r == 0)
    r = db_commit_durable(st);
  else
    db_rollback(st);
  if (r < 0) {
    pin_unlock(fd);
    return r;
  }
  pin_delete_unlock(st, CAIRN_PIN_IMAGE, id, fd);
  cairn_report rep = {0};
  r = store_sweep(st, false, STORE_LOCK_EXCLUSIVE_NB, &rep);
  cairn_report_free(&rep);
  return r;
}

int cairn_rm(cairn_store *st, const char *ref) {
  char name[512];
  cairn_id id;
  int r;
  /* the lookup's statement is finished before anything is written: a
   * write on a read snapshot still open is SQLITE_BUSY at once */
  if ((r = image_name_lookup(st, ref, name, sizeof(name), id)) < 0) return r;
  if (r == 1) {
    r = name_remove_unless_last(st, name, id);
    return r == 1 ? image_remove(st, id) : r;
  }
  if ((r = cairn_image_resolve(st, ref, id)) < 0) return r;
  return image_remove(st, id);
}
