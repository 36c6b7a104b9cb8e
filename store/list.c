/*
 * list.c — what `cairn images`, `layers` and `inspect` show, as Jansson
 * values with the contract's keys. Front ends print them as JSON or as a
 * table; there is one source for both.
 */
#include "internal.h"

#include <string.h>

static json_t *image_names(cairn_store *st, const char *id) {
  json_t *names = json_array();
  _cleanup_stmt_ sqlite3_stmt *q = NULL;
  if (db_prepare(st, &q, "SELECT name FROM names WHERE image_id = ? ORDER BY name") < 0)
    return names;
  sqlite3_bind_text(q, 1, id, -1, SQLITE_STATIC);
  while (sqlite3_step(q) == SQLITE_ROW)
    json_array_append_new(names, json_string((const char *)sqlite3_column_text(q, 0)));
  return names;
}

/* {id: true} for every target with a live pin: one read of /proc/locks
 * for a whole listing (the first read in a process can take ~10 ms). */
static json_t *pinned_targets(cairn_store *st) {
  json_t *set = json_object();
  _cleanup_json_ json_t *pins = cairn_pins_json(st, NULL);
  size_t i;
  json_t *row;
  json_array_foreach(pins, i, row) if (!json_is_true(json_object_get(row, "stale")))
      json_object_set_new(set, json_string_value(json_object_get(row, "target")), json_true());
  return set;
}

static bool image_pinned(cairn_store *st, json_t *pinned, const char *id) {
  if (json_object_get(pinned, id)) return true;
  _cleanup_free_ char *desc = NULL;
  return mount_live_for_image(st, id, &desc) > 0;
}

json_t *cairn_images_json(cairn_store *st) {
  _cleanup_stmt_ sqlite3_stmt *q = NULL;
  if (db_prepare(st, &q,
                 "SELECT id, size, created,"
                 " (SELECT count(*) FROM image_layers WHERE image_id = id)"
                 " FROM images ORDER BY created DESC, id") < 0)
    return NULL;
  _cleanup_json_ json_t *pinned = pinned_targets(st);
  json_t *rows = json_array();
  while (sqlite3_step(q) == SQLITE_ROW) {
    const char *id = (const char *)sqlite3_column_text(q, 0);
    json_array_append_new(rows, json_pack("{s:s, s:o, s:i, s:I, s:I, s:b}", "id", id, "names",
                                          image_names(st, id), "layers", sqlite3_column_int(q, 3),
                                          "size", (json_int_t)sqlite3_column_int64(q, 1), "created",
                                          (json_int_t)sqlite3_column_int64(q, 2), "pinned",
                                          image_pinned(st, pinned, id)));
  }
  return rows;
}

json_t *cairn_layers_json(cairn_store *st) {
  _cleanup_stmt_ sqlite3_stmt *q = NULL;
  if (db_prepare(st, &q,
                 "SELECT id, size, entries,"
                 " (SELECT count(DISTINCT image_id) FROM image_layers WHERE layer_id = id)"
                 " FROM layers ORDER BY created, id") < 0)
    return NULL;
  _cleanup_json_ json_t *pinned = pinned_targets(st);
  json_t *rows = json_array();
  while (sqlite3_step(q) == SQLITE_ROW) {
    const char *id = (const char *)sqlite3_column_text(q, 0);
    json_array_append_new(rows, json_pack("{s:s, s:I, s:I, s:i, s:b}", "id", id, "size",
                                          (json_int_t)sqlite3_column_int64(q, 1), "entries",
                                          (json_int_t)sqlite3_column_int64(q, 2), "images",
                                          sqlite3_column_int(q, 3), "pinned",
                                          json_object_get(pinned, id) != NULL));
  }
  return rows;
}

json_t *cairn_inspect_json(cairn_store *st, const char *image_id) {
  _cleanup_stmt_ sqlite3_stmt *q = NULL;
  if (db_prepare(st, &q, "SELECT config, size, created FROM images WHERE id = ?") < 0) return NULL;
  sqlite3_bind_text(q, 1, image_id, -1, SQLITE_STATIC);
  if (sqlite3_step(q) != SQLITE_ROW) {
    store_fail(st, -ENOENT, "no such image");
    return NULL;
  }
  json_t *config = json_loads((const char *)sqlite3_column_text(q, 0), 0, NULL);
  json_t *layers = json_array();
  _cleanup_stmt_ sqlite3_stmt *l = NULL;
  if (db_prepare(st, &l,
                 "SELECT l.id, l.size, l.entries FROM image_layers il JOIN layers l"
                 " ON l.id = il.layer_id WHERE il.image_id = ? ORDER BY il.position") == 0) {
    sqlite3_bind_text(l, 1, image_id, -1, SQLITE_STATIC);
    while (sqlite3_step(l) == SQLITE_ROW)
      json_array_append_new(layers, json_pack("{s:s, s:I, s:I}", "id",
                                              (const char *)sqlite3_column_text(l, 0), "size",
                                              (json_int_t)sqlite3_column_int64(l, 1), "entries",
                                              (json_int_t)sqlite3_column_int64(l, 2)));
  }
  json_t *pins = cairn_pins_json(st, image_id);
  _cleanup_json_ json_t *pinned = pinned_targets(st);
  return json_pack("{s:s, s:o, s:o*, s:o, s:I, s:I, s:o*, s:b}", "id", image_id, "names",
                   image_names(st, image_id), "config", config, "layers", layers, "size",
                   (json_int_t)sqlite3_column_int64(q, 1), "created",
                   (json_int_t)sqlite3_column_int64(q, 2), "pins", pins, "pinned",
                   image_pinned(st, pinned, image_id));
}
