/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libcairn_snapshot_chain.h — the chain mounts' bookkeeping
 * (snapshot_chain.c) that snapshot.c shares with gc's sweep
 * (cn_snapshot_chain_sweep, libcairn_snapshot.h): the chain lock, a chain
 * image's users and mount point, the end of its mount. A file of its own
 * so that gc's link (the slim cairn) does not take snapshot.c's object,
 * whose lazy Prepare refers to pull, the registry and the TOC code.
 */
#ifndef LIBCAIRN_SNAPSHOT_CHAIN_H
#define LIBCAIRN_SNAPSHOT_CHAIN_H
#include "libcairn_snapshot.h"

/* A failed step rc of a snapshot table's statement about what, recorded:
 * -ENOSPC for a full disk, else the database's error. */
int cn_snapshot_fail_step(cairn_store *st, int rc, const char *what);
/* The mount point of the chain image image_id: STORE/snapshot-mounts/ID. */
void cn_snapshot_chain_dir(cairn_store *st, const char *image_id, char *buf, size_t len);
/* The chain mounts' lock, held from a chain image's lookup until its use
 * is recorded (Mounts), and while one no snapshot uses is ended (after a
 * Remove or a Commit, and Cleanup's sweep): so that a mount a snapshot
 * has just found live is not ended under it by another call. Its fd, or
 * a negative errno (recorded). */
int cn_snapshot_chain_lock(cairn_store *st);
/* How many snapshots use the chain image image_id (as snapshot_mounts
 * says), or -1. */
int64_t cn_snapshot_chain_users(cairn_store *st, const char *image_id);
/* After the last snapshot that used it went: its chain ends, unless
 * another has used it since. Best effort: no error is left recorded. */
void cn_snapshot_chain_end(cairn_store *st, const char *image_id);

#endif
