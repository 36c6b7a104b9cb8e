/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mount.c — mountpoints and mount records: which directory a cairnfs
 * daemon serves, for which image, with which pid and device.
 *
 * A mountpoint is named by its real path: every front end resolves what the
 * user typed with cairn_mountpoint_resolve, so a record, a mountinfo line
 * and a later umount always name the same directory.
 *
 * A record's daemon is cairnfs's supervisor (fs/supervisor.c), which holds
 * the session and the pins and runs a server as its child. A record's
 * state: restarting while the daemon (pid and start time) runs but no
 * server of it does; else live while its directory is that mount (same
 * device) in our mount namespace; detached while the mount is only in
 * other namespaces (a container runtime's copy outlives the host's
 * unmount: the daemon serves until the kernel ends the session); stale
 * once the daemon is gone. Live, restarting and detached records keep the
 * image from rm and gc even in the moment its daemon's pins are not held;
 * a stale one never keeps anything. A record whose daemon runs but holds
 * no lock any more (an image's mount: its session is over, it let go of
 * its upper layer's lock and its pins first and is forgetting the record
 * now) is ending, and every scan skips it as already forgotten: cairn
 * umount returns once the locks are gone, with the daemon's bookkeeping
 * after it. cn_mount_clean_stale (gc, fsck and
 * every sweep) deletes the stale records of this boot, asking only whether
 * the daemon runs; those written before this boot (/proc/stat's btime)
 * are what `cairn mount --restore` republishes, and are kept for it (it
 * reports and forgets those whose image is gone), as are those of --rw
 * mounts whose upper layer is there (left, or still locked by a server
 * killed with its daemon and not yet gone; a crash keeps a user's changes:
 * `cairn umount` drops them, `--restore` or `--resume` serves them).
 *
 * A mount that took its pins by STORE/refs records itself (and annotates
 * its pins) only after it answered, while SQLite loads: from before its
 * pins until then it holds STORE/mounting.lock shared
 * (cairn_mount_pending_begin), and every reader of records and
 * annotations first waits until it can take that lock exclusive
 * (cn_mounts_settle: at most SETTLE_POLLS polls, then it reads anyway), so
 * a listing after a mount answered shows it as before. Never while the
 * reader holds SQLite's write lock, which the pending mount waits for.
 */
#include "libcairn_pin.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/fuse.h>
#include <sched.h>
#include <spawn.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <time.h>

extern char **environ;

#define CAIRNFS_TYPE "fuse.cairnfs"
#define CAIRN_ALS_TYPE "fuse.cairn-als" /* cairnfs --als: ours too */

/* Whether a mount of fstype is one of cairnfs's: an image's or the ALS. */
static bool cairnfs_type(const char *fstype) {
  return strcmp(fstype, CAIRNFS_TYPE) == 0 || strcmp(fstype, CAIRN_ALS_TYPE) == 0;
}
#define SETTLE_POLL_NS 1000000 /* 1 ms */
#define SETTLE_POLLS 5000      /* 5 s: a mount's own wait is a few ms */
#define MAX_SYMLINKS 40        /* as the kernel's path walk */

static int copy_path(char *out, size_t len, const char *a, const char *b) {
  int n = b ? snprintf(out, len, "%s/%s", strcmp(a, "/") == 0 ? "" : a, b)
            : snprintf(out, len, "%s", a);
  return n >= 0 && (size_t)n < len ? 0 : -ENAMETOOLONG;
}

/* Whether a symlink in directory d (as fstat shows it) may be followed:
 * d is the caller's or root's and no one else may add a name to it (a
 * sticky directory such as /tmp lets others add only their own names,
 * which link_trusted refuses). */
static bool dir_trusted(const struct stat *d, uid_t me) {
  if (d->st_uid != 0 && d->st_uid != me) return false;
  return !(d->st_mode & (S_IWOTH | S_IWGRP)) || (d->st_mode & S_ISVTX);
}

/* Whether the symlink dfd/name may be followed: in a trusted directory
 * (and every directory above it on the way was one: untrusted says one
 * was not), and, in a sticky one, made by the caller or root. */
static bool link_trusted(int dfd, const char *name, bool untrusted, uid_t me) {
  struct stat d, l;
  if (untrusted || fstat(dfd, &d) < 0 || !dir_trusted(&d, me)) return false;
  if (!(d.st_mode & S_ISVTX)) return true;
  return fstatat(dfd, name, &l, AT_SYMLINK_NOFOLLOW) == 0 && (l.st_uid == 0 || l.st_uid == me);
}

/* Replaces rest (the components still to walk) with target then rest. */
static int splice_link(char *rest, size_t len, const char *target, const char *after) {
  char tmp[2 * PATH_MAX];
  int n = snprintf(tmp, sizeof(tmp), "%s/%s", target, after);
  if (n < 0 || (size_t)n >= len || (size_t)n >= sizeof(tmp)) return -ENAMETOOLONG;
  memcpy(rest, tmp, (size_t)n + 1);
  return 0;
}

int cairn_path_resolve(const char *path, char *out, size_t len, int *parent_fd) {
  if (parent_fd) *parent_fd = -1;
  if (!path || !*path) return -ENOENT;
  char rest[2 * PATH_MAX], name[NAME_MAX + 1], target[PATH_MAX], here[PATH_MAX];
  if (path[0] == '/') {
    if (strlen(path) >= sizeof(rest)) return -ENAMETOOLONG;
    snprintf(rest, sizeof(rest), "%s", path);
  } else {
    if (!getcwd(here, sizeof(here))) return -errno;
    if (splice_link(rest, sizeof(rest), here, path) < 0) return -ENAMETOOLONG;
  }
  uid_t me = geteuid();
  int cur = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (cur < 0) return -errno;
  bool untrusted = false; /* a directory walked was not the caller's or root's alone */
  int links = 0, r = 0;
  name[0] = '\0';
  for (;;) {
    char *p = rest;
    while (*p == '/') p++;
    if (!*p) break; /* walked it all: cur is the directory itself */
    char *end = strchr(p, '/');
    size_t n = end ? (size_t)(end - p) : strlen(p);
    if (n > NAME_MAX) {
      r = -ENAMETOOLONG;
      goto fail;
    }
    memcpy(name, p, n);
    name[n] = '\0';
    const char *after = end ? end : "";
    while (*after == '/') after++;
    bool last = !*after;
    memmove(rest, after, strlen(after) + 1);
    if (strcmp(name, ".") == 0) {
      name[0] = '\0';
      continue;
    }
    /* readlinkat never asks a file system mounted on name: a dead
     * daemon's mount answers stat with ENOTCONN, not this. */
    ssize_t k = strcmp(name, "..") == 0 ? -1 : readlinkat(cur, name, target, sizeof(target));
    if (k >= 0) {
      if ((size_t)k >= sizeof(target)) {
        r = -ENAMETOOLONG;
        goto fail;
      }
      target[k] = '\0';
      if (++links > MAX_SYMLINKS) {
        r = -ELOOP;
        goto fail;
      }
      if (!link_trusted(cur, name, untrusted, me)) {
        r = -EPERM;
        goto fail;
      }
      if ((r = splice_link(rest, sizeof(rest), target, rest)) < 0) goto fail;
      if (target[0] == '/') { /* from / again */
        close(cur);
        if ((cur = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0) return -errno;
        untrusted = false;
      }
      name[0] = '\0';
      continue;
    }
    if (last && strcmp(name, "..") != 0) break; /* the last name: never opened */
    int next = openat(cur, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (next < 0) {
      r = -errno;
      goto fail;
    }
    struct stat sb;
    if (fstat(next, &sb) < 0 || !dir_trusted(&sb, me)) untrusted = true;
    close(cur);
    cur = next;
    name[0] = '\0';
  }
  /* The parent's real path is what its fd names now. */
  char fdp[64], real[PATH_MAX];
  snprintf(fdp, sizeof(fdp), "/proc/self/fd/%d", cur);
  ssize_t k = readlink(fdp, real, sizeof(real) - 1);
  if (k <= 0) {
    r = k < 0 ? -errno : -ENOENT;
    goto fail;
  }
  real[k] = '\0';
  if (!name[0]) { /* the path ended at a directory walked into (/, .., .) */
    if ((r = copy_path(out, len, real, NULL)) < 0) goto fail;
    if (parent_fd) { /* its parent, and its name: the last of real */
      char *slash = strrchr(real, '/');
      int up = openat(cur, "..", O_PATH | O_DIRECTORY | O_CLOEXEC);
      if (up < 0) {
        r = -errno;
        goto fail;
      }
      close(cur);
      cur = up;
      if (slash && slash[1] && strlen(slash + 1) < sizeof(name))
        snprintf(name, sizeof(name), "%s", slash + 1);
      else
        snprintf(name, sizeof(name), ".");
    }
  } else if ((r = copy_path(out, len, real, name)) < 0) {
    goto fail;
  }
  if (parent_fd)
    *parent_fd = cur;
  else
    close(cur);
  return 0;
fail:
  close(cur);
  return r;
}

const char *cairn_path_why(int r) {
  return r == -EPERM ? "a symlink in a directory another user can write: not followed"
                     : strerror(-r);
}

int cairn_mountpoint_resolve(const char *dir, char *out, size_t len) {
  return cairn_path_resolve(dir, out, len, NULL);
}

/* Undoes mountinfo's octal escapes (\040 for a space, \011, \012, \134). */
static void mountinfo_unescape(char *s) {
  char *out = s;
  for (char *in = s; *in; out++) {
    if (in[0] == '\\' && in[1] >= '0' && in[1] <= '3' && in[2] >= '0' && in[2] <= '7' &&
        in[3] >= '0' && in[3] <= '7') {
      *out = (char)((in[1] - '0') * 64 + (in[2] - '0') * 8 + (in[3] - '0'));
      in += 4;
    } else {
      *out = *in++;
    }
  }
  *out = '\0';
}

/* One line of a mountinfo file: the fields cairn looks at. */
struct mount_line {
  const char *dev;    /* "maj:min" */
  const char *dir;    /* the mount point, unescaped */
  const char *fstype; /* "fuse.cairnfs" for ours */
};

/* Calls visit for each line of a mountinfo file, in order (later lines are
 * mounted on top of earlier ones); a true return stops. */
static int mountinfo_foreach(const char *file, bool (*visit)(const struct mount_line *, void *),
                             void *arg) {
  FILE *f = fopen(file, "re");
  if (!f) return -errno;
  char *line = NULL;
  size_t cap = 0;
  while (getline(&line, &cap, f) > 0) {
    /* id parent maj:min root mountpoint options... - fstype source super */
    char *save = NULL, *field[5], *tok;
    field[0] = strtok_r(line, " ", &save);
    for (int i = 1; i < 5; i++) field[i] = field[i - 1] ? strtok_r(NULL, " ", &save) : NULL;
    if (!field[4]) continue;
    while ((tok = strtok_r(NULL, " ", &save)) && strcmp(tok, "-") != 0) {
    }
    char *fstype = tok ? strtok_r(NULL, " ", &save) : NULL;
    if (!fstype) continue;
    mountinfo_unescape(field[4]);
    struct mount_line m = {.dev = field[2], .dir = field[4], .fstype = fstype};
    if (visit(&m, arg)) break;
  }
  free(line);
  fclose(f);
  return 0;
}

/* The topmost mount at a directory. */
struct mount_top {
  const char *dir;
  char dev[32];
  char fstype[256];
};

static bool top_visit(const struct mount_line *m, void *arg) {
  struct mount_top *t = arg;
  if (strcmp(m->dir, t->dir) == 0) {
    snprintf(t->dev, sizeof(t->dev), "%s", m->dev);
    snprintf(t->fstype, sizeof(t->fstype), "%s", m->fstype);
  }
  return false;
}

/* The topmost mount at dir in our namespace (fstype "" if none). */
static int mountpoint_top(const char *dir, struct mount_top *t) {
  *t = (struct mount_top){.dir = dir};
  return mountinfo_foreach("/proc/self/mountinfo", top_visit, t);
}

int cairn_mountpoint_state(const char *dir) {
  struct mount_top t;
  int r = mountpoint_top(dir, &t);
  if (r < 0) return r;
  if (!t.fstype[0]) return CAIRN_MP_NONE;
  if (!cairnfs_type(t.fstype)) return CAIRN_MP_OTHER;
  struct statfs sf;
  if (statfs(dir, &sf) == 0) return CAIRN_MP_LIVE;
  return errno == ENOTCONN || errno == ECONNABORTED ? CAIRN_MP_STALE : -errno;
}

int cairn_mountpoint_unmount(const char *dir, bool lazy) {
  /* dir is resolved again and unmounted through an fd of its parent
   * (/proc/self/fd/N/NAME) with UMOUNT_NOFOLLOW: a symlink put at it or
   * on the way since it was resolved is never followed. */
  char real[PATH_MAX], at[PATH_MAX + 64];
  int pfd = -1;
  int r = cairn_path_resolve(dir, real, sizeof(real), &pfd);
  if (r < 0) return r;
  cairn_autoclose int parent = pfd;
  if (strcmp(real, dir) != 0) return -EPERM; /* no longer the directory resolved */
  const char *slash = strrchr(real, '/');
  snprintf(at, sizeof(at), "/proc/self/fd/%d/%s", parent, slash && slash[1] ? slash + 1 : ".");
  if (umount2(at, UMOUNT_NOFOLLOW | (lazy ? MNT_DETACH : 0)) == 0) return 0;
  if (errno != EPERM) return -errno;
  char *argv[] = {"fusermount3", "-u", "-z", (char *)dir, NULL};
  if (!lazy) argv[2] = (char *)dir, argv[3] = NULL;
  pid_t pid;
  r = posix_spawnp(&pid, "fusermount3", NULL, NULL, argv, environ);
  if (r != 0) return -EPERM;
  int status;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -errno;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -EPERM;
}

int cairn_mountpoint_dev(const char *dir, char *dev, size_t len) {
  struct mount_top t;
  int r = mountpoint_top(dir, &t);
  if (r < 0) return r;
  if (!cairnfs_type(t.fstype)) return -ENOENT;
  return copy_path(dev, len, t.dev, NULL);
}

/* Whether a mountinfo file has the cairnfs mount of one device. */
struct mount_find {
  const char *dev;
  bool found;
};

static bool find_visit(const struct mount_line *m, void *arg) {
  struct mount_find *f = arg;
  f->found = strcmp(m->dev, f->dev) == 0 && cairnfs_type(m->fstype);
  return f->found;
}

/* Whether the link at path (a process's cwd, root or fd) points at dir or
 * below it: read with readlink, never followed (a stat through a FUSE
 * mount would ask its daemon, which may hang). */
static bool link_below(const char *path, const char *dir, size_t dlen) {
  char t[PATH_MAX];
  ssize_t n = readlink(path, t, sizeof(t) - 1);
  if (n < 0) return false;
  t[n] = '\0';
  return strncmp(t, dir, dlen) == 0 && (t[dlen] == '\0' || t[dlen] == '/');
}

/* Whether pid's fd (its name in /proc/PID/fd) is an O_PATH one: a handle
 * (cairnfs holds one of the directory it mounted on, under the mount)
 * that reads nothing and keeps no mount busy. */
static bool fd_is_path(long pid, const char *fd) {
  char path[96], line[64];
  snprintf(path, sizeof(path), "/proc/%ld/fdinfo/%.20s", pid, fd);
  cairn_autofclose FILE *f = fopen(path, "re");
  unsigned long flags;
  while (f && fgets(line, sizeof(line), f))
    if (sscanf(line, "flags: %lo", &flags) == 1) return (flags & O_PATH) != 0;
  return false;
}

int cairn_mount_users(const char *dir, char **desc) {
  *desc = NULL;
  cairn_autoclosedir DIR *proc = opendir("/proc");
  if (!proc) return -errno;
  char *buf = NULL;
  size_t len = 0, dlen = strlen(dir);
  FILE *f = open_memstream(&buf, &len);
  int users = 0;
  struct dirent *de;
  while (f && (de = readdir(proc))) {
    char *end, path[96];
    long pid = strtol(de->d_name, &end, 10);
    if (*end || pid <= 0 || pid == (long)getpid()) continue;
    bool uses = false;
    snprintf(path, sizeof(path), "/proc/%ld/cwd", pid);
    uses = link_below(path, dir, dlen);
    snprintf(path, sizeof(path), "/proc/%ld/root", pid);
    uses = uses || (strcmp(dir, "/") != 0 && link_below(path, dir, dlen));
    snprintf(path, sizeof(path), "/proc/%ld/fd", pid);
    cairn_autoclosedir DIR *fds = uses ? NULL : opendir(path);
    struct dirent *fe;
    while (fds && !uses && (fe = readdir(fds))) {
      if (fe->d_name[0] == '.') continue;
      snprintf(path, sizeof(path), "/proc/%ld/fd/%.20s", pid, fe->d_name);
      uses = link_below(path, dir, dlen) && !fd_is_path(pid, fe->d_name);
    }
    if (!uses) continue;
    if (users < 8) {
      cairn_autofree char *cmd = cn_proc_command((pid_t)pid);
      fprintf(f, "%spid %ld (%s)", users ? ", " : "", pid, cmd);
    } else if (users == 8)
      fputs(", ...", f);
    users++;
  }
  if (!f) return -ENOMEM;
  fclose(f);
  *desc = buf;
  return users;
}

int cairn_mount_holders(const char *dev, char **desc) {
  *desc = NULL;
  cairn_autoclosedir DIR *proc = opendir("/proc");
  if (!proc) return -errno;
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  ino_t *seen = NULL;
  size_t n_seen = 0, cap_seen = 0;
  int holders = 0;
  struct dirent *de;
  while (f && (de = readdir(proc))) {
    char *end, path[64];
    long pid = strtol(de->d_name, &end, 10);
    struct stat ns;
    snprintf(path, sizeof(path), "/proc/%ld/ns/mnt", pid);
    if (*end || pid <= 0 || stat(path, &ns) < 0) continue;
    bool known = false;
    for (size_t i = 0; i < n_seen && !known; i++) known = seen[i] == ns.st_ino;
    if (known) continue;
    ino_t *more = cn_array_grow(seen, n_seen, &cap_seen, sizeof(*seen));
    if (!more) break;
    seen = more;
    seen[n_seen++] = ns.st_ino;
    struct mount_find find = {.dev = dev};
    snprintf(path, sizeof(path), "/proc/%ld/mountinfo", pid);
    if (mountinfo_foreach(path, find_visit, &find) < 0 || !find.found) continue;
    cairn_autofree char *cmd = cn_proc_command((pid_t)pid);
    fprintf(f, "%spid %ld (%s)", holders ? ", " : "", pid, cmd);
    holders++;
  }
  free(seen);
  if (!f) return -ENOMEM;
  fclose(f);
  *desc = buf;
  return holders;
}

pid_t cairn_mount_supervisor(const char *dir) {
  char buf[16];
  ssize_t n = lgetxattr(dir, CAIRN_XATTR_SUPERVISOR, buf, sizeof(buf) - 1);
  if (n < 0) return errno == ENOTSUP || errno == ERANGE ? -ENODATA : -errno;
  buf[n] = '\0';
  char *end;
  long pid = strtol(buf, &end, 10);
  return n > 0 && !*end && pid > 0 && pid < INT_MAX ? (pid_t)pid : -ENODATA;
}

bool cairn_mount_daemon_holds(pid_t pid) {
  if (pid <= 0 || !cairn_process_running(pid, NULL)) return false;
  FILE *f = fopen("/proc/locks", "re");
  if (!f) return true; /* cannot tell: as if it held them */
  char line[256];
  bool held = false;
  while (!held && fgets(line, sizeof(line), f)) {
    /* "1: FLOCK  ADVISORY  READ 42 fe:00:123 0 EOF"; a waiter's has "->" */
    char type[16], mode[16];
    long owner;
    held = sscanf(line, "%*d: %15s %*s %15s %ld", type, mode, &owner) == 3 &&
           strcmp(type, "FLOCK") == 0 && owner == pid;
  }
  fclose(f);
  return held;
}

/* The number of the FUSE connection of a mount of device "maj:min": its
 * directory in fusectl (the kernel names it by the device number). */
static int fuse_connection(const char *dev, unsigned *conn) {
  unsigned maj, min;
  if (sscanf(dev, "%u:%u", &maj, &min) != 2) return -EINVAL;
  *conn = (maj << 20) | min;
  return 0;
}

#define FUSECTL_DIR "/sys/fs/fuse/connections"
#define FUSECTL_SUPER_MAGIC 0x65735543

/* Writes to fusectl's abort file of connection conn: 0, -ENOENT if the
 * connection is over, or -errno. */
static int abort_write(unsigned conn) {
  char path[96];
  snprintf(path, sizeof(path), FUSECTL_DIR "/%u/abort", conn);
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  int r = write(fd, "1", 1) == 1 ? 0 : -errno;
  close(fd);
  return r;
}

int cairn_mount_abort(const char *dev) {
  unsigned conn;
  int r = fuse_connection(dev, &conn);
  if (r < 0) return r;
  struct statfs sf;
  if (statfs(FUSECTL_DIR, &sf) == 0 && (unsigned long)sf.f_type == FUSECTL_SUPER_MAGIC)
    return abort_write(conn);
  /* fusectl is not mounted here: a child mounts it in a mount namespace
   * of its own (the host's stays as it is) and writes there. */
  pid_t pid = fork();
  if (pid < 0) return -errno;
  if (pid == 0) {
    if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
        mount("fusectl", FUSECTL_DIR, "fusectl", 0, NULL) < 0)
      _exit(errno == EPERM ? 2 : 1);
    r = abort_write(conn);
    _exit(r == 0 ? 0 : r == -ENOENT ? 3 : 1);
  }
  int status;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -errno;
  int code = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
  return code == 0 ? 0 : code == 3 ? -ENOENT : code == 2 ? -EPERM : -EIO;
}

int cairn_mount_record_at(cairn_store *st, const char *dir, const char *image_id, pid_t pid,
                          const char *dev, bool rw, const struct stat *under) {
  store_errclear(st);
  cn_autostmt sqlite3_stmt *s = NULL;
  /* Without under, the directory pid's record of dir had (a record
   * written again: a move, a commit) stays. */
  int r = cn_db_prepare(st, &s,
                        "INSERT OR REPLACE INTO mounts(dir, image_id, pid, pid_start, rw,"
                        " since, dev, dir_dev, dir_ino, dir_uid) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7,"
                        " CASE WHEN ?8 THEN ?9 ELSE (SELECT dir_dev FROM mounts"
                        "  WHERE dir = ?1 AND pid = ?3) END,"
                        " CASE WHEN ?8 THEN ?10 ELSE (SELECT dir_ino FROM mounts"
                        "  WHERE dir = ?1 AND pid = ?3) END,"
                        " CASE WHEN ?8 THEN ?11 ELSE (SELECT dir_uid FROM mounts"
                        "  WHERE dir = ?1 AND pid = ?3) END)");
  if (r < 0) return r;
  sqlite3_bind_text(s, 1, dir, -1, SQLITE_STATIC);
  sqlite3_bind_text(s, 2, image_id, -1, SQLITE_STATIC);
  sqlite3_bind_int(s, 3, pid);
  sqlite3_bind_int64(s, 4, (sqlite3_int64)cn_proc_start_time(pid));
  sqlite3_bind_int(s, 5, rw);
  sqlite3_bind_int64(s, 6, cn_now_seconds());
  sqlite3_bind_text(s, 7, dev, -1, SQLITE_STATIC);
  sqlite3_bind_int(s, 8, under != NULL);
  if (under) {
    sqlite3_bind_int64(s, 9, (sqlite3_int64)under->st_dev);
    sqlite3_bind_int64(s, 10, (sqlite3_int64)under->st_ino);
    sqlite3_bind_int64(s, 11, (sqlite3_int64)under->st_uid);
  }
  return sqlite3_step(s) == SQLITE_DONE ? 0 : cn_store_fail_db(st, "mount record");
}

int cairn_mount_record(cairn_store *st, const char *dir, const char *image_id, pid_t pid,
                       const char *dev, bool rw) {
  return cairn_mount_record_at(st, dir, image_id, pid, dev, rw, NULL);
}

/* Durable when it returns: umount reports the mount gone, and a power
 * cut after that must not bring its record back (as a stale mount). */
int cairn_mount_forget(cairn_store *st, const char *dir, pid_t pid) {
  store_errclear(st);
  cn_autostmt sqlite3_stmt *s = NULL;
  int r = cn_db_prepare(st, &s, "DELETE FROM mounts WHERE dir = ? AND pid = ?");
  if (r < 0) return r;
  sqlite3_bind_text(s, 1, dir, -1, SQLITE_STATIC);
  sqlite3_bind_int(s, 2, pid);
  bool own = sqlite3_get_autocommit(st->db); /* else the caller's transaction */
  if (own && (r = cn_db_begin(st)) < 0) return r;
  if (sqlite3_step(s) != SQLITE_DONE) {
    r = cn_store_fail_db(st, "mount record");
    if (own) cn_db_rollback(st);
    return r;
  }
  return own ? cn_db_commit_durable(st) : 0;
}

/* Whether a record's daemon is gone (stale). A zombie daemon does not run:
 * the kernel has dropped its pins and its session. */
static bool daemon_gone(pid_t pid, uint64_t start) {
  uint64_t now = cn_proc_start_time(pid);
  return now == 0 || now != start || !cairn_process_running(pid, NULL);
}

/* Our namespace's mounts as mountinfo lists them, read once for a scan of
 * any number of records (on the first record whose daemon runs). */
struct mount_entry {
  char *dir;
  char dev[32];
  bool cairnfs;
};

struct mount_table {
  struct mount_entry *v; /* in mountinfo order: later ones on top */
  size_t n, cap;
  bool read;
};

static void mount_table_free(struct mount_table *t) {
  for (size_t i = 0; i < t->n; i++) free(t->v[i].dir);
  free(t->v);
  *t = (struct mount_table){0};
}

static bool table_add(const struct mount_line *m, void *arg) {
  struct mount_table *t = arg;
  struct mount_entry *v = cn_array_grow(t->v, t->n, &t->cap, sizeof(*v));
  char *dir = v ? strdup(m->dir) : NULL;
  if (!dir) return true; /* out of memory: what was read is what we know */
  t->v = v;
  v[t->n] = (struct mount_entry){.dir = dir, .cairnfs = cairnfs_type(m->fstype)};
  snprintf(v[t->n].dev, sizeof(v[0].dev), "%s", m->dev);
  t->n++;
  return false;
}

/* Whether the daemon pid (cairnfs's supervisor) has a server child that
 * runs; true when that cannot be told. */
static bool server_running(pid_t pid) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)pid, (int)pid);
  FILE *f = fopen(path, "re");
  if (!f) return true;
  long child;
  bool found = false;
  while (!found && fscanf(f, "%ld", &child) == 1)
    found = child > 0 && cairn_process_running((pid_t)child, "cairnfs");
  fclose(f);
  return found;
}

