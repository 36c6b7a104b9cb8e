/*
 * upper.h — what cairn's mount commands (cmd-mount.c) ask of the upper
 * layers of writable mounts (tools/upper.c): the upper a mountpoint has,
 * what umount says of it, the rows `cairn mounts` adds for uppers that no
 * live mount serves.
 */
#ifndef CAIRN_TOOLS_UPPER_H
#define CAIRN_TOOLS_UPPER_H

#include "cairn.h"

#include <jansson.h>

struct cli_upper {
  cairn_id id, image;
  uint64_t entries, bytes;
  bool found;
};

/* The upper made for dir (resolved) that is live (a daemon holds it), or
 * with live false the newest one that is not (kept, or left by a crash):
 * u->found says if there is one. */
int cli_upper_of_dir(cairn_store *st, const char *dir, bool live, struct cli_upper *u);

/* After cairn umount of a --rw mount: "Dropped: ..." or "Kept: ..." on
 * stdout, with how many entries and bytes. */
void cli_upper_say(const struct cli_upper *u, bool kept, const char *dir);

/* Appends to rows (cairn mounts) one row per upper no live mount serves:
 * state "kept" or "stale", rw true, pid 0, with its id and size. */
int cli_upper_rows(cairn_store *st, json_t *rows);

#endif
