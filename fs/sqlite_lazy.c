/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sqlite_lazy.c — cairnfs loads SQLite when it first asks it something,
 * not before main: the SQLite functions libcairn calls are defined here,
 * each calling the library's own through a pointer that the first call of
 * any of them fills in (dlopen of libsqlite3.so.0, then dlsym of each).
 *
 * Why: with cold caches the loader's reading of libsqlite3 and its libm
 * took 7 of a mount's 30 ms (README, "Mount cost"), before the daemon
 * could do anything else. Loaded here, a read-only mount of an image that
 * STORE/refs lists answers before it loads SQLite at all, and writes its
 * annotations and record after (supervisor.c). Only cairnfs links this
 * file; every other program links
 * SQLite as usual, and cairnfs has no libsqlite3 in its DT_NEEDED
 * (tests/e2e/test_mount_libs.sh), so a function of SQLite that libcairn
 * starts to call in cairnfs's code without a line here fails the link.
 *
 * Invariants:
 * - The library is loaded once (pthread_once): a call from any thread
 *   waits for a load in progress, then goes straight through.
 * - If it cannot be loaded, sqlite3_open_v2 fails (SQLITE_CANTOPEN, no
 *   handle) after saying why on stderr: every other function needs a
 *   handle or a statement, so none is reached without the library.
 * - Packagers: dpkg-shlibdeps does not see a dlopen'd library; cairnfs's
 *   package needs libsqlite3-0 named by hand (README, "Libraries").
 */
#include <dlfcn.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#define SQLITE_SONAME "libsqlite3.so.0"

/* X(return type, name, parameters, arguments) for each function. */
#define SQLITE_FUNCTIONS(X)                                                                        \
  X(int, sqlite3_bind_blob, (sqlite3_stmt * s, int i, const void *v, int n, void (*d)(void *)),    \
    (s, i, v, n, d))                                                                               \
  X(int, sqlite3_bind_int, (sqlite3_stmt * s, int i, int v), (s, i, v))                            \
  X(int, sqlite3_bind_int64, (sqlite3_stmt * s, int i, sqlite3_int64 v), (s, i, v))                \
  X(int, sqlite3_bind_null, (sqlite3_stmt * s, int i), (s, i))                                     \
  X(int, sqlite3_bind_text, (sqlite3_stmt * s, int i, const char *v, int n, void (*d)(void *)),    \
    (s, i, v, n, d))                                                                               \
  X(int, sqlite3_busy_timeout, (sqlite3 * db, int ms), (db, ms))                                   \
  X(int, sqlite3_changes, (sqlite3 * db), (db))                                                    \
  X(int, sqlite3_close, (sqlite3 * db), (db))                                                      \
  X(const void *, sqlite3_column_blob, (sqlite3_stmt * s, int i), (s, i))                          \
  X(int, sqlite3_column_bytes, (sqlite3_stmt * s, int i), (s, i))                                  \
  X(int, sqlite3_column_int, (sqlite3_stmt * s, int i), (s, i))                                    \
  X(sqlite3_int64, sqlite3_column_int64, (sqlite3_stmt * s, int i), (s, i))                        \
  X(const unsigned char *, sqlite3_column_text, (sqlite3_stmt * s, int i), (s, i))                 \
  X(int, sqlite3_column_type, (sqlite3_stmt * s, int i), (s, i))                                   \
  X(int, sqlite3_errcode, (sqlite3 * db), (db))                                                    \
  X(const char *, sqlite3_errmsg, (sqlite3 * db), (db))                                            \
  X(const char *, sqlite3_errstr, (int rc), (rc))                                                  \
  X(int, sqlite3_exec,                                                                             \
    (sqlite3 * db, const char *sql, int (*cb)(void *, int, char **, char **), void *arg,           \
     char **err),                                                                                  \
    (db, sql, cb, arg, err))                                                                       \
  X(int, sqlite3_file_control, (sqlite3 * db, const char *name, int op, void *arg),                \
    (db, name, op, arg))                                                                           \
  X(int, sqlite3_finalize, (sqlite3_stmt * s), (s))                                                \
  X(int, sqlite3_get_autocommit, (sqlite3 * db), (db))                                             \
  X(int, sqlite3_prepare_v2,                                                                       \
    (sqlite3 * db, const char *sql, int n, sqlite3_stmt **s, const char **tail),                   \
    (db, sql, n, s, tail))                                                                         \
  X(int, sqlite3_reset, (sqlite3_stmt * s), (s))                                                   \
  X(int, sqlite3_step, (sqlite3_stmt * s), (s))                                                    \
  X(int, sqlite3_system_errno, (sqlite3 * db), (db))                                               \
  X(int, sqlite3_txn_state, (sqlite3 * db, const char *schema), (db, schema))

#define POINTER(type, name, params, args) static type(*real_##name) params;
SQLITE_FUNCTIONS(POINTER)
static int (*real_sqlite3_open_v2)(const char *, sqlite3 **, int, const char *);
static int (*real_sqlite3_db_config)(sqlite3 *, int, ...);

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static bool loaded;

static void load(void) {
  void *lib = dlopen(SQLITE_SONAME, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "cairnfs: %s: %s\n", SQLITE_SONAME, dlerror());
    return;
  }
#define LOOKUP(type, name, params, args)                                                           \
  if (!(*(void **)&real_##name = dlsym(lib, #name))) goto missing;
  SQLITE_FUNCTIONS(LOOKUP)
  LOOKUP(int, sqlite3_open_v2, (), ())
  LOOKUP(int, sqlite3_db_config, (), ())
  loaded = true;
  return;
missing:
  fprintf(stderr, "cairnfs: %s: %s\n", SQLITE_SONAME, dlerror());
}

/* Past a failed load no handle exists, so no call but sqlite3_open_v2's
 * can get here: abort() rather than jump through a null pointer. */
static void need(void) {
  pthread_once(&load_once, load);
  if (!loaded) abort();
}

#define DEFINE(type, name, params, args)                                                           \
  type name params {                                                                               \
    need();                                                                                        \
    return real_##name args;                                                                       \
  }
SQLITE_FUNCTIONS(DEFINE)

int sqlite3_open_v2(const char *path, sqlite3 **db, int flags, const char *vfs) {
  pthread_once(&load_once, load);
  if (!loaded) {
    *db = NULL;
    return SQLITE_CANTOPEN;
  }
  return real_sqlite3_open_v2(path, db, flags, vfs);
}

/* Variadic: what follows op is passed on for the options that take an int
 * and an int * (all but two); those two are not used by cairn. */
int sqlite3_db_config(sqlite3 *db, int op, ...) {
  need();
  if (op == SQLITE_DBCONFIG_MAINDBNAME || op == SQLITE_DBCONFIG_LOOKASIDE) return SQLITE_MISUSE;
  va_list ap;
  va_start(ap, op);
  int value = va_arg(ap, int);
  int *out = va_arg(ap, int *);
  va_end(ap);
  return real_sqlite3_db_config(db, op, value, out);
}
