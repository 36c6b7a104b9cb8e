/* SPDX-License-Identifier: Apache-2.0 */
/*
 * inject.c — a test-only LD_PRELOAD library that counts the durable steps a
 * process takes in one directory (a cairn store) and crashes, fails or
 * "cuts the power" at the Nth. Built for tests, never installed.
 *
 * A durable step is one call, on a file or name below CAIRN_INJECT_DIR, of
 *   write pwrite pwrite64 writev pwritev pwritev64 pwritev2 pwritev64v2
 *   ftruncate ftruncate64 fallocate fallocate64
 *   fsync fdatasync syncfs sync_file_range
 *   rename renameat renameat2 link linkat unlink unlinkat
 * (an fd's path comes from /proc/self/fd). SQLite (pwrite64, write,
 * ftruncate64, fdatasync, unlink) and libarchive are shared libraries that
 * call these through the PLT, so their calls are counted too. Not
 * interposed, because the store never uses them: open(O_TRUNC), stdio's
 * writes (glibc calls its internal __write), copy_file_range, sendfile,
 * splice, and stores through mmap (SQLite maps only its -shm file, which
 * it rebuilds from the WAL whenever the first connection opens).
 *
 * Environment:
 *   CAIRN_INJECT_DIR=DIR    the directory whose steps count (unset: inactive)
 *   CAIRN_INJECT_AT=N       the step to act on (unset or 0: only count)
 *   CAIRN_INJECT_MODE=M     kill: SIGKILL the process just before step N;
 *                           killparent: SIGKILL its parent, then it (a
 *                           cairnfs server: its supervisor, then it);
 *                           parent: SIGKILL its parent there, and go on
 *                           (the cairnfs server whose read runs `cairn fill
 *                           --file`, killed while the fill fetches or stores);
 *                           stop: SIGSTOP the process there (the test lets
 *                           it go on with SIGCONT, or kills it: cairn commit
 *                           stopped between its read of a mount's upper
 *                           and the move);
 *                           sleep: the thread there sleeps
 *                           CAIRN_INJECT_SECONDS (default 5), the process's
 *                           other threads go on (a slow call in
 *                           cairn-snapshotter while others are answered);
 *                           fail: step N fails (errno CAIRN_INJECT_ERRNO,
 *                           EIO or ENOSPC, default EIO) and the process goes on;
 *                           cut:  a power cut, see below
 *   CAIRN_INJECT_LOG=FILE   the undo log of mode cut (outside DIR)
 *   CAIRN_INJECT_COUNT=FILE at exit, the number of steps counted goes there
 *                           (else to stderr)
 *   CAIRN_INJECT_TRACE=FILE one line per step: number, call, path
 *   CAIRN_INJECT_PROG=NAME  only a process whose program is NAME (the base
 *                           name of argv[0]: "cairn") counts and acts; any
 *                           other, e.g. the cairnfs daemon `cairn mount`
 *                           starts with this environment, is left alone
 *   CAIRN_INJECT_ONCE=FILE  act only in the first process to reach step N
 *                           or CAIRN_INJECT_POINT (the one that creates
 *                           FILE): a mount runs a
 *                           filler per fetch, each with this environment
 *   CAIRN_INJECT_ARG=WORD   and only one with WORD among its arguments
 *                           ("fill": the filler a mount runs, not the
 *                           `cairn mount` that started the mount)
 *   CAIRN_INJECT_PATH=PART  only steps on a path containing PART count (a
 *                           point's path is its name): "STORE/tmp/", the first
 *                           blob a commit stages
 *   CAIRN_INJECT_POINT=NAME act at the named point NAME (cairn_test_point),
 *                           the first time it is reached, whatever
 *                           CAIRN_INJECT_AT (implies CAIRN_INJECT_POINTS=1)
 *   CAIRN_INJECT_POINTS=1   the store's named test points (cairn_test_point,
 *                           store_test_point: "lazy: range fetched", ...)
 *                           count as steps too, traced as "point NAME":
 *                           kill and cut act there (fail does nothing,
 *                           a point has nothing to fail). They are not
 *                           durable steps but moments between them (a
 *                           fetched file verified, not stored yet). The
 *                           program reached them through the one symbol
 *                           it exports, cn_store_test_hook (the full
 *                           cairn and cairnfs: tools/ and
 *                           fs/CMakeLists.txt).
 *
 * The power-cut model (mode cut). A disk keeps what was made durable and
 * may forget the rest. Here: file contents and sizes written since the
 * file's last successful fsync/fdatasync (or the last syncfs) are
 * forgotten; namespace operations (link, rename, unlink, and the creation
 * of files) are kept as done, whether their directory was synced or not.
 * That is the adversarial case for the store: a commit of SQLite that was
 * never synced is undone while the files it let go are already unlinked.
 * Before every change of a file's contents or size the injector appends
 * to the undo log the file's handle, its size and the bytes about to be
 * overwritten; a successful sync appends a marker. At step N the process
 * is killed (SIGKILL, before the step); then `inject-undo LOG` restores,
 * newest first, every change not covered by a later sync of its file:
 * the page cache that a real power cut would have lost. Files are named in
 * the log by their kernel file handle (name_to_handle_at), so a blob
 * written as an anonymous O_TMPFILE and linked later is still found;
 * inject-undo opens them with open_by_handle_at, which needs root.
 */
