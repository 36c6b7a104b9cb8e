/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rows.h — the rows of a listing (images, layers, mounts, pins), held
 * positionally and printed as a table, a template, the ids, or JSON.
 *
 * A listing of 10,000 pins is 10,000 rows: each row is a run of typed
 * cells in its schema's order, strings copied into one arena, so that a
 * table costs no allocation per cell and no hashing per key. JSON objects
 * are made only for --json (and for cairn inspect's pins), with the keys
 * in the schema's order, which is the contract's.
 */
#ifndef CAIRN_ROWS_H
#define CAIRN_ROWS_H

#include "cairn.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum cli_type {
  CLI_STR,   /* text */
  CLI_ID,    /* text; an id of 64 digits is cut to 12 in tables */
  CLI_INT,   /* a number */
  CLI_SIZE,  /* bytes: exact in JSON, human in tables */
  CLI_BOOL,  /* yes / no in tables */
  CLI_TIME,  /* seconds since the epoch: RFC 3339 in JSON, "3 minutes ago" in tables */
  CLI_NAMES, /* a list of text, joined with commas in tables ("<none>" if empty) */
  CLI_PIDS,  /* a list of numbers (JSON only) */
};

/* One key of a row's JSON object; unset cells are null, or left out of
 * the object if omit_unset. */
struct cli_field {
  const char *key;
  enum cli_type type;
  bool omit_unset;
};

struct cli_schema {
  const struct cli_field *fields;
  size_t n;
};

/* 16 bytes: a listing of 10,000 pins is 90,000 cells. */
struct cli_cell {
  union {
    const char *s; /* STR, ID (in the rows' arena) */
    int64_t i;     /* INT, SIZE, TIME */
    bool b;
    const void *list; /* const char *const[] for NAMES, pid_t[] for PIDS */
  };
  uint32_t n; /* the list's length */
  bool set;
};

struct cli_arena_chunk;

/* Rows of one schema (set by the first row added); zero-initialized is an
 * empty listing. */
struct cli_rows {
  const struct cli_schema *schema;
  struct cli_cell *cells; /* n rows of schema->n cells */
  size_t n, cap;
  struct cli_arena_chunk *arena;
  void *names_index; /* what cli_rows_add_names read, for its NAMES cells */
};

void cli_rows_free(struct cli_rows *rows);
/* Appends a row of schema (every cell unset) and returns its cells, or
 * NULL without memory. All the rows of a listing have one schema. */
struct cli_cell *cli_rows_add(struct cli_rows *rows, const struct cli_schema *schema);
/* Drops the rows after the first n (their text stays in the arena until
 * cli_rows_free). */
void cli_rows_truncate(struct cli_rows *rows, size_t n);
/* Keeps the rows keep says to keep, in order (cells shared with a dropped
 * row's text stay valid: the text is in the arena). */
void cli_rows_filter(struct cli_rows *rows,
                     bool (*keep)(const struct cli_rows *rows, const struct cli_cell *row,
                                  void *arg),
                     void *arg);
/* The cell of row whose field is key, or NULL. */
const struct cli_cell *cli_row_get(const struct cli_rows *rows, const struct cli_cell *row,
                                   const char *key);
/* Copies s into the rows' arena into cell, a cell of the last row (or
 * shares the text of the same cell of the row before, if it is s); false
 * without memory. */
bool cli_cell_set_str(struct cli_rows *rows, struct cli_cell *cell, const char *s);
/* Copies n values of size each into the arena, as a list cell. */
bool cli_cell_set_list(struct cli_rows *rows, struct cli_cell *cell, const void *v, size_t n,
                       size_t size);

/* The rows as a JSON array of objects (keys in schema order); NULL without
 * memory or for text that is not UTF-8. */
json_t *cli_rows_json(const struct cli_rows *rows);

/* Sets each row's "names" cell: the names of the images whose id, or one
 * of whose layers' ids, is the row's text at key; they are read now unless
 * cli_rows_read_names read them before. */
int cli_rows_add_names(cairn_store *st, struct cli_rows *rows, const char *key);
/* Reads the names for cli_rows_add_names ahead of the rows (cairn-pin ls,
 * while the host's locks are read: cairn_pins_prefetch); cli_pin_row then
 * sets each pin's names as it adds the row (no cli_rows_add_names). */
int cli_rows_read_names(cairn_store *st, struct cli_rows *rows);

/* The records of libcairn as the contract's rows (the keys of
 * doc/design.md): each appends the record's row to the struct
 * cli_rows arg, as the callback of its *_foreach; -ENOMEM if it cannot. */
int cli_pin_row(const struct cairn_pin_rec *p, void *rows);
int cli_mount_row(const struct cairn_mount_rec *m, void *rows);
int cli_image_row(const struct cairn_image_rec *im, void *rows);
int cli_layer_row(const struct cairn_layer_rec *l, void *rows);
/* The image rows of rows as podman images shows them, into out (rows must
 * outlive it: out shares their text): a row per name, with its
 * "repository" and "tag" cells set (an image without a name: one row,
 * <none> and <none>). Those cells are left out of --json, whose rows are
 * the images. -ENOMEM (out then holds what was made: free it). */
int cli_image_rows_by_name(const struct cli_rows *rows, struct cli_rows *out);
/* An upper layer of a writable mount as a row of `cairn mounts` (pid 0,
 * state "kept" or "stale", with its id and size). */
int cli_upper_row(const struct cairn_upper_rec *u, void *rows);

struct cli_listing;
/* Prints rows as l says: JSON; each row by l->format; the ids; or a
 * table. columns are "KEY:HEADER" pairs naming fields of the rows' schema,
 * in table order; in a table (and a template) ids are cut to 12 digits
 * (unless --no-trunc), sizes made human, times relative, lists joined with
 * commas. Returns CAIRN_EXIT_OK, CAIRN_EXIT_USAGE for a template naming no
 * column (said, with the usage), or CAIRN_EXIT_FAILURE for JSON it could
 * not make (said). */
int cli_listing_print(const struct cli_listing *l, const char *usage, const struct cli_rows *rows,
                      const char *const *columns, size_t n);

#endif
