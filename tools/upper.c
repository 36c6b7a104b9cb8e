/*
 * upper.c — the front end's side of writable mounts' upper layers: finding
 * the upper of a mountpoint (umount, mount --resume), saying what umount
 * drops or keeps, listing the uppers no live mount serves (cairn mounts).
 * The store logic is libcairn's (store/upper.c); this only asks and prints.
 */
#include "upper.h"

#include <errno.h>

#include <stdio.h>
#include <string.h>

struct find {
  const char *dir;
  bool live;
  int64_t created;
  struct cli_upper *u;
};

static int find_one(const struct cairn_upper_rec *r, void *arg) {
  struct find *f = arg;
  if (strcmp(r->dir, f->dir) != 0 || r->live != f->live) return 0;
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
  struct find f = {.dir = dir, .live = live, .u = u};
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

static int upper_row(const struct cairn_upper_rec *r, void *rows) {
  if (r->live) return 0;
  json_t *row =
      json_pack("{s:s, s:s, s:i, s:s, s:b, s:s, s:s, s:I, s:I}", "dir", r->dir, "image", r->image,
                "pid", 0, "state", r->kept ? "kept" : "stale", "rw", 1, "dev", "", "upper", r->id,
                "upper_entries", (json_int_t)r->entries, "upper_bytes", (json_int_t)r->bytes);
  if (!row || json_array_append_new(rows, row) < 0) return -ENOMEM;
  return 0;
}

int cli_upper_rows(cairn_store *st, json_t *rows) {
  return cairn_uppers_foreach(st, upper_row, rows);
}
