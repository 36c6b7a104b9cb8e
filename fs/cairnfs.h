/*
 * cairnfs.h — what the daemon's main (main.c) shares with its FUSE
 * operations (ops.c): the state one mount serves from.
 */
#ifndef CAIRNFS_H
#define CAIRNFS_H

#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <sys/stat.h>

#include "cairn.h"

struct cairnfs {
  cairn_store *st;          /* only for opening blobs (thread-safe) */
  cairn_tree *tree;         /* read-only once built: no lock needed */
  bool no_open, no_opendir; /* the kernel need not open files / dirs (init) */
  char dev[32];             /* the mount's device, "MAJ:MIN" (set once mounted) */
  bool readahead_raised;    /* by the first read (ops.c) */
  struct cairnfs_rw *rw;    /* a writable mount's upper layer (upper.c), else NULL */
};

extern const struct fuse_lowlevel_ops cairnfs_ops;
/* The operations of a writable (-o writable) mount: fs->rw is set. */
extern const struct fuse_lowlevel_ops cairnfs_rw_ops;

/* ops.c, shared with upper.c: a node's attributes as the kernel sees them,
 * and the reply to a read of a node's blob (fd-backed, spliced). */
void cairnfs_node_stat(const cairn_node *n, uint64_t ino, struct stat *st);
void cairnfs_read_lower(fuse_req_t req, struct cairnfs *fs, const cairn_node *n, size_t size,
                        off_t off);

/* upper.c: gives fs (its store and tree open) an upper layer in the store
 * for image_id mounted at dir: a fresh one, or the kept upper resume (an
 * id, else NULL), held (flocked) until cairnfs_rw_free, which drops it
 * unless it was kept (cairn umount --keep) or resumed and never served.
 * The daemon's umask becomes 0 (modes come from the kernel's requests). */
int cairnfs_rw_setup(struct cairnfs *fs, const char *image_id, const char *dir, const char *resume);
void cairnfs_rw_free(struct cairnfs *fs);

/* The session loop's worker threads: one is started when a request finds
 * none idle, up to this many, and all are kept. (libfuse ends idle threads
 * beyond its max_idle_threads: a burst of small reads then started and
 * ended hundreds of threads, each a clone, a /dev/fuse clone and a pipe.) */
#define CAIRNFS_THREADS 8

#endif
