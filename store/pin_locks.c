/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pin_locks.c — who holds which pin: the flock(2) locks the kernel lists in
 * /proc/locks, read once per listing (and ahead of it, by a thread, while
 * the listing reads the rest: cairn_pins_prefetch), sorted and searched by
 * inode; whether a target's pin file is locked. pin.c's invariants say why
 * the kernel's lock is the truth.
 */
#include "libcairn_pin.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <string.h>
#include <sys/file.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <time.h>

/* ---- who holds what: /proc/locks ------------------------------------- */

/* By inode, then pid. */
static int inode_cmp(const struct kernel_lock *l, unsigned maj, unsigned min, unsigned long ino) {
  if (l->maj != maj) return l->maj < maj ? -1 : 1;
  if (l->min != min) return l->min < min ? -1 : 1;
  return (l->ino > ino) - (l->ino < ino);
}

static int lock_cmp(const void *a, const void *b) {
  const struct kernel_lock *x = a, *y = b;
  int c = inode_cmp(x, y->maj, y->min, y->ino);
  return c ? c : (x->pid > y->pid) - (x->pid < y->pid);
}

/* An unsigned number in base 10 or 16 at *p (at least one digit, no sign,
 * no overflow); *p is moved past it. */
static bool num_parse(const char **p, int base, unsigned long *out) {
  unsigned long v = 0;
  const char *s = *p;
  for (;; s++) {
    unsigned d;
    if (*s >= '0' && *s <= '9')
      d = (unsigned)(*s - '0');
    else if (base == 16 && *s >= 'a' && *s <= 'f')
      d = (unsigned)(*s - 'a' + 10);
    else
      break;
    if (v > (ULONG_MAX - d) / (unsigned)base) return false;
    v = v * (unsigned)base + d;
  }
  if (s == *p) return false;
  *p = s;
  *out = v;
  return true;
}

/* One held flock(2) lock from a line of /proc/locks or of a "lock:" line of
 * /proc/PID/fdinfo/FD (which has the same fields); false for a waiter or a
 * lock of another kind. */
bool cn_lock_line_parse(const char *line, struct kernel_lock *out) {
  /* "N: FLOCK  ADVISORY  READ PID MAJ:MIN:INO START END"; a waiter has
   * "N: -> FLOCK ...". Parsed by hand: a listing reads 10,000 of these, and
   * strtoul's locale handling was most of their cost. */
  const char *p = strchr(line, ':');
  if (!p) return false;
  while (*++p == ' ') {
  }
  if (strncmp(p, "FLOCK ", 6) != 0) return false;
  for (int field = 0; field < 3; field++) { /* FLOCK, ADVISORY, READ|WRITE */
    while (*p && *p != ' ') p++;
    while (*p == ' ') p++;
  }
  unsigned long pid, maj, min, ino;
  if (!num_parse(&p, 10, &pid) || *p++ != ' ' || !num_parse(&p, 16, &maj) || *p++ != ':' ||
      !num_parse(&p, 16, &min) || *p++ != ':' || !num_parse(&p, 10, &ino) || *p != ' ')
    return false;
  if (pid == 0 || pid > INT_MAX || maj > UINT_MAX || min > UINT_MAX) return false;
  *out = (struct kernel_lock){(unsigned)maj, (unsigned)min, ino, (pid_t)pid};
  return true;
}

int cn_locks_add(struct kernel_locks *kl, size_t *cap, const struct kernel_lock *l) {
  struct kernel_lock *v = cn_array_grow(kl->v, kl->n, cap, sizeof(*v));
  if (!v) return -ENOMEM;
  (kl->v = v)[kl->n++] = *l;
  return 0;
}

/* Sorts kl; a lock seen twice is kept once. */
void cn_locks_sort(struct kernel_locks *kl) {
  kl->n = cn_sort_unique(kl->v, kl->n, sizeof(*kl->v), lock_cmp);
}

/* Reads every held flock(2) lock of the host from /proc/locks, sorted;
 * touches no store (the prefetch thread runs it). Returns -errno. */
static int locks_read(struct kernel_locks *out) {
  *out = (struct kernel_locks){0};
  /* /proc/locks walks the list from its start for every page it returns:
   * a big buffer makes few read(2)s of it (glibc's would be 1 KiB). */
  cairn_autofree char *buf = malloc(1 << 16);
  if (!buf) return -ENOMEM;
  FILE *f = fopen("/proc/locks", "re");
  if (!f) return -errno;
  setvbuf(f, buf, _IOFBF, 1 << 16);
  char line[512];
  size_t cap = 0;
  struct kernel_lock l;
  while (fgets(line, sizeof(line), f)) {
    if (!cn_lock_line_parse(line, &l)) continue;
    if (cn_locks_add(out, &cap, &l) < 0) {
      fclose(f);
      free(out->v);
      *out = (struct kernel_locks){0};
      return -ENOMEM;
    }
  }
  fclose(f);
  cn_locks_sort(out);
  return 0;
}

int cn_kernel_locks_read(cairn_store *st, struct kernel_locks *out) {
  int r = locks_read(out);
  return r < 0 ? cairn_fail(st, r, "/proc/locks: %s", strerror(-r)) : 0;
}

/* ---- /proc/locks read while a listing reads the rest ------------------ */

