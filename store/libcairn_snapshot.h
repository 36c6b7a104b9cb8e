/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libcairn_snapshot.h — containerd's snapshots (snapshot.c), the layer
 * above remote: what gc asks of their chain images.
 */
#ifndef LIBCAIRN_SNAPSHOT_H
#define LIBCAIRN_SNAPSHOT_H
#include "libcairn_store.h"

/* How cn_snapshot_chain_sweep treats what it finds (flags, or'd). */
enum {
  /* The chain lock is not waited for: held (a Mounts call may wait for
   * the store lock its caller holds), or never made (no snapshotter ever
   * made a chain image), the sweep is left to a later one; nor is a
   * pinned image's settling waited for. */
  CN_CHAIN_SWEEP_NO_WAIT = 1,
  /* No chain mount is ended: an image a live mount serves is left. */
  CN_CHAIN_SWEEP_NO_UNMOUNT = 2,
};
/* Under the chain mounts' lock: ends the chain images no snapshot uses
 * (nor a name names), their mounts and rows, but a pinned one (its fill
 * runs), which a later sweep removes; without CN_CHAIN_SWEEP_NO_UNMOUNT,
 * also the mount points of STORE/snapshot-mounts no snapshot uses. A
 * crash between a Remove's or a Commit's transaction and its unmount, or
 * between a chain's mount and the row of its use, leaves one. 0 or a
 * negative errno (recorded). */
int cn_snapshot_chain_sweep(cairn_store *st, unsigned flags);

#endif
