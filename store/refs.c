/* SPDX-License-Identifier: Apache-2.0 */
/*
 * refs.c — STORE/refs: every image's id and layers and every name, in a
 * small text file by which a read-only mount takes its pins and answers
 * before it opens the database (fs/supervisor.c).
 *
 *   cairn-refs 1
 *   i IMAGE_ID LAYER_ID ...      one line per image, by id, layers bottom first
 *   n NAME:TAG IMAGE_ID          one line per name, by name
 *   .                            the end: a file without it is not read
 *
 * The database is the truth, and the file says what it says: a mount
 * trusts it. A missing or torn file costs time (the mount asks the
 * database), never a wrong image.
 *
 * Invariants:
 * - Every transaction that changes images or names runs between
 *   cn_refs_begin and cn_refs_end, under the exclusive flock of
 *   STORE/refs.lock: before it, the file is unlinked and the unlink made
 *   durable (the store directory fsync'd); after it, the file is written
 *   anew from the database (an O_TMPFILE, fsync'd, linked under its name:
 *   a power cut leaves no file or a whole one).
 * - So while the file exists it says what the database says, or said just
 *   before a commit that has not returned yet. A crash between unlink and
 *   rewrite leaves no file; the next writer, or a mount that finds none
 *   (cairn_refs_repair, which never waits for the lock), writes it.
 * - A deleter of an image (rm, fsck --repair) holds its pin's lock
 *   exclusive from before its transaction until after the file is
 *   rewritten: an image the file lists once its pin is held (a shared
 *   lock, cairn_pin_image_early) exists and cannot go.
 */
#include "libcairn_image.h"
#include "libcairn_pin.h"
#include "libcairn_tree.h"

#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>

#define REFS_HEADER "cairn-refs 1\n"
#define REFS_END "\n.\n"    /* the last line's newline, then "." */
#define REFS_MAX (64 << 20) /* a file bigger than this is not read */

/* What the file must say, from the database (one read transaction):
 * malloc'd text in *out, or -errno (nothing recorded). */
static int refs_render(cairn_store *st, char **out, size_t *len) {
  *out = NULL;
  FILE *f = open_memstream(out, len);
  if (!f) return -ENOMEM;
  fputs(REFS_HEADER, f);
  cn_autostmt sqlite3_stmt *img = NULL, *names = NULL;
  sqlite3 *db = cn_db(st);
  int rc = SQLITE_ERROR;
  /* One read transaction for both queries: one state of the database. */
  if (db && sqlite3_exec(db, "BEGIN", NULL, NULL, NULL) == SQLITE_OK) {
    if (sqlite3_prepare_v2(db,
                           "SELECT id, layer_id FROM images LEFT JOIN image_layers"
                           " ON image_id = id ORDER BY id, position",
                           -1, &img, NULL) == SQLITE_OK &&
        sqlite3_prepare_v2(db, "SELECT name, image_id FROM names ORDER BY name", -1, &names,
                           NULL) == SQLITE_OK) {
      char last[CAIRN_ID_LEN + 1] = "";
      while ((rc = sqlite3_step(img)) == SQLITE_ROW) {
        const char *id = (const char *)sqlite3_column_text(img, 0);
        const char *layer = (const char *)sqlite3_column_text(img, 1);
        if (strcmp(id, last) != 0) {
          fprintf(f, "%si %s", last[0] ? "\n" : "", id);
          snprintf(last, sizeof(last), "%s", id);
        }
        if (layer) fprintf(f, " %s", layer);
      }
      if (last[0]) fputc('\n', f);
      if (rc == SQLITE_DONE)
        while ((rc = sqlite3_step(names)) == SQLITE_ROW)
          fprintf(f, "n %s %s\n", (const char *)sqlite3_column_text(names, 0),
                  (const char *)sqlite3_column_text(names, 1));
    }
    sqlite3_finalize(img);
    sqlite3_finalize(names);
    img = names = NULL;
    sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
  }
  fputs(&REFS_END[1], f);
  if (fclose(f) != 0) rc = SQLITE_NOMEM;
  if (rc == SQLITE_DONE) return 0;
  free(*out);
  *out = NULL;
  return rc == SQLITE_NOMEM ? -ENOMEM : -EIO;
}

