/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libcairn_tarsplit.h — exact layers: what a layer's tar holds besides its files'
 * contents, recorded at import so that the tar can be written again byte
 * for byte (tarsplit.c), in the layers row, used by layer.c and by fsck.
 */
#ifndef LIBCAIRN_TARSPLIT_H
#define LIBCAIRN_TARSPLIT_H

#include "libcairn_store.h"

/* A recorder: fed every byte of the uncompressed stream in order (the tar
 * and whatever follows its end), it keeps the bytes that are not regular
 * files' contents (headers, pax and GNU long-name records, padding, the end
 * blocks, trailing bytes) and, for each content span, its size and its
 * XXH3-128 (the name of the blob that holds it). */
typedef struct cn_tarsplit cn_tarsplit;
int cn_tarsplit_new(cairn_store *st, cn_tarsplit **out);
void cn_tarsplit_feed(cn_tarsplit *ts, const void *buf, size_t len);
/* Ends the record, once the import's entries are staged (temp.stage): a
 * content span whose blob no staged entry names (a path given twice, the
 * first content replaced) is kept inline, read back from its blob file.
 * 0 and *data (malloc'd, *len bytes) on success; 1 and no data if the
 * layer cannot be recorded (a span no blob holds); negative on error. */
int cn_tarsplit_finish(cn_tarsplit *ts, void **data, size_t *len);
void cn_tarsplit_free(cn_tarsplit *ts);

/* Writes the tar a record describes through fn (if not NULL), reading the
 * contents from the blobs; *size_out and sha256 (hex) of what was written.
 * -EBADMSG if the record is corrupt or a blob is missing or of the wrong
 * size. */
int cn_tarsplit_write(cairn_store *st, const void *data, size_t len, cairn_write_fn fn, void *arg,
                      uint64_t *size_out, cairn_id sha256_out);

#endif
