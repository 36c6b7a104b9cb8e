/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pin.c — pins: shared flock(2) locks on one file per image and per layer
 * under STORE/pins/{image,layer}/ID, plus annotations in SQLite that say
 * who pins and why. This file takes, deletes and waits for them;
 * pin_locks.c reads who holds what from /proc/locks, pin_list.c lists them
 * (and deletes stale annotations). The invariants are the three files'.
 *
 * Invariants
 * - The kernel lock is the truth. An annotation counts only while a lock by
 *   its pid exists on the pin file's inode (read from /proc/locks, after the
 *   annotation: pinners lock first, then annotate; a lock that the read of
 *   /proc/locks seems to miss is looked for in a second read, then in
 *   /proc/PID/fdinfo of the fds on the pin file); the rest are stale.
 *   Listings report them; only cairn_pins_clean_stale deletes them, deciding
 *   in the deleting transaction itself (annotations, then /proc/locks).
 * - Only a listing that shows who holds a lock a dead locker passed on, or
 *   that must confirm a lock /proc/locks did not show, walks /proc/PID/fd
 *   (and stats only the fds on files of pins/), once however many such
 *   pins it has; the pinned flags of image and layer listings read
 *   /proc/locks alone.
 * - A listing costs one read of /proc/locks, one query of the annotations
 *   and the pin directories' entries (their d_ino; a stat per pin file only
 *   where d_ino is not st_ino), however many pins: locks and targets are
 *   sorted and searched, and each process is looked up once.
 * - A deleter takes LOCK_EX|LOCK_NB on the same file; failing that, the
 *   target is pinned. It unlinks the pin file only while holding that
 *   exclusive lock, when the target is gone.
 * - A deleter deletes the target's annotations before it unlinks the pin
 *   file: any written later belong to a pin on a new file.
 * - A locker that wins a lock on a file that was unlinked meanwhile holds
 *   nothing: after every lock we check that the path still names the inode
 *   we locked, and start again if it does not.
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

#define PIN_RELOCK_LIMIT 1000

struct pin {
  enum cairn_pin_kind kind;
  cairn_id id;
  int fd;
  bool annotated;
};

struct cairn_pinset {
  char *purpose;
  bool cloexec;
  struct pin *pins;
  size_t n, cap;
};

const char *cn_pin_kind_dir(enum cairn_pin_kind kind) {
  return kind == CAIRN_PIN_IMAGE ? "image" : "layer";
}

int cn_pin_path(cairn_store *st, enum cairn_pin_kind kind, const char *id, char *buf, size_t len) {
  if (!cn_is_hex_id(id, CAIRN_ID_LEN)) return cairn_fail(st, -EINVAL, "%s: not an id", id);
  snprintf(buf, len, "%s/pins/%s/%s", st->dir, cn_pin_kind_dir(kind), id);
  return 0;
}

/* Opens the pin file and locks it with op; returns the fd once the lock is
 * known to be on the inode the path names. */
static int pin_open_locked(cairn_store *st, enum cairn_pin_kind kind, const char *id, int op,
                           bool cloexec) {
  char path[PATH_MAX];
  int r = cn_pin_path(st, kind, id, path, sizeof(path));
  if (r < 0) return r;
  for (int attempt = 0; attempt < PIN_RELOCK_LIMIT; attempt++) {
    /* Through STORE/pins/KIND as the store's opening checked it. */
    int dfd = st->pin_dir_fd[kind];
    int fd = openat(dfd, id, O_RDONLY | O_CREAT | O_NOFOLLOW | (cloexec ? O_CLOEXEC : 0), 0600);
    if (fd < 0) return cairn_fail(st, -errno, "%s: %s", path, strerror(errno));
    while (flock(fd, op) < 0) {
      int e = errno;
      if (e == EINTR) continue;
      close(fd);
      return e == EWOULDBLOCK ? -EBUSY : cairn_fail(st, -e, "%s: %s", path, strerror(e));
    }
    struct stat locked, named;
    if (fstat(fd, &locked) == 0 && fstatat(dfd, id, &named, AT_SYMLINK_NOFOLLOW) == 0 &&
        locked.st_dev == named.st_dev && locked.st_ino == named.st_ino)
      return fd;
    close(fd); /* the file was unlinked (its target deleted) while we waited */
  }
  return cairn_fail(st, -EAGAIN, "%s: pin file keeps being replaced", path);
}

cairn_pinset *cairn_pinset_new(const char *purpose, bool cloexec) {
  cairn_pinset *ps = calloc(1, sizeof(*ps));
  if (!ps) return NULL;
  ps->purpose = strdup(purpose ? purpose : "");
  ps->cloexec = cloexec;
  if (!ps->purpose) {
    free(ps);
    return NULL;
  }
  return ps;
}

int cn_pin_lock(cairn_store *st, cairn_pinset *ps, enum cairn_pin_kind kind, const char *id) {
  for (size_t i = 0; i < ps->n; i++)
    if (ps->pins[i].kind == kind && strcmp(ps->pins[i].id, id) == 0) return 0;
  struct pin *v = cn_array_grow(ps->pins, ps->n, &ps->cap, sizeof(*v));
  if (!v) return cairn_fail(st, -ENOMEM, "out of memory pinning %s", id);
  ps->pins = v;
  int fd = pin_open_locked(st, kind, id, LOCK_SH, ps->cloexec);
  if (fd < 0) return fd;
  struct pin *p = &ps->pins[ps->n++];
  p->kind = kind;
  snprintf(p->id, sizeof(p->id), "%s", id);
  p->fd = fd;
  p->annotated = false;
  return 1;
}

