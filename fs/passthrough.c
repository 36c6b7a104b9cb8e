/* SPDX-License-Identifier: Apache-2.0 */
/*
 * passthrough.c — FUSE passthrough (kernel 6.9+) under libfuse 3.14, which
 * has no API for it: once a file is open, the kernel reads it straight
 * from its blob, with no request to the daemon and no copy through it.
 *
 * Three steps, each in bytes libfuse writes without knowing them:
 *  1. the reply to INIT gets FUSE_PASSTHROUGH and max_stack_depth 1, when
 *     the kernel's INIT request offered it (its flags2);
 *  2. an open registers the inode's blob with the kernel
 *     (FUSE_DEV_IOC_BACKING_OPEN on /dev/fuse), and its reply gets
 *     FOPEN_PASSTHROUGH and the backing id: conn.c's read notes the
 *     request a thread is handling, its writev lets this file patch the
 *     reply to it (a thread answers the request it read: ops.c replies
 *     before returning);
 *  3. the id is closed when the inode's last open is released.
 *
 * Invariants. The kernel binds one backing file to an inode for as long as
 * any passthrough open of it lasts, and fails an open (EIO) that names
 * another id, or that is not passthrough while others are (and the other
 * way round). So each inode has one state while it is open: passthrough
 * with one id, or cached (the registration failed: every open of it is
 * then served the old way until the last is released). The states live in
 * a table shared with later servers (a memfd the supervisor keeps), one
 * 64-bit word per inode changed only by compare-and-swap, so that a server
 * killed at any instant leaves it consistent and a restarted server goes
 * on with the ids the dead one registered. The worst a kill can do is an
 * open counted twice (the kernel resends an open the dead server counted):
 * the id then outlives the last release, a reference to an immutable blob
 * that the kernel drops with the session. A release resent the same way
 * can close an id early; a later open of that inode while it is still open
 * elsewhere then fails with EIO (a kill inside a release, once).
 *
 * max_stack_depth is 1 so that an overlay can still be stacked on a mount
 * (podman --rootfs MNT:O): a store on a stacked file system (overlayfs)
 * cannot register blobs, and its files are served the old way.
 */
#include "cairnfs.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

/* From linux/fuse.h of kernel 6.9+ (Debian 12's headers are 6.1's). */
#define INIT_EXT (1u << 30)         /* fuse_init_in/out.flags: flags2 is used */
#define INIT2_PASSTHROUGH (1u << 5) /* flags2: FUSE_PASSTHROUGH (1ULL << 37) */
#define OPEN_PASSTHROUGH (1u << 7)  /* fuse_open_out.open_flags: FOPEN_PASSTHROUGH */
#define OP_OPEN 14                  /* FUSE_OPEN */
#define IN_HEADER_SIZE 40           /* sizeof(struct fuse_in_header) */
#define OUT_HEADER_SIZE 16          /* sizeof(struct fuse_out_header) */
#define INIT_IN_FLAGS 12            /* fuse_init_in: flags, flags2 */
#define INIT_IN_FLAGS2 16
#define INIT_OUT_FLAGS 12 /* fuse_init_out: flags, flags2, max_stack_depth */
#define INIT_OUT_FLAGS2 32
#define INIT_OUT_STACK_DEPTH 36
#define OPEN_OUT_FLAGS 8 /* fuse_open_out: fh, open_flags, backing_id */
#define OPEN_OUT_BACKING_ID 12
#define OPEN_OUT_SIZE 16
struct backing_map {
  int32_t fd;
  uint32_t flags;
  uint64_t padding;
};
#define DEV_IOC_BACKING_OPEN _IOW(229, 1, struct backing_map)
#define DEV_IOC_BACKING_CLOSE _IOW(229, 2, uint32_t)

/* A table word: the backing id in the high half (CACHED: not passthrough),
 * the number of opens in the low half; 0 is "not open". */
