/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lazy.h — partial layers (lazy.c), the layer above the merged tree: what
 * fsck needs of them (sweep.c sweeps their kept TOCs).
 */
#ifndef LIBCAIRN_LAZY_H
#define LIBCAIRN_LAZY_H

#include "libcairn_store.h"

/* Checks the partial layers: state, source and pending rows agree, each
 * pending row names a regular file of its layer that names no blob, the
 * kept TOC is there with the digest the pull verified. Problems go to
 * r (cn_report_problem). */
int cn_lazy_fsck(cairn_store *st, cairn_report *r);

#endif
