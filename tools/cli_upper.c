/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cli_upper.c — the front end's side of writable mounts' upper layers: finding
 * the upper of a mountpoint (umount, mount --resume), dropping or keeping
 * those a crash or umount left (umount, --discard) and saying so,
 * listing the uppers no live mount serves (cairn mounts).
 * The store logic is libcairn's (store/upper.c); this only asks and prints.
 */
#include "cli_upper.h"

#include <errno.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct find {
  const char *dir;
  bool live;
  const char *id; /* this one only, if not NULL */
  int64_t created;
  struct cli_upper *u;
};

static int find_one(const struct cairn_upper_rec *r, void *arg) {
  struct find *f = arg;
  if (strcmp(r->dir, f->dir) != 0 || r->live != f->live) return 0;
  if (f->id && strcmp(r->id, f->id) != 0) return 0;
  if (f->u->found && r->created < f->created) return 0;
  f->created = r->created;
  f->u->found = true;
  snprintf(f->u->id, sizeof(f->u->id), "%s", r->id);
  snprintf(f->u->image, sizeof(f->u->image), "%s", r->image);
  f->u->entries = r->entries;
  f->u->bytes = r->bytes;
  return 0;
}

int cli_upper_of_dir(cairn_store *st, const char *dir, bool live, struct cli_upper *u) {
  memset(u, 0, sizeof(*u));
  cairn_id mine;
  struct find f = {.dir = dir, .live = live, .u = u};
  if (live && cairn_upper_of_mount(dir, mine) == 0) { /* the mount at dir says which */
    f.id = mine;
    int r = cairn_uppers_foreach(st, find_one, &f);
    if (r < 0 || u->found) return r;
    f.id = NULL;
  }
  return cairn_uppers_foreach(st, find_one, &f);
}

void cli_upper_say(const struct cli_upper *u, bool kept, const char *dir) {
  char size[32];
  cairn_human_size(u->bytes, size, sizeof(size));
  if (kept)
    printf("Kept: upper %.12s (%llu entries, %s): cairn mount --rw --resume %s\n", u->id,
           (unsigned long long)u->entries, size, dir);
  else
    printf("Dropped: upper %.12s (%llu entries, %s)\n", u->id, (unsigned long long)u->entries,
           size);
}

/* The uppers left for a directory (no live mount serves them). */
struct left {
  const char *dir;
  struct cli_upper *v;
  size_t n, cap;
  bool *kept;
};

static int left_one(const struct cairn_upper_rec *r, void *arg) {
  struct left *l = arg;
  if (r->live || strcmp(r->dir, l->dir) != 0) return 0;
  if (l->n == l->cap) {
    size_t cap = l->cap ? 2 * l->cap : 4;
    struct cli_upper *v = realloc(l->v, cap * sizeof(*v));
    bool *kept = v ? realloc(l->kept, cap * sizeof(*kept)) : NULL;
    if (v) l->v = v;
    if (!kept) return -ENOMEM;
    l->kept = kept;
    l->cap = cap;
  }
  struct cli_upper *u = &l->v[l->n];
  *u = (struct cli_upper){.entries = r->entries, .bytes = r->bytes, .found = true};
  snprintf(u->id, sizeof(u->id), "%s", r->id);
  snprintf(u->image, sizeof(u->image), "%s", r->image);
  l->kept[l->n++] = r->kept;
  return 0;
}

int cli_uppers_left(cairn_store *st, const char *dir, enum cli_left_action act, bool quiet,
                    int *untouched) {
  struct left l = {.dir = dir};
  *untouched = 0;
  int r = cairn_uppers_foreach(st, left_one, &l);
  int done = 0;
  for (size_t i = 0; r == 0 && i < l.n; i++) {
    if (act == CLI_LEFT_KEEP) {
      if ((r = cairn_upper_drop_if_empty(st, l.v[i].id)) < 0) break;
      if (r == 1) { /* nothing to keep */
        r = 0;
        continue;
      }
      if (l.kept[i]) { /* kept already: only --discard drops it */
        (*untouched)++;
        continue;
      }
    }
    r = act == CLI_LEFT_KEEP ? cairn_upper_keep(st, l.v[i].id) : cairn_upper_drop(st, l.v[i].id);
    if (r < 0) break;
    if (!quiet) cli_upper_say(&l.v[i], act == CLI_LEFT_KEEP, dir);
    done++;
  }
  free(l.v);
  free(l.kept);
  return r < 0 ? r : done;
}

static int upper_row(const struct cairn_upper_rec *r, void *rows) {
  return r->live ? 0 : cli_upper_row(r, rows);
}

int cli_upper_rows(cairn_store *st, struct cli_rows *rows) {
  return cairn_uppers_foreach(st, upper_row, rows);
}
