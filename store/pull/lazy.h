/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lazy.h — the lazy pull of a zstd:chunked layer (lazy.c), for pull.c.
 * Built on cairn.h alone, like the rest of store/pull/.
 */
#ifndef CAIRN_PULL_LAZY_H
#define CAIRN_PULL_LAZY_H

#include "pull.h"

/* Records layer d (diff_id, pinned by the caller) of a registry source
 * from its TOC alone: the range the manifest's annotation names, checked
 * against its checksum annotation, kept; the files the store holds are
 * linked, the others pending (*pending). 0 when recorded (or stored
 * already), 1 when the layer is not zstd:chunked with a TOC the manifest
 * vouches for, or the source cannot range-request (pull it in full), a
 * negative errno on failure. *fetched grows by the bytes fetched. */
int cn_lazy_layer(pull_source *src, const pull_desc *d, const char *diff_id, size_t *pending,
                  uint64_t *fetched, cairn_store *st);

#endif
