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
};

extern const struct fuse_lowlevel_ops cairnfs_ops;

#endif
