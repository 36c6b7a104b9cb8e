/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cairn/layer.h — libcairn's public face: layers, their entries and blobs; exact layers.
 * Included by cairn.h, whose comment gives the conventions every function
 * here keeps (errors, ids, handles).
 */
#ifndef CAIRN_LAYER_H
#define CAIRN_LAYER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cairn/store.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- layers, entries, blobs ------------------------------------------ */

enum cairn_entry_type {
  CAIRN_REG = 0,
  CAIRN_DIR = 1,
  CAIRN_SYMLINK = 2,
  CAIRN_HARDLINK = 3, /* target: path of the first name in the same layer */
  CAIRN_CHR = 4,
  CAIRN_BLK = 5,
  CAIRN_FIFO = 6,
  CAIRN_SOCK = 7,
  CAIRN_WHITEOUT = 8, /* path is "dir/.wh.NAME" as in the tar */
  CAIRN_OPAQUE = 9,   /* path is "dir/.wh..wh..opq" as in the tar */
};

typedef struct cairn_xattr {
  const char *name;
  const void *value;
  size_t len;
} cairn_xattr;

/* One entry of a layer, as the tar gave it. path is relative with no
 * leading "./" or "/", no "." / ".." components, no trailing slash; the
 * layer root itself is "". Strings are valid only during the callback. */
typedef struct cairn_entry {
  const char *path;
  enum cairn_entry_type type;
  uint32_t mode; /* permission bits incl. setuid/setgid/sticky (07777) */
  uint32_t uid, gid;
  uint64_t size; /* regular files */
  int64_t mtime_sec;
  uint32_t mtime_nsec;
  uint64_t rdev;      /* devices */
  const char *target; /* symlink target, or hardlink's first name */
  const char *blob;   /* regular files with size > 0: blob name; a file of a
                         partial layer not fetched yet: "sha256:HEX" of its
                         content (cairn_blob_is_pending) */
  const cairn_xattr *xattrs;
  size_t n_xattrs;
} cairn_entry;

typedef int (*cairn_entry_fn)(const cairn_entry *e, void *arg);

/* Resolves a layer's full id or unambiguous id prefix (>= 12 hex digits,
 * optional "sha256:"), the rule images follow too.
 * Returns 0; -ENOENT: no such layer; -EINVAL: an ambiguous prefix. */
int cairn_layer_resolve(cairn_store *st, const char *ref, cairn_id id);

/* Opens a blob read-only (O_RDONLY|O_CLOEXEC). Unlike the rest of the API
 * it may be called from several threads on one handle: it only opens a
 * file below the store, and records no WHY (the -errno is all it says).
 * Returns the fd; -ENOENT: no such blob; -errno: open(2)'s. */
int cairn_blob_open(cairn_store *st, const char *blob);
/* The stored blob whose content has sha256 ("sha256:HEX", a pending file's
 * name): its name in blob, found in the database (opened if the handle has
 * none; one thread at a time, as the rest of the API). A blob is there only
 * once verified and durable: a pending file the fill or a fetch stored is
 * read from it with no fetch.
 * Returns 1: found; 0: the store lacks it; -EINVAL: sha256 is not a sha256. */
int cairn_blob_find_sha256(cairn_store *st, const char *sha256, char blob[48]);

/* ---- exact layers (store/tarsplit.c) ----------------------------------- */

/* Receives bytes; 0, or a negative errno that stops the writer. */
typedef int (*cairn_write_fn)(const void *buf, size_t len, void *arg);

#ifdef __cplusplus
}
#endif

#endif
