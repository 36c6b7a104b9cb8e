/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rw_freeze.c — cairn commit's freeze of a writable mount: between its
 * read of the upper and the move onto the new image (rw_rebase.c), no
 * request that changes the view runs, so that the committed image is the
 * view at the freeze and nothing written meanwhile is in neither the
 * image nor the fresh upper (the old upper goes after the move).
 *
 * cairn commit asks, as root, by reading xattrs of the mount's root (a
 * read: the kernel takes no lock of the root for it, which a held create
 * in the root directory holds), each naming the upper the mount serves
 * (so that only who can read the store's uppers/ can freeze):
 *   trusted.cairn.freeze.UPPER         freeze; answered once no request
 *                                      that changes the view runs
 *   trusted.cairn.rebase.UPPER.IMAGE   move onto IMAGE (rw_rebase), then
 *                                      thaw; EBUSY if the freeze ended
 *   trusted.cairn.thaw.UPPER           thaw (commit failed before the move)
 * The freeze ends too when the process that asked for it dies (a pidfd of
 * the requester: commit's child that holds the freeze, which exits when
 * commit does), and after FREEZE_BOUND_S seconds; then writes run, and a
 * later move is refused (EBUSY: the mount stays on its image and upper,
 * which hold every write). One freeze at a time (EBUSY).
 *
 * Held are the requests that change the view: create, mknod, mkdir,
 * symlink, link, unlink, rmdir, rename, setattr, write, fallocate,
 * copy_file_range, tmpfile, setxattr and removexattr (not ours), and
 * opens for writing or truncating (which copy up). Reads go on. They are
 * held before libfuse sees them (conn.c's read, cairnfs_freeze_take): the
 * request is queued and the thread reads on, so that a held request takes
 * no worker thread; at the thaw the queue is handed to libfuse in order
 * (fuse_session_process_buf), the freeze lasting until it is empty. The
 * queue keeps HELD_MEM_MAX bytes of requests in memory at most; the
 * others (a writer's threads may hold hundreds of writes of 1 MiB) go to
 * a spill file, an anonymous file in the upper's work/ read back one at a
 * time by the drain: the server's memory stays bounded whatever the
 * writers send. A server killed while frozen loses its queue with it: the
 * kernel resends those requests to the next server, which goes on with
 * the freeze (the same holder and bound, from the upper's work/freeze,
 * written once the freeze holds and removed before a held request runs),
 * so the move still runs under it; a freeze that a server died before
 * writing down is not the next server's, which refuses the move. The
 * moved handles and nodeids are the rebase's: a held request names what
 * the kernel holds, which the move maps onto the new view.
 */
#include "rw.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* How long a freeze lasts at most (cairn(1), commit). */
#define FREEZE_BOUND_S 60
/* The bytes of held requests kept in memory; past them, the spill file,
 * for requests of SPILL_MAX bytes at most (libfuse's buffer: a write of
 * 1 MiB and its headers). */
#define HELD_MEM_MAX (1024 * 1024)
#define SPILL_MAX (1024 * 1024 + 4096)

/* linux/fuse.h's opcodes and fields (it cannot be included next to
 * libfuse's headers). */
enum {
  OP_SETATTR = 4,
  OP_SYMLINK = 6,
  OP_MKNOD = 8,
  OP_MKDIR = 9,
  OP_UNLINK = 10,
  OP_RMDIR = 11,
  OP_RENAME = 12,
  OP_LINK = 13,
  OP_OPEN = 14,
  OP_WRITE = 16,
  OP_SETXATTR = 21,
  OP_REMOVEXATTR = 24,
  OP_CREATE = 35,
  OP_FALLOCATE = 43,
  OP_RENAME2 = 45,
  OP_COPY_FILE_RANGE = 47,
  OP_TMPFILE = 51,
};
#define IN_HEADER_LEN 40 /* struct fuse_in_header */
#define IN_NODEID_OFF 16

struct held {
  size_t len;
  uint64_t unique; /* its header's */
  off_t spilled;   /* -1: in buf; else where in the spill file */
  struct held *next;
  char buf[];
};

static struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  struct fuse_session *se; /* NULL: not a writable mount's server */
  struct cairnfs *fs;
  bool frozen;      /* changing requests are queued */
  bool ended;       /* the freeze is over (its watcher drains the queue) */
  bool moving;      /* a rebase runs under the freeze */
  bool serving;     /* drain() hands a held request to libfuse */
  unsigned running; /* changing requests handed to libfuse, unfinished */
  pid_t pid;        /* the freeze's requester */
  struct held *head, *tail;
  size_t mem;      /* the bytes of held requests in memory */
  int spill;       /* the spill file (-1: none yet) */
  off_t spill_end; /* its size */
  char *spill_buf; /* the drain's buffer for a spilled request, SPILL_MAX */
  int wake; /* eventfd: the freeze's watcher, told it ended */
} fz = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .spill = -1, .wake = -1};

static void freeze_end(void);

/* This thread's last request changes the view (running counts it). */
static __thread bool t_changing;

void cairnfs_freeze_stop(void) {
  pthread_mutex_lock(&fz.mu);
  fz.se = NULL; /* a held request is dropped: the session is over */
  while (fz.serving) pthread_cond_wait(&fz.cv, &fz.mu);
  pthread_mutex_unlock(&fz.mu);
}

/* Whether the raw request changes the view. */
static bool changing(const char *buf, size_t n) {
  struct cairnfs_in_header h;
  if (n < IN_HEADER_LEN) return false;
  memcpy(&h, buf, sizeof(h));
  switch (h.opcode) {
  case OP_SETATTR:
  case OP_SYMLINK:
  case OP_MKNOD:
  case OP_MKDIR:
  case OP_UNLINK:
  case OP_RMDIR:
  case OP_RENAME:
  case OP_LINK:
  case OP_WRITE:
  case OP_REMOVEXATTR:
  case OP_CREATE:
  case OP_FALLOCATE:
  case OP_RENAME2:
  case OP_COPY_FILE_RANGE:
  case OP_TMPFILE: return true;
  case OP_OPEN: {
    uint32_t flags = 0;
    if (n >= IN_HEADER_LEN + 4) memcpy(&flags, buf + IN_HEADER_LEN, 4);
    return (flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC);
  }
  case OP_SETXATTR: {
    /* Ours (cairn commit's rebase, on the root) is not held: its name
     * follows struct fuse_setxattr_in, of 8 or (FUSE_SETXATTR_EXT) 16
     * bytes. */
    uint64_t nodeid;
    memcpy(&nodeid, buf + IN_NODEID_OFF, sizeof(nodeid));
    for (size_t off = IN_HEADER_LEN + 8; nodeid == FUSE_ROOT_ID && off <= IN_HEADER_LEN + 16;
         off += 8)
      if (n >= off + strlen(XA_PREFIX) && memcmp(buf + off, XA_PREFIX, strlen(XA_PREFIX)) == 0)
        return false;
    return true;
  }
  default: return false;
  }
}

void cairnfs_freeze_done(void) {
  if (!t_changing) return;
  t_changing = false;
  pthread_mutex_lock(&fz.mu);
  if (--fz.running == 0) pthread_cond_broadcast(&fz.cv);
  pthread_mutex_unlock(&fz.mu);
}

/* Appends the n bytes at buf to the spill file, opened with the drain's
 * buffer at its first use (mu held): their offset, or -1 (too long, no
 * spill file or full: the caller keeps them in memory). */
static off_t spill(const void *buf, size_t n) {
  if (n > SPILL_MAX) return -1;
  if (!fz.spill_buf && !(fz.spill_buf = malloc(SPILL_MAX))) return -1;
  if (fz.spill < 0 && fz.fs) {
    LOCK(fz.fs);
    fz.spill = openat(fz.fs->rw->lock_fd, "work", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    UNLOCK(fz.fs);
    fz.spill_end = 0;
  }
  if (fz.spill < 0) return -1;
  for (size_t done = 0; done < n;) {
    ssize_t k = pwrite(fz.spill, (const char *)buf + done, n - done, fz.spill_end + (off_t)done);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1; /* what it wrote is past spill_end: overwritten */
    done += (size_t)k;
  }
  off_t at = fz.spill_end;
  fz.spill_end += (off_t)n;
  return at;
}

bool cairnfs_freeze_take(const void *buf, size_t n) {
  if (!fz.se || !changing(buf, n)) return false;
  pthread_mutex_lock(&fz.mu);
  if (fz.frozen) {
    off_t at = fz.mem + n > HELD_MEM_MAX ? spill(buf, n) : -1;
    struct held *h = malloc(sizeof(*h) + (at < 0 ? n : 0));
    if (h) {
      struct cairnfs_in_header hd;
      memcpy(&hd, buf, sizeof(hd));
      h->len = n;
      h->unique = hd.unique;
      h->spilled = at;
      h->next = NULL;
      if (at < 0) {
        memcpy(h->buf, buf, n);
        fz.mem += n;
      }
      if (fz.tail)
        fz.tail->next = h;
      else
        fz.head = h;
      fz.tail = h;
      pthread_mutex_unlock(&fz.mu);
      return true;
    }
    /* It runs, so the move is refused (or runs first): it is not lost. */
    freeze_end();
    while (fz.moving) pthread_cond_wait(&fz.cv, &fz.mu);
  }
  fz.running++;
  t_changing = true;
  pthread_mutex_unlock(&fz.mu);
  return false;
}

/* The bound, in seconds: FREEZE_BOUND_S; a build with the tests reads
 * CAIRNFS_TEST_FREEZE_S (tests/e2e/test_commit_freeze.sh). */
static int freeze_bound(void) {
#ifdef CAIRNFS_TEST_HOOKS
  const char *s = getenv("CAIRNFS_TEST_FREEZE_S");
  if (s && atoi(s) > 0) return atoi(s);
#endif
  return FREEZE_BOUND_S;
}

struct watch {
  int pidfd; /* -1: the requester's pid is not known here */
  int wake;
  struct timespec deadline; /* CLOCK_MONOTONIC */
};

static void mark_remove(struct cairnfs *fs);

/* Hands the held requests to libfuse, in order, then ends the freeze
 * (mu held on entry and return). */
static void drain(void) {
  if (fz.fs) {
    pthread_mutex_unlock(&fz.mu);
    mark_remove(fz.fs);
    pthread_mutex_lock(&fz.mu);
  }
  while (fz.head) {
    struct held *h = fz.head;
    fz.head = h->next;
    if (!fz.head) fz.tail = NULL;
    struct fuse_session *se = fz.se;
    fz.serving = se != NULL;
    if (h->spilled < 0) fz.mem -= h->len;
    pthread_mutex_unlock(&fz.mu);
    char *req = h->buf;
    if (h->spilled >= 0) { /* the drain alone uses spill_buf */
      req = fz.spill_buf;
      ssize_t k = pread(fz.spill, req, h->len, h->spilled);
      if (k != (ssize_t)h->len && se) {
        /* Unreadable: answered EIO, not lost (its writer would wait
         * for ever). */
        struct cairnfs_out_header out = {.len = sizeof(out), .error = -EIO, .unique = h->unique};
        if (write(fuse_session_fd(se), &out, sizeof(out)) < 0) {
          /* the session is over */
        }
        se = NULL;
      }
    }
    cairnfs_resent = (h->unique & CAIRNFS_UNIQUE_RESEND) != 0;
    struct fuse_buf b = {.size = h->len, .mem = req};
    if (se) fuse_session_process_buf(se, &b);
    free(h);
    pthread_mutex_lock(&fz.mu);
    fz.serving = false;
    pthread_cond_broadcast(&fz.cv);
  }
  if (fz.spill >= 0) close(fz.spill);
  fz.spill = -1;
  free(fz.spill_buf);
  fz.spill_buf = NULL;
  fz.mem = 0;
  fz.frozen = false;
  fz.ended = false;
  if (fz.wake >= 0) close(fz.wake);
  fz.wake = -1;
  pthread_cond_broadcast(&fz.cv);
}

/* The freeze's watcher: ends it when its requester dies, when the bound
 * passes, or when told (a rebase or a thaw ended it), then drains. */
static void *watcher(void *arg) {
  struct watch *w = arg;
  for (;;) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    long ms =
        (w->deadline.tv_sec - now.tv_sec) * 1000 + (w->deadline.tv_nsec - now.tv_nsec) / 1000000;
    if (ms <= 0) break;
    struct pollfd p[2] = {{.fd = w->wake, .events = POLLIN}, {.fd = w->pidfd, .events = POLLIN}};
    int k = poll(p, w->pidfd >= 0 ? 2 : 1, (int)(ms > 1000 ? 1000 : ms));
    if (k > 0) break; /* told, or the requester died */
  }
  if (w->pidfd >= 0) close(w->pidfd);
  close(w->wake);
  pthread_mutex_lock(&fz.mu);
  fz.ended = true;
  while (fz.moving) pthread_cond_wait(&fz.cv, &fz.mu);
  drain();
  pthread_mutex_unlock(&fz.mu);
  free(w);
  return NULL;
}

/* Whether upper is the one this server serves. */
static bool upper_is(struct cairnfs *fs, const char *upper) {
  LOCK(fs);
  bool r = strcmp(upper, fs->rw->id) == 0;
  UNLOCK(fs);
  return r;
}

/* Begins a freeze of the process pid (its pidfd, or -1) for seconds at
 * most (mu held): 0, or -errno. */
static int freeze_begin(pid_t pid, int pidfd, long seconds) {
  struct watch *w = calloc(1, sizeof(*w));
  if (!w) {
    if (pidfd >= 0) close(pidfd);
    return -ENOMEM;
  }
  w->pidfd = pidfd;
  w->wake = eventfd(0, EFD_CLOEXEC);
  clock_gettime(CLOCK_MONOTONIC, &w->deadline);
  w->deadline.tv_sec += seconds;
  int r = w->wake < 0 ? -errno : 0;
  pthread_t t;
  if (r == 0 && (r = -pthread_create(&t, NULL, watcher, w)) == 0) {
    pthread_detach(t);
    fz.frozen = true;
    fz.ended = false;
    fz.pid = pid;
    fz.wake = dup(w->wake);
    return 0;
  }
  if (w->pidfd >= 0) close(w->pidfd);
  if (w->wake >= 0) close(w->wake);
  free(w);
  return r;
}

/* The freeze, for a later server of this upper if this one dies while it
 * lasts (work/freeze: the holder's pid and the bound's end, in seconds
 * since the epoch): written once the freeze holds, removed before a held
 * request runs. */
#define MARK "work/freeze"

static void mark_write(struct cairnfs *fs, pid_t pid, time_t end) {
  LOCK(fs);
  int fd =
      openat(fs->rw->lock_fd, MARK, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd >= 0) {
    dprintf(fd, "%d %lld\n", (int)pid, (long long)end);
    close(fd);
  }
  UNLOCK(fs);
}

static void mark_remove(struct cairnfs *fs) {
  LOCK(fs);
  unlinkat(fs->rw->lock_fd, MARK, 0);
  UNLOCK(fs);
}

void cairnfs_freeze_start(struct fuse_session *se, struct cairnfs *fs) {
  fz.se = se;
  fz.fs = fs;
  fs->rw->se = se; /* and the rebase's (rw_kernel_holds) */
  /* A freeze a dead server of this upper held: it goes on here (the
   * kernel resends the requests it held, and commit's move). */
  char buf[64] = {0};
  int fd = openat(fs->rw->lock_fd, MARK, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return;
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  int pid = 0;
  long long end = 0;
  time_t now = time(NULL);
  int pidfd = n > 0 && sscanf(buf, "%d %lld", &pid, &end) == 2 && pid > 0 && end > now
                  ? (int)syscall(SYS_pidfd_open, pid, 0)
                  : -1;
  pthread_mutex_lock(&fz.mu);
  int r = pidfd >= 0 ? freeze_begin(pid, pidfd, (long)(end - now)) : -ESRCH;
  pthread_mutex_unlock(&fz.mu);
  if (r < 0) mark_remove(fs); /* over: its holder is gone, or its bound */
}

int rw_freeze(fuse_req_t req, struct cairnfs *fs, const char *upper) {
  if (!upper_is(fs, upper)) return -EPERM;
  if (!fz.se) return -ENOTSUP;
  pid_t pid = fuse_req_ctx(req)->pid;
  int r = 0;
  pthread_mutex_lock(&fz.mu);
  /* The last freeze's queue is still being served (the commit before
   * this one): wait for it. */
  while (fz.frozen && fz.ended) pthread_cond_wait(&fz.cv, &fz.mu);
  if (fz.frozen && (pid <= 0 || pid != fz.pid)) {
    r = -EBUSY;
  } else if (!fz.frozen) { /* else the request is resent: that freeze goes on here */
    int pidfd = pid > 0 ? (int)syscall(SYS_pidfd_open, pid, 0) : -1;
    r = freeze_begin(pid, pidfd, freeze_bound());
    if (r == 0) {
      pthread_mutex_unlock(&fz.mu);
      mark_write(fs, pid, time(NULL) + freeze_bound());
      pthread_mutex_lock(&fz.mu);
    }
  }
  /* Until no changing request runs (the watcher ends the freeze at the
   * bound: then the move is refused). */
  while (r == 0 && fz.running && !fz.ended) pthread_cond_wait(&fz.cv, &fz.mu);
  if (r == 0 && (fz.ended || !fz.frozen)) r = -EBUSY;
  pthread_mutex_unlock(&fz.mu);
  return r;
}

/* Tells the freeze's watcher it ended (mu held). */
static void freeze_end(void) {
  fz.ended = true;
  if (fz.wake >= 0 && eventfd_write(fz.wake, 1) < 0) {
    /* the watcher still ends it at the bound */
  }
}

int rw_thaw(struct cairnfs *fs, const char *upper) {
  if (!upper_is(fs, upper)) return -EPERM;
  pthread_mutex_lock(&fz.mu);
  if (fz.frozen && !fz.ended) freeze_end();
  pthread_mutex_unlock(&fz.mu);
  return 0;
}

int rw_rebase_frozen(struct cairnfs *fs, const char *upper, const char *image) {
  char value[2 * CAIRN_ID_LEN + 2];
  snprintf(value, sizeof(value), "%.*s %.*s", CAIRN_ID_LEN, upper, CAIRN_ID_LEN, image);
  pthread_mutex_lock(&fz.mu);
  bool ok = fz.frozen && !fz.ended;
  if (ok) fz.moving = true;
  pthread_mutex_unlock(&fz.mu);
  /* Not frozen: the freeze ended (its bound, or a restart of the server)
   * and writes may have run since commit read the upper: the mount stays
   * (unless a dead server moved it: the kernel resent this request). */
  if (!ok) {
    if (!cairnfs_resent) return -EBUSY;
    LOCK(fs);
    bool moved = strcmp(image, fs->rw->image) == 0 && strcmp(upper, fs->rw->id) != 0;
    UNLOCK(fs);
    return moved ? 0 : -EBUSY;
  }
  int r = rw_rebase(fs, value, strlen(value));
  pthread_mutex_lock(&fz.mu);
  fz.moving = false;
  freeze_end();
  pthread_cond_broadcast(&fz.cv);
  pthread_mutex_unlock(&fz.mu);
  return r;
}
