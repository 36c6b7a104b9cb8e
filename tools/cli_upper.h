/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cli_upper.h — what cairn's mount commands (cmd-mount.c) ask of the upper
 * layers of writable mounts (tools/cli_upper.c): the upper a mountpoint has,
 * what umount says of it, the rows `cairn mounts` adds for uppers that no
 * live mount serves.
 */
#ifndef CAIRN_TOOLS_UPPER_H
#define CAIRN_TOOLS_UPPER_H

#include "rows.h"

struct cli_upper {
  cairn_id id, image;
  uint64_t entries, bytes;
  bool found;
};

/* The upper made for dir (resolved) that is live (a daemon holds it): the
 * one the --rw mount at dir says it serves (cairn_upper_of_mount), not
 * another made for dir earlier whose mount was detached here and is
 * served on in another mount namespace; if dir's mount says none (an
 * older cairnfs, no mount), the newest live one. With live false the
 * newest one that is not live (kept, or left by a crash). u->found says
 * if there is one. */
int cli_upper_of_dir(cairn_store *st, const char *dir, bool live, struct cli_upper *u);

/* After cairn umount of a --rw mount: "Dropped: ..." or "Kept: ..." on
 * stdout, with how many entries and bytes. */
void cli_upper_say(const struct cli_upper *u, bool kept, const char *dir);

/* What umount does with the uppers left for its directory (no live mount
 * serves them): keep them (those a crash left are marked kept; one with
 * no entry is dropped silently), or drop them all (--discard). */
enum cli_left_action { CLI_LEFT_KEEP, CLI_LEFT_DISCARD };
/* Does act to the uppers left for dir (resolved), saying each as
 * cli_upper_say does unless quiet; returns how many it dropped or marked
 * kept, or -errno; *untouched counts the already kept ones it left. */
int cli_uppers_left(cairn_store *st, const char *dir, enum cli_left_action act, bool quiet,
                    int *untouched);

/* Appends to rows (cairn mounts) one row per upper no live mount serves:
 * state "kept" or "stale", rw true, pid 0, with its id and size. */
int cli_upper_rows(cairn_store *st, struct cli_rows *rows);

#endif
