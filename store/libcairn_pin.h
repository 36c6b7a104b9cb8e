/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libcairn_pin.h — pins and the mount records their annotations point to, the layer
 * above blobs: taking and deleting pins (pin.c), who holds them, from
 * /proc/locks (pin_locks.c), listing them (pin_list.c), mount records
 * (mount.c). Each calls only the ones before it.
 */
#ifndef LIBCAIRN_PIN_H
#define LIBCAIRN_PIN_H

#include "libcairn_store.h"

#include <sys/stat.h>

/* Pins (pin.c). The pin file of a target; the name of its kind's folder
 * under STORE/pins/ ("image", "layer"). */
const char *cn_pin_kind_dir(enum cairn_pin_kind kind);
int cn_pin_path(cairn_store *st, enum cairn_pin_kind kind, const char *id, char *buf, size_t len);
/* Takes a shared pin into ps without its annotation (cn_pin_annotate):
 * 1 if taken, 0 if ps held it already, or a negative errno. */
int cn_pin_lock(cairn_store *st, cairn_pinset *ps, enum cairn_pin_kind kind, const char *id);
/* Writes the annotations of ps's pins that have none yet, in one
 * transaction (unless the caller has one open). */
int cn_pin_annotate(cairn_store *st, cairn_pinset *ps);
/* Exclusive non-blocking lock on a target's pin file for deletion: returns
 * an fd (to pass to cn_pin_delete_unlock) or -EBUSY. */
int cn_pin_lock_exclusive(cairn_store *st, enum cairn_pin_kind kind, const char *id);
/* Unlinks the pin file (the target is gone) and closes the lock. */
void cn_pin_delete_unlock(cairn_store *st, enum cairn_pin_kind kind, const char *id, int fd);
void cn_pin_unlock(int fd);
/* The flock(2) locks held (not waited for) on any file, from /proc/locks,
 * sorted by inode then pid; free v. A failure is recorded in st. */
struct kernel_lock {
  unsigned maj, min;
  unsigned long ino;
  pid_t pid;
};
struct kernel_locks {
  struct kernel_lock *v;
  size_t n;
};
int cn_kernel_locks_read(cairn_store *st, struct kernel_locks *out);
/* A listing's read of them: the one cairn_pins_prefetch started, if one
 * runs (joined here; it may have begun before the listing's other reads),
 * else one now. */
int cn_kernel_locks_first(cairn_store *st, struct kernel_locks *out);
/* Ends the prefetch, if one runs, unused (a listing that failed). */
void cn_pins_prefetch_drop(cairn_store *st);
/* True if any process holds a lock (in kl) on the target's pin file. */
bool cn_pin_held_in(cairn_store *st, const struct kernel_locks *kl, enum cairn_pin_kind kind,
                    const char *id);
/* The pieces of that, for the listing (pin_list.c). One held flock(2) lock
 * from a line of /proc/locks or a "lock:" line of /proc/PID/fdinfo/FD;
 * false for a waiter or a lock of another kind. */
bool cn_lock_line_parse(const char *line, struct kernel_lock *out);
/* Appends l to kl (*cap: its room); -ENOMEM. Sorts kl; a lock seen twice
 * is kept once. */
int cn_locks_add(struct kernel_locks *kl, size_t *cap, const struct kernel_lock *l);
void cn_locks_sort(struct kernel_locks *kl);
/* The locks on the inode s: a run of the sorted kl (*n of them). */
const struct kernel_lock *cn_locks_on(const struct kernel_locks *kl, const struct stat *s,
                                      size_t *n);
/* Whether one of the n locks l is pid's; whether pid (<= 0: anyone) holds
 * a lock on the inode s. */
bool cn_locks_have_pid(const struct kernel_lock *l, size_t n, pid_t pid);
bool cn_inode_locked_by(const struct kernel_locks *kl, const struct stat *s, pid_t pid);
/* Stats the target's pin file; false if it has none. */
bool cn_pin_stat(cairn_store *st, enum cairn_pin_kind kind, const char *id, struct stat *s);

/* Mounts (mount.c): number of live or detached mount records of the
 * image; *desc gets "mount DIR (cairnfs pid N[, detached])" entries joined
 * by "; ". */
int cn_mount_live_for_image(cairn_store *st, const char *image_id, char **desc);
/* Waits (bounded) until no mount holds STORE/mounting.lock: its record and
 * annotations, written right after it answered, are in (mount.c). */
void cn_mounts_settle(cairn_store *st);
/* Deletes the stale records of this boot (see mount.c), but those of --rw
 * mounts for whose directory keep_rw (upper.c's cn_upper_left_of_dir)
 * says an upper layer is left. */
int cn_mount_clean_stale(cairn_store *st, int (*keep_rw)(cairn_store *st, const char *dir));
/* The daemons whose mounts are detached (their pins' purposes say
 * " (detached)"), unsorted; free *pids. */
int cn_mount_detached_pids(cairn_store *st, pid_t **pids, size_t *n);

/* containerd's snapshots as holders (pin_list.c): every snapshot holds the
 * layers of its chain, recorded in the table snapshot_layers (its own
 * rows for a committed snapshot, its parent's for an active one or a
 * view: store/snapshot.c), a record gc and rm honour while no process
 * runs. cn_snapshot_holders: the snapshots holding layer id (kind
 * CAIRN_PIN_LAYER) or one of image id's layers (CAIRN_PIN_IMAGE), as
 * "containerd snapshot KEY, ..." (containerd's key, without the
 * "NAMESPACE/N/" its proxy adds; the first few, then how many more); NULL
 * if none (or on an error, recorded in st). */
char *cn_snapshot_holders(cairn_store *st, enum cairn_pin_kind kind, const char *id);
/* Calls fn for every layer a snapshot holds, once per snapshot (layer id,
 * or an image id: its layers; NULL: all), as a pin row: kind
 * CAIRN_PIN_LAYER, pid 0, command "containerd", purpose "containerd
 * snapshot KEY", since its creation. */
int cn_snapshot_pin_rows(cairn_store *st, const char *filter_id, cairn_pin_fn fn, void *arg);

#endif
