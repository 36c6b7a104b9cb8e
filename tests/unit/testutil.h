/* SPDX-License-Identifier: Apache-2.0 */
/*
 * testutil.h — what the unit tests share: a fresh store in a temporary
 * directory (removed at the end), layer tars built with libarchive's write
 * API from a small description, a look at what a store holds (blob files,
 * listings, hashes), and forked children synchronised with pipes.
 *
 * Helpers that set a test up assert (Criterion) when they fail. Helpers
 * meant for forked children (tu_child_store, tu_spawn's fn) never assert:
 * a child reports with its exit status.
 */
#ifndef CAIRN_TESTUTIL_H
#define CAIRN_TESTUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cairn.h"

/* ---- temporary directories and stores ---------------------------------- */

/* Makes a fresh directory /tmp/cairn-ut-XXXXXX; the path is malloc'd. */
char *tu_tmpdir(void);
/* rm -rf without following symlinks (read-only files included). */
void tu_rmrf(const char *path);

/* A test's store: root is a fresh temporary directory, dir is root/store
 * (created by cairn_store_open on first use), st is open on it. */
typedef struct tu_store {
  char *root;
  char *dir;
  cairn_store *st;
} tu_store;

void tu_store_setup(tu_store *t);
/* Closes the store and removes root with everything under it. */
void tu_store_teardown(tu_store *t);
/* Closes and opens the store again. */
void tu_store_reopen(tu_store *t);
/* Opens a store, asserting success. */
cairn_store *tu_store_open(const char *dir);
/* For a forked child: its own handle on the store, or NULL. */
cairn_store *tu_child_store(const char *dir);

/* ---- layer tars ---------------------------------------------------------- */

#define TU_MAX_XATTRS 4

typedef struct tu_xattr {
  const char *name;
  const void *value;
  size_t len; /* 0: strlen(value) */
} tu_xattr;

/* One tar entry. Zero fields take defaults, so a designated initializer
 * names only what a test cares about. */
typedef struct tu_entry {
  const char *path;
  /* 'f' regular (also 0), 'd' directory, 'l' symlink, 'h' hardlink,
   * 'c' char device, 'b' block device, 'p' fifo */
  char type;
  unsigned mode; /* 07777 bits; 0 picks 0644 (0755 dirs, 0777 symlinks) */
  uint64_t uid, gid;
  int64_t mtime;
  long mtime_nsec;
  const char *content; /* regular files */
  size_t len;          /* 0: strlen(content) */
  const char *target;  /* symlink target, or hardlink's target name */
  unsigned rdev_major, rdev_minor;
  tu_xattr xattrs[TU_MAX_XATTRS]; /* up to the first without a name */
} tu_entry;

#define TU_N(array) (sizeof(array) / sizeof((array)[0]))

/* Flags of tu_tar: a compression filter, and full pax instead of the
 * restricted pax (which writes pax headers only where ustar cannot hold a
 * field, and then also the mtime's nanoseconds). */
enum { TU_PLAIN = 0, TU_GZIP = 1, TU_ZSTD = 2, TU_PAX_FULL = 4 };

/* Builds a tar of these entries; *buf is malloc'd. The compressed forms
 * are the plain tar's bytes run through the filter, so all three have the
 * same uncompressed stream. */
void tu_tar(const tu_entry *e, size_t n, unsigned flags, void **buf, size_t *len);
/* Compresses bytes with libarchive's gzip (TU_GZIP) or zstd (TU_ZSTD). */
void tu_compress(const void *in, size_t len, unsigned flags, void **out, size_t *out_len);
/* An fd (memfd, offset 0) that reads these bytes. */
int tu_memfd(const void *buf, size_t len);
void tu_write_file(const char *path, const void *buf, size_t len);
/* The whole of the file at PATH (malloc'ed, one byte more than *LEN), or
 * the test fails. */
void *tu_read_file(const char *path, size_t *len);

