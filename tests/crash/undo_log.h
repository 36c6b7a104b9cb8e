/* SPDX-License-Identifier: Apache-2.0 */
/*
 * undo_log.h — the record format shared by the injector (inject.c), which
 * appends to the undo log, and inject-undo (inject-undo.c), which replays
 * it backwards after a simulated power cut. Test-only.
 *
 * The log is a sequence of records, each a fixed header followed by
 * data_len bytes. Files are named by kernel file handles
 * (name_to_handle_at), so that a file written while anonymous (O_TMPFILE)
 * or under another name is still found after it was linked or renamed.
 */
#ifndef CAIRN_UNDO_LOG_H
#define CAIRN_UNDO_LOG_H

#include <stdint.h>

enum undo_kind {
  UNDO_DIR = 1, /* data: the directory the injector watches (for open_by_handle_at) */
  UNDO_WRITE,   /* before a change: size_before, and data = the old bytes at off */
  UNDO_SYNC,    /* fsync/fdatasync of the file succeeded: its earlier records are durable */
  UNDO_SYNCFS,  /* syncfs succeeded: every earlier record is durable */
};

#define UNDO_HANDLE_MAX 128 /* MAX_HANDLE_SZ */

struct undo_rec {
  uint32_t kind;
  int32_t handle_type;
  uint32_t handle_bytes;
  uint32_t pad;
  uint64_t size_before;
  uint64_t off;
  uint64_t data_len;
  unsigned char handle[UNDO_HANDLE_MAX];
};

#endif
