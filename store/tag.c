/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tag.c — `cairn tag IMAGE NAME[:TAG]`: one more name for an image, as
 * podman tag. A name that named another image moves to this one (the
 * other image keeps its other names, or stays unnamed, listed by id).
 * Invariant: the name is inserted only if the image is still there when
 * the row is written (the names table's foreign key), so a tag that races
 * an rm either names the image or fails with "no such image".
 */
#include "libcairn_image.h"

#include <string.h>

/* The transaction: the name, if the image is still there. */
static int name_insert(cairn_store *st, const char *norm, const char *image_id) {
  int r;
  if ((r = cn_db_begin(st)) < 0) return r;
  cn_autostmt sqlite3_stmt *s = NULL;
  if ((r = cn_db_prepare(st, &s, "INSERT OR REPLACE INTO names(name, image_id) VALUES(?, ?)")) <
      0) {
    cn_db_rollback(st);
    return r;
  }
  sqlite3_bind_text(s, 1, norm, -1, SQLITE_STATIC);
  sqlite3_bind_text(s, 2, image_id, -1, SQLITE_STATIC);
  int rc = sqlite3_step(s);
  if (rc == SQLITE_DONE && (r = cn_name_old_drop(st, norm)) < 0) {
    cn_db_rollback(st);
    return r;
  }
  if (rc != SQLITE_DONE) {
    r = rc == SQLITE_CONSTRAINT ? cairn_fail(st, -ENOENT, "no such image")
        : rc == SQLITE_FULL     ? cn_store_fail_nospace(st)
                                : cn_store_fail_db(st, "image name");
    cn_db_rollback(st);
    return r;
  }
  r = cn_db_commit_durable(st); /* the command says it is done */
  return r == -ENOSPC ? cn_store_fail_nospace(st) : r;
}

int cairn_tag(cairn_store *st, const char *ref, const char *name, cairn_id image_id_out) {
  store_errclear(st);
  char norm[512];
  if (cairn_name_normalize(name, norm, sizeof(norm)) < 0)
    return cairn_fail(st, -EINVAL, "%s: not a valid NAME[:TAG]", name);
  int r = cairn_image_resolve(st, ref, image_id_out);
  if (r < 0) return r;
  int lock = cn_refs_begin(st);
  if (lock < 0) return lock;
  r = name_insert(st, norm, image_id_out);
  cn_refs_end(st, lock);
  return r;
}