/* The state of a record (see the top of the file). An empty dev (a record
 * of an older cairn) matches any cairnfs mount at dir. */
static enum cairn_mount_state record_state(struct mount_table *t, const char *dir, pid_t pid,
                                           uint64_t start, const char *dev, bool als) {
  if (daemon_gone(pid, start)) return CAIRN_MOUNT_STALE;
  if (!als && !server_running(pid)) return CAIRN_MOUNT_RESTARTING; /* the ALS serves itself */
  if (!t->read) {
    t->read = true;
    mountinfo_foreach("/proc/self/mountinfo", table_add, t);
  }
  const struct mount_entry *top = NULL; /* the topmost mount at dir */
  for (size_t i = t->n; i-- > 0 && !top;)
    if (strcmp(t->v[i].dir, dir) == 0) top = &t->v[i];
  bool here = top && top->cairnfs && (!*dev || strcmp(dev, top->dev) == 0);
  return here ? CAIRN_MOUNT_LIVE : CAIRN_MOUNT_DETACHED;
}

int cairn_mount_pending_begin(cairn_store *st) {
  return cn_lock_file(st, "mounting.lock", LOCK_SH);
}

void cairn_mount_pending_end(int fd) {
  if (fd >= 0) close(fd);
}

void cn_mounts_settle(cairn_store *st) {
  /* Never while we hold SQLite's write lock: it is what a pending mount
   * waits for to write its record (each would wait for the other, up to
   * SETTLE_POLLS, while every writer waited behind them); a caller there
   * holds the pin of the image it asks about exclusive, which no pending
   * mount of that image can, or deletes only stale annotations. (A
   * listing's read transaction settles as before.) */
  if (st->db && sqlite3_txn_state(st->db, NULL) == SQLITE_TXN_WRITE) return;
  cairn_autoclose int fd = cn_store_openat(st, "mounting.lock", O_RDONLY, 0);
  if (fd < 0) return; /* no mount ever took the fast way */
  const struct timespec poll = {.tv_nsec = SETTLE_POLL_NS};
  for (int i = 0; i < SETTLE_POLLS; i++) {
    if (flock(fd, LOCK_EX | LOCK_NB) == 0 || (errno != EWOULDBLOCK && errno != EINTR)) return;
    nanosleep(&poll, NULL);
  }
}

