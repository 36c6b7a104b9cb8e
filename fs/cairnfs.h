/*
 * cairnfs.h — what the daemon's main (main.c) shares with its FUSE
 * operations (ops.c): the state one mount serves from.
 */
#ifndef CAIRNFS_H
#define CAIRNFS_H

#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>
#include <pthread.h>

#include "cairn.h"

struct cairnfs {
  cairn_store *st;          /* only for opening blobs (thread-safe) */
  cairn_tree *tree;         /* read-only once built: no lock needed */
  bool no_open, no_opendir; /* the kernel need not open files / dirs (init) */
  char dev[32];             /* the mount's device, "MAJ:MIN" (set once mounted) */
  bool readahead_raised;    /* by the first read (ops.c) */
};

extern const struct fuse_lowlevel_ops cairnfs_ops;

/* The session loop's worker threads: one is started when a request finds
 * none idle, up to this many, and all are kept. (libfuse ends idle threads
 * beyond its max_idle_threads: a burst of small reads then started and
 * ended hundreds of threads, each a clone, a /dev/fuse clone and a pipe.) */
#define CAIRNFS_THREADS 8

#endif
