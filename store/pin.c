/*
 * pin.c — pins: shared flock(2) locks on one file per image and per layer
 * under STORE/pins/{image,layer}/ID, plus annotations in SQLite that say
 * who pins and why.
 *
 * Invariants
 * - The kernel lock is the truth. An annotation counts only while a lock by
 *   its pid exists on the pin file's inode (read from /proc/locks, after the
 *   annotation: pinners lock first, then annotate); the rest are stale,
 *   reported as such and deleted, after /proc/locks is read once more in
 *   the deleting transaction.
 * - A deleter takes LOCK_EX|LOCK_NB on the same file; failing that, the
 *   target is pinned. It unlinks the pin file only while holding that
 *   exclusive lock, when the target is gone.
 * - A deleter deletes the target's annotations before it unlinks the pin
 *   file: any written later belong to a pin on a new file.
 * - A locker that wins a lock on a file that was unlinked meanwhile holds
 *   nothing: after every lock we check that the path still names the inode
 *   we locked, and start again if it does not.
 */
#include "internal.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>

#define PIN_RELOCK_LIMIT 1000

struct pin {
  enum cairn_pin_kind kind;
  cairn_id id;
  int fd;
};

struct cairn_pinset {
  char *purpose;
  bool cloexec;
  struct pin *pins;
  size_t n, cap;
};

static const char *kind_dir(enum cairn_pin_kind kind) {
  return kind == CAIRN_PIN_IMAGE ? "image" : "layer";
}

int pin_path(cairn_store *st, enum cairn_pin_kind kind, const char *id, char *buf, size_t len) {
  if (!is_hex_id(id, CAIRN_ID_LEN)) return store_fail(st, -EINVAL, "%s: not an id", id);
  snprintf(buf, len, "%s/pins/%s/%s", st->dir, kind_dir(kind), id);
  return 0;
}

/* Opens the pin file and locks it with op; returns the fd once the lock is
 * known to be on the inode the path names. */
