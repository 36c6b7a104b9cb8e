/*
 * mount.c — mountpoints and mount records: which directory a cairnfs
 * daemon serves, for which image, with which pid.
 *
 * A mountpoint is named by its real path: every front end resolves what the
 * user typed with cairn_mountpoint_resolve, so a record, a mountinfo line
 * and a later umount always name the same directory.
 *
 * A record is live while its daemon (pid and start time) runs and its
 * directory is a fuse.cairnfs mount point; a live record keeps the image
 * from rm and gc even in the moment its daemon's pins are not held (a
 * restart). A record whose directory is verifiably not served (no such
 * mount, or the daemon gone) is stale: it never keeps anything and is
 * cleaned when seen.
 */
#include "internal.h"

#include <limits.h>
#include <string.h>
#include <sys/vfs.h>

#define MAX_SYMLINKS 40 /* as the kernel's path walk */

static int copy_path(char *out, size_t len, const char *a, const char *b) {
  int n = b ? snprintf(out, len, "%s/%s", strcmp(a, "/") == 0 ? "" : a, b)
            : snprintf(out, len, "%s", a);
  return n >= 0 && (size_t)n < len ? 0 : -ENAMETOOLONG;
}

int cairn_mountpoint_resolve(const char *dir, char *out, size_t len) {
  char path[PATH_MAX], parent[PATH_MAX], joined[PATH_MAX], target[PATH_MAX];
  int r = copy_path(path, sizeof(path), dir, NULL);
  for (int links = 0; r == 0 && links <= MAX_SYMLINKS; links++) {
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') path[--n] = '\0';
    char *slash = strrchr(path, '/');
    char *name = slash ? slash + 1 : path;
    if (!*name || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
      return realpath(path, joined) ? copy_path(out, len, joined, NULL) : -errno;
    if (slash) *slash = '\0';
    if (!realpath(!slash ? "." : slash == path ? "/" : path, parent)) return -errno;
    if ((r = copy_path(joined, sizeof(joined), parent, name)) < 0) return r;
    /* readlink never asks the file system mounted at joined: a dead
     * daemon's mount fails lstat and realpath with ENOTCONN, not this. */
    ssize_t k = readlink(joined, target, sizeof(target));
    if (k < 0) return copy_path(out, len, joined, NULL);
    if ((size_t)k >= sizeof(target)) return -ENAMETOOLONG;
    target[k] = '\0';
    r = target[0] == '/' ? copy_path(path, sizeof(path), target, NULL)
                         : copy_path(path, sizeof(path), parent, target);
  }
  return r < 0 ? r : -ELOOP;
}

int cairn_mount_record(cairn_store *st, const char *dir, const char *image_id, pid_t pid, bool rw) {
  _cleanup_stmt_ sqlite3_stmt *s = NULL;
  int r = db_prepare(st, &s,
                     "INSERT OR REPLACE INTO mounts(dir, image_id, pid, pid_start, rw,"
                     " since) VALUES(?, ?, ?, ?, ?, ?)");
  if (r < 0) return r;
  sqlite3_bind_text(s, 1, dir, -1, SQLITE_STATIC);
  sqlite3_bind_text(s, 2, image_id, -1, SQLITE_STATIC);
  sqlite3_bind_int(s, 3, pid);
  sqlite3_bind_int64(s, 4, (sqlite3_int64)proc_start_time(pid));
  sqlite3_bind_int(s, 5, rw);
  sqlite3_bind_int64(s, 6, now_seconds());
  return sqlite3_step(s) == SQLITE_DONE ? 0 : store_fail_db(st, "mount record");
}

int cairn_mount_forget(cairn_store *st, const char *dir) {
  _cleanup_stmt_ sqlite3_stmt *s = NULL;
  int r = db_prepare(st, &s, "DELETE FROM mounts WHERE dir = ?");
  if (r < 0) return r;
  sqlite3_bind_text(s, 1, dir, -1, SQLITE_STATIC);
  return sqlite3_step(s) == SQLITE_DONE ? 0 : store_fail_db(st, "mount record");
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

/* The file system type of the topmost mount at dir in our mount namespace
 * ("" if dir is not a mount point). */
static int mountpoint_fstype(const char *dir, char *fstype, size_t len) {
  FILE *f = fopen("/proc/self/mountinfo", "re");
  if (!f) return -errno;
  fstype[0] = '\0';
  char *line = NULL;
  size_t cap = 0;
  while (getline(&line, &cap, f) > 0) {
    /* id parent maj:min root mountpoint options... - fstype source super */
    char *save = NULL, *mnt = NULL;
    char *tok = strtok_r(line, " ", &save);
    for (int field = 0; tok && field < 4; field++) tok = strtok_r(NULL, " ", &save);
    mnt = tok;
    if (!mnt) continue;
    mountinfo_unescape(mnt);
    if (strcmp(mnt, dir) != 0) continue;
    while ((tok = strtok_r(NULL, " ", &save)) && strcmp(tok, "-") != 0) {
    }
    tok = tok ? strtok_r(NULL, " ", &save) : NULL;
    if (tok) snprintf(fstype, len, "%s", tok); /* later lines are mounted on top */
  }
  free(line);
  fclose(f);
  return 0;
}

int cairn_mountpoint_state(const char *dir) {
  char fstype[256];
  int r = mountpoint_fstype(dir, fstype, sizeof(fstype));
  if (r < 0) return r;
  if (!fstype[0]) return CAIRN_MP_NONE;
  if (strcmp(fstype, "fuse.cairnfs") != 0) return CAIRN_MP_OTHER;
  struct statfs sf;
  if (statfs(dir, &sf) == 0) return CAIRN_MP_LIVE;
  return errno == ENOTCONN || errno == ECONNABORTED ? CAIRN_MP_STALE : -errno;
}

static bool dir_is_cairnfs_mount(const char *dir) {
  char fstype[256];
  return mountpoint_fstype(dir, fstype, sizeof(fstype)) == 0 && strcmp(fstype, "fuse.cairnfs") == 0;
}

/* Live: the recorded daemon runs (same pid and start time; a zombie does
 * not count: the kernel has dropped its pins and its mount is dead) and the
 * directory is a cairnfs mount. */
static bool record_live(const char *dir, pid_t pid, uint64_t start) {
  uint64_t now = proc_start_time(pid);
  return now != 0 && now == start && cairn_process_running(pid, NULL) && dir_is_cairnfs_mount(dir);
}

/* Visits records (of one image, or all); deletes the stale ones. */
static int mounts_scan(cairn_store *st, const char *image_id, json_t *out) {
  _cleanup_stmt_ sqlite3_stmt *q = NULL;
  int r = db_prepare(st, &q,
                     "SELECT dir, image_id, pid, pid_start, rw, since FROM mounts"
                     " WHERE ?1 IS NULL OR image_id = ?1 ORDER BY dir");
  if (r < 0) return r;
  sqlite3_bind_text(q, 1, image_id, -1, SQLITE_STATIC);
  while (sqlite3_step(q) == SQLITE_ROW) {
    const char *dir = (const char *)sqlite3_column_text(q, 0);
    pid_t pid = sqlite3_column_int(q, 2);
    bool live = record_live(dir, pid, (uint64_t)sqlite3_column_int64(q, 3));
    json_array_append_new(out,
                          json_pack("{s:s, s:s, s:i, s:s, s:b}", "dir", dir, "image",
                                    (const char *)sqlite3_column_text(q, 1), "pid", pid, "state",
                                    live ? "live" : "stale", "rw", sqlite3_column_int(q, 4) != 0));
  }
  return 0;
}

json_t *cairn_mounts_json(cairn_store *st) {
  json_t *rows = json_array();
  if (mounts_scan(st, NULL, rows) < 0) {
    json_decref(rows);
    return NULL;
  }
  return rows;
}

int mount_live_for_image(cairn_store *st, const char *image_id, char **desc) {
  _cleanup_json_ json_t *rows = json_array();
  int r = mounts_scan(st, image_id, rows);
  *desc = NULL;
  if (r < 0) return r;
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f) return -ENOMEM;
  int live = 0;
  size_t i;
  json_t *row;
  json_array_foreach(rows, i, row) {
    if (strcmp(json_string_value(json_object_get(row, "state")), "live") != 0) continue;
    fprintf(f, "%smount %s (cairnfs pid %d)", live ? "; " : "",
            json_string_value(json_object_get(row, "dir")),
            (int)json_integer_value(json_object_get(row, "pid")));
    live++;
  }
  fclose(f);
  *desc = buf;
  return live;
}

int mount_clean_stale(cairn_store *st) {
  _cleanup_json_ json_t *rows = cairn_mounts_json(st);
  if (!rows) return -EIO;
  int n = 0;
  size_t i;
  json_t *row;
  json_array_foreach(rows, i, row) {
    if (strcmp(json_string_value(json_object_get(row, "state")), "stale") != 0) continue;
    cairn_mount_forget(st, json_string_value(json_object_get(row, "dir")));
    n++;
  }
  return n;
}
