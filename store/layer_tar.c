/* SPDX-License-Identifier: Apache-2.0 */
/*
 * layer_tar.c — a stored layer's tar, written again byte for byte
 * (cn_layer_tar, for push and export) from its record (tarsplit.c) and
 * its blobs, and whether it has one. It calls both tarsplit.c (the
 * record's format) and layer.c (the layer's rows), so that neither of them
 * calls the other: layer.c records, tarsplit.c knows no layer.
 */
#include "libcairn_layer.h"
#include "libcairn_tarsplit.h"

#include <string.h>

int cn_layer_tar_recorded(cairn_store *st, const char *diff_id) {
  store_errclear(st);
  cn_autostmt sqlite3_stmt *q = NULL;
  int r = cn_db_prepare(st, &q, "SELECT 1 FROM layer_tars WHERE layer_id = ?");
  if (r < 0) return r;
  sqlite3_bind_text(q, 1, diff_id, -1, SQLITE_STATIC);
  r = sqlite3_step(q);
  return r == SQLITE_ROW ? 1 : r == SQLITE_DONE ? 0 : cn_store_fail_db(st, "layer tar record");
}

int cn_layer_tar(cairn_store *st, const char *diff_id, cairn_write_fn fn, void *arg,
                    uint64_t *size) {
  store_errclear(st);
  cairn_autofree void *data = NULL;
  size_t len = 0;
  {
    cn_autostmt sqlite3_stmt *q = NULL;
    int r = cn_db_prepare(st, &q, "SELECT data FROM layer_tars WHERE layer_id = ?");
    if (r < 0) return r;
    sqlite3_bind_text(q, 1, diff_id, -1, SQLITE_STATIC);
    r = sqlite3_step(q);
    if (r == SQLITE_DONE) {
      int e = cn_layer_exists(st, diff_id);
      if (e < 0) return e;
      return e ? cairn_fail(st, -ENODATA,
                            "layer sha256:%.12s: stored without its tar headers (imported"
                            " before cairn kept them): import or pull it again",
                            diff_id)
               : cairn_fail(st, -ENOENT, "layer sha256:%.12s: no such layer", diff_id);
    }
    if (r != SQLITE_ROW) return cn_store_fail_db(st, "layer tar record");
    len = (size_t)sqlite3_column_bytes(q, 0);
    if (!(data = malloc(len ? len : 1)))
      return cairn_fail(st, -ENOMEM, "out of memory reading a tar record");
    memcpy(data, sqlite3_column_blob(q, 0), len);
  }
  uint64_t total;
  cairn_id sha;
  int r = cn_tarsplit_write(st, data, len, fn, arg, &total, sha);
  if (r < 0) return r == -EBADMSG ? cn_fail_context(st, r, "layer sha256:%.12s", diff_id) : r;
  if (strcmp(sha, diff_id) != 0)
    return cairn_fail(st, -EBADMSG, "layer sha256:%.12s: its tar rebuilt hashes to sha256:%.12s",
                      diff_id, sha);
  if (size) *size = total;
  return 0;
}
