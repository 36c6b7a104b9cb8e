/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libcairn_store.h — the bottom layer of libcairn, which every file of store/
 * (outside store/remote/) may use and nobody outside sees: the store handle,
 * error helpers, SQLite helpers, the store lock, process facts, small
 * helpers, cleanup attributes, the progress hook, cairn.conf (error.c,
 * db.c, lock.c, staging.c, store.c, util.c, proc.c, progress.c, config.c,
 * backoff.c; the files of this layer call one another only downward:
 * store.c, which opens and closes the store, at the top).
 *
 * The layers above it, each with its own header, each using only the ones
 * below (scripts/check-layers.sh checks it): blobs (libcairn_blob.h), pins and mount
 * records (libcairn_pin.h), the merged-tree builder (libcairn_tree.h), layers and sweeping
 * (libcairn_layer.h, libcairn_sweep.h), images (libcairn_image.h), then merge and export, rm/gc/fsck
 * and pull, which have no private header.
 */
#ifndef LIBCAIRN_STORE_H
#define LIBCAIRN_STORE_H

#include "cairn.h"
#include "cleanup.h"
#include "libcairn_core.h"

#include <errno.h>
#include <jansson.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

struct cairn_store {
  char *dir;    /* absolute store directory */
  int dirfd;    /* O_PATH|O_DIRECTORY of dir */
  int blobs_fd; /* dirfd of dir/blobs */
  /* O_PATH fds of dir/tmp, dir/pins/image and dir/pins/layer, opened
   * without following a symlink (store.c): what is made or removed there
   * goes through them. */
  int tmp_fd;
  int pin_dir_fd[2]; /* by enum cairn_pin_kind */
  sqlite3 *db;
  int staging_fd;          /* the running import's journal (staging.c), or -1 */
  char staging_path[4096]; /* its name in STORE/tmp */
  char err[1024];
  char notice[1024];          /* what opening changed, for the person (store.c), or "" */
  bool created;               /* this opening made the store (CAIRN_STORE_CREATE) */
  uint64_t ingest_padding;    /* the last ingest's zero bytes added (layer.c), or 0 */
  cairn_progress_fn progress; /* cairn_store_set_progress (progress.c) */
  void *progress_arg;
  struct cn_locks_prefetch *locks_prefetch; /* cairn_pins_prefetch (pin.c), or NULL */
  /* Set by a layer above that holds something to end before the store
   * closes (pin.c: a prefetch's thread, joined); cairn_store_close runs it
   * first. */
  void (*on_close)(cairn_store *st);
};

/* cairn_store_default_dir, its failure recorded on st (config.c). */
int cn_store_default_dir(cairn_store *st, char *buf, size_t len);

/* Calls st's progress hook, if any (progress.c). */
void cn_progress(cairn_store *st, const char *step, uint64_t done, uint64_t total, bool bytes,
                 bool finished);

/* Failures (error.c). Records a message for the person and returns err (a
 * negative errno): the library's files call the public cairn_fail by this name. */
/* Forgets the WHY of an earlier call. Every public function that takes a
 * store and can fail calls it first, so that cairn_errmsg never gives an
 * old reason for a new failure (or for a success). Cleanup functions (void)
 * neither clear nor write a WHY: they run on the failure paths of others. */
static inline void store_errclear(cairn_store *st) { st->err[0] = '\0'; }
/* The one message for a full disk, whatever filled it (blob files, SQLite's
 * "database or disk is full"): "STORE: no space left on device". Returns
 * -ENOSPC. */
int cn_store_fail_nospace(cairn_store *st);
/* cairn_fail with SQLite's own message appended; returns -EIO. */
int cn_store_fail_db(cairn_store *st, const char *what);

/* The database (db.c). Opens st's meta.db (creating it, migrating its
 * schema): cairn_store_open does, and cn_db once cairn_store_idle closed
 * it. */
int cn_db_open(cairn_store *st);
/* st's database connection, opened again if cairn_store_idle closed it;
 * NULL (the WHY recorded) if that fails. */
sqlite3 *cn_db(cairn_store *st);
/* Prepares sql or records the SQLite error. */
int cn_db_prepare(cairn_store *st, sqlite3_stmt **stmt, const char *sql);
/* Runs sql with no results. */
int cn_db_exec(cairn_store *st, const char *sql);
/* BEGIN IMMEDIATE / COMMIT / ROLLBACK. */
int cn_db_begin(cairn_store *st);
int cn_db_commit(cairn_store *st);
/* COMMIT that is on disk when it returns (a NORMAL commit in WAL mode is
 * atomic but may be undone by a power cut until a checkpoint). Use it for
 * a commit that files are unlinked after, or that a command reports done;
 * pin annotations and mount records need only cn_db_commit. */
int cn_db_commit_durable(cairn_store *st);
void cn_db_rollback(cairn_store *st);

/* Locks (lock.c). Opens (creating) STORE/name and takes flock op on it: the fd, or a
 * negative errno (-EWOULDBLOCK for a LOCK_NB that would wait), nothing
 * recorded. */
