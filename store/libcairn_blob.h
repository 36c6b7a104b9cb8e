/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libcairn_blob.h — blobs, the layer above the store handle (blob.c).
 */
#ifndef LIBCAIRN_BLOB_H
#define LIBCAIRN_BLOB_H

#include "libcairn_store.h"

/* Blobs (blob.c). A writer streams content into an anonymous file in the
 * store, then links it under its content name. */
typedef struct blob_writer blob_writer;
int cn_blob_writer_new(cairn_store *st, blob_writer **out);
/* Zeros in buf are skipped, not written: the file holds them as holes. */
int cn_blob_writer_write(blob_writer *w, const void *buf, size_t len);
/* len zero bytes left unwritten (a hole): the content is as if they were
 * written, the file does not allocate them. */
int cn_blob_writer_hole(blob_writer *w, uint64_t len);
/* Finishes the blob: name (XXH3-128 hex, or with a "-N" suffix on a key
 * collision) goes to name_out, which holds at least 48 bytes. The blob's
 * row is inserted by the caller's commit. */
int cn_blob_writer_finish(blob_writer *w, char *name_out, uint64_t *size_out,
                          char sha256_hex_out[65]);
void cn_blob_writer_free(blob_writer *w);
/* The stored blob whose content has this sha256 (64 hex digits, "sha256:"
 * allowed; the content's, holes read as zeros, as a TOC states it), from
 * the sha256 column of its row (index blobs_sha256): 1 and its name
 * (at least 48 bytes) and size, 0 if no committed blob with its file has
 * it, -EINVAL for a malformed digest. The blob stays while the caller
 * holds the store lock shared (as an import does) until it commits the
 * rows that name it; without the lock a gc may remove it at any time. */
int cn_blob_by_sha256(cairn_store *st, const char *sha256, char name_out[48], uint64_t *size_out);
/* Deletes blob rows nothing references and their files, and files with no
 * row. Needs the store lock exclusive. */
int cn_blob_rows_unreferenced(cairn_store *st, bool dry_run, struct strv *names, cairn_report *r);
/* cn_blob_files_remove reports, as step CN_BLOB_UNUSED_STEP, how many of
 * the files it has removed (gc's first step is that one). */
#define CN_BLOB_UNUSED_STEP "unused layers and blobs"
int cn_blob_files_remove(cairn_store *st, const struct strv *names);
/* The sweep of files with no row reports, as step CN_BLOB_ORPHANS_STEP,
 * how many of the 256 blob directories it has read. */
#define CN_BLOB_ORPHANS_STEP "blob files no layer uses"
int cn_blob_orphans_sweep(cairn_store *st, bool dry_run, cairn_report *r);
void cn_blob_name_path(const char *name, char *rel, size_t len);

#endif