/* Writes the file from the database: 0, or -errno (nothing recorded: the
 * commit it follows has succeeded, and no file only sends mounts to the
 * database). */
static int refs_write(cairn_store *st) {
  cairn_autofree char *buf = NULL;
  size_t len = 0;
  int r = refs_render(st, &buf, &len);
  if (r < 0) return r;
  cairn_autoclose int fd = openat(st->dirfd, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0400);
  if (fd < 0) return -errno;
  if ((r = cn_write_all(fd, buf, len)) < 0) return r;
  if (fsync(fd) < 0) return -errno;
  char proc[64];
  snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
  unlinkat(st->dirfd, "refs", 0); /* a wrong one (fsck --repair), or a crashed writer's */
  return linkat(AT_FDCWD, proc, st->dirfd, "refs", AT_SYMLINK_FOLLOW) < 0 ? -errno : 0;
}

int cn_refs_begin(cairn_store *st) {
  int fd = cn_lock_file(st, "refs.lock", LOCK_EX);
  if (fd < 0) return cairn_fail(st, fd, "%s/refs.lock: %s", st->dir, strerror(-fd));
  if (unlinkat(st->dirfd, "refs", 0) == 0) {
    cairn_autoclose int dir = openat(st->dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0 || fsync(dir) < 0) {
      int e = errno;
      close(fd);
      return cairn_fail(st, -e, "%s: %s", st->dir, strerror(e));
    }
  } else if (errno != ENOENT) {
    int e = errno;
    close(fd);
    return cairn_fail(st, -e, "%s/refs: %s", st->dir, strerror(e));
  }
  return fd;
}

void cn_refs_end(cairn_store *st, int lock) {
  if (lock < 0) return;
  refs_write(st);
  close(lock);
}

void cairn_refs_repair(cairn_store *st) {
  if (faccessat(st->dirfd, "refs", F_OK, 0) == 0) return;
  int fd = cn_lock_file(st, "refs.lock", LOCK_EX | LOCK_NB);
  if (fd < 0) return; /* a writer has it, and writes the file */
  if (faccessat(st->dirfd, "refs", F_OK, 0) < 0) refs_write(st);
  close(fd);
}

