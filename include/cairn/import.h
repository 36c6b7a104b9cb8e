/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cairn/import.h — libcairn's public face: import.
 * Included by cairn.h, whose comment gives the conventions every function
 * here keeps (errors, ids, handles).
 */
#ifndef CAIRN_IMPORT_H
#define CAIRN_IMPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cairn/store.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- import ------------------------------------------------------------ */

/* The same with podman import's --change instructions applied to the
 * image's config, each "KEY=VALUE" (or "KEY VALUE"): CMD and ENTRYPOINT (a
 * JSON array of strings, else a shell command: /bin/sh -c VALUE), ENV
 * K=V, WORKDIR, USER, LABEL K=V, EXPOSE PORT[/PROTO]..., STOPSIGNAL. A
 * change it does not take is refused before any layer is read.
 * Returns 0; -EINVAL: a bad name or change, or a path that is a directory; -ENOENT: a path is
 * not there; -EBADMSG: a tar that is corrupt, truncated or unsafe. */
int cairn_import_files_changes(cairn_store *st, const char *name, const char *const *paths,
                               size_t n, const char *const *changes, size_t n_changes,
                               cairn_id image_id_out);

#ifdef __cplusplus
}
#endif

#endif
