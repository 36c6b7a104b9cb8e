/*
 * list.c — what `cairn images`, `layers` and `inspect` show, as records
 * (struct cairn_image_rec and its kin) handed to a callback. Front ends
 * print them as JSON or as a table; there is one source for both.
 *
 * The pinned flags of a whole listing come from one read of /proc/locks
 * (the first read in a process can take ~10 ms) and the live mount records;
 * no annotation is read or deleted.
 */
#include "image.h"
#include "pin.h"

#include <string.h>

/* The names of an image, sorted. */
struct names {
  char **v;
  size_t n;
};

static void names_free(struct names *ns) {
  cairn_strv_free(ns->v, ns->n);
  *ns = (struct names){0};
}

static int image_names(cairn_store *st, const char *id, struct names *out) {
  *out = (struct names){0};
  _cleanup_stmt_ sqlite3_stmt *q = NULL;
  int r = cn_db_prepare(st, &q, "SELECT name FROM names WHERE image_id = ? ORDER BY name");
  if (r < 0) return r;
  sqlite3_bind_text(q, 1, id, -1, SQLITE_STATIC);
  while ((r = sqlite3_step(q)) == SQLITE_ROW) {
    char **v = realloc(out->v, (out->n + 1) * sizeof(*v));
    if (v) out->v = v;
    if (!v || !(v[out->n] = strdup((const char *)sqlite3_column_text(q, 0)))) {
      names_free(out);
      return store_fail(st, -ENOMEM, "out of memory reading the names of image %.12s", id);
    }
    out->n++;
  }
  if (r != SQLITE_DONE) {
    names_free(out);
    return cn_store_fail_db(st, "image names");
  }
  return 0;
}

static int image_pinned(cairn_store *st, const struct kernel_locks *kl, const char *id) {
  if (cn_pin_held_in(st, kl, CAIRN_PIN_IMAGE, id)) return 1;
  _cleanup_free_ char *desc = NULL;
  int live = cn_mount_live_for_image(st, id, &desc);
  return live < 0 ? live : live > 0;
}

/* The record of the image in q's row (id, size, created, layers); its
 * names go to names (free them). */
static int image_rec_fill(cairn_store *st, const struct kernel_locks *kl, sqlite3_stmt *q,
                          struct cairn_image_rec *im, struct names *names) {
  const char *id = (const char *)sqlite3_column_text(q, 0);
  int r = image_names(st, id, names);
  if (r < 0) return r;
  int pinned = image_pinned(st, kl, id);
  if (pinned < 0) {
    names_free(names);
    return pinned;
  }
  *im = (struct cairn_image_rec){.id = id,
                                 .names = (const char *const *)names->v,
                                 .n_names = names->n,
                                 .size = (uint64_t)sqlite3_column_int64(q, 1),
                                 .created = sqlite3_column_int64(q, 2),
                                 .layers = (unsigned)sqlite3_column_int(q, 3),
                                 .pinned = pinned};
  return 0;
}

int cairn_images_foreach(cairn_store *st, cairn_image_fn fn, void *arg) {
  store_errclear(st);
  _cleanup_stmt_ sqlite3_stmt *q = NULL;
  int r = cn_db_prepare(st, &q,
                        "SELECT id, size, created,"
                        " (SELECT count(*) FROM image_layers WHERE image_id = id)"
                        " FROM images ORDER BY created DESC, id");
  struct kernel_locks kl;
  if (r < 0 || (r = cn_kernel_locks_read(st, &kl)) < 0) return r;
  int step;
  while (r == 0 && (step = sqlite3_step(q)) == SQLITE_ROW) {
    struct cairn_image_rec im;
    struct names names;
    if ((r = image_rec_fill(st, &kl, q, &im, &names)) < 0) break;
    r = fn(&im, arg);
    names_free(&names);
  }
  free(kl.v);
  if (r == 0 && step != SQLITE_DONE) r = cn_store_fail_db(st, "images");
  return r;
}