#undef _FILE_OFFSET_BITS /* define pwrite and pwrite64 as the two symbols they are */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "undo_log.h"

enum inject_mode {
  MODE_COUNT,
  MODE_KILL,
  MODE_KILL_PARENT,
  MODE_FAIL,
  MODE_CUT,
  MODE_PARENT,
  MODE_STOP,
  MODE_SLEEP
};

static pthread_once_t once = PTHREAD_ONCE_INIT;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static char watch_dir[PATH_MAX];
static size_t watch_len; /* 0: inactive */
static long inject_at;
static enum inject_mode mode = MODE_COUNT;
static int fail_errno = EIO;
static int log_fd = -1, trace_fd = -1;
static atomic_long steps;

static ssize_t (*real_write)(int, const void *, size_t);
static ssize_t (*real_pwrite)(int, const void *, size_t, off_t);
static ssize_t (*real_pwrite64)(int, const void *, size_t, off64_t);
static ssize_t (*real_writev)(int, const struct iovec *, int);
static ssize_t (*real_pwritev)(int, const struct iovec *, int, off_t);
static ssize_t (*real_pwritev64)(int, const struct iovec *, int, off64_t);
static ssize_t (*real_pwritev2)(int, const struct iovec *, int, off_t, int);
static ssize_t (*real_pwritev64v2)(int, const struct iovec *, int, off64_t, int);
static int (*real_ftruncate)(int, off_t);
static int (*real_ftruncate64)(int, off64_t);
static int (*real_fallocate)(int, int, off_t, off_t);
static int (*real_fallocate64)(int, int, off64_t, off64_t);
static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static int (*real_syncfs)(int);
static int (*real_sync_file_range)(int, off64_t, off64_t, unsigned int);
static int (*real_rename)(const char *, const char *);
static int (*real_renameat)(int, const char *, int, const char *);
static int (*real_renameat2)(int, const char *, int, const char *, unsigned int);
static int (*real_link)(const char *, const char *);
static int (*real_linkat)(int, const char *, int, const char *, int);
static int (*real_unlink)(const char *);
static int (*real_unlinkat)(int, const char *, int);

static int step(const char *call, const char *path);
static const char *at_point; /* CAIRN_INJECT_POINT */
static atomic_bool point_done;
static void act(void);
/* A named point of the program (CAIRN_INJECT_POINTS): a step. */
static void named_point(void *st, const char *point) {
  (void)st;
  if (at_point && strcmp(point, at_point) == 0 && !atomic_exchange(&point_done, true)) {
    const char *once = getenv("CAIRN_INJECT_ONCE");
    int fd = once ? open(once, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600) : -1;
    if (once && fd < 0) return; /* another process acted */
    if (fd >= 0) close(fd);
    act();
    return;
  }
  step("point", point);
}

/* Whether word is one of this process's arguments (/proc/self/cmdline). */
static bool has_arg(const char *word) {
  char buf[8192];
  int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return false;
  buf[n] = '\0';
  for (char *p = buf; p < buf + n; p += strlen(p) + 1)
    if (p != buf && strcmp(p, word) == 0) return true;
  return false;
}

#define RESOLVE(name) real_##name = (__typeof__(real_##name))dlsym(RTLD_NEXT, #name)

