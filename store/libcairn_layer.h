/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libcairn_layer.h — layers: ingesting a layer tar, reading and deleting its rows
 * (layer.c), the layer above the tree builder. Sweeping unused layers and
 * blobs is in libcairn_sweep.h.
 */
#ifndef LIBCAIRN_LAYER_H
#define LIBCAIRN_LAYER_H

#include "libcairn_store.h"

/* cn_layer_ingest of a layer tar held in memory. */
int cn_layer_ingest_memory(cairn_store *st, const void *buf, size_t len, cairn_pinset *ps,
                           cairn_id diff_id_out);

/* Rows of entries: q selects path, type, mode, uid, gid, size,
 * mtime, mtime_nsec, rdev, target, blob, xattrs; fn gets each row as a
 * cairn_entry (as cn_layer_foreach gives them). */
int cn_entry_rows_foreach(cairn_store *st, sqlite3_stmt *q, cairn_entry_fn fn, void *arg);

/* Deletes a layer with its entries, within an open transaction. */
int cn_layer_delete_rows(cairn_store *st, const char *diff_id);

#endif
