/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nodetab.c — the identity of a writable mount's upper objects, kept
 * across server restarts: which upper file, directory or node each FUSE
 * nodeid the kernel may hold names, so that a restarted server (conn.c)
 * resolves every nodeid and file handle the dead one handed out.
 *
 * The table is an append-only log in a memfd that the supervisor keeps
 * for every server of the mount (as passthrough.c's table of open inodes):
 *
 *   header: magic, the number of complete records, the server epoch,
 *           whether cairn commit moved the mount onto its new image
 *           (rw_rebase.c's rw_rebase()) and then the upper it moved to
 *           (its id, 32 bytes), and base: the records before it are of
 *           before the last move, and mean nothing now
 *   record: nodeid, tree inode (0: none), flags (indexed; lower only: no
 *           handle, the nodeid is the tree inode's; stale: it names
 *           nothing), and the upper object's file handle
 *           (name_to_handle_at, opened again with open_by_handle_at on the
 *           upper's file system)
 *
 * What needs no record: a lower-only inode (its nodeid is its tree inode
 * and the tree says where it is, fs/rw_restart.c), and the root. After a
 * move a nodeid may name another tree inode than its number (the kernel
 * held it before the move): a lower-only record says which (a move made
 * by a restarted server records every old tree inode number whose path
 * the new tree numbers differently: rw_rebase.c's rebase_unknown).
 *
 * A move (cairnfs_nodetab_stage, cairnfs_nodetab_move) writes the records
 * of every nodeid the kernel may hold after the counted ones, then the
 * header, in one pwrite, with base at the old count and the new upper: a
 * server killed before that write leaves the table of the old view, after
 * it the table of the new one. A record is
 * appended when an inode is first bound to an upper object whose handle
 * differs from the one recorded for its nodeid (a copy-up, a create, a
 * lookup of an entry made by an earlier server), and a tombstone when
 * the inode is dropped (the kernel forgot it); the last record of a
 * nodeid wins. A file handle names an object, not a path, so renames need
 * no record, and an object that is gone (removed, and no longer open in
 * any process) no longer opens: its nodeid then answers ESTALE.
 *
 * Invariants:
 * - One server at a time writes the log (the supervisor starts the next
 *   only once the last has been reaped), under rw.h's namespace mutex (mu).
 * - A record is written before the count that makes it visible, each with
 *   one pwrite: a server killed at any instant leaves a consistent log
 *   (at worst a record not counted, for an inode whose request was not
 *   answered: the kernel resends it and the replay records it).
 * - The log grows by 64 bytes per upper object bound or dropped, and is
 *   compacted once it holds more than twice the records of the nodeids
 *   bound (and 1024 more): the bound ones' records are written after the
 *   counted ones, then the header, in one pwrite, with base at the old
 *   count (as a move does; a server killed before that write leaves the
 *   log as it was), and the pages of the records before base are given
 *   back to the kernel (FALLOC_FL_PUNCH_HOLE: the memfd's size stays, its
 *   memory goes). A compaction keeps the record of every nodeid bound, so
 *   a later server restores what the kernel may hold as before, and no
 *   nodeid is handed out that the table binds (key_new asks it). The
 *   memory is then O(nodeids bound): 200,000 files created and unlinked
 *   cost 64 KiB at most, not 25 MB.
 * - Each server takes the next epoch (the header's, incremented at its
 *   start); rw_restart.c puts it into every file handle (fh) it hands out, to
 *   tell its own handles from a dead server's.
 */
#include "nodetab.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <linux/falloc.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAGIC 0x3162746e6e726163ULL /* "cairnnt1" */
#define HANDLE_MAX 40
#define RECORD_SIZE 64
#define HEADER_SIZE 64
#define F_INDEXED 1u
#define F_GONE 2u  /* a tombstone: the nodeid is no longer the kernel's */
#define F_LOWER 4u /* lower only: the tree inode lower of the image served, no handle */
#define F_STALE 8u /* names nothing any more (a move dropped what it was) */

struct header {
  uint64_t magic;
  uint64_t count;
  uint32_t epoch;
  uint32_t final;             /* moved by cairnfs_nodetab_move */
  unsigned char moved_to[32]; /* the upper it serves then (binary id) */
  uint64_t base;              /* the records before it are of before the move */
};
_Static_assert(sizeof(struct header) <= 64, "header size");
_Static_assert(offsetof(struct header, base) == 56, "header layout");

struct record {
  uint64_t nodeid;
  uint32_t lower;
  uint32_t flags;
  uint32_t handle_bytes;
  int32_t handle_type;
  unsigned char handle[HANDLE_MAX];
};
_Static_assert(sizeof(struct record) == RECORD_SIZE, "record size");

/* A file handle with room for HANDLE_MAX bytes of it. */
union handle_buf {
  struct file_handle fh;
  unsigned char bytes[sizeof(struct file_handle) + HANDLE_MAX];
};

struct entry {
  struct record rec;
  struct entry *next;
};

#define NBUCKETS 4096
#define COMPACT_SLACK 1024 /* records the log may hold beyond twice those needed */

struct cairnfs_nodetab {
  int fd;       /* the memfd (dup'ed: ours to close) */
  int mount_fd; /* any fd on the upper's file system */
  uint64_t count;
  uint64_t base;   /* the records before it mean nothing (the header's) */
  uint64_t live;   /* nodeids bound (entries) */
  uint64_t staged; /* records of a move written after count, not yet counted */
  uint32_t epoch;
  struct entry *buckets[NBUCKETS];
};

static struct entry **slot_of(struct cairnfs_nodetab *t, uint64_t nodeid) {
  struct entry **pp = &t->buckets[(nodeid * 0x9e3779b97f4a7c15ULL) >> 52];
  while (*pp && (*pp)->rec.nodeid != nodeid) pp = &(*pp)->next;
  return pp;
}

static int remember(struct cairnfs_nodetab *t, const struct record *r) {
  struct entry **pp = slot_of(t, r->nodeid);
  if (r->flags & F_GONE) {
    struct entry *e = *pp;
    if (e) {
      *pp = e->next;
      free(e);
      t->live--;
    }
    return 0;
  }
  if (!*pp) {
    if (!(*pp = calloc(1, sizeof(**pp)))) return -ENOMEM;
    t->live++;
  }
  (*pp)->rec = *r;
  return 0;
}

int cairnfs_nodetab_open(int fd, int mount_fd, struct cairnfs_nodetab **out) {
  struct cairnfs_nodetab *t = calloc(1, sizeof(*t));
  if (!t) return -ENOMEM;
  t->mount_fd = mount_fd;
  t->fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
  int r = t->fd < 0 ? -errno : 0;
  struct header h = {0};
  struct stat sb;
  if (r == 0 && fstat(t->fd, &sb) < 0) r = -errno;
  if (r == 0 && sb.st_size >= HEADER_SIZE && pread(t->fd, &h, sizeof(h), 0) != sizeof(h)) r = -EIO;
  if (r == 0 && h.magic != MAGIC) h = (struct header){.magic = MAGIC}; /* a fresh table */
  if (r == 0 && h.count && (uint64_t)sb.st_size < HEADER_SIZE + h.count * RECORD_SIZE) r = -EPROTO;
  if (r == 0 && h.base > h.count) r = -EPROTO;
  for (uint64_t k = h.base; r == 0 && k < h.count; k++) {
    struct record rec;
    if (pread(t->fd, &rec, sizeof(rec), (off_t)(HEADER_SIZE + k * RECORD_SIZE)) != sizeof(rec))
      r = -EIO;
    else
      r = remember(t, &rec);
  }
  if (r == 0) {
    t->count = h.count;
    t->base = h.base;
    h.epoch++;
    t->epoch = h.epoch;
    if (pwrite(t->fd, &h, sizeof(h), 0) != sizeof(h)) r = errno ? -errno : -EIO;
  }
  if (r < 0) {
    cairnfs_nodetab_free(t);
    return r;
  }
  *out = t;
  return 0;
}

void cairnfs_nodetab_free(struct cairnfs_nodetab *t) {
  if (!t) return;
  for (size_t b = 0; b < NBUCKETS; b++)
    for (struct entry *e = t->buckets[b], *next; e; e = next) {
      next = e->next;
      free(e);
    }
  if (t->fd >= 0) close(t->fd);
  free(t);
}

uint32_t cairnfs_nodetab_epoch(const struct cairnfs_nodetab *t) { return t ? t->epoch : 0; }

static int hex_digit(char c) {
  return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* A record of nodeid: fd's object (its handle), else lower only (lower),
 * else nothing (stale). */
static void record_make(struct record *rec, uint64_t nodeid, uint32_t lower, bool indexed, int fd) {
  *rec = (struct record){.nodeid = nodeid, .lower = lower};
  if (fd >= 0) {
    union handle_buf h;
    h.fh.handle_bytes = HANDLE_MAX;
    int mount_id;
    if (name_to_handle_at(fd, "", &h.fh, &mount_id, AT_EMPTY_PATH) == 0) {
      rec->flags = indexed ? F_INDEXED : 0;
      rec->handle_bytes = h.fh.handle_bytes;
      rec->handle_type = h.fh.handle_type;
      memcpy(rec->handle, h.fh.f_handle, h.fh.handle_bytes);
      return;
    }
  }
  rec->flags = fd < 0 && lower ? F_LOWER : F_STALE;
}

void cairnfs_nodetab_stage(struct cairnfs_nodetab *t, uint64_t nodeid, uint32_t lower, bool indexed,
                           int fd) {
  if (!t) return;
  struct record rec;
  record_make(&rec, nodeid, lower, indexed, fd);
  off_t at = (off_t)(HEADER_SIZE + (t->count + t->staged) * RECORD_SIZE);
  if (pwrite(t->fd, &rec, sizeof(rec), at) == sizeof(rec)) t->staged++;
}

int cairnfs_nodetab_move(struct cairnfs_nodetab *t, const char *upper) {
  if (!t) return 0;
  struct header h;
  if (pread(t->fd, &h, sizeof(h), 0) != sizeof(h)) return errno ? -errno : -EIO;
  memset(h.moved_to, 0, sizeof(h.moved_to));
  for (size_t k = 0; upper && strlen(upper) == 64 && k < 32; k++)
    h.moved_to[k] = (unsigned char)(hex_digit(upper[2 * k]) << 4 | hex_digit(upper[2 * k + 1]));
  h.base = t->count;
  h.count = t->count + t->staged;
  h.final = 1;
  /* The one write that moves the mount: a server killed before it is
   * restarted on the old upper, after it on the new one. */
  if (pwrite(t->fd, &h, sizeof(h), 0) != sizeof(h)) return errno ? -errno : -EIO;
  for (size_t b = 0; b < NBUCKETS; b++) {
    for (struct entry *e = t->buckets[b], *next; e; e = next) {
      next = e->next;
      free(e);
    }
    t->buckets[b] = NULL;
  }
  t->live = 0;
  t->base = h.base;
  for (uint64_t k = h.base; k < h.count; k++) {
    struct record rec;
    if (pread(t->fd, &rec, sizeof(rec), (off_t)(HEADER_SIZE + k * RECORD_SIZE)) == sizeof(rec))
      remember(t, &rec);
  }
  t->count = h.count;
  t->staged = 0;
  return 0;
}

bool cairnfs_nodetab_final(int fd, char upper[65]) {
  struct header h = {0};
  bool final = pread(fd, &h, sizeof(h), 0) == sizeof(h) && h.magic == MAGIC && h.final;
  static const char digits[] = "0123456789abcdef";
  for (size_t k = 0; upper && k < 32; k++) {
    upper[2 * k] = digits[h.moved_to[k] >> 4];
    upper[2 * k + 1] = digits[h.moved_to[k] & 15];
  }
  if (upper) upper[final ? 64 : 0] = '\0';
  return final;
}

bool cairnfs_nodetab_names_else(struct cairnfs_nodetab *t, uint64_t nodeid, uint32_t lower) {
  struct entry *e = t ? *slot_of(t, nodeid) : NULL;
  return e && ((e->rec.flags & F_STALE) || ((e->rec.flags & F_LOWER) && e->rec.lower != lower));
}

/* Compacts the log (see Invariants above): the records of the nodeids
 * bound written after the counted ones, then count and base in one
 * write, then the pages before base given back. Not during a move. */
static void compact(struct cairnfs_nodetab *t) {
  if (t->staged) return;
  uint64_t at = t->count;
  for (size_t b = 0; b < NBUCKETS; b++)
    for (struct entry *e = t->buckets[b]; e; e = e->next, at++)
      if (pwrite(t->fd, &e->rec, sizeof(e->rec), (off_t)(HEADER_SIZE + at * RECORD_SIZE)) !=
          sizeof(e->rec))
        return;
  struct {
    uint64_t count;
    uint32_t epoch, final;
    unsigned char moved_to[32];
    uint64_t base;
  } tail;
  _Static_assert(sizeof(tail) == sizeof(struct header) - offsetof(struct header, count),
                 "header tail");
  if (pread(t->fd, &tail, sizeof(tail), offsetof(struct header, count)) != sizeof(tail)) return;
  tail.count = at;
  tail.base = t->count;
  /* The one write that makes the compacted records the log. */
  if (pwrite(t->fd, &tail, sizeof(tail), offsetof(struct header, count)) != sizeof(tail)) return;
  t->base = t->count;
  t->count = at;
  long page = sysconf(_SC_PAGESIZE);
  off_t from = page > 0 ? page : 4096;
  off_t to = (off_t)(HEADER_SIZE + t->base * RECORD_SIZE) / from * from;
  if (to > from) fallocate(t->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, from, to - from);
}

/* Appends rec: written, then counted; the log compacted when it holds
 * more than twice the records it needs. */
static void append(struct cairnfs_nodetab *t, const struct record *rec) {
  off_t at = (off_t)(HEADER_SIZE + t->count * RECORD_SIZE);
  if (pwrite(t->fd, rec, sizeof(*rec), at) != sizeof(*rec)) return;
  uint64_t count = t->count + 1;
  if (pwrite(t->fd, &count, sizeof(count), offsetof(struct header, count)) != sizeof(count)) return;
  t->count = count;
  remember(t, rec);
  if (t->count - t->base > 2 * t->live + COMPACT_SLACK) compact(t);
}

void cairnfs_nodetab_note(struct cairnfs_nodetab *t, uint64_t nodeid, uint32_t lower, bool indexed,
                          int fd) {
  if (!t || fd < 0) return;
  struct record rec;
  record_make(&rec, nodeid, lower, indexed, fd);
  if (rec.flags & F_STALE) return; /* unrecorded */
  struct entry *e = *slot_of(t, nodeid);
  if (e && memcmp(&e->rec, &rec, sizeof(rec)) == 0) return; /* recorded already */
  append(t, &rec);
}

void cairnfs_nodetab_note_lower(struct cairnfs_nodetab *t, uint64_t nodeid, uint32_t lower) {
  if (!t) return;
  struct record rec = {.nodeid = nodeid, .lower = lower, .flags = F_LOWER};
  struct entry *e = *slot_of(t, nodeid);
  if (e && memcmp(&e->rec, &rec, sizeof(rec)) == 0) return;
  append(t, &rec);
}

void cairnfs_nodetab_forget(struct cairnfs_nodetab *t, uint64_t nodeid) {
  if (!t || !*slot_of(t, nodeid)) return;
  struct record rec = {.nodeid = nodeid, .flags = F_GONE};
  append(t, &rec);
}

bool cairnfs_nodetab_has(struct cairnfs_nodetab *t, uint64_t nodeid) {
  return t && *slot_of(t, nodeid);
}

void cairnfs_nodetab_foreach(struct cairnfs_nodetab *t, void (*fn)(uint64_t nodeid, void *arg),
                             void *arg) {
  for (size_t b = 0; t && b < NBUCKETS; b++)
    for (struct entry *e = t->buckets[b], *next; e; e = next) {
      next = e->next; /* fn may forget it */
      fn(e->rec.nodeid, arg);
    }
}

int cairnfs_nodetab_find(struct cairnfs_nodetab *t, uint64_t nodeid, uint32_t *lower,
                         bool *indexed) {
  struct entry *e = t ? *slot_of(t, nodeid) : NULL;
  if (!e) return -ENOENT;
  if (e->rec.flags & F_STALE) return -ENXIO; /* kept: not a handle gone */
  if (e->rec.flags & F_LOWER) {
    *lower = e->rec.lower;
    *indexed = false;
    return -ENODATA;
  }
  union handle_buf h;
  h.fh.handle_bytes = e->rec.handle_bytes;
  h.fh.handle_type = e->rec.handle_type;
  memcpy(h.fh.f_handle, e->rec.handle, e->rec.handle_bytes);
  int fd = open_by_handle_at(t->mount_fd, &h.fh, O_PATH | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return -errno;
  *lower = e->rec.lower;
  *indexed = e->rec.flags & F_INDEXED;
  return fd;
}
