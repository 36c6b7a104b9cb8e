/* SPDX-License-Identifier: Apache-2.0 */
/*
 * list.c — what `cairn images`, `layers` and `inspect` show, as records
 * (struct cairn_image_rec and its kin) handed to a callback. Front ends
 * print them as JSON or as a table; there is one source for both.
 *
 * The pinned flags of a whole listing come from one read of /proc/locks
 * (the first read in a process can take ~10 ms), made on a thread while
 * images and layers are read (cairn_pins_prefetch: their rows are kept
 * until it is joined), and the live mount records; no annotation is read
 * or deleted.
 */
#include "libcairn_blob.h"
#include "libcairn_image.h"
#include "libcairn_pin.h"

#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>

/* The names of an image, sorted. */
struct names {
  char **v;
  size_t n;
};

static void names_free(struct names *ns) {
  cn_strv_free(ns->v, ns->n);
  *ns = (struct names){0};
}

/* The names of image id, sorted, by names_q (prepared by names_prepare,
 * reset here: a listing prepares it once). */
static int names_prepare(cairn_store *st, sqlite3_stmt **names_q) {
  return cn_db_prepare(st, names_q, "SELECT name FROM names WHERE image_id = ? ORDER BY name");
}

static int image_names(cairn_store *st, sqlite3_stmt *q, const char *id, struct names *out) {
  *out = (struct names){0};
  sqlite3_reset(q);
  sqlite3_bind_text(q, 1, id, -1, SQLITE_TRANSIENT);
  int r;
  while ((r = sqlite3_step(q)) == SQLITE_ROW) {
    char **v = realloc(out->v, (out->n + 1) * sizeof(*v));
    if (v) out->v = v;
    if (!v || !(v[out->n] = strdup((const char *)sqlite3_column_text(q, 0)))) {
      names_free(out);
      return cairn_fail(st, -ENOMEM, "out of memory reading the names of image %.12s", id);
    }
    out->n++;
  }
  if (r != SQLITE_DONE) {
    names_free(out);
    return cn_store_fail_db(st, "image names");
  }
  return 0;
}

/* What makes an image pinned, read once for a whole listing: the kernel's
 * locks, and the images that live or detached mounts serve (sorted). */
struct pinned_view {
  struct kernel_locks kl;
  struct strv mounted;
};

static void pinned_view_free(struct pinned_view *pv) {
  free(pv->kl.v);
  cn_strv_clear(&pv->mounted);
}

static int mounted_add(const struct cairn_mount_rec *m, void *mounted) {
  return m->state == CAIRN_MOUNT_STALE ? 0 : cn_strv_push(mounted, m->image);
}

