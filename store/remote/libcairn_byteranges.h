/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libcairn_byteranges.h — the answer to an HTTP range request (RFC 9110 14.6, 15.3.7):
 * a 206 with one Content-Range, or a multipart/byteranges body whose parts
 * each carry theirs. Network input: every number is checked against the
 * blob's size and every part's data against the body. Built on cairn.h
 * alone, like the rest of store/remote/.
 */
#ifndef LIBCAIRN_BYTERANGES_H
#define LIBCAIRN_BYTERANGES_H

#include <stddef.h>
#include <stdint.h>

#include "cairn.h"

/* Receives one part: the blob's bytes [off, off + len); 0 or a negative
 * errno that stops the parse. */
typedef int (*cn_byterange_fn)(uint64_t off, const unsigned char *data, size_t len, void *arg);

/* Parses "bytes A-B/SIZE" (SIZE may be "*"): *off = A, *len = B - A + 1;
 * -EBADMSG unless A <= B < blob_size and SIZE (when given) is blob_size. */
int cn_content_range_parse(const char *s, size_t n, uint64_t blob_size, uint64_t *off,
                           uint64_t *len);

/* Splits a 206 reply (content_type and content_range: its headers, either
 * may be NULL or "") into the parts it holds, in order, through fn. At most
 * max_parts parts (-EBADMSG beyond). Returns the number of parts, or
 * -EBADMSG (reason recorded on st, which may be NULL) for a body that is
 * not a well-formed answer. */
int cn_byteranges_parse(const char *content_type, const char *content_range, const void *body,
                        size_t len, uint64_t blob_size, size_t max_parts, cn_byterange_fn fn,
                        void *arg, cairn_store *st);

#endif
