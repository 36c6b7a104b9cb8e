/* SPDX-License-Identifier: Apache-2.0 */
/*
 * upper.c — the upper layers of writable (--rw) mounts: private directories
 * of the store, STORE/uppers/ID/, that a cairnfs daemon writes a mount's
 * changes to (fs/rw.h says how they are laid out inside).
 *
 * Invariants:
 * - An upper is created 0700 with its subdirectories root/ (the changes,
 *   overlayfs-style) and work/ (copy-up staging and the hardlink index),
 *   and a file "info" naming its image and mountpoint, written before the
 *   directory is renamed to its final name: a listed upper is complete.
 * - The daemon that serves an upper holds an exclusive flock(2) on the
 *   upper's directory for as long as it runs (the kernel drops it when the
 *   daemon dies): a lock that can be taken means no live mount owns it.
 * - The image's layers and blobs are never written through an upper.
 * - When its mount's session ends, an upper is dropped only if cairn
 *   umount (without --keep) marked it "drop" before unmounting; else it
 *   is kept ("keep", as umount --keep): a session that umount(8),
 *   fusermount3 -u or a container's namespace ended drops nobody's work.
 *   While both marks are there, keep wins.
 * - Several uppers may name one mountpoint and be live: one whose mount
 *   cairn umount detached while another mount namespace holds it is
 *   served on, beside a new mount of the directory. Which one the mount at
 *   the directory serves is asked of that mount (cairn_upper_of_mount).
 * - The fresh upper of cairn commit's move names the one it moves from
 *   (info's "from") and is marked "moved" at the move's commit point; a
 *   pair that a crash of the mount's supervisor left is settled by the
 *   next scan (uppers_settle): one upper, the mount's, is left.
 */
#include "libcairn_upper.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <sys/xattr.h>

#define UPPERS "uppers"

/* Opens (creating it) STORE/uppers, O_PATH|O_DIRECTORY. */
static int uppers_dir(cairn_store *st) {
  if (mkdirat(st->dirfd, UPPERS, 0700) < 0 && errno != EEXIST)
    return cairn_fail(st, -errno, "%s/" UPPERS ": %s", st->dir, strerror(errno));
  int fd = cn_store_openat(st, UPPERS, O_PATH | O_DIRECTORY, 0);
  if (fd < 0) return cairn_fail(st, -errno, "%s/" UPPERS ": %s", st->dir, strerror(errno));
  return fd;
}

static int write_info(int dirfd, const char *image_id, const char *mountpoint, const char *from) {
  cairn_autoclose int fd =
      openat(dirfd, "info", O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return -errno;
  cairn_autofree char *text = cn_xasprintf("image %s\ndir %s\ncreated %lld\n%s%s%s", image_id,
                                           mountpoint, (long long)cn_now_seconds(),
                                           from ? "from " : "", from ? from : "", from ? "\n" : "");
  if (!text) return -ENOMEM;
  size_t len = strlen(text);
  if (write(fd, text, len) != (ssize_t)len) return errno ? -errno : -EIO;
  return fsync(fd) < 0 ? -errno : 0;
}

int cairn_upper_new_id(cairn_id id_out) {
  unsigned char rnd[32];
  if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd)) return errno ? -errno : -EIO;
  cn_hex_encode(rnd, sizeof(rnd), id_out);
  return 0;
}

