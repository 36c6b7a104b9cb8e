/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cairn/upper.h — libcairn's public face: writable mounts' upper layers, commit.
 * Included by cairn.h, whose comment gives the conventions every function
 * here keeps (errors, ids, handles).
 */
#ifndef CAIRN_UPPER_H
#define CAIRN_UPPER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cairn/store.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- writable mounts: upper layers (store/upper.c) ------------------------
 * A --rw mount writes its changes to a private directory of the store,
 * STORE/uppers/ID/ (root/ the changes, work/ the daemon's staging), made
 * 0700. The image's layers and blobs are never changed. */

/* Creates a fresh upper for image_id mounted at mountpoint: its id in
 * id_out, its directory in path, and in *lock_fd an fd on that directory
 * holding an exclusive flock, which the serving daemon keeps open for as
 * long as it runs (no live mount owns an upper whose lock is free).
 * Returns 0; -ENAMETOOLONG: the directory does not fit len. */
int cairn_upper_create(cairn_store *st, const char *image_id, const char *mountpoint,
                       cairn_id id_out, char *path, size_t len, int *lock_fd);
/* Draws a fresh upper's id into id_out.
 * Returns 0; -errno: getrandom(2)'s. */
int cairn_upper_new_id(cairn_id id_out);
/* The same as cairn_upper_create for cairn commit's move of a live mount
 * off the upper from onto image_id, under the id the caller drew
 * (cairn_upper_new_id), so that it can say which upper it makes before
 * the upper is listed (a server killed in between leaves none nobody
 * knows of). The fresh upper names from (its info's "from" line), so
 * that a kill of the mount's supervisor during the move leaves one of the
 * two (cairn_uppers_foreach settles them, see cairn_upper_mark_moved).
 * Returns 0; -EINVAL: id is not an upper id; -ENAMETOOLONG: the directory does not fit len. */
int cairn_upper_create_moved(cairn_store *st, const char *image_id, const char *mountpoint,
                             const char *from, const char *id, char *path, size_t len,
                             int *lock_fd);
/* The move's commit point for a crash of its supervisor (lock_fd: the
 * fresh upper's, from cairn_upper_create_moved): made once the fresh upper
 * and the new image hold the whole view, with no write running. Left by a
 * crash beside the upper it moved from, both unowned: marked, the fresh
 * upper is the mount's and the old one, whose changes the new image
 * holds, is dropped; unmarked, the fresh upper holds only copies of the
 * old one's files and is dropped.
 * Returns 0; -errno: the mark cannot be made. */
int cairn_upper_mark_moved(int lock_fd);
/* Opens the upper id again (cairn mount --rw --resume): its image in
 * image_out, its directory in path, its lock in *lock_fd. A keep mark is
 * removed (the upper is in use again).
 * Returns 0; -ENOENT: no such upper; -EINVAL: id is not an upper id; -EBUSY: a live mount
 * holds it; -EBADMSG: its info file is unreadable. */
int cairn_upper_open(cairn_store *st, const char *id, cairn_id image_out, char *path, size_t len,
                     int *lock_fd);
/* Marks the upper id kept (cairn umount --keep): gc leaves it and its
 * daemon does not drop it when it exits.
 * Returns 0; -ENOENT: no such upper; -EINVAL: id is not an upper id. */
int cairn_upper_keep(cairn_store *st, const char *id);
/* Records (drop) that cairn umount without --keep asked for the upper id
 * to go when its session ends, removing a keep mark (*was_kept says if
 * there was one); !drop undoes that (an unmount that failed), putting
 * back the keep mark if *was_kept.
 * Returns 0; -ENOENT: no such upper; -EINVAL: id is not an upper id. */
int cairn_upper_mark_drop(cairn_store *st, const char *id, bool drop, bool *was_kept);
/* At the end of the session of the upper id (dirfd: its directory):
 * discards it if cairn umount asked (a drop mark, no keep mark), else
 * keeps it (marked kept if it was not: nobody asked for it to go).
 * Returns 1: discarded; 0: kept. */
int cairn_upper_session_end(cairn_store *st, const char *id, int dirfd);
/* Discards the upper id: renamed away at once (its daemon, on a clean
 * exit, still holding its lock), no longer listed nor resumable; its files
 * stay until cairn_upper_drop (cairn umount, once the daemon is gone) or
 * gc removes them.
 * Returns 0, also when there is no such upper. */
int cairn_upper_discard(cairn_store *st, const char *id);
/* Removes the upper id, discarded or not, and its files.
 * Returns 0, also when there is no such upper. */
int cairn_upper_drop(cairn_store *st, const char *id);
/* Removes the upper id if no live mount serves it and it holds no entry
 * (nothing uncommitted: a commit moved its mount onto it, or nothing was
 * changed).
 * Returns 1: removed; 0: kept; -ENOENT: no such upper; -EINVAL: id is not an upper id. */
int cairn_upper_drop_if_empty(cairn_store *st, const char *id);
/* One upper as listings show it. Strings are valid during the callback. */
typedef struct cairn_upper_rec {
  const char *id;
  const char *image; /* image id */
  const char *dir;   /* the mountpoint it was made for */
  int64_t created;   /* seconds since the epoch */
  bool live;         /* a running daemon holds its lock */
  bool kept;         /* kept by cairn umount --keep for a later --resume */
  uint64_t entries;  /* entries below root/ (whiteouts included) */
  uint64_t bytes;    /* their regular files' sizes */
} cairn_upper_rec;
typedef int (*cairn_upper_fn)(const cairn_upper_rec *u, void *arg);
/* Calls fn for every complete upper of the store.
 * Returns 0, or fn's non-zero return (which stops the walk). */
int cairn_uppers_foreach(cairn_store *st, cairn_upper_fn fn, void *arg);
/* The id of the upper the --rw mount at dir (absolute, its root) serves
 * now, asked of its daemon (the trusted.cairn.upper xattr of its root;
 * root only), in id_out. Other uppers made for dir may be live too: a
 * mount of dir that umount detached while another mount namespace (a
 * container) holds it is served on.
 * Returns 0; -ENODATA: dir's mount names none (a read-only mount, an older cairnfs, no
 * cairnfs mount, no answer in 2 s); -errno: getxattr's. */
int cairn_upper_of_mount(const char *dir, cairn_id id_out);
/* lsetxattr(path, name, set) or, set NULL, lgetxattr into buf (len bytes,
 * under 4 KiB), asked by a child holding none of the caller's fds and
 * awaited at most timeout_s seconds: a FUSE request a dead server read is
 * waited for uninterruptibly until a server answers or the session ends.
 * The ask of cairn_upper_of_mount (2 s) and commit's move.
 * Returns the value's length (0 for a set); -ETIMEDOUT: no answer in time (the child waits
 * on; init reaps it); -EIO: the child died unanswered; -errno: the xattr call's. */
int cairn_xattr_bounded(const char *path, const char *name, const char *set, char *buf, size_t len,
                        int timeout_s);
/* cairn commit's freeze of the live --rw mount at dir (absolute, its
 * root) serving upper: its daemon holds every request that changes the
 * view (writes, creates, renames, ...; reads go on) until the move
 * (cairn_mount_move_frozen) or cairn_mount_thaw, or until the process
 * that holds the freeze dies, or for a bound (cairnfs's, 60 s) at most;
 * then writes run and the move is refused. Asked by a child that holds
 * the freeze for as long as the caller lives (it exits when hold_fd, the
 * caller's end of a pipe, closes: a caller killed ends the freeze).
 * Awaited at most timeout_s seconds.
 * Returns 0: frozen (f's hold_fd and pid set); -ENOTSUP: dir's daemon cannot freeze (an older
 * cairnfs); -EBUSY: another freeze holds it; -ETIMEDOUT: no answer in time. */
typedef struct cairn_freeze {
  int hold_fd;
  pid_t pid;
} cairn_freeze;
int cairn_mount_freeze(const char *dir, const char *upper, int timeout_s, cairn_freeze *f);
/* The move of the frozen mount at dir (serving upper) onto image (a fresh,
 * empty upper), then the thaw.
 * Returns 0; -EBUSY: the freeze ended (its bound, a restart of the daemon: the mount stays on
 * its image and upper, which hold every write); -ETIMEDOUT: no answer in time. */
int cairn_mount_move_frozen(const char *dir, const char *upper, const char *image, int timeout_s);
/* Ends a freeze (ask: tells the daemon; else only lets the holder go, the
 * daemon having thawed). */
void cairn_mount_thaw(const char *dir, const char *upper, cairn_freeze *f, bool ask);

/* cairn commit (store/commit.c): the upper upper_id as a new OCI layer
 * (.wh. whiteouts, .wh..wh..opq opaque markers, imported like any layer:
 * deduplicated, its diff_id in layer_out) on top of the upper's image, and
 * a new image (image_out) named name (or none if NULL), whose config is
 * the image's plus the layer and a history entry (comment, if any). The
 * upper and the image are only read.
 * Returns 0; -ENOENT: no such upper, or its image is gone; -EINVAL: a bad name; -EBADMSG: the
 * upper's info or the image's config is unreadable. */
int cairn_commit(cairn_store *st, const char *upper_id, const char *name, const char *comment,
                 cairn_id image_out, cairn_id layer_out);
/* cairn_commit, saying in rep (if not NULL) what it left out: one line
 * per socket ("/PATH: a socket, not committed"). Sparse files whose holes
 * come to more than a layer holds (64 GiB) fail it, naming the file and
 * its owner.
 * Returns as cairn_commit; -EBADMSG also for such a sparse file. */
struct cairn_report;
int cairn_commit_report(cairn_store *st, const char *upper_id, const char *name,
                        const char *comment, cairn_id image_out, cairn_id layer_out,
                        struct cairn_report *rep);

#ifdef __cplusplus
}
#endif

#endif
