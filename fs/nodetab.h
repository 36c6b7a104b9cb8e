/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nodetab.h — a writable mount's table of upper-object identities, kept
 * across server restarts (nodetab.c says how).
 */
#ifndef CAIRNFS_NODETAB_H
#define CAIRNFS_NODETAB_H

#include <stdbool.h>
#include <stdint.h>

struct cairnfs_nodetab;

/* Reads the table in memfd fd (empty: a fresh one) and takes the next
 * server epoch; mount_fd is any fd on the upper's file system. */
int cairnfs_nodetab_open(int fd, int mount_fd, struct cairnfs_nodetab **out);
void cairnfs_nodetab_free(struct cairnfs_nodetab *t);
/* This server's epoch (1, 2, ...), 0 without a table. */
uint32_t cairnfs_nodetab_epoch(const struct cairnfs_nodetab *t);
/* A move onto a committed image (rw_rebase.c), in two steps: every nodeid
 * the kernel may hold is staged (what it is in the new view: fd's object,
 * else lower only as tree inode lower, else nothing: ESTALE), unseen by a
 * later server until cairnfs_nodetab_move, whose one write makes the
 * staged records the table and names the upper the mount is on now (id
 * upper: 64 hex digits). */
void cairnfs_nodetab_stage(struct cairnfs_nodetab *t, uint64_t nodeid, uint32_t lower, bool indexed,
                           int fd);
int cairnfs_nodetab_move(struct cairnfs_nodetab *t, const char *upper);
/* Whether the table in memfd fd was moved (the supervisor's side), and
 * the upper it names in upper (if not NULL; "" if not moved). */
bool cairnfs_nodetab_final(int fd, char upper[65]);
/* Records that nodeid is lower only, tree inode lower (after a move, a
 * nodeid that is not its tree inode's). */
void cairnfs_nodetab_note_lower(struct cairnfs_nodetab *t, uint64_t nodeid, uint32_t lower);
/* Whether the table says nodeid is something else than tree inode lower
 * (lower only as another, or nothing): it is not to be handed out as it. */
bool cairnfs_nodetab_names_else(struct cairnfs_nodetab *t, uint64_t nodeid, uint32_t lower);
/* Records that nodeid is the upper object fd (any fd on it). */
void cairnfs_nodetab_note(struct cairnfs_nodetab *t, uint64_t nodeid, uint32_t lower, bool indexed,
                          int fd);
/* Records that nodeid is no longer bound (the kernel forgot it). */
void cairnfs_nodetab_forget(struct cairnfs_nodetab *t, uint64_t nodeid);
/* Whether nodeid is bound (recorded and not forgotten). */
bool cairnfs_nodetab_has(struct cairnfs_nodetab *t, uint64_t nodeid);
/* Calls fn for every nodeid bound (recorded and not forgotten). */
void cairnfs_nodetab_foreach(struct cairnfs_nodetab *t, void (*fn)(uint64_t nodeid, void *arg),
                             void *arg);
/* An O_PATH fd on the upper object recorded for nodeid, and its tree
 * inode and index flag; -ENOENT if none is recorded, -ESTALE if it is gone,
 * -ENXIO if it is recorded as nothing, -ENODATA (and lower) if it is
 * lower only. */
int cairnfs_nodetab_find(struct cairnfs_nodetab *t, uint64_t nodeid, uint32_t *lower,
                         bool *indexed);

#endif
