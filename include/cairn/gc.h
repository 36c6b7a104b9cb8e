/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cairn/gc.h — libcairn's public face: removal, gc, fsck.
 * Included by cairn.h, whose comment gives the conventions every function
 * here keeps (errors, ids, handles).
 */
#ifndef CAIRN_GC_H
#define CAIRN_GC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cairn/store.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- removal and maintenance ------------------------------------------ */

/* Removes a name, or an image by id (ref as the user typed it).
 * Returns 0; -ENOENT: no such name or image; -EINVAL: an ambiguous prefix; -EBUSY: the image
 * is pinned or mounted, or a --rw mount's upper layer is left on it (the WHY names them);
 * -EAGAIN: the name kept moving to another image meanwhile (try again). */
int cairn_rm(cairn_store *st, const char *ref);

/* Report of gc / fsck / rm: lines for a person, counts for tests. */
typedef struct cairn_report {
  char **lines;
  size_t n_lines;
  uint64_t layers, blobs, pins, bytes, problems;
} cairn_report;
void cairn_report_free(cairn_report *r);

/* cairn_rm, saying in rep what changed once done (also what it did before
 * a failure): "Untagged: NAME" for each name removed, "Deleted: ID" (full
 * id) for the image, then one line per layer it freed (as gc's). An image
 * with a --rw mount's upper layer left on it (kept or crashed) is refused,
 * unless flags has CAIRN_RM_FORCE: the upper is dropped first
 * ("Dropped: upper ID of DIR (N entries, SIZE)").
 * Returns as cairn_rm. */
#define CAIRN_RM_FORCE 1u
int cairn_rm_report(cairn_store *st, const char *ref, unsigned flags, cairn_report *rep);

/* Removes unreferenced, unpinned layers, blobs, pin files and stale
 * annotations/mount records; dry_run only reports.
 * Returns 0. */
int cairn_gc(cairn_store *st, bool dry_run, cairn_report *r);

/* Verifies blobs and metadata, and partial layers (their rows, and their
 * pending files against their kept TOCs). Incomplete work (orphan blobs of
 * a crashed import, stale records) is discarded first. Problems are lines
 * of r ("problem: ...") counted in r->problems; repair rebuilds a
 * corrupt blob from a compressed layer a pull kept, else from the registry
 * its layer was pulled from (cairn_fsck_net), and removes what is still
 * broken (layers whose blobs are gone or corrupt, images using them).
 * Returns 0: no problem (or every one repaired); -EBADMSG: problems left. */
int cairn_fsck(cairn_store *st, bool repair, cairn_report *r);

/* cairn_fsck, a repair's fetches of pulled layers from the registries
 * they came from (for a corrupt blob whose layer the store keeps no
 * compressed copy of) made with net's creds (NULL: auth.json's),
 * cert_dir, attempts and backoff; net NULL: a pull's defaults.
 * Returns as cairn_fsck. */
struct cairn_pull_opts;
int cairn_fsck_net(cairn_store *st, bool repair, const struct cairn_pull_opts *net,
                   cairn_report *r);

#ifdef __cplusplus
}
#endif

#endif
