/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cairn/mount.h — libcairn's public face: mount records and mountpoints.
 * Included by cairn.h, whose comment gives the conventions every function
 * here keeps (errors, ids, handles).
 */
#ifndef CAIRN_MOUNT_H
#define CAIRN_MOUNT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "cairn/store.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- mounts ------------------------------------------------------------- */

/* Resolves path (relative to the working directory) to its real absolute
 * path in out (PATH_MAX bytes are always enough) the way a root command
 * must resolve a path a user may control: walked one name at a time from
 * / with O_PATH|O_NOFOLLOW, a symlink followed only if every directory on
 * the way to it is root's or the caller's and no one else may add a name
 * to it (in a sticky one such as /tmp, only a symlink of the caller's or
 * root's); any other symlink is refused (cairn_path_why says so).
 * The last name is never opened (a dead daemon's mount answers stat with
 * ENOTCONN); it may not exist. If parent_fd, *parent_fd is an O_PATH fd of
 * the directory the last name of out is in, to act through.
 * Returns 0; -EPERM: a symlink it may not follow; -ENOENT: an empty path or a directory on the
 * way is missing; -ELOOP: too many symlinks; -ENAMETOOLONG: it does not fit. */
int cairn_path_resolve(const char *path, char *out, size_t len, int *parent_fd);
/* Why cairn_path_resolve (or what uses it) failed with r.
 * Returns a static string: -EPERM's sentence, else strerror(-r). */
const char *cairn_path_why(int r);
/* cairn_path_resolve for a mountpoint, for every front end alike (cairnfs
 * records it, cairn mount / umount look it up).
 * Returns as cairn_path_resolve. */
int cairn_mountpoint_resolve(const char *dir, char *out, size_t len);

/* Records that pid serves image at dir (resolved), a mount of device dev
 * ("maj:min", as in mountinfo), replacing a record of dir and pid.
 * Returns 0. */
int cairn_mount_record(cairn_store *st, const char *dir, const char *image_id, pid_t pid,
                       const char *dev, bool rw);
/* cairn_mount_record with the directory the mount was made on, as stat
 * showed it before the mount covered it (its device, inode and owner are
 * recorded: mount --restore mounts again only on that directory); under
 * NULL, as cairn_mount_record does, keeps what pid's record of dir had.
 * Returns 0. */
int cairn_mount_record_at(cairn_store *st, const char *dir, const char *image_id, pid_t pid,
                          const char *dev, bool rw, const struct stat *under);
/* A mount that records itself after it answered (cairnfs's fast way)
 * holds this (STORE/mounting.lock, shared) from before it pins until it
 * has recorded and annotated: readers of records and pins wait for it.
 * Returns the fd to pass to cairn_mount_pending_end. */
int cairn_mount_pending_begin(cairn_store *st);
void cairn_mount_pending_end(int fd);
/* Forgets pid's record of dir (another daemon's record of dir stays),
 * durably once it returns.
 * Returns 0, also when there was no such record. */
int cairn_mount_forget(cairn_store *st, const char *dir, pid_t pid);
/* A mount record. Its state is live (served here), detached (the daemon
 * serves it only in other mount namespaces, e.g. a container's, after a
 * host-side unmount), restarting (the daemon, cairnfs's supervisor, runs
 * and holds the session and the pins, but no server of it runs: requests
 * wait for the next one) or stale (the daemon is gone). Strings are valid
 * only during the callback. */
enum cairn_mount_state {
  CAIRN_MOUNT_LIVE = 0,
  CAIRN_MOUNT_DETACHED = 1,
  CAIRN_MOUNT_STALE = 2,
  CAIRN_MOUNT_RESTARTING = 3,
};
typedef struct cairn_mount_rec {
  const char *dir;
  const char *image;
  pid_t pid; /* the daemon (cairnfs's supervisor) */
  enum cairn_mount_state state;
  bool rw;
  const char *dev; /* "maj:min"; "" in a record of an older cairn */
  /* The directory mounted on, before the mount covered it (its device,
   * inode and owner); dir_known false in a record of an older cairn. */
  bool dir_known;
  dev_t dir_dev;
  ino_t dir_ino;
  uid_t dir_uid;
} cairn_mount_rec;
typedef int (*cairn_mount_fn)(const cairn_mount_rec *m, void *arg);
/* Calls fn for every mount record, by dir.
 * Returns 0, or fn's non-zero return (which stops the walk). */