/* cn_layer_ingest of these bytes; a NULL ps uses a pinset of its own,
 * released before returning. Returns what cn_layer_ingest returned. */
int tu_ingest_bytes(cairn_store *st, const void *buf, size_t len, const char *expected_diff_id,
                    cairn_pinset *ps, cairn_id diff_id);
int tu_ingest(cairn_store *st, const tu_entry *e, size_t n, unsigned flags, cairn_pinset *ps,
              cairn_id diff_id);

typedef struct tu_layer {
  const tu_entry *entries;
  size_t n;
} tu_layer;

/* cn_import_files of these layers (bottom first), written as tar files
 * in t->root. Returns what cn_import_files returned. */
int tu_import(tu_store *t, const char *name, const tu_layer *layers, size_t n, cairn_id image_id);

/* ---- looking at a store --------------------------------------------------- */

/* The blob files of a store: "XX/NAME" lines, sorted (malloc'd). */
char *tu_blob_names(const char *store_dir);
/* How many blob files (regular files under DIR/blobs/XX/). */
long tu_blob_count(const char *store_dir);
size_t tu_images_count(cairn_store *st);
size_t tu_layers_count(cairn_store *st);
/* A pin as a listing gave it (struct cairn_pin_rec, copied). */
typedef struct tu_pin {
  enum cairn_pin_kind kind;
  cairn_id target;
  pid_t pid;
  char command[64];
  char purpose[256];
  int64_t since;
  bool stale;
} tu_pin;
/* The pins cairn_pins_foreach lists (malloc'd; *n of them). */
tu_pin *tu_pins(cairn_store *st, const char *filter_id, size_t *n);
/* The pin of pid on target among n pins, or NULL. */
tu_pin *tu_pin_of(tu_pin *pins, size_t n, const char *target, pid_t pid);
/* A blob's whole content through cairn_blob_open (malloc'd, NUL added). */
char *tu_blob_read(cairn_store *st, const char *blob, size_t *len);
/* Every path under dir, relative, sorted, one per line (malloc'd); a
 * top-level name equal to skip is left out with what is below it. */
char *tu_dir_listing(const char *dir, const char *skip);
/* A copy of one entry of a layer: e's strings and xattrs point into it. */
typedef struct tu_got {
  bool found;
  cairn_entry e;
  char path[4096], target[4096], blob[64];
  cairn_xattr xattrs[TU_MAX_XATTRS];
  char xattr_names[TU_MAX_XATTRS][256];
  unsigned char xattr_values[TU_MAX_XATTRS][1024];
} tu_got;

/* The entry at path of a stored layer (malloc'd; found is false if the
 * layer has no such entry). */
tu_got *tu_layer_get(cairn_store *st, const char *diff_id, const char *path);
/* How many entries cn_layer_foreach gives for the layer. */
size_t tu_layer_entries(cairn_store *st, const char *diff_id);
void tu_sha256_hex(const void *buf, size_t len, char out[65]);

/* ---- children -------------------------------------------------------------- */

/* Forks a child that runs fn(arg) and _exits with its result; it dies with
 * the test process and after 30 s whatever happens. */
pid_t tu_spawn(int (*fn)(void *), void *arg);
/* Waits for pid up to timeout_ms: its wait status, or -1 after killing and
 * reaping it when time ran out. */
int tu_reap(pid_t pid, int timeout_ms);
/* SIGKILL and reap. */
void tu_kill_reap(pid_t pid);
/* One byte from fd within timeout_ms, or -1. */
int tu_read_byte(int fd, int timeout_ms);
void tu_write_byte(int fd, char c);
/* Polls cond every 10 ms for up to timeout_ms; its last answer. */
bool tu_wait_until(bool (*cond)(void *), void *arg, int timeout_ms);

/* Asserts that two merged trees are the same, node by node: attributes,
 * strings, xattrs, and each directory's entries (names and inodes). */
void tu_assert_same_tree(const cairn_tree *a, const cairn_tree *b);

#endif
