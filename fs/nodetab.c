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
 *   header: magic, the number of complete records, the server epoch, and
 *           whether a later server may serve the mount at all (a server
 *           that moved the mount onto a committed image, rw_rebase.c's
 *           rw_rebase(), serves what no later one could: set_final), and
 *           then the upper it moved to (its id, 32 bytes)
 *   record: nodeid, tree inode (0: none), flags (indexed), and the upper
 *           object's file handle (name_to_handle_at, opened again with
 *           open_by_handle_at on the upper's file system)
 *
 * What needs no record: a lower-only inode (its nodeid is its tree inode
 * and the tree says where it is, fs/rw_restart.c), and the root. A record is
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
 * - The log only grows, by 64 bytes per upper object bound or dropped (a
 *   compaction is future work): 100,000 files created and forgotten cost
 *   12.8 MB of memory for the mount's lifetime.
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
#include <sys/stat.h>
#include <unistd.h>

#define MAGIC 0x3162746e6e726163ULL /* "cairnnt1" */
#define HANDLE_MAX 40
#define RECORD_SIZE 64
#define HEADER_SIZE 64
#define F_INDEXED 1u
#define F_GONE 2u /* a tombstone: the nodeid is no longer the kernel's */

struct header {
  uint64_t magic;
  uint64_t count;
  uint32_t epoch;
  uint32_t final;             /* cairnfs_nodetab_set_final: no later server */
  unsigned char moved_to[32]; /* the upper it serves then (binary id) */
};
_Static_assert(sizeof(struct header) <= 64, "header size");

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

struct cairnfs_nodetab {
  int fd;       /* the memfd (dup'ed: ours to close) */
  int mount_fd; /* any fd on the upper's file system */
  uint64_t count;
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
    }
    return 0;
  }
  if (!*pp) {
    if (!(*pp = calloc(1, sizeof(**pp)))) return -ENOMEM;
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
  for (uint64_t k = 0; r == 0 && k < h.count; k++) {
    struct record rec;
    if (pread(t->fd, &rec, sizeof(rec), (off_t)(HEADER_SIZE + k * RECORD_SIZE)) != sizeof(rec))
      r = -EIO;
    else
      r = remember(t, &rec);
  }
  if (r == 0) {
    t->count = h.count;
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

void cairnfs_nodetab_set_final(struct cairnfs_nodetab *t, const char *upper) {
  unsigned char id[32] = {0};
  for (size_t k = 0; upper && strlen(upper) == 64 && k < 32; k++)
    id[k] = (unsigned char)(hex_digit(upper[2 * k]) << 4 | hex_digit(upper[2 * k + 1]));
  uint32_t one = 1;
  /* The id first, then the flag; best effort: the memfd has room for its
   * header. */
  if (!t || pwrite(t->fd, id, sizeof(id), offsetof(struct header, moved_to)) != sizeof(id)) return;
  ssize_t n = pwrite(t->fd, &one, sizeof(one), offsetof(struct header, final));
  (void)n;
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

/* Appends rec: written, then counted. */
static void append(struct cairnfs_nodetab *t, const struct record *rec) {
  off_t at = (off_t)(HEADER_SIZE + t->count * RECORD_SIZE);
  if (pwrite(t->fd, rec, sizeof(*rec), at) != sizeof(*rec)) return;
  uint64_t count = t->count + 1;
  if (pwrite(t->fd, &count, sizeof(count), offsetof(struct header, count)) != sizeof(count)) return;
  t->count = count;
  remember(t, rec);
}

void cairnfs_nodetab_note(struct cairnfs_nodetab *t, uint64_t nodeid, uint32_t lower, bool indexed,
                          int fd) {
  if (!t || fd < 0) return;
  union handle_buf h;
  h.fh.handle_bytes = HANDLE_MAX;
  int mount_id;
  if (name_to_handle_at(fd, "", &h.fh, &mount_id, AT_EMPTY_PATH) < 0) return; /* unrecorded */
  struct record rec = {.nodeid = nodeid,
                       .lower = lower,
                       .flags = indexed ? F_INDEXED : 0,
                       .handle_bytes = h.fh.handle_bytes,
                       .handle_type = h.fh.handle_type};
  memcpy(rec.handle, h.fh.f_handle, h.fh.handle_bytes);
  struct entry *e = *slot_of(t, nodeid);
  if (e && memcmp(&e->rec, &rec, sizeof(rec)) == 0) return; /* recorded already */
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
