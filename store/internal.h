/*
 * internal.h — what the files of libcairn share and nobody else sees: the
 * store handle, error helpers, SQLite helpers, cleanup attributes.
 */
#ifndef CAIRN_INTERNAL_H
#define CAIRN_INTERNAL_H

#include "cairn.h"

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
  sqlite3 *db;
  char err[1024];
};

/* Records a message for the person and returns err (a negative errno): the
 * library's files call the public cairn_fail by this name. */
#define store_fail cairn_fail
/* The one message for a full disk, whatever filled it (blob files, SQLite's
 * "database or disk is full"): "STORE: no space left on device". Returns
 * -ENOSPC (import.c). */
int store_fail_nospace(cairn_store *st);
/* store_fail with SQLite's own message appended; returns -EIO. */
int store_fail_db(cairn_store *st, const char *what);

/* Prepares sql or records the SQLite error. */
int db_prepare(cairn_store *st, sqlite3_stmt **stmt, const char *sql);
/* Runs sql with no results. */
int db_exec(cairn_store *st, const char *sql);
/* BEGIN IMMEDIATE / COMMIT / ROLLBACK. */
int db_begin(cairn_store *st);
int db_commit(cairn_store *st);
/* COMMIT that is on disk when it returns (a NORMAL commit in WAL mode is
 * atomic but may be undone by a power cut until a checkpoint). Use it for
 * a commit that files are unlinked after, or that a command reports done;
 * pin annotations and mount records need only db_commit. */
int db_commit_durable(cairn_store *st);
void db_rollback(cairn_store *st);

/* Store-wide lock: imports hold it shared while they have blobs that no
 * committed row references yet; blob sweeping holds it exclusive. */
enum store_lock_mode { STORE_LOCK_SHARED, STORE_LOCK_EXCLUSIVE, STORE_LOCK_EXCLUSIVE_NB };
int store_lock(cairn_store *st, enum store_lock_mode mode); /* returns fd */

/* Blobs (blob.c). A writer streams content into an anonymous file in the
 * store, then links it under its content name. */
typedef struct blob_writer blob_writer;
int blob_writer_new(cairn_store *st, blob_writer **out);
int blob_writer_write(blob_writer *w, const void *buf, size_t len);
/* Finishes the blob: name (XXH3-128 hex, or with a "-N" suffix on a key
 * collision) goes to name_out, which holds at least 48 bytes. The blob's
 * row is inserted by the caller's commit. */
int blob_writer_finish(blob_writer *w, char *name_out, uint64_t *size_out, char sha256_hex_out[65]);
void blob_writer_free(blob_writer *w);
/* Deletes blob rows nothing references and their files, and files with no
 * row. Needs the store lock exclusive. */
int blob_rows_unreferenced(cairn_store *st, bool dry_run, json_t *names, cairn_report *r);
int blob_files_remove(cairn_store *st, json_t *names);
int blob_orphans_sweep(cairn_store *st, bool dry_run, cairn_report *r);
void blob_name_path(const char *name, char *rel, size_t len);

/* Pins (pin.c). */
int pin_path(cairn_store *st, enum cairn_pin_kind kind, const char *id, char *buf, size_t len);
/* Exclusive non-blocking lock on a target's pin file for deletion: returns
 * an fd (to pass to pin_delete_unlock) or -EBUSY. */
int pin_lock_exclusive(cairn_store *st, enum cairn_pin_kind kind, const char *id);
/* Unlinks the pin file (the target is gone) and closes the lock. */
void pin_delete_unlock(cairn_store *st, enum cairn_pin_kind kind, const char *id, int fd);
void pin_unlock(int fd);
/* The flock(2) locks held (not waited for) on any file, from /proc/locks;
 * free v. A failure is recorded in st. */
struct kernel_lock {
  unsigned maj, min;
  unsigned long ino;
  pid_t pid;
};
struct kernel_locks {
  struct kernel_lock *v;
  size_t n;
};
int kernel_locks_read(cairn_store *st, struct kernel_locks *out);
/* True if any process holds a lock (in kl) on the target's pin file. */
bool pin_held_in(cairn_store *st, const struct kernel_locks *kl, enum cairn_pin_kind kind,
                 const char *id);

