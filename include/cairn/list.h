/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cairn/list.h — libcairn's public face: the listings: images, layers, inspect, df, info.
 * Included by cairn.h, whose comment gives the conventions every function
 * here keeps (errors, ids, handles).
 */
#ifndef CAIRN_LIST_H
#define CAIRN_LIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cairn/store.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- listing ------------------------------------------------------------ */

/* What `cairn images`, `layers` and `inspect` show. Strings and arrays are
 * valid only during the callback; a non-zero return of fn stops the walk
 * and is returned. pinned: a process pins it, or (images) a live or
 * detached mount serves it. */
typedef struct cairn_image_rec {
  const char *id;
  const char *const *names; /* sorted */
  size_t n_names;
  unsigned layers;
  uint64_t size;
  int64_t created; /* seconds since the epoch: the config's "created", as podman
                    * shows it; if it has none, stored */
  int64_t stored;  /* when this store got the image */
  bool pinned;
  /* A lazy pull's (doc/lazy-pulls.md): the files of the image's layers
   * not fetched yet, and their bytes; 0 for a complete image. */
  uint64_t pending_files, pending_bytes;
  /* How many of its layers a lazy pull recorded whose diff_id no rebuilt
   * tar has proven yet (or refuted): 0 for an image all proven. */
  unsigned unverified;
} cairn_image_rec;
typedef int (*cairn_image_fn)(const cairn_image_rec *im, void *arg);
/* Calls fn for every image, newest first.
 * Returns 0, or fn's non-zero return (which stops the walk). */
int cairn_images_foreach(cairn_store *st, cairn_image_fn fn, void *arg);

/* Every name and what it names: fn(target, name) for each name of an image
 * (target: the image's id) and for each name of an image a layer is in
 * (target: the layer's id), by target then name; one query, however many
 * images.
 * Returns 0, or fn's non-zero return (which stops the walk). */
typedef int (*cairn_name_fn)(const char *target, const char *name, void *arg);
int cairn_names_foreach(cairn_store *st, cairn_name_fn fn, void *arg);

typedef struct cairn_layer_rec {
  const char *id;
  uint64_t size;
  uint64_t entries;
  unsigned images; /* how many images use it */
  bool pinned;
} cairn_layer_rec;
typedef int (*cairn_layer_rec_fn)(const cairn_layer_rec *l, void *arg);
/* Calls fn for every layer, oldest first.
 * Returns 0, or fn's non-zero return (which stops the walk). */
int cairn_layers_foreach(cairn_store *st, cairn_layer_rec_fn fn, void *arg);

/* One image in full; its pins come from cairn_pins_foreach. */
typedef struct cairn_image_layer {
  const char *id;
  uint64_t size, entries;
} cairn_image_layer;
typedef struct cairn_image_info {
  cairn_image_rec image;
  const char *config;              /* the config JSON as stored */
  const cairn_image_layer *layers; /* bottom first */
  size_t n_layers;
} cairn_image_info;
typedef int (*cairn_inspect_fn)(const cairn_image_info *info, void *arg);
/* Calls fn once with the image.
 * Returns 0, or fn's non-zero return; -ENOENT: no such image. */
int cairn_inspect(cairn_store *st, const char *image_id, cairn_inspect_fn fn, void *arg);

/* What `cairn df` shows: for images, layers and blobs, how many and how
 * many bytes, each thing counted once. shared: used by more than one image
 * (a blob: by more than one layer; an image: one with a layer another image
 * uses, its shared_bytes those layers'). reclaimable: what cairn gc would
 * free now (layers no image uses and no pin holds, the blobs only they or
 * no layer use; gc never removes an image). pinned: held by a pin or a live
 * mount, as `images` and `layers` say (blobs have no pins of their own).
 * A blob's bytes are those its file takes on disk (st_blocks * 512: a
 * sparse file's holes take none); images' and layers' are their tars'. */
typedef struct cairn_df_class {
  uint64_t count, bytes;
  uint64_t shared_count, shared_bytes;
  uint64_t reclaimable_count, reclaimable_bytes;
  uint64_t pinned_count, pinned_bytes;
} cairn_df_class;
struct cairn_df {
  cairn_df_class images, layers, blobs;
  /* The compressed layers pulls keep for podman's Additional Layer Store
   * (STORE/compressed): each goes with its layer, so it is shared, pinned
   * or reclaimable as its layer is. */
  cairn_df_class compressed;
  /* What lazy pulls have not fetched yet: the images with files pending,
   * those files (each layer's) and their bytes (not in any class above:
   * the store does not hold them). */
  uint64_t pending_images, pending_files, pending_bytes;
};
/* Fills df from one snapshot of the store.
 * Returns 0. */
int cairn_df(cairn_store *st, struct cairn_df *df);

/* What `cairn info` says of a store: its schema version and how many
 * images, names, layers and blobs it holds. */
struct cairn_store_info {
  int schema_version;
  uint64_t images, names, layers, blobs;
};
/* Fills info from the store.
 * Returns 0. */
int cairn_store_info(cairn_store *st, struct cairn_store_info *info);

/* Writes the image's merged root filesystem to fd as a tar (pax), the
 * image pinned meanwhile.
 * Returns 0; -ENOENT: no such image; -ENODATA: a lazy pull left files of it not fetched yet
 * (cairn_fill first); -EIO: the tar could not be written to fd. */
int cairn_export(cairn_store *st, const char *image_id, int fd);

#ifdef __cplusplus
}
#endif

#endif
