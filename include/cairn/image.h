/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cairn/image.h — libcairn's public face: names, resolving, tags and history.
 * Included by cairn.h, whose comment gives the conventions every function
 * here keeps (errors, ids, handles).
 */
#ifndef CAIRN_IMAGE_H
#define CAIRN_IMAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cairn/store.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- references -------------------------------------------------------- */

/* Normalizes a NAME[:TAG] (tag defaults to "latest") into out.
 * Returns 0; -EINVAL: not a valid name; -ENAMETOOLONG: it does not fit len. */
int cairn_name_normalize(const char *name, char *out, size_t len);

/* Resolves a name, full id or unambiguous id prefix (>= 12 hex digits,
 * optional "sha256:") to an image id.
 * Returns 0; -ENOENT: no such image (the WHY suggests a near name); -EINVAL: an ambiguous
 * prefix. */
int cairn_image_resolve(cairn_store *st, const char *ref, cairn_id id);

/* ---- tag, history (store/tag.c, store/history.c) ----------------------- */

/* Names the image ref resolves to name too (NAME[:TAG], normalized); a
 * name that named another image moves. Its id in image_id_out.
 * Returns 0; -ENOENT: no such image; -EINVAL: a bad name or an ambiguous prefix. */
int cairn_tag(cairn_store *st, const char *ref, const char *name, cairn_id image_id_out);

/* One entry of an image config's history, as podman history shows it.
 * Strings are valid only during the callback. */
typedef struct cairn_history_rec {
  int64_t created;        /* seconds since the epoch; 0 if the entry has none (cairn
                           * import's: the image's created) */
  const char *created_by; /* "" if none; likewise comment and author */
  const char *comment;
  const char *author;
  const char *layer; /* the layer it made (diff_id), or NULL (empty_layer) */
  uint64_t size;     /* that layer's size; 0 without one */
  bool empty_layer;
} cairn_history_rec;
typedef int (*cairn_history_fn)(const cairn_history_rec *h, void *arg);
/* Calls fn for each history entry of the image, newest first (a config
 * without history: one bare entry per layer).
 * Returns 0, or fn's non-zero return (which stops the walk); -ENOENT: no such image;
 * -EBADMSG: its config is not JSON. */
int cairn_history_foreach(cairn_store *st, const char *image_id, cairn_history_fn fn, void *arg);

#ifdef __cplusplus
}
#endif

#endif