/* Mounts (mount.c): number of live or detached mount records of the
 * image; *desc gets "mount DIR (cairnfs pid N[, detached])" entries joined
 * by "; ". */
int mount_live_for_image(cairn_store *st, const char *image_id, char **desc);
int mount_clean_stale(cairn_store *st);
/* A pin annotation's purpose as people see it: with " (detached)" when pid
 * is a daemon whose mount is detached. Caller frees; NULL on ENOMEM. */
char *mount_pin_purpose(cairn_store *st, pid_t pid, const char *purpose);

/* A test seam: unit tests set it to run a competing operation at a named
 * point of a race window (rm between counting names and deleting, pin
 * listings between their reads); NULL otherwise. */
extern void (*store_test_hook)(cairn_store *st, const char *point);
static inline void store_test_point(cairn_store *st, const char *point) {
  if (store_test_hook) store_test_hook(st, point);
}

/* Process facts (proc.c). */
uint64_t proc_start_time(pid_t pid); /* 0 if no such process */
char *proc_command(pid_t pid);       /* comm, or "?"; caller frees */

/* cairn_layer_ingest of a layer tar held in memory (import.c). */
int layer_ingest_memory(cairn_store *st, const void *buf, size_t len, cairn_pinset *ps,
                        cairn_id diff_id_out);

/* Looks a NAME[:TAG] up (normalized into name): 1 and id if it names an
 * image, 0 if not (or not a valid name), negative on error (image.c). */
int image_name_lookup(cairn_store *st, const char *ref, char *name, size_t len, cairn_id id);

/* Deletion within an open transaction (rm.c): a layer with its entries; an
 * image with its names and layer list (no error if it is gone already). */
int layer_delete_rows(cairn_store *st, const char *diff_id);
int image_delete_rows(cairn_store *st, const char *id);

/* Rows of entries (image.c): q selects path, type, mode, uid, gid, size,
 * mtime, mtime_nsec, rdev, target, blob, xattrs; fn gets each row as a
 * cairn_entry (as cairn_layer_foreach gives them). */
int entry_rows_foreach(cairn_store *st, sqlite3_stmt *q, cairn_entry_fn fn, void *arg);

/* The merged-tree builder (merge.c): layers applied bottom first by the
 * OCI rules, whatever their entries come from. A source calls fn for each
 * entry of one layer, in path order (as cairn_layer_foreach does), and
 * returns what a non-zero fn returned. Errors are -EBADMSG for a layer
 * that cannot be merged (the message says why) or -ENOMEM. */
typedef struct merge_builder merge_builder;
typedef int (*merge_source_fn)(void *src, cairn_entry_fn fn, void *arg);
int merge_builder_new(cairn_store *st, merge_builder **out);
int merge_builder_add_layer(merge_builder *b, merge_source_fn source, void *src);
/* Freezes the tree into *out; b is freed either way. */
int merge_builder_finish(merge_builder *b, cairn_tree **out);
void merge_builder_free(merge_builder *b);

/* Small helpers (util.c). */
bool is_hex_id(const char *s, size_t len);
/* Lowercase hex of n bytes into out (2n + 1 bytes). */
void hex_encode(const unsigned char *bytes, size_t n, char *out);
#define sha256_hex cairn_sha256_hex /* the public name, used by pull too */
int64_t now_seconds(void);
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* An array of n elements of size bytes, *cap allocated, with room for one
 * more: v, or v moved to a larger block (*cap updated); NULL if there is
 * no memory (v is left as it was). */
void *array_grow(void *v, size_t n, size_t *cap, size_t size);

/* _cleanup_free_, _cleanup_close_, _cleanup_fclose_, _cleanup_closedir_:
 * cairn.h. */
static inline void finalizep(sqlite3_stmt **s) { sqlite3_finalize(*s); }
static inline void json_unrefp(json_t **j) { json_decref(*j); }
#define _cleanup_stmt_ __attribute__((cleanup(finalizep)))
#define _cleanup_json_ __attribute__((cleanup(json_unrefp)))

#endif