static void write_all(int fd, const void *buf, size_t len) {
  const char *p = buf;
  while (len > 0) {
    ssize_t n = real_write(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    p += n;
    len -= (size_t)n;
  }
}

static void log_append(const struct undo_rec *rec, const void *data) {
  write_all(log_fd, rec, sizeof(*rec));
  if (rec->data_len) write_all(log_fd, data, rec->data_len);
}

static void inject_init(void) {
  RESOLVE(write);
  RESOLVE(pwrite);
  RESOLVE(pwrite64);
  RESOLVE(writev);
  RESOLVE(pwritev);
  RESOLVE(pwritev64);
  RESOLVE(pwritev2);
  RESOLVE(pwritev64v2);
  RESOLVE(ftruncate);
  RESOLVE(ftruncate64);
  RESOLVE(fallocate);
  RESOLVE(fallocate64);
  RESOLVE(fsync);
  RESOLVE(fdatasync);
  RESOLVE(syncfs);
  RESOLVE(sync_file_range);
  RESOLVE(rename);
  RESOLVE(renameat);
  RESOLVE(renameat2);
  RESOLVE(link);
  RESOLVE(linkat);
  RESOLVE(unlink);
  RESOLVE(unlinkat);
  const char *dir = getenv("CAIRN_INJECT_DIR"), *at = getenv("CAIRN_INJECT_AT"),
             *m = getenv("CAIRN_INJECT_MODE"), *err = getenv("CAIRN_INJECT_ERRNO"),
             *log = getenv("CAIRN_INJECT_LOG"), *trace = getenv("CAIRN_INJECT_TRACE");
  if (!dir || !realpath(dir, watch_dir)) return;
  const char *prog = getenv("CAIRN_INJECT_PROG");
  if (prog && strcmp(prog, program_invocation_short_name) != 0) return;
  const char *arg = getenv("CAIRN_INJECT_ARG");
  if (arg && !has_arg(arg)) return;
  inject_at = at ? atol(at) : 0;
  if (m && strcmp(m, "kill") == 0)
    mode = MODE_KILL;
  else if (m && strcmp(m, "killparent") == 0)
    mode = MODE_KILL_PARENT;
  else if (m && strcmp(m, "fail") == 0)
    mode = MODE_FAIL;
  else if (m && strcmp(m, "cut") == 0)
    mode = MODE_CUT;
  else if (m && strcmp(m, "parent") == 0)
    mode = MODE_PARENT;
  else if (m && strcmp(m, "stop") == 0)
    mode = MODE_STOP;
  else if (m && strcmp(m, "sleep") == 0)
    mode = MODE_SLEEP;
  if (err && strcmp(err, "ENOSPC") == 0) fail_errno = ENOSPC;
  if (trace) trace_fd = open(trace, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (mode == MODE_CUT) {
    if (!log || (log_fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600)) < 0) {
      fprintf(stderr, "cairn-inject: mode cut needs CAIRN_INJECT_LOG\n");
      _exit(99);
    }
    struct undo_rec rec = {.kind = UNDO_DIR, .data_len = strlen(watch_dir)};
    log_append(&rec, watch_dir);
  }
  watch_len = strlen(watch_dir);
  const char *points = getenv("CAIRN_INJECT_POINTS");
  at_point = getenv("CAIRN_INJECT_POINT");
  if (at_point || (points && strcmp(points, "1") == 0)) {
    void (**hook)(void *, const char *) = dlsym(RTLD_DEFAULT, "cn_store_test_hook");
    if (hook) *hook = named_point;
  }
}

static void init(void) { pthread_once(&once, inject_init); }

__attribute__((constructor)) static void inject_constructor(void) { init(); }

__attribute__((destructor)) static void inject_report(void) {
  if (!watch_len) return;
  const char *out = getenv("CAIRN_INJECT_COUNT");
  char line[64];
  int n = snprintf(line, sizeof(line), "%ld\n", atomic_load(&steps));
  int fd = out ? open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600) : -1;
  if (fd >= 0) {
    write_all(fd, line, (size_t)n);
    close(fd);
  } else if (!out) {
    fprintf(stderr, "cairn-inject: %ld durable steps\n", atomic_load(&steps));
  }
}

