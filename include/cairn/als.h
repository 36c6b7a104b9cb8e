/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cairn/als.h — libcairn's public face: podman's Additional Layer Store.
 * Included by cairn.h, whose comment gives the conventions every function
 * here keeps (errors, ids, handles).
 */
#ifndef CAIRN_ALS_H
#define CAIRN_ALS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cairn/pin.h"
#include "cairn/store.h"
#include "cairn/tree.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- podman's Additional Layer Store (store/als.c) --------------------- */

/* What a pull keeps of a layer it downloaded, so that a containers/storage
 * Additional Layer Store can hand the layer to podman by the digest of its
 * manifest: the compressed blob's digest, media type and size against the
 * layer's diff_id, and the compressed bytes themselves (STORE/compressed/HEX,
 * removed with the layer). */
typedef struct cairn_layer_blob {
  char digest[CAIRN_DIGEST_LEN + 1]; /* the manifest's (compressed) digest */
  cairn_id diff_id;
  char media_type[128];
  uint64_t size; /* compressed */
} cairn_layer_blob;

/* The record of digest ("sha256:HEX"), into *out.
 * Returns 0; -ENOENT: no record (or a malformed digest). */
int cairn_layer_blob_get(cairn_store *st, const char *digest, cairn_layer_blob *out);
typedef int (*cairn_layer_blob_fn)(const cairn_layer_blob *b, void *arg);
/* Calls fn for every record, by digest.
 * Returns 0, or fn's non-zero return (which stops the walk). */
int cairn_layer_blobs_foreach(cairn_store *st, cairn_layer_blob_fn fn, void *arg);
/* Opens the kept compressed bytes of digest read-only.
 * Returns the fd; -ENOENT: none kept (or a malformed digest). */
int cairn_layer_blob_open(cairn_store *st, const char *digest);
/* The `info` file of an Additional Layer Store for b: a containers/storage
 * Layer as JSON (compressed-diff-digest, compressed-size, diff-digest,
 * compression, read-only).
 * Returns the JSON (caller frees); NULL: out of memory, or b's digest or diff_id is malformed. */
char *cairn_layer_blob_info(const cairn_layer_blob *b);
/* Pins layer diff_id in ps, and every image that uses it now (so that
 * `cairn rm` of one is refused, exit 4, naming ps's purpose, as for a
 * mounted image): what an Additional Layer Store takes when podman says it
 * uses the layer.
 * Returns 0; -EINVAL: diff_id is not an id. */
int cairn_layer_pin_users(cairn_store *st, cairn_pinset *ps, const char *diff_id);
/* The tree of one layer alone, in overlayfs's encoding of a lower layer:
 * its entries as they are (parents synthesized), each whiteout a 0/0
 * character device under the name it hides, each opaque directory marked
 * with the xattr trusted.overlay.opaque=y (served by cairnfs --als), in
 * *out (cairn_tree_free it).
 * Returns 0; -ENOENT: no such layer. */
int cairn_layer_diff_tree(cairn_store *st, const char *diff_id, cairn_tree **out);

#ifdef __cplusplus
}
#endif

#endif
