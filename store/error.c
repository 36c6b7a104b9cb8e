/* SPDX-License-Identifier: Apache-2.0 */
/*
 * error.c — failures: the WHY recorded on a store for the person
 * (cairn_fail, cn_fail_context, cairn_errmsg), SQLite's and a full
 * disk's, and the exit code each failure gives (cairn_exit_code). It calls
 * nothing of the store: every file of it calls these.
 */
#include "libcairn_store.h"

#include <string.h>

int cairn_fail(cairn_store *st, int err, const char *fmt, ...) {
  if (!st) return err;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(st->err, sizeof(st->err), fmt, ap);
  va_end(ap);
  return err;
}

int cn_fail_context(cairn_store *st, int err, const char *fmt, ...) {
  if (!st) return err;
  char context[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(context, sizeof(context), fmt, ap);
  va_end(ap);
  if (!st->err[0]) snprintf(st->err, sizeof(st->err), "%s", strerror(-err));
  /* prepend in place: "CONTEXT: " then as much of the WHY as fits */
  size_t clen = strlen(context), wlen = strlen(st->err);
  size_t room = sizeof(st->err) - 1 - (clen + 2);
  if (wlen > room) wlen = room;
  memmove(st->err + clen + 2, st->err, wlen);
  memcpy(st->err, context, clen);
  memcpy(st->err + clen, ": ", 2);
  st->err[clen + 2 + wlen] = '\0';
  return err;
}

int cn_store_fail_db(cairn_store *st, const char *what) {
  int code = st->db ? sqlite3_errcode(st->db) : SQLITE_ERROR;
  /* a full disk is SQLITE_FULL, or an I/O error (growing the -shm file) */
  if (code == SQLITE_FULL || (code == SQLITE_IOERR && sqlite3_system_errno(st->db) == ENOSPC))
    return cairn_fail(st, -ENOSPC, "%s: %s: no space left on device", what, st->dir);
  int err = (code == SQLITE_BUSY || code == SQLITE_LOCKED)    ? -EBUSY
            : code == SQLITE_CORRUPT || code == SQLITE_NOTADB ? -EBADMSG
                                                              : -EIO;
  return cairn_fail(st, err, "%s: %s", what, st->db ? sqlite3_errmsg(st->db) : "no database");
}

const char *cairn_errmsg(const cairn_store *st) { return st ? st->err : "out of memory"; }

int cn_store_fail_nospace(cairn_store *st) {
  return cairn_fail(st, -ENOSPC, "%s: no space left on device", st->dir);
}

int cairn_exit_code(int err) {
  switch (err) {
  case 0: return CAIRN_EXIT_OK;
  case -ENOENT: return CAIRN_EXIT_NOT_FOUND;
  case -EBUSY: return CAIRN_EXIT_BUSY;
  case -EBADMSG: return CAIRN_EXIT_INTEGRITY;
  case -EINVAL: return CAIRN_EXIT_USAGE;
  default: return CAIRN_EXIT_FAILURE;
  }
}