int cn_lock_file(cairn_store *st, const char *name, int op);
/* Store-wide lock: imports hold it shared while they have blobs that no
 * committed row references yet; blob sweeping holds it exclusive. */
enum store_lock_mode { STORE_LOCK_SHARED, STORE_LOCK_EXCLUSIVE, STORE_LOCK_EXCLUSIVE_NB };
int cn_store_lock(cairn_store *st, enum store_lock_mode mode); /* returns fd */

/* A test seam: unit tests set it to run a competing operation at a named
 * point of a race window (rm between counting names and deleting, pin
 * listings between their reads); NULL otherwise. */
extern void (*cn_store_test_hook)(cairn_store *st, const char *point);
static inline void store_test_point(cairn_store *st, const char *point) {
  if (cn_store_test_hook) cn_store_test_hook(st, point);
}

/* Process facts (proc.c). */
uint64_t cn_proc_start_time(pid_t pid); /* 0 if no such process */
char *cn_proc_command(pid_t pid);       /* comm, or "?"; caller frees */

/* Looks an id up in table ("images" or "layers"): ref is a full id or a
 * prefix of at least CAIRN_ID_PREFIX_MIN hex digits, "sha256:" optional.
 * 1 and id if one row matches, 0 if none (or ref is no id), -EINVAL if the
 * prefix is ambiguous (db.c). */
int cn_id_lookup(cairn_store *st, const char *table, const char *ref, cairn_id id);

/* Staging journals (staging.c): the blob files an import links before it
 * commits. begin opens and locks this handle's journal; note records a
 * file (its path below blobs/) before it is linked; end closes it, after a
 * failure removing the files it names that no row references (when no
 * other import runs; else a later opening of the store does). recover,
 * run by every opening of the store, does that for the journals of imports
 * that died. */
int cn_staging_begin(cairn_store *st);
int cn_staging_note(cairn_store *st, const char *rel);
void cn_staging_end(cairn_store *st, bool failed);
void cn_staging_recover(cairn_store *st);
/* True if name (a file of STORE/tmp) is a journal: recover's, not a
 * temporary file for gc's age-based sweep. */
bool cn_staging_is_journal(const char *name);

/* Small helpers (util.c). */
/* A growable list of strings, freed by cn_strv_clear (or cn_autostrv). */
struct strv {
  char **v;
  size_t n, cap;
};
int cn_strv_push(struct strv *sv, const char *s); /* copies s; -ENOMEM */
void cn_strv_clear(struct strv *sv);
/* The directory name below dirfd, open for reading (closedir frees it),
 * never through a symlink at name; NULL and errno if it cannot be. */
DIR *cn_opendirat(int dirfd, const char *name);
/* The directory rel below the store, open for reading, as
 * cn_store_openat opens it (no symlink followed) (util.c). */
DIR *cn_store_opendir(cairn_store *st, const char *rel);
/* Adds a line to a report; a line that finds no memory is left out. */
void cn_report_line(cairn_report *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
bool cn_is_hex_id(const char *s, size_t len);
/* Writes all n bytes of buf to fd (again after a short write or EINTR):
 * 0 or -errno. */
int cn_write_all(int fd, const void *buf, size_t n);
/* Lowercase hex of n bytes into out (2n + 1 bytes). */
void cn_hex_encode(const unsigned char *bytes, size_t n, char *out);
int64_t cn_now_seconds(void);
char *cn_xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* An array of n elements of size bytes, *cap allocated, with room for one
 * more: v, or v moved to a larger block (*cap updated); NULL if there is
 * no memory (v is left as it was). */
void *cn_array_grow(void *v, size_t n, size_t *cap, size_t size);
/* Sorts the n elements of v by cmp and keeps one of each run of equal
 * ones; returns how many are left. */
size_t cn_sort_unique(void *v, size_t n, size_t size, int (*cmp)(const void *, const void *));

/* Sparse files in the tars export and commit write (export.c). The next
 * extent of data at or after pos in fd (size bytes): [*d, *h); *d == size
 * if only a hole is left. A file system that cannot tell holes has one
 * extent, the whole file. */
void cn_next_extent(int fd, uint64_t pos, uint64_t size, uint64_t *d, uint64_t *h);
/* The most a layer's sparse files may hold of holes, all together (an
 * import, a commit). */
#define CN_LAYER_HOLES_MAX (UINT64_C(64) << 30)
/* Gives tar entry e a sparse map if fd (its data, size bytes) has holes,
 * so that the tar holds the data only (pax, GNU sparse 1.0): the writer
 * then drops the bytes written for the holes. */
struct archive_entry;
void cn_tar_sparse_map(struct archive_entry *e, int fd, uint64_t size);

/* cairn_autofree, cairn_autoclose, cairn_autofclose, cairn_autoclosedir:
 * cairn.h. */
static inline void finalizep(sqlite3_stmt **s) { sqlite3_finalize(*s); }
static inline void json_unrefp(json_t **j) { json_decref(*j); }
#define cn_autostmt __attribute__((cleanup(finalizep)))
#define cn_autojson __attribute__((cleanup(json_unrefp)))
#define cn_autostrv __attribute__((cleanup(cn_strv_clear)))

#endif
