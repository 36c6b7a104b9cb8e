/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libcairn_image.h — images (image.c, list.c), the layer above layers.
 */
#ifndef LIBCAIRN_IMAGE_H
#define LIBCAIRN_IMAGE_H

#include "libcairn_store.h"

/* The key the config of a snapshot chain image has first (snapshot.c: the
 * image a chain's cairnfs mount serves, no user's), and the SQL condition
 * on an images row that it is a user's image, as listings and counts
 * show them. */
#define CN_CHAIN_IMAGE_KEY "\"cairn.snapshot.chain\""
#define CN_USER_IMAGE_SQL "instr(config, '" CN_CHAIN_IMAGE_KEY "') = 0"

/* Looks a NAME[:TAG] up (normalized into name): 1 and id if it names an
 * image, 0 if not (or not a valid name), negative on error (image.c). */
int cn_image_name_lookup(cairn_store *st, const char *ref, char *name, size_t len, cairn_id id);

/* Within a transaction that set the name norm: drops what a store from
 * before localhost/ holds for it (app:1 for localhost/app:1), so that the
 * name moves whole. 0 or -errno. */
int cn_name_old_drop(cairn_store *st, const char *norm);

/* Deletes an image with its names and layer list, within an open
 * transaction (no error if it is gone already). */
int cn_image_delete_rows(cairn_store *st, const char *id);
/* The same in a transaction of its own, under the refs lock
 * (cn_refs_begin): for an image the caller holds exclusive. 0 or a
 * negative errno (recorded). */
int cn_image_delete(cairn_store *st, const char *id);

/* Builds the merged tree of image_id from its stored layers, bottom first,
 * through the tree builder (tree.c), ignoring any index file (image.c). */
int cn_image_tree_build(cairn_store *st, const char *image_id, cairn_tree **out);

/* Around every transaction that changes images or names (refs.c): begin
 * takes STORE/refs.lock and removes STORE/refs (durably), returning the
 * lock's fd or a negative errno (recorded; the caller changes nothing);
 * end writes STORE/refs from the database and drops the lock. */
int cn_refs_begin(cairn_store *st);
void cn_refs_end(cairn_store *st, int lock);
/* fsck's check of STORE/refs against the database, under its lock: right,
 * missing (no problem: mounts ask the database) or wrong (a mount would
 * trust it); repair writes a missing or wrong one again. A negative errno
 * (recorded) if it could not tell or write. */
enum { CN_REFS_RIGHT, CN_REFS_MISSING, CN_REFS_WRONG };
int cn_refs_check(cairn_store *st, bool repair);

#endif