#define CACHED UINT32_MAX
static uint64_t word(uint32_t id, uint32_t opens) { return (uint64_t)id << 32 | opens; }
static uint32_t word_id(uint64_t w) { return (uint32_t)(w >> 32); }
static uint32_t word_opens(uint64_t w) { return (uint32_t)w; }

/* The open this thread is answering (set by its read, used by its reply). */
static __thread struct {
  uint64_t unique; /* of the FUSE_OPEN request read last, or 0 */
  uint32_t id;     /* the backing id its reply names, or 0 */
  uint64_t ino;
} pending;

/* Reads 4 bytes at off of the message held by iov. */
static bool iov_get32(const struct iovec *iov, int count, size_t off, uint32_t *v) {
  for (int i = 0; i < count; off -= iov[i].iov_len, i++)
    if (off + sizeof(*v) <= iov[i].iov_len) {
      memcpy(v, (const char *)iov[i].iov_base + off, sizeof(*v));
      return true;
    } else if (off < iov[i].iov_len) {
      return false; /* split across buffers: libfuse never does */
    }
  return false;
}

static bool iov_put32(struct iovec *iov, int count, size_t off, uint32_t v) {
  for (int i = 0; i < count; off -= iov[i].iov_len, i++)
    if (off + sizeof(v) <= iov[i].iov_len) {
      memcpy((char *)iov[i].iov_base + off, &v, sizeof(v));
      return true;
    } else if (off < iov[i].iov_len) {
      return false;
    }
  return false;
}

static size_t iov_total(const struct iovec *iov, int count) {
  size_t n = 0;
  for (int i = 0; i < count; i++) n += iov[i].iov_len;
  return n;
}

bool cairnfs_passthrough_offered(const void *init, size_t len) {
  uint32_t flags, flags2;
  if (len < IN_HEADER_SIZE + INIT_IN_FLAGS2 + sizeof(flags2)) return false;
  memcpy(&flags, (const char *)init + IN_HEADER_SIZE + INIT_IN_FLAGS, sizeof(flags));
  memcpy(&flags2, (const char *)init + IN_HEADER_SIZE + INIT_IN_FLAGS2, sizeof(flags2));
  return (flags & INIT_EXT) && (flags2 & INIT2_PASSTHROUGH);
}

void cairnfs_passthrough_init_reply(struct iovec *iov, int count) {
  uint32_t flags, flags2;
  if (iov_total(iov, count) < OUT_HEADER_SIZE + INIT_OUT_STACK_DEPTH + 4 ||
      !iov_get32(iov, count, OUT_HEADER_SIZE + INIT_OUT_FLAGS, &flags) || !(flags & INIT_EXT) ||
      !iov_get32(iov, count, OUT_HEADER_SIZE + INIT_OUT_FLAGS2, &flags2))
    return;
  iov_put32(iov, count, OUT_HEADER_SIZE + INIT_OUT_FLAGS2, flags2 | INIT2_PASSTHROUGH);
  iov_put32(iov, count, OUT_HEADER_SIZE + INIT_OUT_STACK_DEPTH, 1);
}

void cairnfs_passthrough_request(const void *buf, size_t len) {
  uint32_t opcode = 0;
  pending.unique = 0;
  pending.id = 0;
  if (len < IN_HEADER_SIZE) return;
  memcpy(&opcode, (const char *)buf + 4, sizeof(opcode));
  if (opcode == OP_OPEN) memcpy(&pending.unique, (const char *)buf + 8, sizeof(pending.unique));
}

int cairnfs_passthrough_table(struct cairnfs *fs, int fd, size_t inodes) {
  size_t size = (inodes + 1) * sizeof(uint64_t);
  struct stat sb;
  if (fstat(fd, &sb) < 0) return -errno;
  /* Every server of an image asks the same size: only the first grows it. */
  if ((size_t)sb.st_size < size && ftruncate(fd, (off_t)size) < 0) return -errno;
  void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return -errno;
  fs->backing = p;
  fs->backing_inodes = inodes;
  return 0;
}

