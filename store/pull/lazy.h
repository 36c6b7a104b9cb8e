/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lazy.h — the lazy pull of a zstd:chunked layer (lazy.c), for pull.c.
 * Built on cairn.h alone, like the rest of store/pull/.
 */
#ifndef CAIRN_PULL_LAZY_H
#define CAIRN_PULL_LAZY_H

#include "pull.h"
#include "toc.h"

/* Records layer d (diff_id, pinned by the caller) of a registry source
 * from its TOC alone: the range the manifest's annotation names, checked
 * against its checksum annotation, kept; the files the store holds are
 * linked, the others pending (*pending). 0 when recorded (or stored
 * already), 1 when the layer is not zstd:chunked with a TOC the manifest
 * vouches for, or the source cannot range-request (pull it in full), a
 * negative errno on failure. *fetched grows by the bytes fetched. */
int cn_lazy_layer(pull_source *src, const pull_desc *d, const char *diff_id, size_t *pending,
                  uint64_t *fetched, cairn_store *st);

/* The pieces of one file's fetch that the fill (fill.c) shares: */
/* f's layer's kept TOC, checked against the digest the pull verified. */
int cn_lazy_kept_toc(cairn_store *st, const cairn_lazy_file *f, cn_toc *toc);
/* An anonymous file in STORE/tmp for a fetched file's content. */
int cn_lazy_open_temp(cairn_store *st);
/* e's chunks from buf, the blob's bytes from offset lo (covering them
 * all), each decompressed and checked against its digest, into fd; then
 * the whole against e's sha256 (-EBADMSG). */
int cn_lazy_unpack(const cn_toc_entry *e, const unsigned char *buf, uint64_t lo, int fd,
                   cairn_store *st);
/* Under the lock of content full ("sha256:HEX", cairn_lazy_lock): 1 (blob
 * set) when the store holds it already (then named in its pending
 * entries), 0 when it is to fetch (*f set: cairn_lazy_file_clear), -ENOENT
 * when it is neither stored nor pending, another negative errno. */
int cn_lazy_file_named(cairn_store *st, const char *full, char blob[48], cairn_lazy_file *f);

#endif