static bool below(const char *path) {
  return strncmp(path, watch_dir, watch_len) == 0 &&
         (path[watch_len] == '/' || path[watch_len] == '\0');
}

/* The path an fd names, into buf; false if it is not below the directory. */
static bool fd_below(int fd, char *buf, size_t len) {
  if (!watch_len) return false;
  char proc[64];
  snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
  ssize_t n = readlink(proc, buf, len - 1);
  if (n < 0) return false;
  buf[n] = '\0';
  return below(buf);
}

/* The absolute path of name relative to dirfd, into buf. */
static bool name_below(int dirfd, const char *name, char *buf, size_t len) {
  if (!watch_len || !name) return false;
  if (name[0] == '/') {
    snprintf(buf, len, "%s", name);
    return below(buf);
  }
  char base[PATH_MAX];
  if (dirfd == AT_FDCWD) {
    if (!getcwd(base, sizeof(base))) return false;
  } else {
    char proc[64];
    snprintf(proc, sizeof(proc), "/proc/self/fd/%d", dirfd);
    ssize_t n = readlink(proc, base, sizeof(base) - 1);
    if (n < 0) return false;
    base[n] = '\0';
  }
  int n = snprintf(buf, len, "%s/%s", base, name);
  return n > 0 && (size_t)n < len && below(buf);
}

/* Counts a step; acts if it is step N. Returns -1 (errno set) to fail it. */
static int step(const char *call, const char *path) {
  const char *part = getenv("CAIRN_INJECT_PATH");
  if (part && !strstr(path, part)) return 0;
  long n = atomic_fetch_add(&steps, 1) + 1;
  if (trace_fd >= 0) {
    char line[PATH_MAX + 96];
    int len = snprintf(line, sizeof(line), "%ld %s %s\n", n, call, path);
    write_all(trace_fd, line, (size_t)len < sizeof(line) ? (size_t)len : sizeof(line) - 1);
  }
  if (n != inject_at || mode == MODE_COUNT) return 0;
  const char *once = getenv("CAIRN_INJECT_ONCE");
  if (once) {
    int fd = open(once, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) return 0; /* another process acted */
    close(fd);
  }
  if (mode == MODE_FAIL) {
    errno = fail_errno;
    return -1;
  }
  act();
  return 0;
}

/* Acts at the step or point chosen (not mode fail). */
static void act(void) {
  if (mode == MODE_STOP) {
    raise(SIGSTOP);
    return;
  }
  if (mode == MODE_SLEEP) {
    const char *secs = getenv("CAIRN_INJECT_SECONDS");
    sleep(secs ? (unsigned)atoi(secs) : 5);
    return;
  }
  if (mode == MODE_PARENT) {
    kill(getppid(), SIGKILL);
    return;
  }
  if (mode == MODE_KILL_PARENT) kill(getppid(), SIGKILL);
  kill(getpid(), SIGKILL);
  for (;;) pause();
}

/* The kernel's handle of fd's file, into rec. Without one the undo log
 * would miss a change, so a file system that has none stops the run. */
static void handle_of(int fd, struct undo_rec *rec) {
  union {
    struct file_handle fh;
    char buf[sizeof(struct file_handle) + UNDO_HANDLE_MAX];
  } h;
  h.fh.handle_bytes = UNDO_HANDLE_MAX;
  int mount_id;
  if (name_to_handle_at(fd, "", &h.fh, &mount_id, AT_EMPTY_PATH) < 0) {
    fprintf(stderr, "cairn-inject: no file handle for fd %d: %s\n", fd, strerror(errno));
    _exit(99);
  }
  rec->handle_type = h.fh.handle_type;
  rec->handle_bytes = h.fh.handle_bytes;
  memcpy(rec->handle, h.fh.f_handle, h.fh.handle_bytes);
}

/* Mode cut: the undo record for a change of [off, off + len) of fd: its
 * size and the bytes there before the change. */