/* With 10,000 locks on the host, reading /proc/locks costs the kernel as
 * much as the rest of a listing of them: one read runs on a thread of its
 * own while the listing asks SQLite for its annotations and names. Those
 * questions are asked in one read transaction, begun before the thread
 * starts and ended after it is done: SQLite locks its files (fcntl) at each
 * transaction's start and end, and a lock taken or dropped during a read of
 * /proc/locks shifts the lines under it (see locks_read_for), which would
 * cost a second read. */
struct cn_locks_prefetch {
  pthread_t thread;
  struct kernel_locks kl;
  int err;
  bool txn; /* the read transaction is the prefetch's */
};

static void *prefetch_run(void *arg) {
  struct cn_locks_prefetch *p = arg;
  p->err = locks_read(&p->kl);
  return NULL;
}

/* Begins a read transaction, and reads, so that SQLite holds its read
 * lock already; false if it did not (a transaction was open, or failed).
 * A listing reads thousands of rows: SQLite reads the database's pages
 * through a mapping from then on, not a pread(2) and a copy each (10,000
 * pins: 300 of them, 6 ms of 60 here). Only listings do (the front ends'):
 * a daemon's connection keeps pread, whose I/O error is an error, where a
 * mapping's would be SIGBUS. */
static bool read_txn_begin(cairn_store *st) {
  sqlite3 *db = cn_db(st);
  if (!db || !sqlite3_get_autocommit(db)) return false;
  (void)cn_db_exec(st, "PRAGMA mmap_size=268435456"); /* none, if it fails */
  if (cn_db_exec(st, "BEGIN") < 0) return false;
  if (cn_db_exec(st, "SELECT 1 FROM pins LIMIT 1") < 0) {
    cn_db_rollback(st);
    return false;
  }
  return true;
}

/* The locks that the prefetch read (joined; NULL kl: dropped), or -errno. */
static int prefetch_join(cairn_store *st, struct kernel_locks *kl) {
  struct cn_locks_prefetch *p = st->locks_prefetch;
  st->locks_prefetch = NULL;
  pthread_join(p->thread, NULL);
  if (p->txn) cn_db_rollback(st); /* it only read */
  int r = p->err;
  if (kl)
    *kl = p->kl;
  else
    free(p->kl.v);
  free(p);
  return r;
}

/* Waits for the prefetch's read, if one runs, and drops it (the store's
 * on_close; a listing that failed before it used it). */
void cn_pins_prefetch_drop(cairn_store *st) {
  if (st->locks_prefetch) prefetch_join(st, NULL);
}

void cairn_pins_prefetch(cairn_store *st) {
  if (st->locks_prefetch) return;
  struct cn_locks_prefetch *p = calloc(1, sizeof(*p));
  if (!p) return; /* the listing reads them itself */
  p->txn = read_txn_begin(st);
  store_errclear(st); /* the listing says why, if the database fails */
  if (pthread_create(&p->thread, NULL, prefetch_run, p) == 0) {
    st->locks_prefetch = p;
    st->on_close = cn_pins_prefetch_drop;
    return;
  }
  if (p->txn) cn_db_rollback(st);
  free(p);
}

/* The first read of a listing: the prefetched one if there is one (a read
 * taken before the annotations: see locks_read_for), else a read now. */
int cn_kernel_locks_first(cairn_store *st, struct kernel_locks *kl) {
  int r = st->locks_prefetch ? prefetch_join(st, kl) : locks_read(kl);
  return r < 0 ? cairn_fail(st, r, "/proc/locks: %s", strerror(-r)) : 0;
}

/* The locks on the inode s: a run of the sorted kl. */
const struct kernel_lock *cn_locks_on(const struct kernel_locks *kl, const struct stat *s,
                                      size_t *n) {
  unsigned maj = major(s->st_dev), min = minor(s->st_dev);
  size_t lo = 0, hi = kl->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (inode_cmp(&kl->v[mid], maj, min, s->st_ino) < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  size_t end = lo;
  while (end < kl->n && inode_cmp(&kl->v[end], maj, min, s->st_ino) == 0) end++;
  *n = end - lo;
  return kl->v + lo;
}

/* Whether one of the n locks l is pid's. */
bool cn_locks_have_pid(const struct kernel_lock *l, size_t n, pid_t pid) {
  for (size_t i = 0; i < n; i++)
    if (l[i].pid == pid) return true;
  return false;
}

bool cn_inode_locked_by(const struct kernel_locks *kl, const struct stat *s, pid_t pid) {
  size_t n;
  const struct kernel_lock *l = cn_locks_on(kl, s, &n);
  return pid <= 0 ? n > 0 : cn_locks_have_pid(l, n, pid);
}

/* Stats the target's pin file; false if it has none. */
bool cn_pin_stat(cairn_store *st, enum cairn_pin_kind kind, const char *id, struct stat *s) {
  return cn_is_hex_id(id, CAIRN_ID_LEN) &&
         fstatat(st->pin_dir_fd[kind], id, s, AT_SYMLINK_NOFOLLOW) == 0;
}

bool cn_pin_held_in(cairn_store *st, const struct kernel_locks *kl, enum cairn_pin_kind kind,
                    const char *id) {
  struct stat s;
  return cn_pin_stat(st, kind, id, &s) && cn_inode_locked_by(kl, &s, 0);
}

bool cn_pin_is_held(cairn_store *st, enum cairn_pin_kind kind, const char *id) {
  store_errclear(st);
  struct kernel_locks kl;
  if (cn_kernel_locks_read(st, &kl) < 0) return false;
  bool held = cn_pin_held_in(st, &kl, kind, id);
  free(kl.v);
  return held;
}
