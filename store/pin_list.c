/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pin_list.c — listing pins (cairn_pins_foreach, _ahead, cairn_pin_holders)
 * and deleting the stale annotations (cairn_pins_clean_stale): the
 * annotations in SQLite matched with the locks of /proc/locks
 * (pin_locks.c) and the pin files' inodes, a lock /proc/locks seems to miss
 * confirmed in /proc/PID/fdinfo, and who holds a lock a dead locker passed
 * on found in /proc/PID/fd. pin.c's invariants say what a listing costs.
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

/* Calls fn(pid, fd, stat, arg) for every open fd on a file of the store's
 * pins/ of the processes pids (NULL: of every process that one can see),
 * until fn returns non-zero (returned). Only those fds are stat'ed: a stat of another could wait on
 * a hung FUSE daemon. */
typedef int (*proc_fd_fn)(pid_t pid, int fd, const struct stat *s, void *arg);
static int proc_pin_fds_walk(cairn_store *st, const pid_t *pids, size_t n_pids, proc_fd_fn fn,
                             void *arg) {
  char real[PATH_MAX], prefix[PATH_MAX + 8];
  if (!realpath(st->dir, real)) return 0; /* no store, no pin */
  int plen = snprintf(prefix, sizeof(prefix), "%s/pins/", real);
  cairn_autoclosedir DIR *proc = pids ? NULL : opendir("/proc");
  struct dirent *p;
  int r = 0;
  for (size_t k = 0; r == 0 && (pids ? k < n_pids : proc && (p = readdir(proc))); k++) {
    pid_t pid = pids ? pids[k] : (pid_t)atoi(p->d_name);
    if (pid <= 0) continue;
    char fddir[64], link[PATH_MAX];
    snprintf(fddir, sizeof(fddir), "/proc/%d/fd", (int)pid);
    cairn_autoclosedir DIR *fds = cn_opendirat(AT_FDCWD, fddir);
    int dfd = fds ? dirfd(fds) : -1;
    struct dirent *f;
    struct stat fs;
    while (fds && r == 0 && (f = readdir(fds))) {
      if (f->d_name[0] == '.') continue;
      ssize_t len = readlinkat(dfd, f->d_name, link, sizeof(link) - 1);
      if (len < plen || strncmp(link, prefix, (size_t)plen) != 0 ||
          fstatat(dfd, f->d_name, &fs, 0) < 0)
        continue;
      r = fn(pid, atoi(f->d_name), &fs, arg);
    }
  }
  return r;
}

/* Adds to kl the locks that the fds on the inodes (sorted by inode) show
 * in /proc/PID/fdinfo. */
struct confirm {
  const struct stat *inodes;
  size_t n;
  struct kernel_locks *kl;
  size_t cap;
};

static int inode_cmp_stat(const void *a, const void *b) {
  const struct stat *x = a, *y = b;
  if (x->st_dev != y->st_dev) return x->st_dev < y->st_dev ? -1 : 1;
  return (x->st_ino > y->st_ino) - (x->st_ino < y->st_ino);
}

/* The flock(2) lock held through pid's fd, from its "lock:" line in
 * /proc/PID/fdinfo (an open file holds one at most; like /proc/locks, it
 * names the process that took the lock, even after that exited); false if
 * it holds none. */
static bool fd_flock(pid_t pid, int fd, struct kernel_lock *out) {
  char path[64], line[512];
  snprintf(path, sizeof(path), "/proc/%d/fdinfo/%d", (int)pid, fd);
  cairn_autofclose FILE *f = fopen(path, "re");
  while (f && fgets(line, sizeof(line), f))
    if (strncmp(line, "lock:", 5) == 0 && cn_lock_line_parse(line + 5, out)) return true;
  return false;
}

static int fd_locks_add(pid_t pid, int fd, const struct stat *s, void *arg) {
  struct confirm *c = arg;
  if (!bsearch(s, c->inodes, c->n, sizeof(*c->inodes), inode_cmp_stat)) return 0;
  struct kernel_lock l;
  return fd_flock(pid, fd, &l) && cn_locks_add(c->kl, &c->cap, &l) < 0 ? -ENOMEM : 0;
}

/* What a listing learns of a process, once however many pins it holds:
 * its command, whether it has exited, whether it serves a detached mount. */
struct proc_info {
  pid_t pid;
  bool known;
  bool gone;
  bool detached;
  char *command;
};

/* An open fd on a file of pins/, as one walk of /proc found it. */
struct pin_fd {
  dev_t dev;
  ino_t ino;
  size_t seq;     /* its place in the walk */
  pid_t pid;      /* whose fd */
  int fd;         /* its number there */
  pid_t lock_pid; /* who took the lock held through it (fdinfo), 0 if none;
                     -1 until asked */
};

struct procs {
  struct proc_info *v; /* by pid */
  size_t n;
  /* Every fd on a pin file, by inode then place in the walk: read on the
   * first pin whose locker is gone (inode_holders), once for the listing,
   * however many such pins it has. */
  struct pin_fd *fds;
  size_t n_fds, cap_fds;
  bool fds_read;
};

static void procs_free(struct procs *ps) {
  for (size_t i = 0; i < ps->n; i++) free(ps->v[i].command);
  free(ps->v);
  free(ps->fds);
  *ps = (struct procs){0};
}