static void remember(int fd, off64_t off, uint64_t len) {
  struct undo_rec rec = {.kind = UNDO_WRITE};
  struct stat sb;
  handle_of(fd, &rec);
  if (fstat(fd, &sb) < 0) return;
  rec.size_before = (uint64_t)sb.st_size;
  rec.off = (uint64_t)off;
  void *old = NULL;
  if (rec.off < rec.size_before && len > 0) {
    uint64_t want = rec.size_before - rec.off < len ? rec.size_before - rec.off : len;
    old = malloc(want);
    ssize_t got = old ? pread64(fd, old, want, off) : -1;
    if (got < 0 && errno == EBADF) { /* opened write-only */
      char proc[64];
      snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
      int rfd = open(proc, O_RDONLY | O_CLOEXEC);
      got = rfd >= 0 ? pread64(rfd, old, want, off) : -1;
      if (rfd >= 0) close(rfd);
    }
    rec.data_len = got > 0 ? (uint64_t)got : 0;
  }
  log_append(&rec, old);
  free(old);
}

static void remember_sync(int fd, enum undo_kind kind) {
  struct undo_rec rec = {.kind = (uint32_t)kind};
  if (kind == UNDO_SYNC) handle_of(fd, &rec);
  log_append(&rec, NULL);
}

/* The offset a write() or writev() of fd starts at. */
static off64_t current_offset(int fd) {
  int fl = fcntl(fd, F_GETFL);
  struct stat sb;
  if (fl >= 0 && (fl & O_APPEND) && fstat(fd, &sb) == 0) return sb.st_size;
  return lseek64(fd, 0, SEEK_CUR);
}

static uint64_t iov_len(const struct iovec *iov, int n) {
  uint64_t len = 0;
  for (int i = 0; i < n; i++) len += iov[i].iov_len;
  return len;
}

/* Wraps a change of fd's contents: counts it and, in mode cut, records
 * what it overwrites; the log lock keeps the record and the change
 * together when threads write at once. off < 0: at the current offset. */
#define CHANGE(fd, call, off, len, expr)                                                           \
  do {                                                                                             \
    init();                                                                                        \
    char path_[PATH_MAX];                                                                          \
    if (!fd_below(fd, path_, sizeof(path_))) return expr;                                          \
    if (step(call, path_) < 0) return -1;                                                          \
    if (mode != MODE_CUT) return expr;                                                             \
    pthread_mutex_lock(&log_lock);                                                                 \
    off64_t o_ = (off) < 0 ? current_offset(fd) : (off);                                           \
    if (o_ >= 0) remember(fd, o_, (len));                                                          \
    __typeof__(expr) r_ = expr;                                                                    \
    int e_ = errno;                                                                                \
    pthread_mutex_unlock(&log_lock);                                                               \
    errno = e_;                                                                                    \
    return r_;                                                                                     \
  } while (0)

ssize_t write(int fd, const void *buf, size_t n) {
  CHANGE(fd, "write", -1, n, real_write(fd, buf, n));
}
ssize_t pwrite(int fd, const void *buf, size_t n, off_t off) {
  CHANGE(fd, "pwrite", off, n, real_pwrite(fd, buf, n, off));
}
ssize_t pwrite64(int fd, const void *buf, size_t n, off64_t off) {
  CHANGE(fd, "pwrite64", off, n, real_pwrite64(fd, buf, n, off));
}
ssize_t writev(int fd, const struct iovec *iov, int cnt) {
  CHANGE(fd, "writev", -1, iov_len(iov, cnt), real_writev(fd, iov, cnt));
}
ssize_t pwritev(int fd, const struct iovec *iov, int cnt, off_t off) {
  CHANGE(fd, "pwritev", off, iov_len(iov, cnt), real_pwritev(fd, iov, cnt, off));
}
ssize_t pwritev64(int fd, const struct iovec *iov, int cnt, off64_t off) {
  CHANGE(fd, "pwritev64", off, iov_len(iov, cnt), real_pwritev64(fd, iov, cnt, off));
}
ssize_t pwritev2(int fd, const struct iovec *iov, int cnt, off_t off, int flags) {
  CHANGE(fd, "pwritev2", off, iov_len(iov, cnt), real_pwritev2(fd, iov, cnt, off, flags));
}
ssize_t pwritev64v2(int fd, const struct iovec *iov, int cnt, off64_t off, int flags) {
  CHANGE(fd, "pwritev64v2", off, iov_len(iov, cnt), real_pwritev64v2(fd, iov, cnt, off, flags));
}

