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

/* cn_layer_ingest of a tar read from fd as its writer writes it: once
 * fd's end is read, and before anything is committed, done(arg) says how
 * the writer ended: 0, or a negative errno (it failed: nothing is
 * committed, whatever it wrote, and the writer's error is the caller's
 * to say; a tar cut short between two entries reads as a whole one). */
typedef int (*cn_layer_writer_done_fn)(void *arg);
int cn_layer_ingest_written(cairn_store *st, int fd, cn_layer_writer_done_fn done, void *arg,
                            cairn_pinset *ps, cairn_id diff_id_out);

/* The directory parent_fd/name, a kernel overlay's upper (a containerd
 * snapshot's), as a layer (store/commit.c): a pax tar of its entries by
 * name (whiteouts, character devices 0/0, as .wh.NAME; a directory whose
 * trusted.overlay.opaque is "y" with its .wh..wh..opq; overlayfs's own
 * xattrs left out; sockets left out), ingested (pinned in ps) as
 * cn_layer_ingest does: the same files give the same layer. */
int cn_dir_layer(cairn_store *st, int parent_fd, const char *name, cairn_pinset *ps,
                 cairn_id layer_out);

/* Rows of entries: q selects path, type, mode, uid, gid, size,
 * mtime, mtime_nsec, rdev, target, blob, xattrs; fn gets each row as a
 * cairn_entry (as cn_layer_foreach gives them). */
int cn_entry_rows_foreach(cairn_store *st, sqlite3_stmt *q, cairn_entry_fn fn, void *arg);

/* How many 512-byte zero blocks (1 to 127) after the stream sha hashed so
 * far (left as it is) make it hash to expected (hex), or 0: the record
 * padding podman 4.3's zstd:chunked writer drops from a layer's blob. */
unsigned cn_layer_padding_blocks(EVP_MD_CTX *sha, const char *expected);

/* Deletes a layer with its entries, within an open transaction. */
int cn_layer_delete_rows(cairn_store *st, const char *diff_id);

/* Within the caller's transaction (an ingest that hashed the layer's tar
 * to diff_id): if layer diff_id is a lazy pull's whose diff_id is not
 * proven yet (a layer_sources row) or refuted (layer_refuted), drops its
 * rows but the layers row (entries, pending files, source, refutation, tar
 * record) and the indexes of its images, for the ingest to store what it
 * hashed: 1, and toc the kept TOC ("toc/HEX", "" if none) to unlink after
 * the commit; 0 when it is proven. */
int cn_layer_unproven_drop(cairn_store *st, const char *diff_id, char toc[80]);

/* Removes the indexes of the images that use layer diff_id (the next use
 * builds them again from the rows as they are then). */
void cn_layer_indexes_remove(cairn_store *st, const char *diff_id);

#endif