/* Calls fn for the records (of one image, or all), with their state. */
static int mounts_scan(cairn_store *st, const char *image_id, cairn_mount_fn fn, void *arg) {
  cn_mounts_settle(st);
  cn_autostmt sqlite3_stmt *q = NULL;
  int r = cn_db_prepare(st, &q,
                        "SELECT dir, image_id, pid, pid_start, rw, dev, dir_dev, dir_ino, dir_uid"
                        " FROM mounts"
                        " WHERE ?1 IS NULL OR image_id = ?1 ORDER BY dir");
  if (r < 0) return r;
  sqlite3_bind_text(q, 1, image_id, -1, SQLITE_STATIC);
  struct mount_table table = {0};
  int step;
  while ((step = sqlite3_step(q)) == SQLITE_ROW) {
    struct cairn_mount_rec m = {.dir = (const char *)sqlite3_column_text(q, 0),
                                .image = (const char *)sqlite3_column_text(q, 1),
                                .pid = sqlite3_column_int(q, 2),
                                .rw = sqlite3_column_int(q, 4) != 0,
                                .dev = (const char *)sqlite3_column_text(q, 5)};
    if (sqlite3_column_type(q, 6) != SQLITE_NULL && sqlite3_column_type(q, 7) != SQLITE_NULL &&
        sqlite3_column_type(q, 8) != SQLITE_NULL) {
      m.dir_known = true;
      m.dir_dev = (dev_t)sqlite3_column_int64(q, 6);
      m.dir_ino = (ino_t)sqlite3_column_int64(q, 7);
      m.dir_uid = (uid_t)sqlite3_column_int64(q, 8);
    }
    m.state = record_state(&table, m.dir, m.pid, (uint64_t)sqlite3_column_int64(q, 3), m.dev,
                           !m.image[0]);
    if (m.state != CAIRN_MOUNT_LIVE && m.state != CAIRN_MOUNT_STALE && m.image[0] &&
        !cairn_mount_daemon_holds(m.pid))
      continue; /* ending: see the top of the file */
    if ((r = fn(&m, arg)) != 0) break;
  }
  mount_table_free(&table);
  if (r != 0) return r;
  return step == SQLITE_DONE ? 0 : cn_store_fail_db(st, "mount records");
}