static int pin_open_locked(cairn_store *st, enum cairn_pin_kind kind, const char *id, int op,
                           bool cloexec) {
  char path[PATH_MAX];
  int r = pin_path(st, kind, id, path, sizeof(path));
  if (r < 0) return r;
  for (int attempt = 0; attempt < PIN_RELOCK_LIMIT; attempt++) {
    int fd = open(path, O_RDONLY | O_CREAT | O_NOFOLLOW | (cloexec ? O_CLOEXEC : 0), 0600);
    if (fd < 0) return store_fail(st, -errno, "%s: %s", path, strerror(errno));
    while (flock(fd, op) < 0) {
      int e = errno;
      if (e == EINTR) continue;
      close(fd);
      return e == EWOULDBLOCK ? -EBUSY : store_fail(st, -e, "%s: %s", path, strerror(e));
    }
    struct stat locked, named;
    if (fstat(fd, &locked) == 0 && stat(path, &named) == 0 && locked.st_dev == named.st_dev &&
        locked.st_ino == named.st_ino)
      return fd;
    close(fd); /* the file was unlinked (its target deleted) while we waited */
  }
  return store_fail(st, -EAGAIN, "%s: pin file keeps being replaced", path);
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

static int annotation_write(cairn_store *st, enum cairn_pin_kind kind, const char *id,
                            const char *purpose) {
  _cleanup_stmt_ sqlite3_stmt *s = NULL;
  int r = db_prepare(st, &s,
                     "INSERT OR REPLACE INTO pins(kind, target, pid, pid_start, purpose, since)"
                     " VALUES(?, ?, ?, ?, ?, ?)");
  if (r < 0) return r;
  sqlite3_bind_int(s, 1, kind);
  sqlite3_bind_text(s, 2, id, -1, SQLITE_STATIC);
  sqlite3_bind_int(s, 3, getpid());
  sqlite3_bind_int64(s, 4, (sqlite3_int64)proc_start_time(getpid()));
  sqlite3_bind_text(s, 5, purpose, -1, SQLITE_STATIC);
  sqlite3_bind_int64(s, 6, now_seconds());
  return sqlite3_step(s) == SQLITE_DONE ? 0 : store_fail_db(st, "pin annotation");
}

int cairn_pin_take(cairn_store *st, cairn_pinset *ps, enum cairn_pin_kind kind, const char *id) {
  for (size_t i = 0; i < ps->n; i++)
    if (ps->pins[i].kind == kind && strcmp(ps->pins[i].id, id) == 0) return 0;
  if (ps->n == ps->cap) {
    size_t cap = ps->cap ? 2 * ps->cap : 8;
    struct pin *v = realloc(ps->pins, cap * sizeof(*v));
    if (!v) return -ENOMEM;
    ps->pins = v;
    ps->cap = cap;
  }
  int fd = pin_open_locked(st, kind, id, LOCK_SH, ps->cloexec);
  if (fd < 0) return fd;
  int r = annotation_write(st, kind, id, ps->purpose);
  if (r < 0) {
    close(fd);
    return r;
  }
  struct pin *p = &ps->pins[ps->n++];
  p->kind = kind;
  snprintf(p->id, sizeof(p->id), "%s", id);
  p->fd = fd;
  return 0;
}

void cairn_pinset_release(cairn_store *st, cairn_pinset *ps) {
  if (!ps) return;
  if (ps->n) {
    sqlite3_stmt *s = NULL;
    if (db_prepare(st, &s, "DELETE FROM pins WHERE kind = ? AND target = ? AND pid = ?") == 0) {
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
  for (size_t i = 0; i < ps->n; i++) close(ps->pins[i].fd);
  free(ps->pins);
  free(ps->purpose);
  free(ps);
}

int cairn_pin_image(cairn_store *st, cairn_pinset *ps, const char *image_id) {
  int r = cairn_pin_take(st, ps, CAIRN_PIN_IMAGE, image_id);
  if (r < 0) return r;
  char **layers = NULL;
  size_t n = 0;
  if ((r = cairn_image_layers(st, image_id, &layers, &n)) < 0) return r;
  for (size_t i = 0; i < n && r == 0; i++) r = cairn_pin_take(st, ps, CAIRN_PIN_LAYER, layers[i]);
  cairn_strv_free(layers, n);
  return r;
}

int pin_lock_exclusive(cairn_store *st, enum cairn_pin_kind kind, const char *id) {
  return pin_open_locked(st, kind, id, LOCK_EX | LOCK_NB, true);
}

void pin_unlock(int fd) {
  if (fd >= 0) close(fd);
}

void pin_delete_unlock(cairn_store *st, enum cairn_pin_kind kind, const char *id, int fd) {
  /* The annotations go first, while the exclusive lock keeps every pinner
   * out: once the file is unlinked, a pinner may lock a new one and
   * annotate at once, and that annotation must stay. */
  _cleanup_stmt_ sqlite3_stmt *s = NULL;
  if (db_prepare(st, &s, "DELETE FROM pins WHERE kind = ? AND target = ?") == 0) {
    sqlite3_bind_int(s, 1, kind);
    sqlite3_bind_text(s, 2, id, -1, SQLITE_STATIC);
    sqlite3_step(s);
  }
  char path[PATH_MAX];
  if (pin_path(st, kind, id, path, sizeof(path)) == 0) unlink(path);
  store_test_point(st, "pin: unlinked");
  close(fd);
}

/* ---- who holds what: /proc/locks ------------------------------------- */

struct kernel_lock {
  unsigned maj, min;
  unsigned long ino;
  pid_t pid;
};

struct kernel_locks {
  struct kernel_lock *v;
  size_t n;
};

/* Reads the FLOCK locks that are held (not waited for) from /proc/locks. */
static int kernel_locks_read(struct kernel_locks *out) {
  out->v = NULL;
  out->n = 0;
  FILE *f = fopen("/proc/locks", "re");
  if (!f) return -errno;
  char line[512];
  size_t cap = 0;
  while (fgets(line, sizeof(line), f)) {
    if (strstr(line, "->")) continue; /* a waiter, not a holder */
    char type[16], adv[16], mode[16];
    int pid;
    unsigned maj, min;
    unsigned long ino;
    if (sscanf(line, "%*d: %15s %15s %15s %d %x:%x:%lu", type, adv, mode, &pid, &maj, &min, &ino) !=
        7)
      continue;
    if (strcmp(type, "FLOCK") != 0) continue;
    if (out->n == cap) {
      cap = cap ? 2 * cap : 64;
      struct kernel_lock *v = realloc(out->v, cap * sizeof(*v));
      if (!v) {
        fclose(f);
        return -ENOMEM;
      }
      out->v = v;
    }
    out->v[out->n++] = (struct kernel_lock){maj, min, ino, pid};
  }
  fclose(f);
  return 0;
}

static bool lock_matches(const struct kernel_lock *l, const struct stat *s) {
  return l->ino == s->st_ino && l->maj == major(s->st_dev) && l->min == minor(s->st_dev);
}

static bool inode_locked_by(const struct kernel_locks *kl, const struct stat *s, pid_t pid) {
  for (size_t i = 0; i < kl->n; i++)
    if (lock_matches(&kl->v[i], s) && (pid <= 0 || kl->v[i].pid == pid)) return true;
  return false;
}

bool cairn_pin_is_held(cairn_store *st, enum cairn_pin_kind kind, const char *id) {
  char path[PATH_MAX];
  struct stat s;
  if (pin_path(st, kind, id, path, sizeof(path)) < 0 || stat(path, &s) < 0) return false;
  struct kernel_locks kl;
  if (kernel_locks_read(&kl) < 0) return false;
  bool held = inode_locked_by(&kl, &s, 0);
  free(kl.v);
  return held;
}

static void iso_time(int64_t t, char *buf, size_t len) {
  time_t tt = (time_t)t;
  struct tm tm;
  gmtime_r(&tt, &tm);
  strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* Live processes with an open fd on the inode: who holds a lock that a
 * now-dead process took and passed on (cairn-pin hold's command). */
static json_t *inode_holders(const struct stat *s) {
  json_t *pids = json_array();
  DIR *proc = opendir("/proc");
  struct dirent *p;
  while (proc && (p = readdir(proc))) {
    pid_t pid = (pid_t)atoi(p->d_name);
    if (pid <= 0) continue;
    char fddir[64];
    snprintf(fddir, sizeof(fddir), "/proc/%d/fd", (int)pid);
    int dfd = open(fddir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *fds = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (!fds && dfd >= 0) close(dfd);
    struct dirent *f;
    struct stat fs;
    while (fds && (f = readdir(fds))) {
      if (f->d_name[0] == '.' || fstatat(dfd, f->d_name, &fs, 0) < 0) continue;
      if (fs.st_dev == s->st_dev && fs.st_ino == s->st_ino) {
        json_array_append_new(pids, json_integer(pid));
        break;
      }
    }
    if (fds) closedir(fds);
  }
  if (proc) closedir(proc);
  return pids;
}

static json_t *pin_row(enum cairn_pin_kind kind, const char *id, const struct stat *file, pid_t pid,
                       const char *purpose, int64_t since, bool stale) {
  char when[32] = "";
  if (since > 0) iso_time(since, when, sizeof(when));
  _cleanup_free_ char *cmd = proc_command(pid);
  json_t *row = json_pack("{s:s, s:s, s:i, s:s, s:s, s:s?, s:b}", "target", id, "kind",
                          kind_dir(kind), "pid", (json_int_t)pid, "command", cmd, "purpose",
                          purpose, "since", since > 0 ? when : NULL, "stale", stale);
  if (!stale && file && proc_start_time(pid) == 0) {
    /* The locker exited; the lock lives on in what inherited it. */
    json_t *held_by = inode_holders(file);
    if (json_array_size(held_by) > 0) {
      _cleanup_free_ char *heir =
          proc_command((pid_t)json_integer_value(json_array_get(held_by, 0)));
      json_object_set_new(row, "command", json_sprintf("%s (inherited)", heir));
    }
    json_object_set_new(row, "held_by", held_by);
  }
  return row;
}

/* The annotations (kind, target, pid, purpose, since) of every target, or
 * of those of one id, or of one kind and id (kind < 0: any). */
static json_t *annotations_read(cairn_store *st, int kind, const char *id) {
  json_t *notes = json_array();
  _cleanup_stmt_ sqlite3_stmt *q = NULL;
  if (db_prepare(st, &q,
                 "SELECT kind, target, pid, purpose, since FROM pins"
                 " WHERE (?1 < 0 OR kind = ?1) AND (?2 IS NULL OR target = ?2)"
                 " ORDER BY since, pid") < 0)
    return notes;
  sqlite3_bind_int(q, 1, kind);
  sqlite3_bind_text(q, 2, id, -1, SQLITE_STATIC);
  while (sqlite3_step(q) == SQLITE_ROW)
    json_array_append_new(
        notes, json_pack("{s:i, s:s, s:i, s:s, s:I}", "kind", sqlite3_column_int(q, 0), "target",
                         (const char *)sqlite3_column_text(q, 1), "pid", sqlite3_column_int(q, 2),
                         "purpose", (const char *)sqlite3_column_text(q, 3), "since",
                         (json_int_t)sqlite3_column_int64(q, 4)));
  return notes;
}

static bool note_is_of(json_t *note, enum cairn_pin_kind kind, const char *id) {
  return json_integer_value(json_object_get(note, "kind")) == kind &&
         strcmp(json_string_value(json_object_get(note, "target")), id) == 0;
}

/* Adds the rows of one target: its annotations (from notes), then its
 * kernel locks that no annotation explains. The locks (kl) were read after
 * the annotations: a pinner locks before it annotates, so an annotation
 * whose pid holds no lock in kl belonged to a pin released since. Those are
 * appended to *stale. */
static void pin_rows_for_target(cairn_store *st, const struct kernel_locks *kl, json_t *notes,
                                enum cairn_pin_kind kind, const char *id, json_t *rows,
                                json_t *stale) {
  char path[PATH_MAX];
  struct stat s;
  bool have_file = pin_path(st, kind, id, path, sizeof(path)) == 0 && stat(path, &s) == 0;
  pid_t annotated[256];
  size_t n_annotated = 0, i;
  json_t *note;
  json_array_foreach(notes, i, note) {
    if (!note_is_of(note, kind, id)) continue;
    pid_t pid = (pid_t)json_integer_value(json_object_get(note, "pid"));
    bool live = have_file && inode_locked_by(kl, &s, pid);
    _cleanup_free_ char *purpose =
        mount_pin_purpose(st, pid, json_string_value(json_object_get(note, "purpose")));
    json_array_append_new(rows,
                          pin_row(kind, id, have_file ? &s : NULL, pid, purpose ? purpose : "",
                                  json_integer_value(json_object_get(note, "since")), !live));
    if (!live)
      json_array_append_new(
          stale, json_pack("{s:i,s:s,s:i}", "kind", kind, "target", id, "pid", (json_int_t)pid));
    else if (n_annotated < 256)
      annotated[n_annotated++] = pid;
  }
  if (!have_file) return;
  for (size_t k = 0; k < kl->n; k++) {
    if (!lock_matches(&kl->v[k], &s)) continue;
    bool known = false;
    for (size_t j = 0; j < n_annotated && !known; j++) known = annotated[j] == kl->v[k].pid;
    if (!known) json_array_append_new(rows, pin_row(kind, id, &s, kl->v[k].pid, "", 0, false));
  }
}

/* Deletes the stale annotations the listing found, unless their pin was
 * taken again meanwhile (a release, then a new pin by the same pid): in
 * one write transaction, during which no annotation can be written, a
 * fresh read of /proc/locks decides. An annotation written before the
 * transaction had its lock taken before, so the read shows it; one
 * written after the transaction is not deleted. */
static void stale_delete(cairn_store *st, json_t *stale) {
  if (json_array_size(stale) == 0) return;
  store_test_point(st, "pins: stale found");
  _cleanup_stmt_ sqlite3_stmt *d = NULL;
  if (db_prepare(st, &d, "DELETE FROM pins WHERE kind = ? AND target = ? AND pid = ?") < 0 ||
      db_begin(st) < 0)
    return;
  struct kernel_locks kl;
  if (kernel_locks_read(&kl) < 0) {
    db_rollback(st);
    return;
  }
  size_t i;
  json_t *row;
  json_array_foreach(stale, i, row) {
    enum cairn_pin_kind kind =
        (enum cairn_pin_kind)json_integer_value(json_object_get(row, "kind"));
    const char *id = json_string_value(json_object_get(row, "target"));
    pid_t pid = (pid_t)json_integer_value(json_object_get(row, "pid"));
    char path[PATH_MAX];
    struct stat s;
    if (pin_path(st, kind, id, path, sizeof(path)) == 0 && stat(path, &s) == 0 &&
        inode_locked_by(&kl, &s, pid))
      continue;
    sqlite3_bind_int(d, 1, kind);
    sqlite3_bind_text(d, 2, id, -1, SQLITE_STATIC);
    sqlite3_bind_int(d, 3, pid);
    sqlite3_step(d);
    sqlite3_reset(d);
  }
  free(kl.v);
  db_commit(st);
}

/* Every target that has a pin file or an annotation (in notes),
 * optionally of one id only. */
static void pin_targets_collect(cairn_store *st, const char *filter_id, json_t *notes,
                                json_t *targets) {
  for (int kind = CAIRN_PIN_IMAGE; kind <= CAIRN_PIN_LAYER; kind++) {
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s/pins/%s", st->dir, kind_dir(kind));
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d))) {
      if (!is_hex_id(de->d_name, CAIRN_ID_LEN)) continue;
      if (filter_id && strcmp(filter_id, de->d_name) != 0) continue;
      json_array_append_new(targets, json_pack("{s:i,s:s}", "kind", kind, "target", de->d_name));
    }
    if (d) closedir(d);
  }
  size_t i, j;
  json_t *note, *t;
  json_array_foreach(notes, i, note) {
    enum cairn_pin_kind kind =
        (enum cairn_pin_kind)json_integer_value(json_object_get(note, "kind"));
    const char *id = json_string_value(json_object_get(note, "target"));
    bool seen = false;
    json_array_foreach(targets, j, t) seen |= note_is_of(t, kind, id);
    if (!seen) json_array_append_new(targets, json_pack("{s:i,s:s}", "kind", kind, "target", id));
  }
}

json_t *cairn_pins_json(cairn_store *st, const char *filter_id) {
  _cleanup_json_ json_t *notes = annotations_read(st, -1, filter_id);
  store_test_point(st, "pins: annotations read");
  struct kernel_locks kl;
  int r = kernel_locks_read(&kl); /* after the annotations: see pin_rows_for_target */
  if (r < 0) {
    store_fail(st, r, "/proc/locks: %s", strerror(-r));
    return NULL;
  }
  json_t *rows = json_array();
  _cleanup_json_ json_t *stale = json_array();
  _cleanup_json_ json_t *targets = json_array();
  pin_targets_collect(st, filter_id, notes, targets);
  size_t i;
  json_t *t;
  json_array_foreach(targets, i, t) pin_rows_for_target(
      st, &kl, notes, (enum cairn_pin_kind)json_integer_value(json_object_get(t, "kind")),
      json_string_value(json_object_get(t, "target")), rows, stale);
  free(kl.v);
  stale_delete(st, stale);
  return rows;
}

int pin_clean_stale(cairn_store *st) {
  json_t *rows = cairn_pins_json(st, NULL);
  if (!rows) return -EIO;
  int n = 0;
  size_t i;
  json_t *row;
  json_array_foreach(rows, i, row) n += json_is_true(json_object_get(row, "stale"));
  json_decref(rows);
  return n;
}

char *cairn_pin_holders(cairn_store *st, enum cairn_pin_kind kind, const char *id) {
  _cleanup_json_ json_t *notes = annotations_read(st, kind, id);
  struct kernel_locks kl;
  if (kernel_locks_read(&kl) < 0) return strdup("unknown holders");
  _cleanup_json_ json_t *rows = json_array();
  _cleanup_json_ json_t *stale = json_array();
  pin_rows_for_target(st, &kl, notes, kind, id, rows, stale);
  free(kl.v);
  char *out = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&out, &len);
  if (!f) return NULL;
  size_t i;
  json_t *row;
  bool first = true;
  json_array_foreach(rows, i, row) {
    if (json_is_true(json_object_get(row, "stale"))) continue;
    const char *purpose = json_string_value(json_object_get(row, "purpose"));
    fprintf(f, "%spid %d (%s)", first ? "" : "; ",
            (int)json_integer_value(json_object_get(row, "pid")),
            json_string_value(json_object_get(row, "command")));
    json_t *held_by = json_object_get(row, "held_by");
    size_t j;
    json_t *h;
    json_array_foreach(held_by, j, h)
        fprintf(f, "%s%d", j ? "," : " held by pid ", (int)json_integer_value(h));
    fprintf(f, "%s%s", *purpose ? " " : "", purpose);
    first = false;
  }
  fclose(f);
  return out;
}

int cairn_pin_wait_free(cairn_store *st, const char *image_id, int64_t timeout_ms) {
  struct timespec start, now;
  clock_gettime(CLOCK_MONOTONIC, &start);
  for (;;) {
    int fd = pin_lock_exclusive(st, CAIRN_PIN_IMAGE, image_id);
    if (fd >= 0) {
      _cleanup_free_ char *desc = NULL;
      int live = mount_live_for_image(st, image_id, &desc);
      pin_unlock(fd);
      if (live == 0) return 0;
      if (live < 0) return live;
    } else if (fd != -EBUSY) {
      return fd;
    }
    clock_gettime(CLOCK_MONOTONIC, &now);
    int64_t waited = (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000;
    if (timeout_ms >= 0 && waited >= timeout_ms) return -ETIMEDOUT;
    usleep(50 * 1000);
  }
}
