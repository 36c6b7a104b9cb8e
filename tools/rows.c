/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rows.c — the rows of a listing and their printing: see rows.h.
 *
 * Invariants: a row is schema->n cells; a cell's text and lists live in
 * the arena (or, for NAMES set by cli_rows_add_names, in names_index),
 * which lives as long as the rows; cells are formatted for a table once.
 */
#include "rows.h"
#include "cli.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

/* ---- the rows and their arena ------------------------------------------ */

struct cli_arena_chunk {
  struct cli_arena_chunk *next;
  size_t used, cap;
  max_align_t data[];
};

#define ARENA_CHUNK (64 * 1024)

/* len bytes of the arena, aligned for any type; NULL without memory. */
static void *arena_alloc(struct cli_rows *rows, size_t len) {
  size_t need = (len + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
  struct cli_arena_chunk *c = rows->arena;
  if (!c || c->cap - c->used < need) {
    size_t cap = need > ARENA_CHUNK ? need : ARENA_CHUNK;
    c = malloc(sizeof(*c) + cap);
    if (!c) return NULL;
    *c = (struct cli_arena_chunk){.next = rows->arena, .cap = cap};
    rows->arena = c;
  }
  void *p = (char *)c->data + c->used;
  c->used += need;
  return p;
}

struct names_index {
  const char **targets; /* sorted, one per (target, name) */
  const char **names;   /* names[i] is a name of targets[i] */
  size_t n, cap;
};

static void names_index_free(struct names_index *ix) {
  if (!ix) return;
  free(ix->targets);
  free(ix->names);
  free(ix);
}

void cli_rows_free(struct cli_rows *rows) {
  while (rows->arena) {
    struct cli_arena_chunk *next = rows->arena->next;
    free(rows->arena);
    rows->arena = next;
  }
  names_index_free(rows->names_index);
  free(rows->cells);
  *rows = (struct cli_rows){0};
}

/* Maps the pages of [p, p + len) now, in one call, rather than a fault at
 * a time as the rows fill them: 10,000 pins' rows are 2 MiB, 500 faults,
 * and a fault can cost 10 µs on a VM (measured: doc/performance.md, Listings).
 * Only for a large block (glibc gives those their own mapping); an older
 * kernel's EINVAL leaves them to fault as before. */
static void prefault(void *p, size_t len) {
  if (len < 128 * 1024) return;
  long page = sysconf(_SC_PAGESIZE);
  uintptr_t start = ((uintptr_t)p + (uintptr_t)page - 1) & ~((uintptr_t)page - 1);
  uintptr_t end = ((uintptr_t)p + len) & ~((uintptr_t)page - 1);
  if (end > start) (void)madvise((void *)start, end - start, MADV_POPULATE_WRITE);
}

struct cli_cell *cli_rows_add(struct cli_rows *rows, const struct cli_schema *schema) {
  rows->schema = schema;
  if (rows->n == rows->cap) {
    size_t cap = rows->cap ? rows->cap * 2 : 64;
    struct cli_cell *cells = realloc(rows->cells, cap * schema->n * sizeof(*cells));
    if (!cells) return NULL;
    rows->cells = cells;
    prefault(cells + rows->cap * schema->n, (cap - rows->cap) * schema->n * sizeof(*cells));
    rows->cap = cap;
  }
  struct cli_cell *row = rows->cells + rows->n++ * schema->n;
  memset(row, 0, schema->n * sizeof(*row));
  return row;
}

void cli_rows_truncate(struct cli_rows *rows, size_t n) {
  if (n < rows->n) rows->n = n;
}

void cli_rows_filter(struct cli_rows *rows,
                     bool (*keep)(const struct cli_rows *rows, const struct cli_cell *row,
                                  void *arg),
                     void *arg) {
  size_t out = 0, w = rows->schema ? rows->schema->n : 0;
  for (size_t i = 0; i < rows->n; i++)
    if (keep(rows, rows->cells + i * w, arg)) {
      if (out != i) memcpy(rows->cells + out * w, rows->cells + i * w, w * sizeof(*rows->cells));
      out++;
    }
  rows->n = out;
}

const struct cli_cell *cli_row_get(const struct cli_rows *rows, const struct cli_cell *row,
                                   const char *key) {
  for (size_t f = 0; rows->schema && f < rows->schema->n; f++)
    if (strcmp(rows->schema->fields[f].key, key) == 0) return &row[f];
  return NULL;
}

bool cli_cell_set_str(struct cli_rows *rows, struct cli_cell *cell, const char *s) {
  /* rows repeat their text (a target's pins come together; thousands of
   * pins have a few commands and purposes): the row before's is shared */
  const struct cli_cell *above =
      (size_t)(cell - rows->cells) >= rows->schema->n ? cell - rows->schema->n : NULL;
  if (above && above->set && strcmp(above->s, s) == 0) {
    *cell = *above;
    return true;
  }
  size_t len = strlen(s) + 1;
  char *copy = arena_alloc(rows, len);
  if (!copy) return false;
  memcpy(copy, s, len);
  cell->s = copy;
  cell->set = true;
  return true;
}

bool cli_cell_set_list(struct cli_rows *rows, struct cli_cell *cell, const void *v, size_t n,
                       size_t size) {
  void *copy = n ? arena_alloc(rows, n * size) : NULL;
  if (n && !copy) return false;
  if (n) memcpy(copy, v, n * size);
  cell->list = copy;
  cell->n = (uint32_t)n;
  cell->set = true;
  return true;
}

/* The field of the rows' schema named key, or -1. */
static int field_of(const struct cli_schema *schema, const char *key, size_t len) {
  for (size_t f = 0; schema && f < schema->n; f++)
    if (strlen(schema->fields[f].key) == len && strncmp(schema->fields[f].key, key, len) == 0)
      return (int)f;
  return -1;
}

/* ---- JSON ----------------------------------------------------------------- */

static json_t *cell_json(const struct cli_field *f, const struct cli_cell *c) {
  if (!c->set) return json_null();
  switch (f->type) {
  case CLI_STR:
  case CLI_ID: return json_string(c->s);
  case CLI_INT:
  case CLI_SIZE: return json_integer(c->i);
  case CLI_BOOL: return json_boolean(c->b);
  case CLI_TIME: {
    char t[32];
    cli_rfc3339(c->i, t, sizeof(t));
    return json_string_nocheck(t);
  }
  case CLI_NAMES:
  case CLI_PIDS: {
    json_t *a = json_array();
    for (size_t i = 0; a && i < c->n; i++) {
      json_t *x = f->type == CLI_NAMES ? json_string(((const char *const *)c->list)[i])
                                       : json_integer(((const pid_t *)c->list)[i]);
      if (json_array_append_new(a, x) < 0) {
        json_decref(a);
        a = NULL;
      }
    }
    return a;
  }
  }
  return NULL;
}

/* Row r as a JSON object (keys in schema order); NULL without memory or
 * for text that is not UTF-8. */
static json_t *row_json(const struct cli_rows *rows, size_t r) {
  const struct cli_cell *row = rows->cells + r * rows->schema->n;
  json_t *obj = json_object();
  for (size_t f = 0; obj && f < rows->schema->n; f++) {
    const struct cli_field *field = &rows->schema->fields[f];
    if (!row[f].set && field->omit_unset) continue;
    json_t *v = cell_json(field, &row[f]);
    if (!v || json_object_set_new_nocheck(obj, field->key, v) < 0) {
      json_decref(obj);
      obj = NULL;
    }
  }
  return obj;
}

json_t *cli_rows_json(const struct cli_rows *rows) {
  json_t *array = json_array();
  for (size_t r = 0; array && r < rows->n; r++) {
    json_t *obj = row_json(rows, r);
    if (!obj || json_array_append_new(array, obj) < 0) {
      json_decref(array);
      array = NULL;
    }
  }
  return array;
}

/* Prints the rows as cli_print_json prints cli_rows_json's array, byte for
 * byte, an object at a time: building 10,000 objects before printing any,
 * then freeing them, was most of cairn-pin ls --json. Each object is dumped
 * alone and indented one level more (a raw newline in a dump is always
 * layout: strings escape theirs); the text is collected first, so that a
 * row that fails prints nothing. -ENOMEM or -EILSEQ (not UTF-8). */
static int rows_json_print(const struct cli_rows *rows) {
  if (rows->n == 0) {
    fputs("[]\n", stdout);
    return 0;
  }
  char *text = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&text, &len);
  if (!out) return -ENOMEM;
  int r = 0;
  fputs("[\n", out);
  for (size_t i = 0; r == 0 && i < rows->n; i++) {
    json_t *obj = row_json(rows, i);
    char *dump = obj ? json_dumps(obj, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(obj);
    if (!dump) {
      r = obj ? -ENOMEM : -EILSEQ;
      break;
    }
    for (const char *p = dump, *nl; *p; p = nl + 1) {
      fputs("  ", out);
      nl = strchr(p, '\n');
      if (!nl) {
        fputs(p, out);
        break;
      }
      fwrite(p, 1, (size_t)(nl - p + 1), out);
    }
    free(dump);
    fputs(i + 1 < rows->n ? ",\n" : "\n]\n", out);
  }
  if (fclose(out) != 0 && r == 0) r = -ENOMEM;
  if (r == 0) fwrite(text, 1, len, stdout);
  free(text);
  return r;
}

/* ---- names ---------------------------------------------------------------- */

static int names_index_add(const char *target, const char *name, void *arg) {
  struct cli_rows *rows = arg;
  struct names_index *ix = rows->names_index;
  if (ix->n == ix->cap) {
    size_t cap = ix->cap ? ix->cap * 2 : 256;
    const char **t = realloc(ix->targets, cap * sizeof(*t));
    if (t) ix->targets = t;
    const char **n = realloc(ix->names, cap * sizeof(*n));
    if (n) ix->names = n;
    if (!t || !n) return -ENOMEM;
    ix->cap = cap;
  }
  size_t tl = strlen(target) + 1, nl = strlen(name) + 1;
  bool same_target = ix->n && strcmp(ix->targets[ix->n - 1], target) == 0;
  if (same_target && strcmp(ix->names[ix->n - 1], name) == 0) return 0; /* once each */
  char *t = same_target ? (char *)ix->targets[ix->n - 1] : arena_alloc(rows, tl);
  char *n = arena_alloc(rows, nl);
  if (!t || !n) return -ENOMEM;
  if (!same_target) memcpy(t, target, tl);
  memcpy(n, name, nl);
  ix->targets[ix->n] = t;
  ix->names[ix->n++] = n;
  return 0;
}

/* Whether cairn_names_foreach's order (target, then name) is strcmp's. */
static bool names_index_sorted(const struct names_index *ix) {
  for (size_t i = 1; i < ix->n; i++) {
    int c = strcmp(ix->targets[i - 1], ix->targets[i]);
    if (c > 0 || (c == 0 && strcmp(ix->names[i - 1], ix->names[i]) >= 0)) return false;
  }
  return true;
}

/* The first entry of target in ix (sorted), or ix->n. */
static size_t names_index_first(const struct names_index *ix, const char *target) {
  size_t lo = 0, hi = ix->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (strcmp(ix->targets[mid], target) < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < ix->n && strcmp(ix->targets[lo], target) == 0 ? lo : ix->n;
}

int cli_rows_read_names(cairn_store *st, struct cli_rows *rows) {
  names_index_free(rows->names_index);
  struct names_index *ix = rows->names_index = calloc(1, sizeof(*ix));
  if (!ix) return -ENOMEM;
  int r = cairn_names_foreach(st, names_index_add, rows);
  if (r < 0) return r;
  return names_index_sorted(ix) ? 0 : cairn_fail(st, -EIO, "the names are not in order");
}

/* Sets row's names cell (nf) to the names of the target at its cell kf:
 * the row above's, if that has the same target (a target's rows come
 * together), else found in ix. */
static void row_names_set(const struct names_index *ix, struct cli_cell *row,
                          const struct cli_cell *above, int kf, int nf) {
  if (above && row[kf].set && above[kf].set &&
      (row[kf].s == above[kf].s || strcmp(row[kf].s, above[kf].s) == 0)) {
    row[nf] = above[nf];
    return;
  }
  size_t first = row[kf].set ? names_index_first(ix, row[kf].s) : ix->n, end = first;
  while (end < ix->n && ix->targets[end] == ix->targets[first]) end++;
  row[nf] = (struct cli_cell){.set = true, .list = ix->names + first, .n = (uint32_t)(end - first)};
}

int cli_rows_add_names(cairn_store *st, struct cli_rows *rows, const char *key) {
  int kf = field_of(rows->schema, key, strlen(key)), nf = field_of(rows->schema, "names", 5);
  if (!rows->n) return 0;
  if (kf < 0 || nf < 0) return -EINVAL;
  int r = rows->names_index ? 0 : cli_rows_read_names(st, rows);
  if (r < 0) return r;
  for (size_t i = 0; i < rows->n; i++) {
    struct cli_cell *row = rows->cells + i * rows->schema->n;
    row_names_set(rows->names_index, row, i ? row - rows->schema->n : NULL, kf, nf);
  }
  return 0;
}

/* ---- the rows of libcairn's records ------------------------------------- */

enum {
  PIN_TARGET,
  PIN_KIND,
  PIN_PID,
  PIN_COMMAND,
  PIN_PURPOSE,
  PIN_SINCE,
  PIN_STALE,
  PIN_HELD_BY,
  PIN_NAMES,
  PIN_FIELDS
};
static const struct cli_field pin_fields[PIN_FIELDS] = {
    [PIN_TARGET] = {"target", CLI_ID, false},    [PIN_KIND] = {"kind", CLI_STR, false},
    [PIN_PID] = {"pid", CLI_INT, false},         [PIN_COMMAND] = {"command", CLI_STR, false},
    [PIN_PURPOSE] = {"purpose", CLI_STR, false}, [PIN_SINCE] = {"since", CLI_TIME, false},
    [PIN_STALE] = {"stale", CLI_BOOL, false},    [PIN_HELD_BY] = {"held_by", CLI_PIDS, true},
    [PIN_NAMES] = {"names", CLI_NAMES, true},
};
static const struct cli_schema pin_schema = {pin_fields, PIN_FIELDS};

int cli_pin_row(const struct cairn_pin_rec *p, void *arg) {
  struct cli_rows *rows = arg;
  struct cli_cell *c = cli_rows_add(rows, &pin_schema);
  if (!c) return -ENOMEM;
  c[PIN_KIND] = (struct cli_cell){.set = true, .s = p->kind == CAIRN_PIN_IMAGE ? "image" : "layer"};
  c[PIN_PID] = (struct cli_cell){.set = true, .i = p->pid};
  if (p->since > 0) c[PIN_SINCE] = (struct cli_cell){.set = true, .i = p->since};
  c[PIN_STALE] = (struct cli_cell){.set = true, .b = p->stale};
  bool ok = cli_cell_set_str(rows, &c[PIN_TARGET], p->target) &&
            cli_cell_set_str(rows, &c[PIN_COMMAND], p->command) &&
            cli_cell_set_str(rows, &c[PIN_PURPOSE], p->purpose) &&
            (!p->locker_gone ||
             cli_cell_set_list(rows, &c[PIN_HELD_BY], p->held_by, p->n_held_by, sizeof(pid_t)));
  if (ok && rows->names_index) /* read before: set now, while the row is at hand */
    row_names_set(rows->names_index, c, rows->n > 1 ? c - PIN_FIELDS : NULL, PIN_TARGET, PIN_NAMES);
  return ok ? 0 : -ENOMEM;
}

enum {
  MOUNT_DIR,
  MOUNT_IMAGE,
  MOUNT_PID,
  MOUNT_STATE,
  MOUNT_RW,
  MOUNT_DEV,
  MOUNT_UPPER,
  MOUNT_UPPER_ENTRIES,
  MOUNT_UPPER_BYTES,
  MOUNT_NAMES,
  MOUNT_FIELDS
};
static const struct cli_field mount_fields[MOUNT_FIELDS] = {
    [MOUNT_DIR] = {"dir", CLI_STR, false},
    [MOUNT_IMAGE] = {"image", CLI_ID, false},
    [MOUNT_PID] = {"pid", CLI_INT, false},
    [MOUNT_STATE] = {"state", CLI_STR, false},
    [MOUNT_RW] = {"rw", CLI_BOOL, false},
    [MOUNT_DEV] = {"dev", CLI_STR, false},
    [MOUNT_UPPER] = {"upper", CLI_ID, true},
    [MOUNT_UPPER_ENTRIES] = {"upper_entries", CLI_INT, true},
    [MOUNT_UPPER_BYTES] = {"upper_bytes", CLI_SIZE, true},
    [MOUNT_NAMES] = {"names", CLI_NAMES, true},
};
static const struct cli_schema mount_schema = {mount_fields, MOUNT_FIELDS};

int cli_mount_row(const struct cairn_mount_rec *m, void *arg) {
  static const char *const states[] = {[CAIRN_MOUNT_LIVE] = "live",
                                       [CAIRN_MOUNT_DETACHED] = "detached",
                                       [CAIRN_MOUNT_STALE] = "stale",
                                       [CAIRN_MOUNT_RESTARTING] = "restarting"};
  struct cli_rows *rows = arg;
  struct cli_cell *c = cli_rows_add(rows, &mount_schema);
  if (!c) return -ENOMEM;
  c[MOUNT_PID] = (struct cli_cell){.set = true, .i = m->pid};
  c[MOUNT_STATE] = (struct cli_cell){.set = true, .s = states[m->state]};
  c[MOUNT_RW] = (struct cli_cell){.set = true, .b = m->rw};
  bool ok = cli_cell_set_str(rows, &c[MOUNT_DIR], m->dir) &&
            cli_cell_set_str(rows, &c[MOUNT_IMAGE], m->image) &&
            cli_cell_set_str(rows, &c[MOUNT_DEV], m->dev);
  return ok ? 0 : -ENOMEM;
}

/* The row of the stale --rw mount record for u's directory and image, not
 * yet given an upper: a crashed mount is listed once, with its upper. */
/* The stale record of u's mount: of its directory and image, else of its
 * directory only (a supervisor killed in cairn commit's move, before it
 * recorded the new image its upper is on: the upper says, *image_differs). */
static struct cli_cell *stale_record_row(struct cli_rows *rows, const struct cairn_upper_rec *u,
                                         bool *image_differs) {
  if (rows->schema != &mount_schema) return NULL;
  for (int pass = 0; pass < 2; pass++) {
    for (size_t i = 0; i < rows->n; i++) {
      struct cli_cell *c = rows->cells + i * MOUNT_FIELDS;
      if (c[MOUNT_RW].b && !c[MOUNT_UPPER].set && c[MOUNT_PID].i > 0 &&
          strcmp(c[MOUNT_STATE].s, "stale") == 0 && strcmp(c[MOUNT_DIR].s, u->dir) == 0 &&
          (pass || strcmp(c[MOUNT_IMAGE].s, u->image) == 0)) {
        *image_differs = pass;
        return c;
      }
    }
  }
  return NULL;
}

int cli_upper_row(const struct cairn_upper_rec *u, void *arg) {
  struct cli_rows *rows = arg;
  bool image_differs = false;
  struct cli_cell *c = u->kept ? NULL : stale_record_row(rows, u, &image_differs);
  if (c && image_differs && !cli_cell_set_str(rows, &c[MOUNT_IMAGE], u->image)) return -ENOMEM;
  if (c) {
    c[MOUNT_UPPER_ENTRIES] = (struct cli_cell){.set = true, .i = (int64_t)u->entries};
    c[MOUNT_UPPER_BYTES] = (struct cli_cell){.set = true, .i = (int64_t)u->bytes};
    return cli_cell_set_str(rows, &c[MOUNT_UPPER], u->id) ? 0 : -ENOMEM;
  }
  c = cli_rows_add(rows, &mount_schema);
  if (!c) return -ENOMEM;
  c[MOUNT_PID] = (struct cli_cell){.set = true, .i = 0};
  c[MOUNT_STATE] = (struct cli_cell){.set = true, .s = u->kept ? "kept" : "stale"};
  c[MOUNT_RW] = (struct cli_cell){.set = true, .b = true};
  c[MOUNT_UPPER_ENTRIES] = (struct cli_cell){.set = true, .i = (int64_t)u->entries};
  c[MOUNT_UPPER_BYTES] = (struct cli_cell){.set = true, .i = (int64_t)u->bytes};
  bool ok = cli_cell_set_str(rows, &c[MOUNT_DIR], u->dir) &&
            cli_cell_set_str(rows, &c[MOUNT_IMAGE], u->image) &&
            cli_cell_set_str(rows, &c[MOUNT_DEV], "") &&
            cli_cell_set_str(rows, &c[MOUNT_UPPER], u->id);
  return ok ? 0 : -ENOMEM;
}

enum {
  IMAGE_ID,
  IMAGE_NAMES,
  IMAGE_LAYERS,
  IMAGE_SIZE,
  IMAGE_CREATED,
  IMAGE_PINNED,
  IMAGE_STORED,
  IMAGE_PENDING_FILES, /* set only for a partial image (a lazy pull's) */
  IMAGE_PENDING_BYTES,
  IMAGE_UNVERIFIED, /* set only when some layer's diff_id is not proven yet */
  IMAGE_REPOSITORY, /* set only by cli_image_rows_by_name: tables and templates */
  IMAGE_TAG,
  IMAGE_FIELDS
};
static const struct cli_field image_fields[IMAGE_FIELDS] = {
    [IMAGE_ID] = {"id", CLI_ID, false},
    [IMAGE_NAMES] = {"names", CLI_NAMES, false},
    [IMAGE_LAYERS] = {"layers", CLI_INT, false},
    [IMAGE_SIZE] = {"size", CLI_SIZE, false},
    [IMAGE_CREATED] = {"created", CLI_TIME, false},
    [IMAGE_PINNED] = {"pinned", CLI_BOOL, false},
    [IMAGE_STORED] = {"stored", CLI_TIME, false},
    [IMAGE_PENDING_FILES] = {"pending_files", CLI_INT, true},
    [IMAGE_PENDING_BYTES] = {"pending_bytes", CLI_SIZE, true},
    [IMAGE_UNVERIFIED] = {"unverified", CLI_INT, true},
    [IMAGE_REPOSITORY] = {"repository", CLI_STR, true},
    [IMAGE_TAG] = {"tag", CLI_STR, true},
};
static const struct cli_schema image_schema = {image_fields, IMAGE_FIELDS};

int cli_image_row(const struct cairn_image_rec *im, void *arg) {
  struct cli_rows *rows = arg;
  struct cli_cell *c = cli_rows_add(rows, &image_schema);
  if (!c) return -ENOMEM;
  c[IMAGE_LAYERS] = (struct cli_cell){.set = true, .i = (int64_t)im->layers};
  c[IMAGE_SIZE] = (struct cli_cell){.set = true, .i = (int64_t)im->size};
  c[IMAGE_CREATED] = (struct cli_cell){.set = true, .i = im->created};
  c[IMAGE_PINNED] = (struct cli_cell){.set = true, .b = im->pinned};
  c[IMAGE_STORED] = (struct cli_cell){.set = true, .i = im->stored};
  if (im->pending_files) {
    c[IMAGE_PENDING_FILES] = (struct cli_cell){.set = true, .i = (int64_t)im->pending_files};
    c[IMAGE_PENDING_BYTES] = (struct cli_cell){.set = true, .i = (int64_t)im->pending_bytes};
  }
  if (im->unverified)
    c[IMAGE_UNVERIFIED] = (struct cli_cell){.set = true, .i = (int64_t)im->unverified};
  bool ok = cli_cell_set_str(rows, &c[IMAGE_ID], im->id);
  const char **names = ok && im->n_names ? arena_alloc(rows, im->n_names * sizeof(*names)) : NULL;
  for (size_t i = 0; names && i < im->n_names; i++) {
    names[i] = arena_alloc(rows, strlen(im->names[i]) + 1);
    if (!names[i]) return -ENOMEM;
    strcpy((char *)names[i], im->names[i]);
  }
  if (im->n_names && !names) return -ENOMEM;
  c[IMAGE_NAMES] = (struct cli_cell){.set = true, .list = names, .n = (uint32_t)im->n_names};
  return ok ? 0 : -ENOMEM;
}

/* Splits name into its repository and tag as podman images shows them:
 * "localhost/app:1" is localhost/app and 1; a name by digest (REPO@sha256:...)
 * has the tag <none>. */
static void name_split(const char *name, char *repo, size_t len, const char **tag) {
  const char *at = strchr(name, '@'), *slash = strrchr(name, '/');
  const char *colon = strrchr(slash ? slash : name, ':');
  size_t n = at ? (size_t)(at - name) : colon ? (size_t)(colon - name) : strlen(name);
  snprintf(repo, len, "%.*s", (int)n, name);
  *tag = at || !colon ? "<none>" : colon + 1;
}

int cli_image_rows_by_name(const struct cli_rows *rows, struct cli_rows *out) {
  *out = (struct cli_rows){0};
  for (size_t i = 0; rows->schema == &image_schema && i < rows->n; i++) {
    const struct cli_cell *row = rows->cells + i * IMAGE_FIELDS;
    const struct cli_cell *names = &row[IMAGE_NAMES];
    for (uint32_t k = 0; k < (names->n ? names->n : 1); k++) {
      struct cli_cell *c = cli_rows_add(out, &image_schema);
      if (!c) return -ENOMEM;
      memcpy(c, row, IMAGE_FIELDS * sizeof(*c));
      char repo[1024] = "<none>";
      const char *tag = "<none>";
      if (names->n) name_split(((const char *const *)names->list)[k], repo, sizeof(repo), &tag);
      if (!cli_cell_set_str(out, &c[IMAGE_REPOSITORY], repo) ||
          !cli_cell_set_str(out, &c[IMAGE_TAG], tag))
        return -ENOMEM;
    }
  }
  return 0;
}

enum { LAYER_ID, LAYER_SIZE, LAYER_ENTRIES, LAYER_IMAGES, LAYER_PINNED, LAYER_FIELDS };
static const struct cli_field layer_fields[LAYER_FIELDS] = {
    [LAYER_ID] = {"id", CLI_ID, false},
    [LAYER_SIZE] = {"size", CLI_SIZE, false},
    [LAYER_ENTRIES] = {"entries", CLI_INT, false},
    [LAYER_IMAGES] = {"images", CLI_INT, false},
    [LAYER_PINNED] = {"pinned", CLI_BOOL, false},
};
static const struct cli_schema layer_schema = {layer_fields, LAYER_FIELDS};

int cli_layer_row(const struct cairn_layer_rec *l, void *arg) {
  struct cli_rows *rows = arg;
  struct cli_cell *c = cli_rows_add(rows, &layer_schema);
  if (!c) return -ENOMEM;
  c[LAYER_SIZE] = (struct cli_cell){.set = true, .i = (int64_t)l->size};
  c[LAYER_ENTRIES] = (struct cli_cell){.set = true, .i = (int64_t)l->entries};
  c[LAYER_IMAGES] = (struct cli_cell){.set = true, .i = (int64_t)l->images};
  c[LAYER_PINNED] = (struct cli_cell){.set = true, .b = l->pinned};
  return cli_cell_set_str(rows, &c[LAYER_ID], l->id) ? 0 : -ENOMEM;
}

/* ---- tables, templates, ids ----------------------------------------------- */

/* Copies s into buf (len > 0), cut to fit. Not snprintf: a table formats
 * every cell of thousands of rows. */
static void text_cell(const char *s, size_t n, char *buf, size_t len) {
  if (n >= len) n = len - 1;
  memcpy(buf, s, n);
  buf[n] = '\0';
}

/* A time as a table says it: "3 minutes ago" (rows repeat their times),
 * from one instant, the first call's: a table formats each cell twice,
 * for the widths and for the rows, and "9 seconds ago" must not become
 * "10 seconds ago" between the two. */
static void time_cell(int64_t t, char *buf, size_t len) {
  static int64_t last = INT64_MIN, now = INT64_MIN;
  static char last_cell[64];
  if (now == INT64_MIN) now = (int64_t)time(NULL);
  if (t != last) {
    cli_time_ago(t, now, last_cell, sizeof(last_cell));
    last = t;
  }
  text_cell(last_cell, strlen(last_cell), buf, len);
}

/* A number in decimal. */
static void int_cell(int64_t v, char *buf, size_t len) {
  char digits[24], *d = digits + sizeof(digits);
  uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
  do *--d = (char)('0' + u % 10);
  while ((u /= 10) > 0);
  if (v < 0) *--d = '-';
  text_cell(d, (size_t)(digits + sizeof(digits) - d), buf, len);
}

/* Formats a cell as a table shows it into buf (len > 0). */
static void cell_format(const struct cli_field *f, const struct cli_cell *c, bool no_trunc,
                        char *buf, size_t len) {
  buf[0] = '\0';
  if (!c->set) return;
  switch (f->type) {
  case CLI_STR:
  case CLI_ID: {
    size_t n = strlen(c->s);
    if (f->type == CLI_ID && !no_trunc && n == 64) n = 12; /* an id: its short form */
    text_cell(c->s, n, buf, len);
    break;
  }
  case CLI_INT:
    if (c->i == 0 && strcmp(f->key, "pid") == 0) /* no process (a kept upper's row) */
      text_cell("-", 1, buf, len);
    else
      int_cell(c->i, buf, len);
    break;
  case CLI_SIZE: cairn_human_size((uint64_t)c->i, buf, len); break;
  case CLI_BOOL: text_cell(c->b ? "yes" : "no", c->b ? 3 : 2, buf, len); break;
  case CLI_TIME: time_cell(c->i, buf, len); break;
  case CLI_NAMES:
  case CLI_PIDS: {
    size_t o = 0;
    for (size_t i = 0; i < c->n && o < len; i++) {
      if (f->type == CLI_NAMES) { /* copied, not printed: thousands of rows have names */
        const char *name = ((const char *const *)c->list)[i];
        size_t n = strlen(name) + (i > 0), room = len - 1 - o, k = n < room ? n : room;
        if (i > 0 && k > 0) buf[o] = ',';
        if (k > (size_t)(i > 0)) memcpy(buf + o + (i > 0), name, k - (i > 0));
        buf[o + k] = '\0';
        o += n;
      } else
        o += (size_t)snprintf(buf + o, len - o, "%s%d", i ? "," : "",
                              (int)((const pid_t *)c->list)[i]);
    }
    if (c->n == 0) snprintf(buf, len, "<none>");
    break;
  }
  }
}

/* The length of the text cell_format gives the cell, for len 1024, found
 * without formatting where that is cheap: the widths' pass measures every
 * cell of thousands of rows. */
static size_t cell_width(const struct cli_field *f, const struct cli_cell *c, bool no_trunc) {
  enum { LEN = 1024 };
  if (!c->set) return 0;
  switch (f->type) {
  case CLI_STR:
  case CLI_ID: {
    size_t n = strlen(c->s);
    if (f->type == CLI_ID && !no_trunc && n == 64) n = 12;
    return n < LEN ? n : LEN - 1;
  }
  case CLI_INT: {
    if (c->i == 0 && strcmp(f->key, "pid") == 0) return 1; /* "-" */
    uint64_t u = c->i < 0 ? 0 - (uint64_t)c->i : (uint64_t)c->i;
    size_t n = 1 + (c->i < 0);
    while ((u /= 10) > 0) n++;
    return n;
  }
  case CLI_BOOL: return c->b ? 3 : 2;
  case CLI_NAMES: {
    if (c->n == 0) return 6; /* <none> */
    size_t n = c->n - 1;     /* the commas */
    for (size_t i = 0; i < c->n && n < LEN; i++) n += strlen(((const char *const *)c->list)[i]);
    return n < LEN ? n : LEN - 1;
  }
  case CLI_SIZE:
  case CLI_TIME:
  case CLI_PIDS: break;
  }
  char cell[LEN];
  cell_format(f, c, no_trunc, cell, sizeof(cell));
  return strlen(cell);
}

/* Appends a cell padded to width to line (the last of a row: no padding,
 * a newline), which has room for the widest row. */
static char *cell_put(char *line, const char *cell, size_t width, bool last) {
  size_t n = strlen(cell);
  if (n > width) n = width; /* never: the widths were taken of these cells */
  memcpy(line, cell, n);
  line += n;
  if (last) {
    *line++ = '\n';
    return line;
  }
  memset(line, ' ', width + 2 - n);
  return line + width + 2 - n;
}

#define MAX_COLUMNS 16

/* The field of each of columns ("KEY:HEADER") into field; false if one
 * names no field of the rows (a listing's own columns always do). */
static bool columns_fields(const struct cli_rows *rows, const char *const *columns, size_t n,
                           int *field) {
  for (size_t c = 0; c < n; c++) {
    field[c] = field_of(rows->schema, columns[c], (size_t)(strchr(columns[c], ':') - columns[c]));
    if (field[c] < 0) return false;
  }
  return true;
}

/* Two passes: the widths, then the rows, each cell formatted in each (its
 * text kept between them cost more, in memory first touched, than
 * formatting it again). */
static void print_table(const struct cli_rows *rows, const char *const *columns, size_t n,
                        const int *field, bool no_trunc) {
  size_t width[MAX_COLUMNS] = {0};
  char cell[1024];
  for (size_t c = 0; c < n; c++) width[c] = strlen(strchr(columns[c], ':') + 1);
  for (size_t i = 0; i < rows->n; i++) {
    const struct cli_cell *row = rows->cells + i * rows->schema->n;
    for (size_t c = 0; c < n; c++) {
      size_t len = cell_width(&rows->schema->fields[field[c]], &row[field[c]], no_trunc);
      if (len > width[c]) width[c] = len;
    }
  }
  /* Rows are written 64 KiB at a time (stdio's buffer is a page: 250
   * write(2)s for 10,000 pins); a row is at most the widths, plus 2 each. */
  size_t line_len = 1;
  for (size_t c = 0; c < n; c++) line_len += width[c] + 2;
  size_t cap = line_len > 64 * 1024 ? line_len : 64 * 1024;
  char *block = malloc(cap), *end = block;
  for (size_t c = 0; block && c < n; c++)
    end = cell_put(end, strchr(columns[c], ':') + 1, width[c], c + 1 == n);
  for (size_t i = 0; block && i < rows->n; i++) {
    if ((size_t)(block + cap - end) < line_len) {
      fwrite(block, 1, (size_t)(end - block), stdout);
      end = block;
    }
    const struct cli_cell *row = rows->cells + i * rows->schema->n;
    for (size_t c = 0; c < n; c++) {
      cell_format(&rows->schema->fields[field[c]], &row[field[c]], no_trunc, cell, sizeof(cell));
      end = cell_put(end, cell, width[c], c + 1 == n);
    }
  }
  if (block) fwrite(block, 1, (size_t)(end - block), stdout);
  free(block);
}

/* The column of columns whose key is name[0..len), case aside ("ID" is
 * id), or -1. */
static int template_column(const char *name, size_t len, const char *const *columns, size_t n) {
  for (size_t c = 0; c < n; c++)
    if ((size_t)(strchr(columns[c], ':') - columns[c]) == len &&
        strncasecmp(columns[c], name, len) == 0)
      return (int)c;
  return -1;
}

/* Prints row by the template (row NULL: only checks it). Returns 0, or -1
 * for a bad {{...}} of which it prints the usage error. */
static int template_print(const struct cli_listing *l, const struct cli_rows *rows,
                          const struct cli_cell *row, const char *const *columns, size_t n,
                          const int *field, const char *usage) {
  char cell[1024];
  for (const char *p = l->format; *p;) {
    if (p[0] == '\\' && (p[1] == 't' || p[1] == 'n')) { /* as podman takes them */
      if (row) putchar(p[1] == 't' ? '\t' : '\n');
      p += 2;
      continue;
    }
    if (strncmp(p, "{{", 2) != 0) {
      if (row) putchar(*p);
      p++;
      continue;
    }
    const char *f = p + 2 + strspn(p + 2, " ");
    size_t len =
        *f == '.' ? strspn(f + 1, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_") : 0;
    const char *end = f + 1 + len + strspn(f + 1 + len, " ");
    int col = len ? template_column(f + 1, len, columns, n) : -1;
    if (col < 0 || strncmp(end, "}}", 2) != 0) {
      size_t shown = strstr(p, "}}") ? (size_t)(strstr(p, "}}") - p) + 2 : strlen(p);
      char fields[256] = "", key[64];
      for (size_t c = 0, o = 0; c < n && o < sizeof(fields); c++) {
        snprintf(key, sizeof(key), "%.*s", (int)(strchr(columns[c], ':') - columns[c]), columns[c]);
        for (size_t k = 0; key[k] && (k == 0 || strlen(key) <= 2); k++) /* ID, Names */
          key[k] = (char)toupper((unsigned char)key[k]);
        o += (size_t)snprintf(fields + o, sizeof(fields) - o, "%s{{.%s}}", c ? " " : "", key);
      }
      report_usage(usage, "%s: --format: %.*s: not a field (fields: %s)", l->cmd, (int)shown, p,
                   fields);
      return -1;
    }
    if (row) {
      cell_format(&rows->schema->fields[field[col]], &row[field[col]], l->no_trunc, cell,
                  sizeof(cell));
      fputs(cell, stdout);
    }
    p = end + 2;
  }
  if (row) putchar('\n');
  return 0;
}

int cli_listing_print(const struct cli_listing *l, const char *usage, const struct cli_rows *rows,
                      const char *const *columns, size_t n) {
  int field[MAX_COLUMNS];
  if (n > MAX_COLUMNS) n = MAX_COLUMNS;
  if (l->json) {
    if (rows_json_print(rows) < 0)
      return report_fail(-ENOMEM, "%s: cannot make the JSON (out of memory)", l->cmd);
    return CAIRN_EXIT_OK;
  }
  if (rows->n && !columns_fields(rows, columns, n, field))
    return report_fail(-EINVAL, "%s: a column is not a field of the rows", l->cmd);
  if (l->format) {
    if (template_print(l, rows, NULL, columns, n, field, usage) < 0) return CAIRN_EXIT_USAGE;
    for (size_t i = 0; i < rows->n; i++)
      template_print(l, rows, rows->cells + i * rows->schema->n, columns, n, field, usage);
  } else if (l->quiet) {
    char cell[1024];
    size_t id = 0; /* the ids if there are, else the first column */
    for (size_t c = 0; c < n; c++)
      if (strncmp(columns[c], "id:", 3) == 0 || strncmp(columns[c], "target:", 7) == 0) id = c;
    for (size_t i = 0; i < rows->n; i++) {
      const struct cli_cell *row = rows->cells + i * rows->schema->n;
      cell_format(&rows->schema->fields[field[id]], &row[field[id]], l->no_trunc, cell,
                  sizeof(cell));
      printf("%s\n", cell);
    }
  } else {
    print_table(rows, columns, n, field, l->no_trunc);
  }
  return CAIRN_EXIT_OK;
}