int cairn_mounts_foreach(cairn_store *st, cairn_mount_fn fn, void *arg);
/* The FUSE protocol version the kernel spoke to the mount daemon pid (a
 * cairnfs supervisor): read from the FUSE_INIT request it keeps (its
 * "cairnfs-init" memfd, through /proc/PID/fd: the same user, or root), in
 * *major and *minor.
 * Returns 0; -ENOENT: pid keeps none (or is gone); -EACCES: it may not be read; -EPROTO: what
 * it keeps is no FUSE_INIT. */
int cairn_mount_kernel_protocol(pid_t pid, unsigned *major, unsigned *minor);

/* What dir (absolute) is as a mount point now (store/mount.c). LIVE asks
 * the file system (statfs), so it waits for a live daemon's answer. */
enum cairn_mountpoint_state {
  CAIRN_MP_NONE = 0,  /* not a mount point */
  CAIRN_MP_LIVE = 1,  /* a cairnfs mount (or cairnfs --als) that answers */
  CAIRN_MP_STALE = 2, /* a cairnfs mount whose daemon is gone (ENOTCONN) */
  CAIRN_MP_OTHER = 3, /* something else is mounted there */
};
/* Returns the enum cairn_mountpoint_state; -errno: mountinfo cannot be read, or statfs of a
 * cairnfs mount fails otherwise than for a gone daemon. */
int cairn_mountpoint_state(const char *dir);

/* Unmounts the topmost mount at dir; lazy detaches it even while in use
 * (MNT_DETACH; a dead daemon's mount needs it). Not root: fusermount3 does
 * it for the user who mounted it.
 * Returns 0; -EPERM: not allowed (fusermount3 failed too), or dir resolves to another path
 * now; -EINVAL: dir is not a mount point (root; a user gets -EPERM); -EBUSY: it is in use (not
 * lazy); else as cairn_path_resolve. */
int cairn_mountpoint_unmount(const char *dir, bool lazy);

/* The device ("maj:min") of the cairnfs mount on top of dir in our mount
 * namespace, without asking the file system, into dev (len bytes).
 * Returns 0; -ENOENT: no cairnfs mount is on top of dir. */
int cairn_mountpoint_dev(const char *dir, char *dev, size_t len);

/* The pid of the supervisor (the daemon a record names) of the live
 * read-only cairnfs mount at dir, as its server says: the xattr
 * CAIRN_XATTR_SUPERVISOR of its root (trusted.*: root only). -ENODATA
 * from a cairnfs before it, -EPERM for other users, else -errno. */
#define CAIRN_XATTR_SUPERVISOR "trusted.cairn.supervisor"
pid_t cairn_mount_supervisor(const char *dir);
/* Whether the process pid (a mount's daemon) still holds a flock(2) lock:
 * its pins, its upper layer's. It lets go of them as soon as its session
 * is over, before any bookkeeping.
 * Returns true if it holds one (or /proc/locks cannot be read); false once it is gone. */
bool cairn_mount_daemon_holds(pid_t pid);
/* Ends the FUSE connection of the mount of device dev ("maj:min") for
 * every mount namespace (fusectl's abort, mounted in a private namespace
 * of a child if it is not mounted).
 * Returns 0; -ENOENT: it is over already; -EPERM: not allowed; -EINVAL: dev is no "maj:min";
 * -EIO: the child failed otherwise. */
int cairn_mount_abort(const char *dev);

/* The processes whose mount namespaces hold the cairnfs mount of device
 * dev, one per namespace, as "pid 1234 (crun), pid 1240 (sh)" in *desc
 * (caller frees).
 * Returns how many (0: none). */
int cairn_mount_holders(const char *dev, char **desc);
/* The processes of this namespace that use the mount at dir (an absolute
 * real path): a working directory, root or open file at or below it, as
 * "pid 1234 (sh), pid 1240 (less)" in *desc (at most 8 named; caller
 * frees). Read from /proc's links, never through the mount.
 * Returns how many (0: none). */
int cairn_mount_users(const char *dir, char **desc);

#ifdef __cplusplus
}
#endif

#endif