int cairn_mounts_foreach(cairn_store *st, cairn_mount_fn fn, void *arg) {
  store_errclear(st);
  return mounts_scan(st, NULL, fn, arg);
}

/* Appends "mount DIR (cairnfs pid N[, detached|restarting])" of a record that is not
 * stale, and counts it. */
struct live_mounts {
  FILE *f;
  int n;
};

static int live_describe(const struct cairn_mount_rec *m, void *arg) {
  struct live_mounts *l = arg;
  if (m->state == CAIRN_MOUNT_STALE) return 0;
  fprintf(l->f, "%smount %s (cairnfs pid %d%s)", l->n ? "; " : "", m->dir, (int)m->pid,
          m->state == CAIRN_MOUNT_DETACHED     ? ", detached"
          : m->state == CAIRN_MOUNT_RESTARTING ? ", restarting"
                                               : "");
  l->n++;
  return 0;
}

int cn_mount_live_for_image(cairn_store *st, const char *image_id, char **desc) {
  char *buf = NULL;
  size_t len = 0;
  *desc = NULL;
  struct live_mounts l = {.f = open_memstream(&buf, &len)};
  if (!l.f) return cairn_fail(st, -ENOMEM, "out of memory listing mounts");
  int r = mounts_scan(st, image_id, live_describe, &l);
  fclose(l.f);
  if (r < 0) {
    free(buf);
    return r;
  }
  *desc = buf;
  return l.n;
}