/* A truncation changes the bytes from the new size on. */
static uint64_t truncated_len(int fd, off64_t size) {
  struct stat sb;
  return fstat(fd, &sb) == 0 && sb.st_size > size ? (uint64_t)(sb.st_size - size) : 0;
}
int ftruncate(int fd, off_t size) {
  CHANGE(fd, "ftruncate", size, truncated_len(fd, size), real_ftruncate(fd, size));
}
int ftruncate64(int fd, off64_t size) {
  CHANGE(fd, "ftruncate64", size, truncated_len(fd, size), real_ftruncate64(fd, size));
}
int fallocate(int fd, int m, off_t off, off_t len) {
  CHANGE(fd, "fallocate", off, (uint64_t)len, real_fallocate(fd, m, off, len));
}
int fallocate64(int fd, int m, off64_t off, off64_t len) {
  CHANGE(fd, "fallocate64", off, (uint64_t)len, real_fallocate64(fd, m, off, len));
}

/* A sync that succeeds makes the file's (syncfs: every file's) changes
 * durable: a marker in the log says so. */
#define SYNC(fd, call, kind, expr)                                                                 \
  do {                                                                                             \
    init();                                                                                        \
    char path_[PATH_MAX];                                                                          \
    if (!fd_below(fd, path_, sizeof(path_))) return expr;                                          \
    if (step(call, path_) < 0) return -1;                                                          \
    if (mode != MODE_CUT) return expr;                                                             \
    pthread_mutex_lock(&log_lock);                                                                 \
    int r_ = expr, e_ = errno;                                                                     \
    if (r_ == 0) remember_sync(fd, kind);                                                          \
    pthread_mutex_unlock(&log_lock);                                                               \
    errno = e_;                                                                                    \
    return r_;                                                                                     \
  } while (0)

int fsync(int fd) { SYNC(fd, "fsync", UNDO_SYNC, real_fsync(fd)); }
int fdatasync(int fd) { SYNC(fd, "fdatasync", UNDO_SYNC, real_fdatasync(fd)); }
int syncfs(int fd) { SYNC(fd, "syncfs", UNDO_SYNCFS, real_syncfs(fd)); }

/* Starts writeback only: nothing is durable after it (no cache flush, no
 * metadata), so it counts as a step but leaves the undo log alone. */
int sync_file_range(int fd, off64_t off, off64_t len, unsigned int flags) {
  init();
  char path[PATH_MAX];
  if (fd_below(fd, path, sizeof(path)) && step("sync_file_range", path) < 0) return -1;
  return real_sync_file_range(fd, off, len, flags);
}

/* Namespace operations: counted (the step happens or not), kept at a cut. */
#define NAMESPACE(call, dirfd1, name1, dirfd2, name2, expr)                                        \
  do {                                                                                             \
    init();                                                                                        \
    char p1_[PATH_MAX], p2_[PATH_MAX];                                                             \
    bool b1_ = name_below(dirfd1, name1, p1_, sizeof(p1_));                                        \
    bool b2_ = name_below(dirfd2, name2, p2_, sizeof(p2_));                                        \
    if ((b1_ || b2_) && step(call, b2_ ? p2_ : p1_) < 0) return -1;                                \
    return expr;                                                                                   \
  } while (0)

int rename(const char *a, const char *b) {
  NAMESPACE("rename", AT_FDCWD, a, AT_FDCWD, b, real_rename(a, b));
}
int renameat(int da, const char *a, int db, const char *b) {
  NAMESPACE("renameat", da, a, db, b, real_renameat(da, a, db, b));
}
int renameat2(int da, const char *a, int db, const char *b, unsigned int flags) {
  NAMESPACE("renameat2", da, a, db, b, real_renameat2(da, a, db, b, flags));
}
int link(const char *a, const char *b) {
  NAMESPACE("link", AT_FDCWD, NULL, AT_FDCWD, b, real_link(a, b));
}
int linkat(int da, const char *a, int db, const char *b, int flags) {
  NAMESPACE("linkat", da, NULL, db, b, real_linkat(da, a, db, b, flags));
}
int unlink(const char *a) { NAMESPACE("unlink", AT_FDCWD, a, AT_FDCWD, NULL, real_unlink(a)); }
int unlinkat(int da, const char *a, int flags) {
  NAMESPACE("unlinkat", da, a, AT_FDCWD, NULL, real_unlinkat(da, a, flags));
}