/* Makes the upper id (drawn by cairn_upper_new_id). */
static int upper_make(cairn_store *st, const char *image_id, const char *mountpoint,
                      const char *from, const char *id, char *path, size_t len, int *lock_fd) {
  if (strlen(id) != CAIRN_ID_LEN || !cn_is_hex_id(id, CAIRN_ID_LEN))
    return cairn_fail(st, -EINVAL, "%s: not an upper id", id);
  cairn_autoclose int ufd = uppers_dir(st);
  if (ufd < 0) return ufd;
  char tmp[CAIRN_ID_LEN + 8];
  snprintf(tmp, sizeof(tmp), ".tmp-%.16s", id);
  if (mkdirat(ufd, tmp, 0700) < 0)
    return cairn_fail(st, -errno, "%s/" UPPERS "/%s: %s", st->dir, tmp, strerror(errno));
  cairn_autoclose int dfd = openat(ufd, tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  int r = dfd < 0 ? -errno : 0;
  if (r == 0 && (mkdirat(dfd, "root", 0755) < 0 || mkdirat(dfd, "work", 0700) < 0)) r = -errno;
  if (r == 0 && mkdirat(dfd, "work/index", 0700) < 0) r = -errno;
  if (r == 0) r = write_info(dfd, image_id, mountpoint, from);
  if (r == 0 && flock(dfd, LOCK_EX | LOCK_NB) < 0) r = -errno;
  if (r == 0 && renameat(ufd, tmp, ufd, id) < 0) r = -errno;
  if (r == 0)
    r = snprintf(path, len, "%s/" UPPERS "/%s", st->dir, id) < (int)len ? 0 : -ENAMETOOLONG;
  if (r < 0) {
    /* Best effort: an incomplete .tmp- upper is nobody's and gc may remove it. */
    return cairn_fail(st, r, "%s/" UPPERS "/%s: %s", st->dir, tmp, strerror(-r));
  }
  /* A move's fresh upper is listed from here on: its maker said which it
   * is before (fs/supervisor.c drops it if the maker dies now). */
  if (from) store_test_point(st, "upper: moved made");
  *lock_fd = dfd;
  dfd = -1;
  return 0;
}

int cairn_upper_create_moved(cairn_store *st, const char *image_id, const char *mountpoint,
                             const char *from, const char *id, char *path, size_t len,
                             int *lock_fd) {
  return upper_make(st, image_id, mountpoint, from, id, path, len, lock_fd);
}

int cairn_upper_create(cairn_store *st, const char *image_id, const char *mountpoint,
                       cairn_id id_out, char *path, size_t len, int *lock_fd) {
  int r = cairn_upper_new_id(id_out);
  if (r < 0) return cairn_fail(st, r, "getrandom: %s", strerror(-r));
  return upper_make(st, image_id, mountpoint, NULL, id_out, path, len, lock_fd);
}

#define MOVED "moved"

int cairn_upper_mark_moved(int lock_fd) {
  int fd = openat(lock_fd, MOVED, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return -errno;
  close(fd);
  return 0;
}

/* Opens uppers/id (O_RDONLY dir); -ENOENT "no such upper". */
static int upper_dirfd(cairn_store *st, int ufd, const char *id) {
  if (!cn_is_hex_id(id, strlen(id)) || strlen(id) != CAIRN_ID_LEN)
    return cairn_fail(st, -EINVAL, "%s: not an upper id", id);
  int fd = openat(ufd, id, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return cairn_fail(st, -errno, "%s: %s", id,
                      errno == ENOENT ? "no such upper" : strerror(errno));
  return fd;
}

/* Reads the info file of an upper: image id and mountpoint. */
static int read_info_from(int dirfd, char *image, size_t ilen, char *dir, size_t dlen,
                          int64_t *created, char *from, size_t flen) {
  cairn_autoclose int fd = openat(dirfd, "info", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  char buf[PATH_MAX + 256];
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  if (n <= 0) return -EBADMSG;
  buf[n] = '\0';
  image[0] = dir[0] = '\0';
  if (from) from[0] = '\0';
  *created = 0;
  for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
    if (strncmp(line, "image ", 6) == 0) snprintf(image, ilen, "%s", line + 6);
    if (strncmp(line, "dir ", 4) == 0) snprintf(dir, dlen, "%s", line + 4);
    if (strncmp(line, "created ", 8) == 0) *created = strtoll(line + 8, NULL, 10);
    if (from && strncmp(line, "from ", 5) == 0) snprintf(from, flen, "%s", line + 5);
  }
  return image[0] && dir[0] ? 0 : -EBADMSG;
}

static int read_info(int dirfd, char *image, size_t ilen, char *dir, size_t dlen,
                     int64_t *created) {
  return read_info_from(dirfd, image, ilen, dir, dlen, created, NULL, 0);
}

int cairn_upper_open(cairn_store *st, const char *id, cairn_id image_out, char *path, size_t len,
                     int *lock_fd) {
  cairn_autoclose int ufd = uppers_dir(st);
  if (ufd < 0) return ufd;
  cairn_autoclose int dfd = upper_dirfd(st, ufd, id);
  if (dfd < 0) return dfd;
  char dir[PATH_MAX], image[CAIRN_ID_LEN + 8];
  int64_t created;
  int r = read_info(dfd, image, sizeof(image), dir, sizeof(dir), &created);
  if (r < 0) return cairn_fail(st, r, "upper %.12s: no info: %s", id, strerror(-r));
  if (flock(dfd, LOCK_EX | LOCK_NB) < 0)
    return cairn_fail(st, errno == EWOULDBLOCK ? -EBUSY : -errno, "upper %.12s: %s", id,
                      errno == EWOULDBLOCK ? "in use by a live mount" : strerror(errno));
  unlinkat(dfd, "keep", 0);
  unlinkat(dfd, "drop", 0);
  snprintf(image_out, sizeof(cairn_id), "%.64s", image);
  if (snprintf(path, len, "%s/" UPPERS "/%s", st->dir, id) >= (int)len)
    return cairn_fail(st, -ENAMETOOLONG, "%s: path too long", id);
  *lock_fd = dfd;
  dfd = -1;
  return 0;
}

int cairn_upper_keep(cairn_store *st, const char *id) {
  cairn_autoclose int ufd = uppers_dir(st);
  if (ufd < 0) return ufd;
  cairn_autoclose int dfd = upper_dirfd(st, ufd, id);
  if (dfd < 0) return dfd;
  cairn_autoclose int fd = openat(dfd, "keep", O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return cairn_fail(st, -errno, "upper %.12s: keep: %s", id, strerror(errno));
  unlinkat(dfd, "drop", 0); /* after: while both are there, keep wins */
  /* Durable before umount --keep says it is done: a power cut right after
   * would otherwise list the upper stale, not kept. */
  if (fsync(dfd) < 0) return cairn_fail(st, -errno, "upper %.12s: keep: %s", id, strerror(errno));
  return 0;
}

int cairn_upper_mark_drop(cairn_store *st, const char *id, bool drop, bool *was_kept) {
  cairn_autoclose int ufd = uppers_dir(st);
  if (ufd < 0) return ufd;
  cairn_autoclose int dfd = upper_dirfd(st, ufd, id);
  if (dfd < 0) return dfd;
  struct stat sb;
  if (!drop) {
    if (was_kept && *was_kept) {
      cairn_autoclose int fd =
          openat(dfd, "keep", O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
      if (fd < 0) return cairn_fail(st, -errno, "upper %.12s: keep: %s", id, strerror(errno));
    }
    if (unlinkat(dfd, "drop", 0) < 0 && errno != ENOENT)
      return cairn_fail(st, -errno, "upper %.12s: drop: %s", id, strerror(errno));
    return 0;
  }
  if (was_kept) *was_kept = fstatat(dfd, "keep", &sb, 0) == 0;
  cairn_autoclose int fd = openat(dfd, "drop", O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return cairn_fail(st, -errno, "upper %.12s: drop: %s", id, strerror(errno));
  if (unlinkat(dfd, "keep", 0) < 0 && errno != ENOENT)
    return cairn_fail(st, -errno, "upper %.12s: drop: %s", id, strerror(errno));
  return 0;
}

int cairn_upper_session_end(cairn_store *st, const char *id, int dirfd) {
  struct stat sb;
  if (fstatat(dirfd, "keep", &sb, 0) == 0) return 0;
  if (fstatat(dirfd, "drop", &sb, 0) == 0) {
    int r = cairn_upper_discard(st, id);
    return r < 0 ? r : 1;
  }
  /* Nobody named it: the session ended by umount(8), fusermount3 -u, or
   * a container letting go. The user's changes stay, kept. */
  cairn_autoclose int fd = openat(dirfd, "keep", O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return cairn_fail(st, -errno, "upper %.12s: keep: %s", id, strerror(errno));
  return 0;
}

/* Removes everything below dirfd/name (not following symlinks), then it. */
static int remove_tree(int dirfd, const char *name) {
  struct stat sb;
  if (fstatat(dirfd, name, &sb, AT_SYMLINK_NOFOLLOW) < 0) return errno == ENOENT ? 0 : -errno;
  if (S_ISDIR(sb.st_mode)) {
    int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return -errno;
    DIR *d = fdopendir(fd);
    if (!d) {
      close(fd);
      return -errno;
    }
    struct dirent *e;
    int r = 0;
    while (r == 0 && (e = readdir(d)))
      if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
        r = remove_tree(fd, e->d_name);
    closedir(d);
    if (r < 0) return r;
  }
  return unlinkat(dirfd, name, S_ISDIR(sb.st_mode) ? AT_REMOVEDIR : 0) < 0 && errno != ENOENT
             ? -errno
             : 0;
}

/* Renames uppers/id to .gone-ID (atomic, instant): no longer listed nor
 * resumable; its files are removed by cairn_upper_drop or gc. */
static int upper_discard(cairn_store *st, int ufd, const char *id) {
  char gone[CAIRN_ID_LEN + 8];
  snprintf(gone, sizeof(gone), ".gone-%.16s", id);
  if (renameat(ufd, id, ufd, gone) < 0 && errno != ENOENT)
    return cairn_fail(st, -errno, "upper %.12s: %s", id, strerror(errno));
  return 0;
}

/* Removes uppers/id: discarded (renamed) first, so that a removal cut
 * short never leaves a half upper under a listed name. */
static int upper_remove(cairn_store *st, int ufd, const char *id) {
  int r = upper_discard(st, ufd, id);
  if (r < 0) return r;
  char gone[CAIRN_ID_LEN + 8];
  snprintf(gone, sizeof(gone), ".gone-%.16s", id);
  r = remove_tree(ufd, gone);
  return r < 0 ? cairn_fail(st, r, "upper %.12s: %s", id, strerror(-r)) : 0;
}

int cairn_upper_discard(cairn_store *st, const char *id) {
  cairn_autoclose int ufd = uppers_dir(st);
  if (ufd < 0) return ufd;
  return upper_discard(st, ufd, id);
}

int cairn_upper_drop(cairn_store *st, const char *id) {
  cairn_autoclose int ufd = uppers_dir(st);
  if (ufd < 0) return ufd;
  return upper_remove(st, ufd, id);
}

/* Sums the entries and bytes (regular files' sizes) below dirfd. */
static void tree_size(int dirfd, uint64_t *entries, uint64_t *bytes, int depth) {
  if (depth > 256) return;
  int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  DIR *d = fdopendir(fd);
  if (!d) {
    close(fd);
    return;
  }
  struct dirent *e;
  while ((e = readdir(d))) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    struct stat sb;
    if (fstatat(fd, e->d_name, &sb, AT_SYMLINK_NOFOLLOW) < 0) continue;
    (*entries)++;
    if (S_ISREG(sb.st_mode)) *bytes += (uint64_t)sb.st_size;
    if (S_ISDIR(sb.st_mode)) {
      int sub = openat(fd, e->d_name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub >= 0) {
        tree_size(sub, entries, bytes, depth + 1);
        close(sub);
      }
    }
  }
  closedir(d);
}

int cairn_upper_drop_if_empty(cairn_store *st, const char *id) {
  cairn_autoclose int ufd = uppers_dir(st);
  if (ufd < 0) return ufd;
  cairn_autoclose int dfd = upper_dirfd(st, ufd, id);
  if (dfd < 0) return dfd;
  /* Held while counting and removing: no mount takes it meanwhile. */
  if (flock(dfd, LOCK_EX | LOCK_NB) < 0) return 0; /* a live mount serves it */
  cairn_autoclosedir DIR *d = cn_opendirat(dfd, "root");
  if (!d) return 0; /* unreadable: kept, never judged empty */
  struct dirent *e;
  errno = 0;
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) return 0;
  if (errno) return 0;
  int r = upper_remove(st, ufd, id);
  return r < 0 ? r : 1;
}

/* A move's two uppers that a crash of its supervisor left, both unowned
 * (cairn_upper_mark_moved says which is the mount's): the other one is
 * dropped, as the move would have dropped it. Each upper checked holds
 * its lock meanwhile, so that no mount takes it then; the old one's
 * first: a supervisor holds it until it has taken the fresh one's
 * (fs/supervisor.c's moved_take), which a lock held here would fail. */
static void uppers_settle(cairn_store *st, int ufd) {
  cairn_autoclosedir DIR *d = cn_opendirat(ufd, ".");
  if (!d) return;
  cairn_id drops[16];
  int held[32];
  size_t n = 0, h = 0;
  struct dirent *e;
  while ((e = readdir(d)) && n < 16) {
    if (strlen(e->d_name) != CAIRN_ID_LEN || !cn_is_hex_id(e->d_name, CAIRN_ID_LEN)) continue;
    int dfd = openat(ufd, e->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    char image[CAIRN_ID_LEN + 8], dir[PATH_MAX], from[CAIRN_ID_LEN + 8];
    int64_t created;
    int ofd = -1;
    struct stat sb;
    if (dfd >= 0 &&
        read_info_from(dfd, image, sizeof(image), dir, sizeof(dir), &created, from, sizeof(from)) ==
            0 &&
        strlen(from) == CAIRN_ID_LEN && cn_is_hex_id(from, CAIRN_ID_LEN) &&
        (ofd = openat(ufd, from, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) >= 0 && /* else: moved */
        flock(ofd, LOCK_EX | LOCK_NB) == 0 && flock(dfd, LOCK_EX | LOCK_NB) == 0) {
      bool moved = fstatat(dfd, MOVED, &sb, AT_SYMLINK_NOFOLLOW) == 0;
      snprintf(drops[n++], sizeof(drops[0]), "%.*s", CAIRN_ID_LEN, moved ? from : e->d_name);
      held[h++] = dfd; /* locked until dropped: no mount takes either meanwhile */
      held[h++] = ofd;
      continue;
    }
    if (ofd >= 0) close(ofd);
    if (dfd >= 0) close(dfd);
  }
  /* Dropped once the scan is over: no rename under a directory read. */
  for (size_t k = 0; k < n; k++) upper_remove(st, ufd, drops[k]);
  for (size_t k = 0; k < h; k++) close(held[k]);
}

/* Calls fn for every complete upper; with sized, its entries and bytes
 * are counted (a walk of its tree), else left 0. */
static int uppers_scan(cairn_store *st, bool sized, cairn_upper_fn fn, void *arg) {
  cairn_autoclose int ufd = uppers_dir(st);
  if (ufd < 0) return ufd;
  uppers_settle(st, ufd);
  cairn_autoclosedir DIR *d = cn_opendirat(ufd, ".");
  if (!d) return cairn_fail(st, -errno, "%s/" UPPERS ": %s", st->dir, strerror(errno));
  struct dirent *e;
  while ((e = readdir(d))) {
    if (strlen(e->d_name) != CAIRN_ID_LEN || !cn_is_hex_id(e->d_name, CAIRN_ID_LEN)) continue;
    cairn_autoclose int dfd = openat(ufd, e->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) continue;
    struct cairn_upper_rec u = {.id = e->d_name};
    char image[CAIRN_ID_LEN + 8], dir[PATH_MAX];
    if (read_info(dfd, image, sizeof(image), dir, sizeof(dir), &u.created) < 0) continue;
    u.image = image;
    u.dir = dir;
    if (flock(dfd, LOCK_SH | LOCK_NB) < 0)
      u.live = true;
    else
      flock(dfd, LOCK_UN);
    struct stat sb;
    u.kept = fstatat(dfd, "keep", &sb, 0) == 0;
    cairn_autoclose int root = sized ? openat(dfd, "root", O_PATH | O_DIRECTORY | O_CLOEXEC) : -1;
    if (root >= 0) tree_size(root, &u.entries, &u.bytes, 0);
    int r = fn(&u, arg);
    if (r) return r;
  }
  return 0;
}

int cairn_uppers_foreach(cairn_store *st, cairn_upper_fn fn, void *arg) {
  return uppers_scan(st, true, fn, arg);
}

/* Any upper of dir, held or not: the stale record of dir is asked about,
 * so a holder is no live mount of it (a record's key is its dir) but the
 * server of the record's daemon, killed with it and not yet gone (its lock
 * goes with it, moments later under load), or a mount not recorded yet. */
static int left_of_dir(const struct cairn_upper_rec *u, void *dir) {
  return strcmp(u->dir, dir) == 0;
}

int cn_upper_left_of_dir(cairn_store *st, const char *dir) {
  return uppers_scan(st, false, left_of_dir, (void *)dir);
}

/* The uppers of one image that no live mount serves, as rm sees them:
 * described (desc), or their ids collected to be dropped. */
struct image_uppers {
  const char *image;
  cairn_report *rep;
  FILE *desc;
  cairn_id *ids;
  size_t n, cap;
};

static int image_upper(const struct cairn_upper_rec *u, void *arg) {
  struct image_uppers *iu = arg;
  if (u->live || strcmp(u->image, iu->image) != 0) return 0;
  char size[32];
  cairn_human_size(u->bytes, size, sizeof(size));
  if (iu->desc) {
    fprintf(iu->desc, "%supper %.12s of %s (%s, %llu entries, %s)", iu->n ? "; " : "", u->id,
            u->dir, u->kept ? "kept" : "stale", (unsigned long long)u->entries, size);
  } else {
    cairn_id *v = cn_array_grow(iu->ids, iu->n, &iu->cap, sizeof(*v));
    if (!v) return -ENOMEM;
    iu->ids = v;
    snprintf(v[iu->n], sizeof(v[0]), "%s", u->id);
    cn_report_line(iu->rep, "Dropped: upper %.12s of %s (%llu entries, %s)", u->id, u->dir,
                   (unsigned long long)u->entries, size);
  }
  iu->n++;
  return 0;
}

int cn_uppers_of_image(cairn_store *st, const char *image_id, cairn_report *drop, char **desc) {
  char *buf = NULL;
  size_t len = 0;
  struct image_uppers iu = {.image = image_id, .rep = drop};
  if (desc) *desc = NULL;
  if (!drop && !(iu.desc = open_memstream(&buf, &len)))
    return cairn_fail(st, -ENOMEM, "out of memory listing upper layers");
  int r = cairn_uppers_foreach(st, image_upper, &iu);
  if (r == -ENOMEM) r = cairn_fail(st, r, "out of memory listing upper layers");
  if (iu.desc) fclose(iu.desc);
  /* Dropped once the scan is over: no rename under a directory read. */
  for (size_t i = 0; r == 0 && drop && i < iu.n; i++) r = cairn_upper_drop(st, iu.ids[i]);
  free(iu.ids);
  if (r < 0 || !desc) {
    free(buf);
    return r < 0 ? r : (int)iu.n;
  }
  *desc = buf;
  return (int)iu.n;
}

int cn_uppers_gc(cairn_store *st, bool dry_run) {
  cairn_autoclose int ufd = uppers_dir(st);
  if (ufd < 0) return ufd;
  cairn_autoclosedir DIR *d = cn_opendirat(ufd, ".");
  if (!d) return cairn_fail(st, -errno, "%s/" UPPERS ": %s", st->dir, strerror(errno));
  struct dirent *e;
  int n = 0;
  while ((e = readdir(d))) {
    /* Only what nobody can reach any more: a creation cut short, or an
     * upper a command dropped. An upper under its name holds a user's
     * changes, kept or left by a crash: gc never takes it. */
    if (strncmp(e->d_name, ".tmp-", 5) != 0 && strncmp(e->d_name, ".gone-", 6) != 0) continue;
    cairn_autoclose int dfd = openat(ufd, e->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) continue;
    if (flock(dfd, LOCK_EX | LOCK_NB) < 0) continue; /* its daemon still runs */
    if (dry_run) continue;
    int r = remove_tree(ufd, e->d_name);
    if (r < 0) return cairn_fail(st, r, "%s/" UPPERS "/%s: %s", st->dir, e->d_name, strerror(-r));
    n++;
  }
  return n;
}

int cairn_xattr_bounded(const char *path, const char *name, const char *set, char *buf, size_t len,
                        int timeout_s) {
  struct {
    ssize_t n;
    int err;
  } a = {0};
  int p[2];
  if (pipe2(p, O_CLOEXEC) < 0) return -errno;
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    int r = -errno;
    close(p[0]);
    close(p[1]);
    return r;
  }
  if (pid == 0) { /* holds none of the caller's fds but the pipe, as fd 0 */
    if (dup2(p[1], 0) < 0) _exit(1);
    close_range(1, ~0U, 0);
    a.n = set ? lsetxattr(path, name, set, strlen(set), 0) : lgetxattr(path, name, buf, len);
    a.err = a.n < 0 ? errno : 0;
    struct iovec v[2] = {{&a, sizeof(a)}, {buf, a.n > 0 && !set ? (size_t)a.n : 0}};
    _exit(writev(0, v, 2) == (ssize_t)(sizeof(a) + v[1].iov_len) ? 0 : 1);
  }
  close(p[1]);
  struct pollfd pfd = {.fd = p[0], .events = POLLIN};
  int k;
  do k = poll(&pfd, 1, timeout_s * 1000);
  while (k < 0 && errno == EINTR);
  ssize_t got = k > 0 ? read(p[0], &a, sizeof(a)) : -1;
  if (got == (ssize_t)sizeof(a) && a.n > 0 && !set &&
      read(p[0], buf, (size_t)a.n) != a.n) /* a pipe's write of under 4 KiB is whole */
    got = -1;
  close(p[0]);
  if (k == 0) return -ETIMEDOUT; /* the child waits on; init reaps it */
  waitpid(pid, NULL, 0);
  if (got != (ssize_t)sizeof(a)) return -EIO;
  return a.n < 0 ? -a.err : (int)a.n;
}

int cairn_mount_freeze(const char *dir, const char *upper, int timeout_s, cairn_freeze *f) {
  char name[64 + CAIRN_ID_LEN];
  snprintf(name, sizeof(name), "trusted.cairn.freeze.%s", upper);
  f->hold_fd = -1;
  f->pid = -1;
  int p[2], h[2];
  if (pipe2(p, O_CLOEXEC) < 0) return -errno;
  if (pipe2(h, O_CLOEXEC) < 0) {
    int r = -errno;
    close(p[0]);
    close(p[1]);
    return r;
  }
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    int r = -errno;
    for (int *fd = (int[]){p[0], p[1], h[0], h[1]}, k = 0; k < 4; k++) close(fd[k]);
    return r;
  }
  if (pid == 0) { /* the holder: the answer on fd 0, then waits for fd 1's end */
    if (dup2(p[1], 0) < 0 || dup2(h[0], 1) < 0) _exit(1);
    close_range(2, ~0U, 0);
    ssize_t n = lgetxattr(dir, name, NULL, 0);
    int err = n < 0 ? errno : 0;
    if (write(0, &err, sizeof(err)) != sizeof(err)) _exit(1);
    close(0);
    char c;
    while (read(1, &c, 1) < 0 && errno == EINTR) continue;
    _exit(0);
  }
  close(p[1]);
  close(h[0]);
  struct pollfd pfd = {.fd = p[0], .events = POLLIN};
  int k;
  do k = poll(&pfd, 1, timeout_s * 1000);
  while (k < 0 && errno == EINTR);
  int err = EIO;
  ssize_t got = k > 0 ? read(p[0], &err, sizeof(err)) : -1;
  close(p[0]);
  if (k == 0) { /* the child waits on, and lets a late freeze go as it gets it */
    close(h[1]);
    return -ETIMEDOUT;
  }
  if (got != (ssize_t)sizeof(err)) err = EIO;
  if (err) {
    close(h[1]);
    waitpid(pid, NULL, 0);
    return err == ENODATA || err == ENOTSUP ? -ENOTSUP : -err;
  }
  f->hold_fd = h[1];
  f->pid = pid;
  return 0;
}

int cairn_mount_move_frozen(const char *dir, const char *upper, const char *image, int timeout_s) {
  char name[64 + 2 * CAIRN_ID_LEN];
  snprintf(name, sizeof(name), "trusted.cairn.rebase.%s.%s", upper, image);
  int r = cairn_xattr_bounded(dir, name, NULL, NULL, 0, timeout_s);
  return r < 0 ? r : 0;
}

void cairn_mount_thaw(const char *dir, const char *upper, cairn_freeze *f, bool ask) {
  if (ask) {
    char name[64 + CAIRN_ID_LEN];
    snprintf(name, sizeof(name), "trusted.cairn.thaw.%s", upper);
    cairn_xattr_bounded(dir, name, NULL, NULL, 0, 2); /* else its bound ends it */
  }
  if (f->hold_fd >= 0) close(f->hold_fd);
  if (f->pid > 0) waitpid(f->pid, NULL, 0);
  f->hold_fd = -1;
  f->pid = -1;
}

int cairn_upper_of_mount(const char *dir, cairn_id id_out) {
  char id[CAIRN_ID_LEN + 1];
  int n = cairn_xattr_bounded(dir, "trusted.cairn.upper", NULL, id, CAIRN_ID_LEN, 2);
  if (n < 0) return n == -ENOTSUP || n == -ERANGE || n == -ETIMEDOUT ? -ENODATA : n;
  if (n != CAIRN_ID_LEN) return -ENODATA;
  id[CAIRN_ID_LEN] = '\0';
  if (!cn_is_hex_id(id, CAIRN_ID_LEN)) return -ENODATA;
  snprintf(id_out, sizeof(cairn_id), "%s", id);
  return 0;
}