int cn_pin_annotate(cairn_store *st, cairn_pinset *ps) {
  size_t todo = 0;
  for (size_t i = 0; i < ps->n; i++) todo += !ps->pins[i].annotated;
  if (todo == 0) return 0;
  cn_autostmt sqlite3_stmt *s = NULL;
  int r = cn_db_prepare(st, &s,
                        "INSERT OR REPLACE INTO pins(kind, target, pid, pid_start, purpose, since)"
                        " VALUES(?, ?, ?, ?, ?, ?)");
  if (r < 0) return r;
  /* Several in one transaction (one write of the log, not one each),
   * unless the caller has its own open. */
  bool txn = todo > 1 && sqlite3_get_autocommit(st->db);
  if (txn && (r = cn_db_begin(st)) < 0) return r;
  sqlite3_int64 start = (sqlite3_int64)cn_proc_start_time(getpid()), now = cn_now_seconds();
  for (size_t i = 0; i < ps->n && r == 0; i++) {
    if (ps->pins[i].annotated) continue;
    sqlite3_bind_int(s, 1, ps->pins[i].kind);
    sqlite3_bind_text(s, 2, ps->pins[i].id, -1, SQLITE_STATIC);
    sqlite3_bind_int(s, 3, getpid());
    sqlite3_bind_int64(s, 4, start);
    sqlite3_bind_text(s, 5, ps->purpose, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 6, now);
    if (sqlite3_step(s) != SQLITE_DONE) r = cn_store_fail_db(st, "pin annotation");
    sqlite3_reset(s);
  }
  if (txn && r == 0)
    r = cn_db_commit(st);
  else if (txn)
    cn_db_rollback(st);
  /* Marked only once written for good: a rolled-back one is written again
   * by the next call. */
  for (size_t i = 0; i < ps->n && r == 0; i++) ps->pins[i].annotated = true;
  return r;
}

int cn_pin_take(cairn_store *st, cairn_pinset *ps, enum cairn_pin_kind kind, const char *id) {
  store_errclear(st);
  int r = cn_pin_lock(st, ps, kind, id);
  if (r <= 0) return r;
  if ((r = cn_pin_annotate(st, ps)) < 0) {
    close(ps->pins[--ps->n].fd);
    return r;
  }
  return 0;
}

/* Runs on the failure paths of others: it keeps their WHY (no cn_db_prepare,
 * which would record its own). */
void cairn_pinset_release(cairn_store *st, cairn_pinset *ps) {
  if (!ps) return;
  /* The locks first: they are the truth, and who waits for them must not
   * wait for SQLite's write lock too (an annotation without its lock is
   * stale already). */
  for (size_t i = 0; i < ps->n; i++) close(ps->pins[i].fd);
  if (ps->n) {
    sqlite3_stmt *s = NULL;
    if (cn_db(st) &&
        sqlite3_prepare_v2(st->db, "DELETE FROM pins WHERE kind = ? AND target = ? AND pid = ?", -1,
                           &s, NULL) == SQLITE_OK) {
      for (size_t i = 0; i < ps->n; i++) {
        sqlite3_bind_int(s, 1, ps->pins[i].kind);
        sqlite3_bind_text(s, 2, ps->pins[i].id, -1, SQLITE_STATIC);
        sqlite3_bind_int(s, 3, getpid());
        sqlite3_step(s);
        sqlite3_reset(s);
      }
    }
    sqlite3_finalize(s);
  }
  free(ps->pins);
  free(ps->purpose);
  free(ps);
}

int cn_pin_lock_exclusive(cairn_store *st, enum cairn_pin_kind kind, const char *id) {
  return pin_open_locked(st, kind, id, LOCK_EX | LOCK_NB, true);
}

void cn_pin_unlock(int fd) {
  if (fd >= 0) close(fd);
}

void cn_pin_delete_unlock(cairn_store *st, enum cairn_pin_kind kind, const char *id, int fd) {
  /* The annotations go first, while the exclusive lock keeps every pinner
   * out: once the file is unlinked, a pinner may lock a new one and
   * annotate at once, and that annotation must stay. */
  cn_autostmt sqlite3_stmt *s = NULL;
  if (cn_db_prepare(st, &s, "DELETE FROM pins WHERE kind = ? AND target = ?") == 0) {
    sqlite3_bind_int(s, 1, kind);
    sqlite3_bind_text(s, 2, id, -1, SQLITE_STATIC);
    sqlite3_step(s);
  }
  if (cn_is_hex_id(id, CAIRN_ID_LEN)) unlinkat(st->pin_dir_fd[kind], id, 0);
  store_test_point(st, "pin: unlinked");
  close(fd);
}

int cairn_pin_wait_free(cairn_store *st, const char *image_id, int64_t timeout_ms) {
  store_errclear(st);
  struct timespec start, now;
  clock_gettime(CLOCK_MONOTONIC, &start);
  for (;;) {
    int fd = cn_pin_lock_exclusive(st, CAIRN_PIN_IMAGE, image_id);
    if (fd >= 0) {
      cairn_autofree char *desc = NULL;
      int live = cn_mount_live_for_image(st, image_id, &desc);
      cn_pin_unlock(fd);
      if (live == 0) return 0;
      if (live < 0) return live;
    } else if (fd != -EBUSY) {
      return fd;
    }
    clock_gettime(CLOCK_MONOTONIC, &now);
    int64_t waited = (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000;
    if (timeout_ms >= 0 && waited >= timeout_ms)
      return cairn_fail(st, -ETIMEDOUT, "image %.12s is still pinned or mounted after %lld ms",
                        image_id, (long long)timeout_ms);
    usleep(50 * 1000);
  }
}