static int pin_fd_add(pid_t pid, int fd, const struct stat *s, void *arg) {
  struct procs *ps = arg;
  struct pin_fd *v = cn_array_grow(ps->fds, ps->n_fds, &ps->cap_fds, sizeof(*v));
  if (!v) return -ENOMEM;
  ps->fds = v;
  v[ps->n_fds] = (struct pin_fd){
      .dev = s->st_dev, .ino = s->st_ino, .seq = ps->n_fds, .pid = pid, .fd = fd, .lock_pid = -1};
  ps->n_fds++;
  return 0;
}

static int pin_fd_cmp(const void *a, const void *b) {
  const struct pin_fd *x = a, *y = b;
  if (x->dev != y->dev) return x->dev < y->dev ? -1 : 1;
  if (x->ino != y->ino) return x->ino < y->ino ? -1 : 1;
  return (x->seq > y->seq) - (x->seq < y->seq);
}

/* Who holds the lock that locker, now dead, took on the inode and passed on
 * (cairn-pin hold's command): the live processes with an fd through which
 * that lock is held, in the order /proc lists them; if fdinfo names no
 * such fd (another pid namespace's view), every process with an fd on the
 * inode. The first call walks /proc for the listing (a walk per pin took
 * minutes at thousands of such pins). */
static int inode_holders(cairn_store *st, struct procs *ps, const struct stat *s, pid_t locker,
                         pid_t **out, size_t *n) {
  *out = NULL;
  *n = 0;
  if (!ps->fds_read) {
    int r = proc_pin_fds_walk(st, NULL, 0, pin_fd_add, ps);
    if (r < 0) {
      ps->n_fds = 0; /* a later pin walks again, from the start */
      return r;
    }
    if (ps->n_fds > 1) qsort(ps->fds, ps->n_fds, sizeof(*ps->fds), pin_fd_cmp);
    ps->fds_read = true;
  }
  struct pin_fd key = {.dev = s->st_dev, .ino = s->st_ino};
  size_t lo = 0, hi = ps->n_fds;
  while (lo < hi) { /* the first fd on the inode */
    size_t mid = lo + (hi - lo) / 2;
    if (pin_fd_cmp(&ps->fds[mid], &key) < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  size_t end = lo;
  while (end < ps->n_fds && ps->fds[end].dev == key.dev && ps->fds[end].ino == key.ino) end++;
  if (end == lo) return 0;
  pid_t *v = malloc((end - lo) * sizeof(*v));
  if (!v) return -ENOMEM;
  /* One process with the file open holds the lock (fdinfo not read);
   * among several, those through whose fd the locker's lock is held. */
  bool one = true, named = false;
  for (size_t i = lo + 1; i < end && one; i++) one = ps->fds[i].pid == ps->fds[lo].pid;
  for (size_t i = lo; i < end && !one; i++) {
    struct pin_fd *f = &ps->fds[i];
    struct kernel_lock l;
    if (f->lock_pid < 0) f->lock_pid = fd_flock(f->pid, f->fd, &l) ? l.pid : 0;
    named = named || f->lock_pid == locker;
  }
  for (size_t i = lo; i < end; i++)
    if ((!named || ps->fds[i].lock_pid == locker) && (*n == 0 || v[*n - 1] != ps->fds[i].pid))
      v[(*n)++] = ps->fds[i].pid;
  *out = v;
  return 0;
}

static int pid_key_cmp(const void *a, const void *b) {
  const pid_t *x = a, *y = b;
  return (*x > *y) - (*x < *y);
}

static int pid_cmp(const void *a, const void *b) {
  const struct proc_info *x = a, *y = b;
  return (x->pid > y->pid) - (x->pid < y->pid);
}

/* The process pid, looked up in /proc on first use; NULL on ENOMEM (or if
 * pid is not one of those procs_init was given). */
static struct proc_info *proc_get(struct procs *ps, pid_t pid) {
  struct proc_info key = {.pid = pid};
  struct proc_info *p = bsearch(&key, ps->v, ps->n, sizeof(*ps->v), pid_cmp);
  if (!p || p->known) return p;
  if (!(p->command = cn_proc_command(pid))) return NULL;
  p->gone = cn_proc_start_time(pid) == 0;
  p->known = true;
  return p;
}

/* Calls fn with one pin; file is the pin file (NULL if it has none), purpose
 * the annotation's. */
static int pin_emit(cairn_store *st, struct procs *ps, const struct cairn_pin_rec *base,
                    const struct stat *file, cairn_pin_fn fn, void *arg) {
  struct cairn_pin_rec rec = *base;
  cairn_autofree char *purpose = NULL;
  cairn_autofree char *inherited = NULL;
  cairn_autofree pid_t *held_by = NULL;
  const struct proc_info *p = proc_get(ps, rec.pid);
  if (!p) return cairn_fail(st, -ENOMEM, "out of memory listing pins");
  rec.command = p->command;
  if (p->detached && *rec.purpose) { /* a daemon's annotation: its mount is detached */
    if (!(purpose = cn_xasprintf("%s (detached)", rec.purpose)))
      return cairn_fail(st, -ENOMEM, "out of memory listing pins");
    rec.purpose = purpose;
  }
  if (!rec.stale && file && p->gone) {
    /* The locker exited; the lock lives on in what inherited it. */
    if (inode_holders(st, ps, file, rec.pid, &held_by, &rec.n_held_by) < 0)
      return cairn_fail(st, -ENOMEM, "out of memory listing pins");
    rec.locker_gone = true;
    rec.held_by = held_by;
    if (rec.n_held_by > 0) {
      cairn_autofree char *heir = cn_proc_command(held_by[0]);
      if (!heir || !(inherited = cn_xasprintf("%s (inherited)", heir)))
        return cairn_fail(st, -ENOMEM, "out of memory listing pins");
      rec.command = inherited;
    }
  }
  return fn(&rec, arg);
}

/* Copies an id (at most CAIRN_ID_LEN characters): listings copy thousands,
 * snprintf would be most of their cost. */
static void id_copy(cairn_id dst, const char *src) {
  size_t n = strnlen(src, CAIRN_ID_LEN);
  memcpy(dst, src, n);
  dst[n] = '\0';
}

/* An annotation: who pins a target and why. */
struct note {
  enum cairn_pin_kind kind;
  uint64_t prefix; /* the target's first bytes (target_prefix) */
  cairn_id target;
  pid_t pid;
  char *purpose; /* the note before's, if shared */
  bool shared;
  int64_t since;
};

struct notes {
  struct note *v;
  size_t n;
};

static void notes_free(struct notes *ns) {
  for (size_t i = 0; i < ns->n; i++)
    if (!ns->v[i].shared) free(ns->v[i].purpose);
  free(ns->v);
  *ns = (struct notes){0};
}

static int key_cmp(enum cairn_pin_kind ka, const char *ia, enum cairn_pin_kind kb, const char *ib) {
  return ka != kb ? (ka < kb ? -1 : 1) : strcmp(ia, ib);
}

/* In listing order (since, pid) within a target. */
static int since_pid_cmp(const struct note *x, const struct note *y) {
  if (x->since != y->since) return x->since < y->since ? -1 : 1;
  return (x->pid > y->pid) - (x->pid < y->pid);
}

/* The first 8 bytes of a target, in an integer that compares as strcmp
 * would (bytes as unsigned, a shorter string first): sorting 10,000 notes
 * by strcmp alone took 5 ms here. */
static uint64_t target_prefix(const char *target) {
  uint64_t o = 0;
  for (size_t i = 0; i < 8 && target[i]; i++)
    o |= (uint64_t)(unsigned char)target[i] << (56 - 8 * i);
  return o;
}

/* By target, then in listing order. */
static int note_cmp(const void *a, const void *b) {
  const struct note *x = a, *y = b;
  if (x->kind != y->kind) return x->kind < y->kind ? -1 : 1;
  if (x->prefix != y->prefix) return x->prefix < y->prefix ? -1 : 1;
  int c = strcmp(x->target, y->target);
  return c ? c : since_pid_cmp(x, y);
}

/* Pointers to notes in listing order: since, pid, then by target. */
static int note_ptr_listing_cmp(const void *a, const void *b) {
  const struct note *x = *(const struct note *const *)a, *y = *(const struct note *const *)b;
  int c = since_pid_cmp(x, y);
  return c ? c : key_cmp(x->kind, x->target, y->kind, y->target);
}

/* The annotations of every target, or of those of one id, or of one kind
 * and id (kind < 0: any), sorted by target (note_cmp). */
static int notes_read(cairn_store *st, int kind, const char *id, struct notes *out) {
  *out = (struct notes){0};
  cn_mounts_settle(st); /* a mount's annotations, written right after it answered */
  cn_autostmt sqlite3_stmt *q = NULL;
  int r = cn_db_prepare(st, &q,
                        "SELECT kind, target, pid, purpose, since FROM pins"
                        " WHERE (?1 < 0 OR kind = ?1) AND (?2 IS NULL OR target = ?2)");
  if (r < 0) return r;
  sqlite3_bind_int(q, 1, kind);
  sqlite3_bind_text(q, 2, id, -1, SQLITE_STATIC);
  size_t cap = 0;
  while ((r = sqlite3_step(q)) == SQLITE_ROW) {
    struct note *v = cn_array_grow(out->v, out->n, &cap, sizeof(*v));
    if (!v) {
      notes_free(out);
      return cairn_fail(st, -ENOMEM, "out of memory reading pin annotations");
    }
    out->v = v;
    struct note *n = &out->v[out->n];
    const char *purpose = (const char *)sqlite3_column_text(q, 3);
    /* a pinner's notes come together, with one purpose: it is shared */
    bool shared = out->n && strcmp(n[-1].purpose, purpose) == 0;
    *n = (struct note){.kind = (enum cairn_pin_kind)sqlite3_column_int(q, 0),
                       .pid = sqlite3_column_int(q, 2),
                       .purpose = shared ? n[-1].purpose : strdup(purpose),
                       .shared = shared,
                       .since = sqlite3_column_int64(q, 4)};
    id_copy(n->target, (const char *)sqlite3_column_text(q, 1));
    n->prefix = target_prefix(n->target);
    out->n++;
    if (!n->purpose) {
      notes_free(out);
      return cairn_fail(st, -ENOMEM, "out of memory reading pin annotations");
    }
  }
  if (r != SQLITE_DONE) {
    notes_free(out);
    return cn_store_fail_db(st, "pin annotations");
  }
  if (out->n) qsort(out->v, out->n, sizeof(*out->v), note_cmp); /* not by SQLite's sorter */
  return 0;
}

/* Whether one of the n notes of run is pid's. */
static bool run_has_pid(const struct note *run, size_t n, pid_t pid) {
  for (size_t i = 0; i < n; i++)
    if (run[i].pid == pid) return true;
  return false;
}

/* The annotations of one target: a run of the sorted notes. */
static const struct note *notes_of(const struct notes *ns, enum cairn_pin_kind kind, const char *id,
                                   size_t *n) {
  size_t lo = 0, hi = ns->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (key_cmp(ns->v[mid].kind, ns->v[mid].target, kind, id) < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  size_t end = lo;
  while (end < ns->n && key_cmp(ns->v[end].kind, ns->v[end].target, kind, id) == 0) end++;
  *n = end - lo;
  return ns->v + lo;
}

/* Every process that a note or a lock names, each looked up once, later. */
static int procs_init(cairn_store *st, const struct notes *ns, const struct kernel_locks *kl,
                      struct procs *out) {
  *out = (struct procs){0};
  if (ns->n + kl->n == 0) return 0;
  /* thousands of pins, a few processes: a pid among the last 8 kept is not
   * kept again, and the rest are sorted as bare ints before they get their
   * records */
  cairn_autofree pid_t *pids = malloc((ns->n + kl->n) * sizeof(*pids));
  size_t n = 0;
  for (size_t i = 0; pids && i < ns->n + kl->n; i++) {
    pid_t pid = i < ns->n ? ns->v[i].pid : kl->v[i - ns->n].pid;
    size_t k = n;
    while (k > 0 && k + 8 > n && pids[k - 1] != pid) k--;
    if (k == 0 || k + 8 <= n) pids[n++] = pid;
  }
  n = pids ? cn_sort_unique(pids, n, sizeof(*pids), pid_key_cmp) : 0;
  if (!pids || !(out->v = calloc(n, sizeof(*out->v))))
    return cairn_fail(st, -ENOMEM, "out of memory listing pins");
  for (out->n = 0; out->n < n; out->n++) out->v[out->n].pid = pids[out->n];
  pid_t *detached; /* one scan of the mount records for every process */
  size_t n_detached;
  int r = cn_mount_detached_pids(st, &detached, &n_detached);
  for (size_t i = 0; r == 0 && i < n_detached; i++) {
    struct proc_info key = {.pid = detached[i]}, *p;
    if ((p = bsearch(&key, out->v, out->n, sizeof(*out->v), pid_cmp))) p->detached = true;
  }
  free(detached);
  if (r < 0) procs_free(out);
  return r;
}

/* A target, with its pin file's inode as stat(2) saw it once. */
struct pin_target {
  enum cairn_pin_kind kind;
  cairn_id id;
  size_t order; /* its place in the listing */
  bool have_file;
  struct stat file;
};

struct pin_targets {
  struct pin_target *v; /* by key (target_find) */
  size_t n, cap;
};

static int target_key_cmp(const void *a, const void *b) {
  const struct pin_target *x = a, *y = b;
  return key_cmp(x->kind, x->id, y->kind, y->id);
}

static const struct pin_target *target_find(const struct pin_targets *t, enum cairn_pin_kind kind,
                                            const char *id) {
  struct pin_target key = {.kind = kind};
  id_copy(key.id, id);
  return t->n ? bsearch(&key, t->v, t->n, sizeof(*t->v), target_key_cmp) : NULL;
}

/* Calls fn for the pins of one target: its annotations (run), then its
 * kernel locks that no annotation explains. The locks (kl) were read after
 * the annotations: a pinner locks before it annotates, so an annotation
 * whose pid holds no lock in kl belongs to a pin released since (stale).
 * With no kl, the rows as they are if each annotation on a pin file has its
 * lock and each lock its annotation (listing_ahead_holds). */
static int target_rows(cairn_store *st, const struct kernel_locks *kl, struct procs *ps,
                       const struct note *run, size_t n_run, const struct pin_target *t,
                       cairn_pin_fn fn, void *arg) {
  const struct stat *file = t->have_file ? &t->file : NULL;
  int r = 0;
  for (size_t i = 0; i < n_run && r == 0; i++) {
    struct cairn_pin_rec rec = {.kind = t->kind,
                                .target = t->id,
                                .pid = run[i].pid,
                                .purpose = run[i].purpose,
                                .since = run[i].since,
                                .stale =
                                    !file || (kl && !cn_inode_locked_by(kl, file, run[i].pid))};
    r = pin_emit(st, ps, &rec, file, fn, arg);
  }
  size_t n_locks = 0;
  const struct kernel_lock *locks = file && kl ? cn_locks_on(kl, file, &n_locks) : NULL;
  for (size_t k = 0; k < n_locks && r == 0; k++) {
    if (run_has_pid(run, n_run, locks[k].pid)) continue; /* annotated, and so live */
    struct cairn_pin_rec rec = {
        .kind = t->kind, .target = t->id, .pid = locks[k].pid, .purpose = ""};
    r = pin_emit(st, ps, &rec, file, fn, arg);
  }
  return r;
}

static int targets_add(struct pin_targets *t, enum cairn_pin_kind kind, const char *id,
                       size_t order, const struct stat *file) {
  struct pin_target *v = cn_array_grow(t->v, t->n, &t->cap, sizeof(*v));
  if (!v) return -ENOMEM;
  t->v = v;
  t->v[t->n] = (struct pin_target){.kind = kind, .order = order, .have_file = file != NULL};
  if (file) t->v[t->n].file = *file;
  id_copy(t->v[t->n].id, id); /* ids are checked */
  t->n++;
  return 0;
}

/* Whether readdir's d_ino is its entries' st_ino and they share the
 * directory's st_dev on the file system of fd: true of the local file
 * systems a store lives on, not of overlayfs or network ones. */
static bool dino_is_st_ino(int fd) {
  struct statfs sf;
  if (fstatfs(fd, &sf) < 0) return false;
  switch ((unsigned long)sf.f_type) {
  case EXT4_SUPER_MAGIC: /* also ext2, ext3 */
  case XFS_SUPER_MAGIC:
  case TMPFS_MAGIC:
  case BTRFS_SUPER_MAGIC: return true;
  default: return false;
  }
}

/* The targets to list: with dirs, every target that has a pin file (first,
 * in directory order), then every other target an annotation names (in
 * listing order); optionally of one id only. Each pin file is stat'ed once,
 * here. */
static int pin_targets_collect(cairn_store *st, const char *filter_id, bool dirs,
                               const struct notes *ns, struct pin_targets *out) {
  *out = (struct pin_targets){0};
  int r = 0;
  for (int kind = CAIRN_PIN_IMAGE; dirs && kind <= CAIRN_PIN_LAYER && r == 0; kind++) {
    cairn_autoclosedir DIR *d = cn_opendirat(st->pin_dir_fd[kind], ".");
    struct dirent *de;
    struct stat s, dir_st;
    /* 0: not known yet; 1: d_ino and the directory's st_dev are the pin
     * files' inode (on the file systems known to keep it so, and checked
     * once by a stat; overlayfs, for one, may not); -1: stat every file. */
    int dino = d && fstat(dirfd(d), &dir_st) == 0 && dino_is_st_ino(dirfd(d)) ? 0 : -1;
    while (d && r == 0 && (de = readdir(d))) {
      if (!cn_is_hex_id(de->d_name, CAIRN_ID_LEN)) continue;
      if (filter_id && strcmp(filter_id, de->d_name) != 0) continue;
      if (dino == 1) {
        s = dir_st;
        s.st_ino = de->d_ino;
      } else {
        if (fstatat(dirfd(d), de->d_name, &s, AT_SYMLINK_NOFOLLOW) < 0) continue; /* deleted */
        if (dino == 0) dino = s.st_dev == dir_st.st_dev && s.st_ino == de->d_ino ? 1 : -1;
      }
      r = targets_add(out, kind, de->d_name, out->n, &s);
    }
  }
  size_t n_files = out->n;
  if (r == 0 && n_files) qsort(out->v, n_files, sizeof(*out->v), target_key_cmp);
  /* the notes are sorted by target, each run in listing order: a target
   * that readdir did not see is placed by its first note's place in the
   * listing */
  cairn_autofree const struct note **heads = NULL;
  size_t n_heads = 0, cap_heads = 0;
  for (size_t i = 0; i < ns->n && r == 0; i++) {
    const struct note *n = &ns->v[i];
    if (i > 0 && key_cmp(n->kind, n->target, ns->v[i - 1].kind, ns->v[i - 1].target) == 0) continue;
    struct pin_target key = {.kind = n->kind};
    id_copy(key.id, n->target);
    if (n_files && bsearch(&key, out->v, n_files, sizeof(*out->v), target_key_cmp)) continue;
    const struct note **v = cn_array_grow(heads, n_heads, &cap_heads, sizeof(*v));
    if (!v)
      r = -ENOMEM;
    else
      (heads = v)[n_heads++] = n;
  }
  if (r == 0 && n_heads) qsort(heads, n_heads, sizeof(*heads), note_ptr_listing_cmp);
  for (size_t i = 0; i < n_heads && r == 0; i++) {
    struct stat s;
    r = targets_add(out, heads[i]->kind, heads[i]->target, n_files + i,
                    cn_pin_stat(st, heads[i]->kind, heads[i]->target, &s) ? &s : NULL);
  }
  if (r < 0) return cairn_fail(st, r, "out of memory listing pins");
  if (out->n > n_files) qsort(out->v, out->n, sizeof(*out->v), target_key_cmp);
  return 0;
}

/* Whether the annotation's pid holds a lock on its target's pin file. */
static bool note_locked(const struct pin_targets *t, const struct note *note,
                        const struct kernel_locks *kl) {
  const struct pin_target *target = target_find(t, note->kind, note->target);
  return target && target->have_file && cn_inode_locked_by(kl, &target->file, note->pid);
}

/* The pin files (inodes, sorted) and the pids of the annotations of ns
 * that kl shows no lock for. */
struct unlocked {
  struct stat *inodes;
  pid_t *pids;
  size_t n, cap_inodes, cap_pids, n_pids;
};

static void unlocked_free(struct unlocked *u) {
  free(u->inodes);
  free(u->pids);
  *u = (struct unlocked){0};
}

static int unlocked_find(const struct notes *ns, const struct pin_targets *t,
                         const struct kernel_locks *kl, struct unlocked *u) {
  unlocked_free(u);
  for (size_t i = 0; i < ns->n; i++) {
    const struct pin_target *target = target_find(t, ns->v[i].kind, ns->v[i].target);
    if (!target || !target->have_file || /* no file: no lock, surely */
        cn_inode_locked_by(kl, &target->file, ns->v[i].pid))
      continue;
    struct stat *v = cn_array_grow(u->inodes, u->n, &u->cap_inodes, sizeof(*v));
    if (v) (u->inodes = v)[u->n++] = target->file;
    pid_t *p = v ? cn_array_grow(u->pids, u->n_pids, &u->cap_pids, sizeof(*p)) : NULL;
    if (!p) return -ENOMEM;
    (u->pids = p)[u->n_pids++] = ns->v[i].pid;
  }
  if (u->n) qsort(u->inodes, u->n, sizeof(*u->inodes), inode_cmp_stat);
  u->n_pids = cn_sort_unique(u->pids, u->n_pids, sizeof(*u->pids), pid_key_cmp); /* each once */
  return 0;
}

/* Adds to kl, the first read of /proc/locks (cn_kernel_locks_first), the locks
 * of the annotations ns that it missed. A pinner locks before it
 * annotates, so a read after ns shows the lock of every live pin in ns. The
 * first read may be the prefetched one, taken while ns was read: a pin taken
 * meanwhile may be in ns and not in that read, and it looks unlocked, as
 * below, until the read again after ns. A read of /proc/locks is not
 * atomic: it comes a page at a time, each page found again by its place in
 * a list that every lock taken or dropped on the host shifts (SQLite's,
 * too), so a line can be
 * skipped; with thousands of locks that is common. So when an annotation
 * looks unlocked, /proc/locks is read again and the two are joined; if one
 * still does, its lock is looked for where the kernel shows it per file, in
 * /proc/PID/fdinfo of the fds on its pin file: first among the annotating
 * processes' own fds, then, for what remains (a lock a dead locker passed
 * on), among every process's. An annotation is stale only if all of that
 * shows no lock of its pid. */
static int locks_read_again(cairn_store *st, const struct notes *ns, const struct pin_targets *t,
                            struct kernel_locks *kl) {
  int r = 0;
  struct unlocked u = {0};
  for (int step = 0; r == 0 && step < 3; step++) {
    if ((r = unlocked_find(ns, t, kl, &u)) < 0 || u.n == 0) break;
    struct confirm c = {u.inodes, u.n, kl, kl->n};
    if (step == 0) {
      struct kernel_locks again;
      if ((r = cn_kernel_locks_read(st, &again)) < 0) break;
      for (size_t i = 0; r == 0 && i < again.n; i++) r = cn_locks_add(kl, &c.cap, &again.v[i]);
      free(again.v);
    } else {
      r = proc_pin_fds_walk(st, step == 1 ? u.pids : NULL, u.n_pids, fd_locks_add, &c);
    }
    cn_locks_sort(kl);
  }
  unlocked_free(&u);
  if (r < 0) {
    free(kl->v);
    *kl = (struct kernel_locks){0};
    return cairn_fail(st, r, "/proc/locks: %s", strerror(-r));
  }
  return 0;
}

/* The locks for the annotations ns: the first read, then as many more as
 * its unlocked-looking annotations ask (locks_read_again). */
static int locks_read_for(cairn_store *st, const struct notes *ns, const struct pin_targets *t,
                          struct kernel_locks *kl) {
  int r = cn_kernel_locks_first(st, kl);
  return r < 0 ? r : locks_read_again(st, ns, t, kl);
}

/* Deletes the annotations (ns) whose pid holds no lock on their target's
 * pin file; returns how many. */
static int stale_delete(cairn_store *st, const struct notes *ns) {
  if (ns->n == 0) return 0;
  struct pin_targets targets;
  int r = pin_targets_collect(st, NULL, false, ns, &targets);
  if (r < 0) return r;
  struct kernel_locks kl;
  r = locks_read_for(st, ns, &targets, &kl);
  cn_autostmt sqlite3_stmt *d = NULL;
  int n = 0;
  for (size_t i = 0; r == 0 && i < ns->n; i++) {
    if (note_locked(&targets, &ns->v[i], &kl)) continue;
    if (!d && (r = cn_db_prepare(st, &d,
                                 "DELETE FROM pins WHERE kind = ? AND target = ? AND pid = ?")) < 0)
      break;
    sqlite3_bind_int(d, 1, ns->v[i].kind);
    sqlite3_bind_text(d, 2, ns->v[i].target, -1, SQLITE_STATIC);
    sqlite3_bind_int(d, 3, ns->v[i].pid);
    if (sqlite3_step(d) != SQLITE_DONE) r = cn_store_fail_db(st, "stale pin annotation");
    sqlite3_reset(d);
    n++;
  }
  free(kl.v);
  free(targets.v);
  return r < 0 ? r : n;
}

static int target_order_cmp(const void *a, const void *b) {
  const struct pin_target *const *x = a, *const *y = b;
  return ((*x)->order > (*y)->order) - ((*x)->order < (*y)->order);
}

/* What a listing has read, target by target in listing order. */
struct pins_listing {
  struct notes notes;
  struct pin_targets targets;
  const struct pin_target **order; /* targets, in listing order */
};

/* Calls fn for the pins of every target, in order (see target_rows); with
 * no kl, ahead of the host's locks: every annotation on a pin file is taken
 * for live, and no lock for one that no annotation explains. */
static int listing_rows(cairn_store *st, const struct pins_listing *l,
                        const struct kernel_locks *kl, struct procs *ps, cairn_pin_fn fn,
                        void *arg) {
  int r = 0;
  for (size_t i = 0; r == 0 && i < l->targets.n; i++) {
    size_t n_run;
    const struct note *run = notes_of(&l->notes, l->order[i]->kind, l->order[i]->id, &n_run);
    r = target_rows(st, kl, ps, run, n_run, l->order[i], fn, arg);
  }
  return r;
}

/* Whether every process of ps is running (each is looked up now): rows are
 * given ahead of the locks only then. An annotation of a process that has
 * exited is stale, or its lock lives on in what inherited it; which one,
 * only the locks say, and the second is costly to list (inode_holders). */
static bool procs_all_running(struct procs *ps) {
  for (size_t i = 0; i < ps->n; i++) {
    const struct proc_info *p = proc_get(ps, ps->v[i].pid);
    if (!p || p->gone) return false;
  }
  return true;
}

/* Whether the rows given ahead of the locks (listing_rows with no kl) are
 * the rows kl gives: on every target's pin file, the pids of its
 * annotations are the pids of its locks. */
static bool listing_ahead_holds(const struct pins_listing *l, const struct kernel_locks *kl) {
  for (size_t i = 0; i < l->targets.n; i++) {
    const struct pin_target *t = &l->targets.v[i];
    if (!t->have_file) continue; /* its annotations are stale either way */
    size_t n_run, n_locks;
    const struct note *run = notes_of(&l->notes, t->kind, t->id, &n_run);
    const struct kernel_lock *locks = cn_locks_on(kl, &t->file, &n_locks);
    for (size_t j = 0; j < n_run; j++) /* a few of each */
      if (!cn_locks_have_pid(locks, n_locks, run[j].pid)) return false;
    for (size_t k = 0; k < n_locks; k++)
      if (!run_has_pid(run, n_run, locks[k].pid)) return false;
  }
  return true;
}

int cairn_pins_foreach_ahead(cairn_store *st, const char *filter_id, cairn_pin_fn fn,
                             void (*undo)(void *arg), void *arg) {
  store_errclear(st);
  cairn_pins_prefetch(st);
  struct pins_listing l = {0};
  struct kernel_locks kl = {0};
  struct procs procs = {0};
  bool ahead = false; /* rows were given ahead of the locks */
  int r = notes_read(st, -1, filter_id, &l.notes);
  if (r < 0) goto out;
  store_test_point(st, "pins: annotations read");
  if ((r = pin_targets_collect(st, filter_id, true, &l.notes, &l.targets)) < 0) goto out;
  if (l.targets.n && !(l.order = malloc(l.targets.n * sizeof(*l.order)))) {
    r = cairn_fail(st, -ENOMEM, "out of memory listing pins");
    goto out;
  }
  for (size_t i = 0; i < l.targets.n; i++) l.order[i] = &l.targets.v[i];
  if (l.targets.n) qsort(l.order, l.targets.n, sizeof(*l.order), target_order_cmp);
  if (undo && st->locks_prefetch) { /* while the thread reads the locks */
    if ((r = procs_init(st, &l.notes, &kl, &procs)) < 0) goto out;
    if ((ahead = procs_all_running(&procs)) && (r = listing_rows(st, &l, NULL, &procs, fn, arg)))
      goto out;
  }
  /* see target_rows; rows given ahead that the first read bears out need
   * no more */
  if ((r = cn_kernel_locks_first(st, &kl)) < 0 || (ahead && listing_ahead_holds(&l, &kl)) ||
      (r = locks_read_again(st, &l.notes, &l.targets, &kl)) < 0 ||
      (ahead && listing_ahead_holds(&l, &kl)))
    goto out;
  if (ahead) undo(arg); /* a stale pin, or an unexplained lock: given again, right */
  procs_free(&procs);
  if ((r = procs_init(st, &l.notes, &kl, &procs)) == 0)
    r = listing_rows(st, &l, &kl, &procs, fn, arg);
out:
  if (r == 0) r = cn_snapshot_pin_rows(st, filter_id, fn, arg); /* no lock: no process */
  cn_pins_prefetch_drop(st); /* not joined if the listing failed before */
  procs_free(&procs);
  free(l.order);
  free(l.targets.v);
  free(kl.v);
  notes_free(&l.notes);
  return r;
}

/* ---- containerd's snapshots as holders ---- */

/* The snapshots holding the layers that match ?1 (a layer id, an image id
 * for its layers, or NULL for all): committed ones by their own rows,
 * active ones and views by their parent's. */
#define SNAP_HOLDS_SQL                                                                             \
  "SELECT l.layer, s.name, s.created FROM snapshot_layers l"                                       \
  " JOIN snapshots s ON s.id = l.snapshot_id WHERE " SNAP_MATCH                                    \
  " UNION SELECT l.layer, c.name, c.created FROM snapshots c JOIN snapshots p"                     \
  " ON p.name = c.parent AND c.kind != 3 JOIN snapshot_layers l ON l.snapshot_id = p.id "          \
  "WHERE " SNAP_MATCH " ORDER BY 1, 2"
#define SNAP_MATCH                                                                                 \
  "(?1 IS NULL OR l.layer = ?1 OR l.layer IN (SELECT layer_id FROM image_layers"                   \
  " WHERE image_id = ?1))"
#define SNAP_HOLDERS_SHOWN 3

/* 1 if the store has snapshot_layers (a snapshotter used it), 0, or < 0. */
static int snapshot_layers_exist(cairn_store *st) {
  cn_autostmt sqlite3_stmt *q = NULL;
  int r = cn_db_prepare(st, &q,
                        "SELECT 1 FROM sqlite_master WHERE type = 'table'"
                        " AND name = 'snapshot_layers'");
  if (r < 0) return r;
  r = sqlite3_step(q);
  return r == SQLITE_ROW ? 1 : r == SQLITE_DONE ? 0 : cn_store_fail_db(st, "snapshot_layers");
}

/* containerd's key of a snapshot named NAMESPACE/N/KEY by its proxy (the
 * name else). */
static const char *snapshot_key(const char *name) {
  const char *p = strchr(name, '/');
  if (!p || p == name || !p[1]) return name;
  const char *q = p + 1 + strspn(p + 1, "0123456789");
  return q > p + 1 && *q == '/' && q[1] ? q + 1 : name;
}

char *cn_snapshot_holders(cairn_store *st, enum cairn_pin_kind kind, const char *id) {
  cn_autostmt sqlite3_stmt *q = NULL;
  if (snapshot_layers_exist(st) <= 0) return NULL;
  if (cn_db_prepare(st, &q,
                    kind == CAIRN_PIN_LAYER ? "SELECT DISTINCT name FROM (" SNAP_HOLDS_SQL
                                              ") WHERE layer = ?1"
                                            : "SELECT DISTINCT name FROM (" SNAP_HOLDS_SQL ")") < 0)
    return NULL;
  sqlite3_bind_text(q, 1, id, -1, SQLITE_STATIC);
  char *out = NULL;
  size_t len = 0, n = 0;
  FILE *f = open_memstream(&out, &len);
  if (!f) return NULL;
  while (sqlite3_step(q) == SQLITE_ROW) {
    if (n++ < SNAP_HOLDERS_SHOWN)
      fprintf(f, "%scontainerd snapshot %s", n > 1 ? ", " : "",
              snapshot_key((const char *)sqlite3_column_text(q, 0)));
  }
  if (n > SNAP_HOLDERS_SHOWN) fprintf(f, " and %zu more", n - SNAP_HOLDERS_SHOWN);
  fclose(f);
  if (n == 0) {
    free(out);
    return NULL;
  }
  return out;
}

int cn_snapshot_pin_rows(cairn_store *st, const char *filter_id, cairn_pin_fn fn, void *arg) {
  int r = snapshot_layers_exist(st);
  if (r <= 0) return r;
  cn_autostmt sqlite3_stmt *q = NULL;
  if ((r = cn_db_prepare(st, &q, SNAP_HOLDS_SQL)) < 0) return r;
  if (filter_id) sqlite3_bind_text(q, 1, filter_id, -1, SQLITE_STATIC);
  while ((r = sqlite3_step(q)) == SQLITE_ROW) {
    cairn_autofree char *purpose = cn_xasprintf(
        "containerd snapshot %s", snapshot_key((const char *)sqlite3_column_text(q, 1)));
    if (!purpose) return cairn_fail(st, -ENOMEM, "out of memory listing pins");
    cairn_pin_rec p = {.kind = CAIRN_PIN_LAYER,
                       .target = (const char *)sqlite3_column_text(q, 0),
                       .command = "containerd",
                       .purpose = purpose,
                       .since = sqlite3_column_int64(q, 2) / 1000000000};
    if ((r = fn(&p, arg))) return r;
  }
  return r == SQLITE_DONE ? 0 : cn_store_fail_db(st, "snapshot_layers");
}

int cairn_pins_foreach(cairn_store *st, const char *filter_id, cairn_pin_fn fn, void *arg) {
  return cairn_pins_foreach_ahead(st, filter_id, fn, NULL, arg);
}

/* In one write transaction, during which no annotation can be written, the
 * annotations are read and then /proc/locks: every annotation read was
 * written after its lock was taken, so a lock missing from the reads was
 * released. One written after the transaction is not seen. */
int cairn_pins_clean_stale(cairn_store *st) {
  store_errclear(st);
  store_test_point(st, "pins: cleaning stale");
  int r = cn_db_begin(st);
  if (r < 0) return r;
  struct notes notes;
  if ((r = notes_read(st, -1, NULL, &notes)) == 0) {
    r = stale_delete(st, &notes);
    notes_free(&notes);
  }
  if (r < 0) {
    cn_db_rollback(st);
    return r;
  }
  int c = cn_db_commit(st);
  return c < 0 ? c : r;
}

/* Appends "pid N (COMMAND)[ held by pid A,B] PURPOSE" of a live pin. */
static int holder_describe(const struct cairn_pin_rec *p, void *arg) {
  FILE *f = arg;
  if (p->stale) return 0;
  fprintf(f, "%spid %d (%s)", ftell(f) ? "; " : "", (int)p->pid, p->command);
  for (size_t j = 0; j < p->n_held_by; j++)
    fprintf(f, "%s%d", j ? "," : " held by pid ", (int)p->held_by[j]);
  fprintf(f, "%s%s", *p->purpose ? " " : "", p->purpose);
  return 0;
}

char *cairn_pin_holders(cairn_store *st, enum cairn_pin_kind kind, const char *id) {
  store_errclear(st);
  struct notes notes;
  struct kernel_locks kl = {0};
  struct procs procs = {0};
  struct pin_target t = {.kind = kind};
  id_copy(t.id, id);
  t.have_file = cn_pin_stat(st, kind, id, &t.file);
  if (notes_read(st, kind, id, &notes) < 0) return strdup("unknown holders");
  char *out = NULL;
  size_t len = 0;
  FILE *f = NULL;
  if (cn_kernel_locks_read(st, &kl) == 0 && procs_init(st, &notes, &kl, &procs) == 0 &&
      (f = open_memstream(&out, &len)))
    target_rows(st, &kl, &procs, notes.v, notes.n, &t, holder_describe, f);
  procs_free(&procs);
  free(kl.v);
  notes_free(&notes);
  if (f) fclose(f);
  return f ? out : strdup("unknown holders");
}