int cairn_layers_foreach(cairn_store *st, cairn_layer_rec_fn fn, void *arg) {
  store_errclear(st);
  _cleanup_stmt_ sqlite3_stmt *q = NULL;
  int r = cn_db_prepare(st, &q,
                        "SELECT id, size, entries,"
                        " (SELECT count(DISTINCT image_id) FROM image_layers WHERE layer_id = id)"
                        " FROM layers ORDER BY created, id");
  struct kernel_locks kl;
  if (r < 0 || (r = cn_kernel_locks_read(st, &kl)) < 0) return r;
  int step;
  while (r == 0 && (step = sqlite3_step(q)) == SQLITE_ROW) {
    const char *id = (const char *)sqlite3_column_text(q, 0);
    struct cairn_layer_rec l = {.id = id,
                                .size = (uint64_t)sqlite3_column_int64(q, 1),
                                .entries = (uint64_t)sqlite3_column_int64(q, 2),
                                .images = (unsigned)sqlite3_column_int(q, 3),
                                .pinned = cn_pin_held_in(st, &kl, CAIRN_PIN_LAYER, id)};
    r = fn(&l, arg);
  }
  free(kl.v);
  if (r == 0 && step != SQLITE_DONE) r = cn_store_fail_db(st, "layers");
  return r;
}

/* The layers of an image, bottom first; their ids are kept in ids. */
static int image_layer_list(cairn_store *st, const char *image_id, struct cairn_image_layer **out,
                            struct names *ids) {
  *out = NULL;
  *ids = (struct names){0};
  _cleanup_stmt_ sqlite3_stmt *l = NULL;
  int r = cn_db_prepare(st, &l,
                        "SELECT l.id, l.size, l.entries FROM image_layers il JOIN layers l"
                        " ON l.id = il.layer_id WHERE il.image_id = ? ORDER BY il.position");
  if (r < 0) return r;
  sqlite3_bind_text(l, 1, image_id, -1, SQLITE_STATIC);
  while ((r = sqlite3_step(l)) == SQLITE_ROW) {
    struct cairn_image_layer *v = realloc(*out, (ids->n + 1) * sizeof(*v));
    char **iv = v ? realloc(ids->v, (ids->n + 1) * sizeof(*iv)) : NULL;
    if (v) *out = v;
    if (iv) ids->v = iv;
    char *id = iv ? strdup((const char *)sqlite3_column_text(l, 0)) : NULL;
    if (!id) {
      r = store_fail(st, -ENOMEM, "out of memory reading the layers of image %.12s", image_id);
      break;
    }
    ids->v[ids->n] = id;
    v[ids->n++] = (struct cairn_image_layer){.id = id,
                                             .size = (uint64_t)sqlite3_column_int64(l, 1),
                                             .entries = (uint64_t)sqlite3_column_int64(l, 2)};
  }
  if (r == SQLITE_DONE) return 0;
  free(*out);
  *out = NULL;
  names_free(ids);
  return r < 0 ? r : cn_store_fail_db(st, "image layers");
}

int cairn_inspect(cairn_store *st, const char *image_id, cairn_inspect_fn fn, void *arg) {
  store_errclear(st);
  _cleanup_stmt_ sqlite3_stmt *q = NULL;
  int r = cn_db_prepare(st, &q,
                        "SELECT id, size, created,"
                        " (SELECT count(*) FROM image_layers WHERE image_id = id), config"
                        " FROM images WHERE id = ?");
  if (r < 0) return r;
  sqlite3_bind_text(q, 1, image_id, -1, SQLITE_STATIC);
  if (sqlite3_step(q) != SQLITE_ROW) return store_fail(st, -ENOENT, "no such image");
  struct kernel_locks kl;
  if ((r = cn_kernel_locks_read(st, &kl)) < 0) return r;
  struct cairn_image_info info = {.config = (const char *)sqlite3_column_text(q, 4)};
  struct names names, layer_ids;
  struct cairn_image_layer *layers;
  r = image_rec_fill(st, &kl, q, &info.image, &names);
  free(kl.v);
  if (r < 0) return r;
  if ((r = image_layer_list(st, image_id, &layers, &layer_ids)) == 0) {
    info.layers = layers;
    info.n_layers = layer_ids.n;
    r = fn(&info, arg);
    free(layers);
    names_free(&layer_ids);
  }
  names_free(&names);
  return r;
}