/* The whole file if it is whole (header and end), NUL-terminated; free it. */
static char *refs_read(cairn_store *st, size_t *len) {
  cairn_autoclose int fd = openat(st->dirfd, "refs", O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  struct stat sb;
  if (fd < 0 || fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode) || sb.st_size > REFS_MAX) return NULL;
  *len = (size_t)sb.st_size;
  char *buf = malloc(*len + 1);
  size_t got = 0;
  while (buf && got < *len) {
    ssize_t n = read(fd, buf + got, *len - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += (size_t)n;
  }
  size_t head = strlen(REFS_HEADER), end = strlen(REFS_END);
  /* The header's newline may be the end's first byte (no image, no name). */
  if (!buf || got != *len || got < head - 1 + end || memcmp(buf, REFS_HEADER, head) != 0 ||
      memcmp(buf + got - end, REFS_END, end) != 0) {
    free(buf);
    return NULL;
  }
  buf[got] = '\0';
  return buf;
}

/* The image line of id (starting at its id), or NULL. */
static const char *image_line(const char *buf, const char *id, size_t n) {
  for (const char *p = buf; (p = strstr(p, "\ni ")) != NULL; p++)
    if (strncmp(p + 3, id, n) == 0) return p + 3;
  return NULL;
}

/* What cairn_image_resolve would give for ref, by the file: 1 and the id's
 * line, 0 if the file does not say (or says it ambiguously). */
static int refs_resolve(const char *buf, const char *ref, const char **line) {
  char name[512];
  if (cairn_name_normalize(ref, name, sizeof(name)) == 0) {
    /* as cn_image_name_lookup: the name, that name without localhost/ (a
     * store from before it), then a short name's one image */
    int passes = strncmp(name, "localhost/", 10) != 0  ? 1
                 : strncmp(ref, "localhost/", 10) == 0 ? 2
                                                       : 3;
    for (int pass = 0; pass < passes; pass++) {
      const char *want = pass == 0 ? name : name + 10, *id = NULL;
      size_t n = strlen(want);
      for (const char *p = buf; (p = strstr(p, "\nn ")) != NULL; p++) {
        const char *end = strchr(p + 3, ' ');
        if (!end) break;
        bool match = pass < 2 ? (size_t)(end - p - 3) == n && strncmp(p + 3, want, n) == 0
                              : (size_t)(end - p - 3) > n && end[-(ptrdiff_t)n - 1] == '/' &&
                                    strncmp(end - n, want, n) == 0;
        if (!match) continue;
        if (id && strncmp(id, end + 1, CAIRN_ID_LEN) != 0) return 0; /* the database says why */
        id = end + 1;
        if (pass < 2) break;
      }
      if (id) return (*line = image_line(buf, id, CAIRN_ID_LEN)) != NULL;
    }
  }
  const char *hex = strncmp(ref, "sha256:", 7) == 0 ? ref + 7 : ref;
  size_t n = strlen(hex);
  if (n < CAIRN_ID_PREFIX_MIN || n > CAIRN_ID_LEN || !cn_is_hex_id(hex, n)) return 0;
  *line = image_line(buf, hex, n);
  return *line && !image_line(*line, hex, n); /* the lines are sorted: the next would follow */
}

int cairn_pin_image_early(cairn_store *st, cairn_pinset *ps, const char *ref, cairn_id id) {
  store_errclear(st);
  size_t len;
  cairn_autofree char *buf = refs_read(st, &len);
  const char *line;
  if (!buf || refs_resolve(buf, ref, &line) != 1) return 0;
  snprintf(id, sizeof(cairn_id), "%.*s", CAIRN_ID_LEN, line);
  if (!cn_is_hex_id(id, CAIRN_ID_LEN) || !cairn_tree_prefetch(st, id)) return 0;
  int r = cn_pin_lock(st, ps, CAIRN_PIN_IMAGE, id);
  if (r < 0) return r;
  /* Still there now that we hold its pin (a deleter takes the pin's lock
   * exclusive and rewrites the file before it lets go)? */
  cairn_autofree char *now = refs_read(st, &len);
  if (!now || !image_line(now, id, CAIRN_ID_LEN)) return 0;
  const char *p = line + CAIRN_ID_LEN;
  while (r >= 0 && *p == ' ') {
    cairn_id layer;
    snprintf(layer, sizeof(layer), "%.*s", CAIRN_ID_LEN, p + 1);
    p += 1 + strlen(layer);
    r = cn_pin_lock(st, ps, CAIRN_PIN_LAYER, layer);
  }
  return r < 0 ? r : 1;
}

int cn_refs_check(cairn_store *st, bool repair) {
  /* Exclusive: no writer is between its unlink and its rewrite. */
  int lock = cn_lock_file(st, "refs.lock", LOCK_EX);
  if (lock < 0) return cairn_fail(st, lock, "%s/refs.lock: %s", st->dir, strerror(-lock));
  bool there = faccessat(st->dirfd, "refs", F_OK, 0) == 0;
  size_t len = 0, want_len = 0;
  cairn_autofree char *now = there ? refs_read(st, &len) : NULL;
  cairn_autofree char *want = NULL;
  int r = refs_render(st, &want, &want_len);
  if (r < 0) {
    close(lock);
    return cairn_fail(st, r, "STORE/refs: reading the database: %s", strerror(-r));
  }
  int verdict = !there                                                  ? CN_REFS_MISSING
                : now && len == want_len && memcmp(now, want, len) == 0 ? CN_REFS_RIGHT
                                                                        : CN_REFS_WRONG;
  if (repair && verdict != CN_REFS_RIGHT && (r = refs_write(st)) < 0)
    verdict = cairn_fail(st, r, "STORE/refs: %s", strerror(-r));
  close(lock);
  return verdict;
}