/* Drops one open of ino; closes its id with the last. */
static void table_release(struct cairnfs *fs, uint64_t ino) {
  uint64_t *slot = &fs->backing[ino];
  uint64_t w = __atomic_load_n(slot, __ATOMIC_ACQUIRE), next;
  do {
    if (word_opens(w) == 0) return; /* a release resent after a restart */
    next = word_opens(w) == 1 ? 0 : w - 1;
  } while (!__atomic_compare_exchange_n(slot, &w, next, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE));
  uint32_t id = word_id(w);
  if (next == 0 && id != CACHED && ioctl(fs->fuse_fd, DEV_IOC_BACKING_CLOSE, &id) < 0) {
    /* The session is over, or the id is gone already: nothing to undo. */
  }
}

bool cairnfs_passthrough_open(struct cairnfs *fs, uint64_t ino, int blob_fd) {
  if (!fs->backing || ino > fs->backing_inodes || !pending.unique) return false;
  uint64_t *slot = &fs->backing[ino];
  uint32_t registered = 0; /* an id this call registered and may have to close */
  uint64_t w = __atomic_load_n(slot, __ATOMIC_ACQUIRE), next;
  for (;;) {
    if (word_opens(w) > 0) {
      next = w + 1;
    } else {
      if (!registered) {
        struct backing_map map = {.fd = blob_fd};
        int id = ioctl(fs->fuse_fd, DEV_IOC_BACKING_OPEN, &map);
        registered = id > 0 ? (uint32_t)id : CACHED;
      }
      next = word(registered, 1);
    }
    if (__atomic_compare_exchange_n(slot, &w, next, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
      break;
  }
  if (registered && registered != CACHED && word_id(next) != registered)
    ioctl(fs->fuse_fd, DEV_IOC_BACKING_CLOSE, &registered); /* another open won */
  pending.ino = ino;
  pending.id = word_id(next) == CACHED ? 0 : word_id(next);
  /* Counted either way: the reply (or its failure) settles it. */
  return pending.id != 0;
}

void cairnfs_passthrough_reply(struct cairnfs *fs, struct iovec *iov, int count) {
  uint64_t unique;
  int32_t error;
  if (!pending.unique || iov[0].iov_len < OUT_HEADER_SIZE) return;
  memcpy(&error, (const char *)iov[0].iov_base + 4, sizeof(error));
  memcpy(&unique, (const char *)iov[0].iov_base + 8, sizeof(unique));
  if (unique != pending.unique || !pending.ino) return;
  uint32_t flags;
  if (error == 0 && pending.id && iov_total(iov, count) == OUT_HEADER_SIZE + OPEN_OUT_SIZE &&
      iov_get32(iov, count, OUT_HEADER_SIZE + OPEN_OUT_FLAGS, &flags)) {
    iov_put32(iov, count, OUT_HEADER_SIZE + OPEN_OUT_FLAGS, flags | OPEN_PASSTHROUGH);
    iov_put32(iov, count, OUT_HEADER_SIZE + OPEN_OUT_BACKING_ID, pending.id);
  }
  (void)fs;
}

void cairnfs_passthrough_replied(struct cairnfs *fs, const struct iovec *iov, bool delivered) {
  uint64_t unique;
  int32_t error;
  if (!pending.unique || !pending.ino || iov[0].iov_len < OUT_HEADER_SIZE) return;
  memcpy(&error, (const char *)iov[0].iov_base + 4, sizeof(error));
  memcpy(&unique, (const char *)iov[0].iov_base + 8, sizeof(unique));
  if (unique != pending.unique) return;
  /* An open the kernel did not get (or got as an error) is never released. */
  if (!delivered || error != 0) table_release(fs, pending.ino);
  pending.unique = 0;
  pending.ino = 0;
  pending.id = 0;
}

void cairnfs_passthrough_release(struct cairnfs *fs, uint64_t ino) {
  if (fs->backing && ino <= fs->backing_inodes) table_release(fs, ino);
}
