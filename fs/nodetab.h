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
/* Marks the table final: this server serves what no later one could (it
 * moved the mount onto a committed image, and its fresh upper, id upper:
 * 64 hex digits), so none is to be started. */
void cairnfs_nodetab_set_final(struct cairnfs_nodetab *t, const char *upper);
/* Whether the table in memfd fd was marked final (the supervisor's side),
 * and the upper it names in upper (if not NULL; "" if not final). */
bool cairnfs_nodetab_final(int fd, char upper[65]);
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
 * inode and index flag; -ENOENT if none is recorded, -ESTALE if it is gone. */
int cairnfs_nodetab_find(struct cairnfs_nodetab *t, uint64_t nodeid, uint32_t *lower,
                         bool *indexed);

#endif