/* Stops the scan at the first record: 1 if it is detached, else 2. */
struct pids {
  pid_t *v;
  size_t n, cap;
};

static int detached_add(const struct cairn_mount_rec *m, void *arg) {
  struct pids *p = arg;
  if (m->state != CAIRN_MOUNT_DETACHED) return 0;
  pid_t *v = cn_array_grow(p->v, p->n, &p->cap, sizeof(*v));
  if (!v) return -ENOMEM;
  (p->v = v)[p->n++] = m->pid;
  return 0;
}

int cn_mount_detached_pids(cairn_store *st, pid_t **pids, size_t *n) {
  struct pids p = {0};
  int r = mounts_scan(st, NULL, detached_add, &p);
  if (r == -ENOMEM) r = cairn_fail(st, r, "out of memory listing mounts");
  if (r < 0) {
    free(p.v);
    p = (struct pids){0};
  }
  *pids = p.v;
  *n = p.n;
  return r;
}

/* A record whose daemon is gone. */
struct stale_mount {
  char *dir;
  pid_t pid;
};

/* When this boot began (/proc/stat's btime), in seconds since the epoch;
 * 0 if unknown. */
static int64_t boot_time(void) {
  FILE *f = fopen("/proc/stat", "re");
  if (!f) return 0;
  char line[256];
  long long t = 0;
  while (fgets(line, sizeof(line), f))
    if (sscanf(line, "btime %lld", &t) == 1) break;
  fclose(f);
  return (int64_t)t;
}