static int str_cmp(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The images that live or detached mounts serve, into pv (sorted). */
static int mounted_read(cairn_store *st, struct pinned_view *pv) {
  int r = cairn_mounts_foreach(st, mounted_add, &pv->mounted);
  if (r == -ENOMEM) r = cairn_fail(st, r, "out of memory listing mounts");
  if (r == 0 && pv->mounted.n) qsort(pv->mounted.v, pv->mounted.n, sizeof(*pv->mounted.v), str_cmp);
  return r;
}

static int pinned_view_read(cairn_store *st, struct pinned_view *pv) {
  *pv = (struct pinned_view){0};
  int r = cn_kernel_locks_read(st, &pv->kl);
  if (r == 0) r = mounted_read(st, pv);
  if (r < 0) pinned_view_free(pv);
  return r;
}

static bool image_pinned(cairn_store *st, const struct pinned_view *pv, const char *id) {
  return cn_pin_held_in(st, &pv->kl, CAIRN_PIN_IMAGE, id) ||
         (pv->mounted.n &&
          bsearch(&id, pv->mounted.v, pv->mounted.n, sizeof(*pv->mounted.v), str_cmp));
}

/* An image as a listing reads it, before it knows its pins. */
struct image_row {
  cairn_id id;
  uint64_t size;
  int64_t created, stored;
  unsigned layers;
  uint64_t pending_files, pending_bytes;
  unsigned unverified;
  struct names names; /* free them */
};

/* The config's created, as podman shows it, else (none, or not RFC 3339)
 * when the store got the image. */
#define IMAGE_CREATED_SQL                                                                          \
  "coalesce(CAST(strftime('%s', json_extract(config, '$.created')) AS INTEGER), created)"

/* The files of an image's layers a lazy pull has not fetched yet, and
 * their bytes (as cairn_image_pending counts them): two columns. */
#define IMAGE_PENDING_SQL                                                                          \
  "(SELECT count(*) FROM pending p JOIN image_layers l ON l.layer_id = p.layer_id"                 \
  " WHERE l.image_id = images.id), (SELECT coalesce(sum(p.size), 0) FROM pending p"                \
  " JOIN image_layers l ON l.layer_id = p.layer_id WHERE l.image_id = images.id)"

/* Its layers whose diff_id is not proven yet: a lazy pull's, still with
 * their source row (lazy.c). One column. */
#define IMAGE_UNVERIFIED_SQL                                                                       \
  "(SELECT count(DISTINCT l.layer_id) FROM image_layers l JOIN layer_sources s"                    \
  " ON s.layer_id = l.layer_id WHERE l.image_id = images.id)"

/* The image of q's row (id, size, created, layers, stored, pending files
 * and bytes, unverified layers) and its names. */
static int image_row_read(cairn_store *st, sqlite3_stmt *names_q, sqlite3_stmt *q,
                          struct image_row *row) {
  snprintf(row->id, sizeof(row->id), "%s", (const char *)sqlite3_column_text(q, 0));
  row->size = (uint64_t)sqlite3_column_int64(q, 1);
  row->created = sqlite3_column_int64(q, 2);
  row->layers = (unsigned)sqlite3_column_int(q, 3);
  row->stored = sqlite3_column_int64(q, 4);
  row->pending_files = (uint64_t)sqlite3_column_int64(q, 5);
  row->pending_bytes = (uint64_t)sqlite3_column_int64(q, 6);
  row->unverified = (unsigned)sqlite3_column_int(q, 7);
  return image_names(st, names_q, row->id, &row->names);
}

/* The record of row, pinned as pv says. */
static struct cairn_image_rec image_row_rec(cairn_store *st, const struct pinned_view *pv,
                                            const struct image_row *row) {
  return (struct cairn_image_rec){.id = row->id,
                                  .names = (const char *const *)row->names.v,
                                  .n_names = row->names.n,
                                  .size = row->size,
                                  .created = row->created,
                                  .stored = row->stored,
                                  .layers = row->layers,
                                  .pinned = image_pinned(st, pv, row->id),
                                  .pending_files = row->pending_files,
                                  .pending_bytes = row->pending_bytes,
                                  .unverified = row->unverified};
}

int cairn_images_foreach(cairn_store *st, cairn_image_fn fn, void *arg) {
  store_errclear(st);
  /* The host's locks are read on a thread while the images are read, in
   * its read transaction; the rows are kept until the thread is done. */
  cairn_pins_prefetch(st);
  cn_autostmt sqlite3_stmt *q = NULL, *names_q = NULL;
  int r = cn_db_prepare(
      st, &q,
      "SELECT id, size, " IMAGE_CREATED_SQL ","
      " (SELECT count(*) FROM image_layers WHERE image_id = id), created, " IMAGE_PENDING_SQL
      ", " IMAGE_UNVERIFIED_SQL " FROM images"
      " WHERE " CN_USER_IMAGE_SQL
      " ORDER BY created DESC, id");
  struct pinned_view pv = {0};
  struct image_row *rows = NULL;
  size_t n = 0, cap = 0;
  if (r < 0 || (r = names_prepare(st, &names_q)) < 0 || (r = mounted_read(st, &pv)) < 0) goto out;
  int step;
  while ((step = sqlite3_step(q)) == SQLITE_ROW) {
    struct image_row *v = cn_array_grow(rows, n, &cap, sizeof(*v));
    if (!v) {
      r = cairn_fail(st, -ENOMEM, "out of memory listing images");
      goto out;
    }
    rows = v;
    if ((r = image_row_read(st, names_q, q, &rows[n])) < 0) goto out;
    n++;
  }
  if (step != SQLITE_DONE) {
    r = cn_store_fail_db(st, "images");
    goto out;
  }
  if ((r = cn_kernel_locks_first(st, &pv.kl)) < 0) goto out;
  for (size_t i = 0; r == 0 && i < n; i++) {
    struct cairn_image_rec im = image_row_rec(st, &pv, &rows[i]);
    r = fn(&im, arg);
  }
out:
  cn_pins_prefetch_drop(st); /* not joined if the listing failed before */
  for (size_t i = 0; i < n; i++) names_free(&rows[i].names);
  free(rows);
  pinned_view_free(&pv);
  return r;
}

/* A (target, name) row of cairn_names_foreach: offsets into its text while
 * it is read, pointers once the text stops moving. */
struct name_row {
  union {
    size_t off;
    const char *s;
  } target, name;
};

static int name_row_cmp(const void *a, const void *b) {
  const struct name_row *x = a, *y = b;
  int c = strcmp(x->target.s, y->target.s);
  return c ? c : strcmp(x->name.s, y->name.s);
}

/* Appends s and its NUL to the text, at *off. */
static int text_add(char **text, size_t *used, size_t *cap, const char *s, size_t *off) {
  size_t len = strlen(s) + 1;
  while (*used + len > *cap) {
    size_t c = *cap ? *cap * 2 : 16384;
    char *t = realloc(*text, c);
    if (!t) return -ENOMEM;
    *text = t;
    *cap = c;
  }
  memcpy(*text + *used, s, len);
  *off = *used;
  *used += len;
  return 0;
}

int cairn_names_foreach(cairn_store *st, cairn_name_fn fn, void *arg) {
  store_errclear(st);
  cn_autostmt sqlite3_stmt *q = NULL;
  /* In no order, and sorted and made unique here: SQLite's UNION and
   * ORDER BY took 5 of the 6 ms this query took with 1,000 images. */
  int r = cn_db_prepare(st, &q,
                        "SELECT image_id, name FROM names"
                        " UNION ALL SELECT l.layer_id, n.name FROM image_layers l"
                        " JOIN names n ON n.image_id = l.image_id");
  cairn_autofree struct name_row *rows = NULL;
  cairn_autofree char *text = NULL;
  size_t n = 0, cap = 0, used = 0, text_cap = 0;
  int step = SQLITE_DONE;
  while (r == 0 && (step = sqlite3_step(q)) == SQLITE_ROW) {
    struct name_row *v = cn_array_grow(rows, n, &cap, sizeof(*v));
    if (!v ||
        text_add(&text, &used, &text_cap, (const char *)sqlite3_column_text(q, 0),
                 &v[n].target.off) < 0 ||
        text_add(&text, &used, &text_cap, (const char *)sqlite3_column_text(q, 1), &v[n].name.off) <
            0) {
      if (v) rows = v;
      r = cairn_fail(st, -ENOMEM, "out of memory reading names");
      break;
    }
    rows = v;
    n++;
  }
  if (r == 0 && step != SQLITE_DONE) r = cn_store_fail_db(st, "names");
  if (r < 0) return r;
  for (size_t i = 0; i < n; i++) {
    rows[i].target.s = text + rows[i].target.off;
    rows[i].name.s = text + rows[i].name.off;
  }
  if (n) qsort(rows, n, sizeof(*rows), name_row_cmp);
  for (size_t i = 0; i < n && r == 0; i++)
    if (i == 0 || name_row_cmp(&rows[i - 1], &rows[i]) != 0) /* once each */
      r = fn(rows[i].target.s, rows[i].name.s, arg);
  return r;
}

int cairn_layers_foreach(cairn_store *st, cairn_layer_rec_fn fn, void *arg) {
  store_errclear(st);
  cairn_pins_prefetch(st); /* as cairn_images_foreach */
  cn_autostmt sqlite3_stmt *q = NULL;
  int r = cn_db_prepare(st, &q,
                        "SELECT id, size, entries,"
                        " (SELECT count(DISTINCT image_id) FROM image_layers WHERE layer_id = id)"
                        " FROM layers ORDER BY created, id");
  struct layer_row {
    cairn_id id;
    struct cairn_layer_rec rec;
  } *rows = NULL;
  size_t n = 0, cap = 0;
  struct kernel_locks kl = {0};
  int step = SQLITE_DONE;
  while (r == 0 && (step = sqlite3_step(q)) == SQLITE_ROW) {
    struct layer_row *v = cn_array_grow(rows, n, &cap, sizeof(*v));
    if (!v) {
      r = cairn_fail(st, -ENOMEM, "out of memory listing layers");
      break;
    }
    rows = v;
    snprintf(rows[n].id, sizeof(rows[n].id), "%s", (const char *)sqlite3_column_text(q, 0));
    rows[n].rec = (struct cairn_layer_rec){.size = (uint64_t)sqlite3_column_int64(q, 1),
                                           .entries = (uint64_t)sqlite3_column_int64(q, 2),
                                           .images = (unsigned)sqlite3_column_int(q, 3)};
    n++;
  }
  if (r == 0 && step != SQLITE_DONE) r = cn_store_fail_db(st, "layers");
  if (r == 0) r = cn_kernel_locks_first(st, &kl);
  for (size_t i = 0; r == 0 && i < n; i++) {
    rows[i].rec.id = rows[i].id;
    rows[i].rec.pinned = cn_pin_held_in(st, &kl, CAIRN_PIN_LAYER, rows[i].id);
    r = fn(&rows[i].rec, arg);
  }
  cn_pins_prefetch_drop(st); /* not joined if the listing failed before */
  free(kl.v);
  free(rows);
  return r;
}

/* The layers of an image, bottom first; their ids are kept in ids. */
static int image_layer_list(cairn_store *st, const char *image_id, struct cairn_image_layer **out,
                            struct names *ids) {
  *out = NULL;
  *ids = (struct names){0};
  cn_autostmt sqlite3_stmt *l = NULL;
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
      r = cairn_fail(st, -ENOMEM, "out of memory reading the layers of image %.12s", image_id);
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
  cn_autostmt sqlite3_stmt *q = NULL;
  int r = cn_db_prepare(
      st, &q,
      "SELECT id, size, " IMAGE_CREATED_SQL ","
      " (SELECT count(*) FROM image_layers WHERE image_id = id), created, " IMAGE_PENDING_SQL
      ", config FROM images WHERE id = ?");
  if (r < 0) return r;
  sqlite3_bind_text(q, 1, image_id, -1, SQLITE_STATIC);
  if (sqlite3_step(q) != SQLITE_ROW) return cairn_fail(st, -ENOENT, "no such image");
  cn_autostmt sqlite3_stmt *names_q = NULL;
  struct pinned_view pv;
  if ((r = names_prepare(st, &names_q)) < 0 || (r = pinned_view_read(st, &pv)) < 0) return r;
  struct cairn_image_info info = {.config = (const char *)sqlite3_column_text(q, 7)};
  struct names layer_ids;
  struct cairn_image_layer *layers;
  struct image_row row;
  r = image_row_read(st, names_q, q, &row);
  if (r == 0) info.image = image_row_rec(st, &pv, &row);
  pinned_view_free(&pv);
  if (r < 0) return r;
  if ((r = image_layer_list(st, image_id, &layers, &layer_ids)) == 0) {
    info.layers = layers;
    info.n_layers = layer_ids.n;
    r = fn(&info, arg);
    free(layers);
    names_free(&layer_ids);
  }
  names_free(&row.names);
  return r;
}

/* ---- cairn df ------------------------------------------------------------ */

/* image_layers of users' images only: a snapshot chain image's layers are
 * containerd's snapshots', which hold them themselves. */
#define USER_IMAGE_LAYERS                                                                          \
  "(SELECT image_id, layer_id FROM image_layers WHERE image_id IN"                                \
  " (SELECT id FROM images WHERE " CN_USER_IMAGE_SQL "))"

/* Adds the count and byte sum of q's one row (count, sum) to *count and
 * *bytes. */
static int df_sum(cairn_store *st, const char *sql, const char *bound, uint64_t *count,
                  uint64_t *bytes) {
  cn_autostmt sqlite3_stmt *q = NULL;
  int r = cn_db_prepare(st, &q, sql);
  if (r < 0) return r;
  if (bound) sqlite3_bind_text(q, 1, bound, -1, SQLITE_STATIC);
  if (sqlite3_step(q) != SQLITE_ROW) return cn_store_fail_db(st, "df");
  *count = (uint64_t)sqlite3_column_int64(q, 0);
  *bytes = (uint64_t)sqlite3_column_int64(q, 1);
  return 0;
}

/* Appends ",\"ID\"" (without the comma first) to the JSON array text *ids. */
static int ids_append(cairn_store *st, char **ids, const char *id) {
  char *more = NULL;
  if (asprintf(&more, "%s%s\"%s\"", *ids ? *ids : "", *ids ? "," : "", id) < 0)
    return cairn_fail(st, -ENOMEM, "out of memory listing pinned layers");
  free(*ids);
  *ids = more;
  return 0;
}

/* Counts a layer (or what goes with it) of size bytes, used by images
 * images, pinned or not, as cairn_df says. */
static void df_count(struct cairn_df_class *d, uint64_t size, int images, bool pinned) {
  d->count++;
  d->bytes += size;
  if (images > 1) d->shared_count++, d->shared_bytes += size;
  if (pinned) d->pinned_count++, d->pinned_bytes += size;
  if (images == 0 && !pinned) d->reclaimable_count++, d->reclaimable_bytes += size;
}

/* Layers, one by one for their pins; the unused pinned ones go to *kept
 * (the text of a JSON array's items), as gc keeps them and their blobs. */
static int df_layers(cairn_store *st, const struct kernel_locks *kl, struct cairn_df_class *d,
                     char **kept) {
  cn_autostmt sqlite3_stmt *q = NULL;
  int r = cn_db_prepare(st, &q,
                        "SELECT id, size,"
                        " (SELECT count(DISTINCT image_id) FROM " USER_IMAGE_LAYERS
                        " WHERE layer_id = id)"
                        " FROM layers");
  if (r < 0) return r;
  while ((r = sqlite3_step(q)) == SQLITE_ROW) {
    const char *id = (const char *)sqlite3_column_text(q, 0);
    uint64_t size = (uint64_t)sqlite3_column_int64(q, 1);
    int images = sqlite3_column_int(q, 2);
    bool pinned = cn_pin_held_in(st, kl, CAIRN_PIN_LAYER, id);
    if (!pinned) { /* held by a containerd snapshot's record, as gc keeps it */
      cairn_autofree char *snaps = cn_snapshot_holders(st, CAIRN_PIN_LAYER, id);
      pinned = snaps != NULL;
    }
    df_count(d, size, images, pinned);
    if (images == 0 && pinned && (r = ids_append(st, kept, id)) < 0) return r;
  }
  return r == SQLITE_DONE ? 0 : cn_store_fail_db(st, "df layers");
}

/* Images: their layers' bytes counted once; pinned as `images` says it,
 * the pinned images' bytes their layers' too, a layer two of them share
 * counted once. */
static int df_images(cairn_store *st, const struct pinned_view *pv, struct cairn_df_class *d) {
  uint64_t n;
  int r = df_sum(st,
                 "SELECT count(*), coalesce(sum(size), 0) FROM layers"
                 " WHERE EXISTS (SELECT 1 FROM " USER_IMAGE_LAYERS " WHERE layer_id = id)",
                 NULL, &n, &d->bytes);
  if (r == 0)
    r = df_sum(st,
               "SELECT count(*), coalesce(sum(size), 0) FROM layers WHERE"
               " (SELECT count(DISTINCT image_id) FROM " USER_IMAGE_LAYERS
               " WHERE layer_id = id) > 1",
               NULL, &n, &d->shared_bytes);
  if (r == 0)
    r = df_sum(st,
               "SELECT count(*), 0 FROM images i WHERE " CN_USER_IMAGE_SQL
               " AND EXISTS (SELECT 1 FROM image_layers a JOIN " USER_IMAGE_LAYERS
               " b ON b.layer_id = a.layer_id AND b.image_id != a.image_id"
               " WHERE a.image_id = i.id)",
               NULL, &d->shared_count, &n);
  cn_autostmt sqlite3_stmt *q = NULL;
  if (r == 0) r = cn_db_prepare(st, &q, "SELECT id FROM images WHERE " CN_USER_IMAGE_SQL);
  if (r < 0) return r;
  cairn_autofree char *items = NULL, *pinned_ids = NULL;
  while ((r = sqlite3_step(q)) == SQLITE_ROW) {
    const char *id = (const char *)sqlite3_column_text(q, 0);
    d->count++;
    if (image_pinned(st, pv, id)) {
      d->pinned_count++;
      if ((r = ids_append(st, &items, id)) < 0) return r;
    }
  }
  if (r != SQLITE_DONE) return cn_store_fail_db(st, "df images");
  if (!items) return 0;
  if (asprintf(&pinned_ids, "[%s]", items) < 0)
    return cairn_fail(st, -ENOMEM, "out of memory listing pinned images");
  return df_sum(st,
                "SELECT count(*), coalesce(sum(size), 0) FROM layers WHERE id IN"
                " (SELECT layer_id FROM image_layers WHERE image_id IN"
                "  (SELECT value FROM json_each(?)))",
                pinned_ids, &n, &d->pinned_bytes);
}

/* Blobs: shared by several layers or not; reclaimable once no layer that
 * stays (used by an image, or pinned: kept, a JSON array) has them. Their
 * bytes are what the files take on disk (st_blocks): a sparse file's holes
 * take none; a file that is missing (fsck --repair moved it) none. */
static int df_blobs(cairn_store *st, const char *kept, struct cairn_df_class *d) {
  cn_autostmt sqlite3_stmt *q = NULL;
  int r = cn_db_prepare(st, &q,
                        "SELECT b.name,"
                        " (SELECT count(DISTINCT layer_id) FROM entries WHERE blob = b.name) > 1,"
                        " NOT EXISTS (SELECT 1 FROM entries e WHERE e.blob = b.name AND"
                        "  (EXISTS (SELECT 1 FROM image_layers WHERE layer_id = e.layer_id)"
                        "   OR e.layer_id IN (SELECT value FROM json_each(?))))"
                        " FROM blobs b");
  if (r < 0) return r;
  sqlite3_bind_text(q, 1, kept, -1, SQLITE_STATIC);
  while ((r = sqlite3_step(q)) == SQLITE_ROW) {
    char rel[128];
    struct stat sb;
    cn_blob_name_path((const char *)sqlite3_column_text(q, 0), rel, sizeof(rel));
    uint64_t bytes = fstatat(st->blobs_fd, rel, &sb, AT_SYMLINK_NOFOLLOW) == 0
                         ? (uint64_t)sb.st_blocks * 512
                         : 0;
    d->count++;
    d->bytes += bytes;
    if (sqlite3_column_int(q, 1)) d->shared_count++, d->shared_bytes += bytes;
    if (sqlite3_column_int(q, 2)) d->reclaimable_count++, d->reclaimable_bytes += bytes;
  }
  return r == SQLITE_DONE ? 0 : cn_store_fail_db(st, "df blobs");
}

/* The kept compressed layers: counted as their layers are. */
static int df_compressed(cairn_store *st, const struct kernel_locks *kl, struct cairn_df_class *d) {
  cn_autostmt sqlite3_stmt *q = NULL;
  int r = cn_db_prepare(
      st, &q,
      "SELECT b.layer_id, b.size,"
      " (SELECT count(DISTINCT image_id) FROM image_layers WHERE layer_id = b.layer_id)"
      " FROM layer_blobs b");
  if (r < 0) return r;
  while ((r = sqlite3_step(q)) == SQLITE_ROW)
    df_count(d, (uint64_t)sqlite3_column_int64(q, 1), sqlite3_column_int(q, 2),
             cn_pin_held_in(st, kl, CAIRN_PIN_LAYER, (const char *)sqlite3_column_text(q, 0)));
  return r == SQLITE_DONE ? 0 : cn_store_fail_db(st, "df compressed layers");
}

/* What lazy pulls have not fetched yet: images, files, bytes. */
static int df_pending(cairn_store *st, struct cairn_df *df) {
  cn_autostmt sqlite3_stmt *q = NULL;
  int r = cn_db_prepare(st, &q,
                        "SELECT (SELECT count(DISTINCT image_id) FROM image_layers WHERE layer_id"
                        " IN (SELECT layer_id FROM pending)), count(*), coalesce(sum(size), 0)"
                        " FROM pending");
  if (r < 0) return r;
  if (sqlite3_step(q) != SQLITE_ROW) return cn_store_fail_db(st, "pending files");
  df->pending_images = (uint64_t)sqlite3_column_int64(q, 0);
  df->pending_files = (uint64_t)sqlite3_column_int64(q, 1);
  df->pending_bytes = (uint64_t)sqlite3_column_int64(q, 2);
  return 0;
}

int cairn_df(cairn_store *st, struct cairn_df *df) {
  store_errclear(st);
  *df = (struct cairn_df){0};
  struct pinned_view pv;
  int r = pinned_view_read(st, &pv);
  if (r < 0) return r;
  cairn_autofree char *items = NULL, *kept = NULL;
  if ((r = cn_db_exec(st, "BEGIN")) == 0) { /* one snapshot for every count */
    r = df_layers(st, &pv.kl, &df->layers, &items);
    if (r == 0 && asprintf(&kept, "[%s]", items ? items : "") < 0)
      r = cairn_fail(st, -ENOMEM, "out of memory listing pinned layers");
    if (r == 0) r = df_images(st, &pv, &df->images);
    if (r == 0) r = df_blobs(st, kept, &df->blobs);
    if (r == 0) r = df_compressed(st, &pv.kl, &df->compressed);
    if (r == 0) r = df_pending(st, df);
    if (r == 0) r = cn_db_exec(st, "COMMIT");
    if (r < 0) cn_db_rollback(st);
  }
  pinned_view_free(&pv);
  return r;
}

/* ---- cairn info ---------------------------------------------------------- */

int cairn_store_info(cairn_store *st, struct cairn_store_info *info) {
  store_errclear(st);
  *info = (struct cairn_store_info){0};
  cn_autostmt sqlite3_stmt *q = NULL;
  int r = cn_db_prepare(st, &q,
                        "SELECT (SELECT value FROM meta WHERE key = 'schema_version'),"
                        " (SELECT count(*) FROM images WHERE " CN_USER_IMAGE_SQL "),"
                        " (SELECT count(*) FROM names),"
                        " (SELECT count(*) FROM layers), (SELECT count(*) FROM blobs)");
  if (r < 0) return r;
  if (sqlite3_step(q) != SQLITE_ROW) return cn_store_fail_db(st, "info");
  *info = (struct cairn_store_info){.schema_version = sqlite3_column_int(q, 0),
                                    .images = (uint64_t)sqlite3_column_int64(q, 1),
                                    .names = (uint64_t)sqlite3_column_int64(q, 2),
                                    .layers = (uint64_t)sqlite3_column_int64(q, 3),
                                    .blobs = (uint64_t)sqlite3_column_int64(q, 4)};
  return 0;
}
