/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libcairn_upper.h — the upper layers of writable mounts (upper.c), the layer above
 * pins: what rm, gc and the sweep of stale mount records ask of them.
 */
#ifndef LIBCAIRN_UPPER_H
#define LIBCAIRN_UPPER_H
#include "libcairn_store.h"

/* gc of the upper layers nobody can reach: a creation cut short, one a
 * command dropped; never one under its name, which holds a user's
 * changes. Returns how many it removed. */
int cn_uppers_gc(cairn_store *st, bool dry_run);
/* 1 if an upper made for the mountpoint dir is there, else 0: asked of a
 * stale record of dir, it is left (kept, or by a crash), or still held
 * by the record's dying server, whose lock outlives its supervisor for a
 * moment. */
int cn_upper_left_of_dir(cairn_store *st, const char *dir);
/* The uppers of image_id that no live mount serves (kept or left by a
 * crash), how many: with drop NULL, described in *desc ("upper ID of DIR
 * (kept, N entries, SIZE); ..."); else dropped, each said in drop
 * ("Dropped: upper ID of DIR (N entries, SIZE)"). */
int cn_uppers_of_image(cairn_store *st, const char *image_id, cairn_report *drop, char **desc);

#endif