int cn_mount_clean_stale(cairn_store *st, int (*keep_rw)(cairn_store *st, const char *dir)) {
  cn_autostmt sqlite3_stmt *q = NULL;
  int r = cn_db_prepare(st, &q, "SELECT dir, pid, pid_start, since, rw, image_id FROM mounts");
  if (r < 0) return r;
  struct stale_mount *stale = NULL;
  size_t n = 0, cap = 0;
  int64_t boot = boot_time();
  while (r >= 0 && (r = sqlite3_step(q)) == SQLITE_ROW) {
    pid_t pid = sqlite3_column_int(q, 1);
    if (!daemon_gone(pid, (uint64_t)sqlite3_column_int64(q, 2))) continue;
    /* A mount of an earlier boot: cairn mount --restore republishes it
     * (not an ALS's, with no image: its unit starts it again). */
    const char *image = (const char *)sqlite3_column_text(q, 5);
    if (boot > 0 && sqlite3_column_int64(q, 3) < boot && image && image[0]) continue;
    /* A crashed --rw mount whose changes are left: listed, restorable. */
    const char *dir = (const char *)sqlite3_column_text(q, 0);
    if (sqlite3_column_int(q, 4) && keep_rw && keep_rw(st, dir) == 1) continue;
    struct stale_mount *v = cn_array_grow(stale, n, &cap, sizeof(*v));
    if (v) {
      stale = v;
      stale[n] = (struct stale_mount){strdup(dir), pid};
    }
    if (!v || !stale[n++].dir) r = cairn_fail(st, -ENOMEM, "out of memory listing stale mounts");
  }
  if (r == SQLITE_DONE)
    r = 0;
  else if (r > 0)
    r = cn_store_fail_db(st, "mount records");
  for (size_t i = 0; i < n; i++) {
    if (r == 0 && stale[i].dir) r = cairn_mount_forget(st, stale[i].dir, stale[i].pid);
    free(stale[i].dir);
  }
  free(stale);
  return r < 0 ? r : (int)n;
}

int cairn_mount_kernel_protocol(pid_t pid, unsigned *major, unsigned *minor) {
  char dir[64];
  snprintf(dir, sizeof dir, "/proc/%d/fd", (int)pid);
  DIR *d = opendir(dir);
  if (!d) return errno == ENOENT ? -ENOENT : -errno;
  int r = -ENOENT;
  struct dirent *e;
  while (r == -ENOENT && (e = readdir(d))) {
    char link[PATH_MAX], target[256];
    snprintf(link, sizeof link, "%s/%s", dir, e->d_name);
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n < 0) continue;
    target[n] = '\0';
    if (strncmp(target, "/memfd:cairnfs-init", 19) != 0) continue;
    int fd = open(link, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      r = -errno;
      break;
    }
    struct fuse_in_header h;
    struct fuse_init_in in;
    if (pread(fd, &h, sizeof h, 0) == (ssize_t)sizeof h && h.opcode == FUSE_INIT &&
        pread(fd, &in, 8, sizeof h) == 8) {
      *major = in.major;
      *minor = in.minor;
      r = 0;
    } else {
      r = -EPROTO;
    }
    close(fd);
  }
  closedir(d);
  return r;
}
