/* SPDX-License-Identifier: Apache-2.0 */
/*
 * util.c — the few small helpers every part of libcairn uses: hex ids,
 * formatting, time, string lists, report lines; opening a path below the
 * store without following a symlink (cn_store_openat) and STORE/tmp.
 */
#include "libcairn_store.h"

#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <openssl/evp.h>
#include <string.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <time.h>

void (*cn_store_test_hook)(cairn_store *st, const char *point);

void cairn_test_point(cairn_store *st, const char *point) { store_test_point(st, point); }

bool cn_is_hex_id(const char *s, size_t len) {
  if (strlen(s) != len) return false;
  for (size_t i = 0; i < len; i++)
    if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
  return true;
}

void cn_hex_encode(const unsigned char *bytes, size_t n, char *out) {
  static const char hex[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = hex[bytes[i] >> 4];
    out[2 * i + 1] = hex[bytes[i] & 15];
  }
  out[2 * n] = '\0';
}

void cn_sha256_hex(const unsigned char digest[32], cairn_id out) {
  cn_hex_encode(digest, 32, out);
}

void cn_sha256_final_hex(EVP_MD_CTX *md, cairn_id out) {
  unsigned char d[32];
  EVP_DigestFinal_ex(md, d, NULL);
  cn_sha256_hex(d, out);
}

void cn_sha256_final_digest(EVP_MD_CTX *md, char out[CAIRN_DIGEST_LEN + 1]) {
  cairn_id hex;
  cn_sha256_final_hex(md, hex);
  snprintf(out, CAIRN_DIGEST_LEN + 1, "sha256:%s", hex);
}

bool cairn_id_valid(const char *s) { return cn_is_hex_id(s, CAIRN_ID_LEN); }

int64_t cn_now_seconds(void) { return (int64_t)time(NULL); }

char *cn_xasprintf(const char *fmt, ...) {
  va_list ap;
  char *s = NULL;
  va_start(ap, fmt);
  int n = vasprintf(&s, fmt, ap);
  va_end(ap);
  return n < 0 ? NULL : s;
}

void cn_strv_free(char **v, size_t n) {
  if (!v) return;
  for (size_t i = 0; i < n; i++) free(v[i]);
  free(v);
}

void *cn_array_grow(void *v, size_t n, size_t *cap, size_t size) {
  if (n < *cap) return v;
  size_t more = *cap ? 2 * *cap : 16;
  void *bigger = realloc(v, more * size);
  if (bigger) *cap = more;
  return bigger;
}

size_t cn_sort_unique(void *v, size_t n, size_t size, int (*cmp)(const void *, const void *)) {
  if (n == 0) return 0;
  qsort(v, n, size, cmp);
  char *a = v;
  size_t kept = 1;
  for (size_t i = 1; i < n; i++)
    if (cmp(a + (kept - 1) * size, a + i * size) != 0) {
      if (kept != i) memcpy(a + kept * size, a + i * size, size);
      kept++;
    }
  return kept;
}

int cn_write_all(int fd, const void *buf, size_t n) {
  const char *p = buf;
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return -errno;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

int cn_strv_push(struct strv *sv, const char *s) {
  char **v = cn_array_grow(sv->v, sv->n, &sv->cap, sizeof(*v));
  if (!v) return -ENOMEM;
  sv->v = v;
  if (!(v[sv->n] = strdup(s))) return -ENOMEM;
  sv->n++;
  return 0;
}

void cn_strv_clear(struct strv *sv) {
  cn_strv_free(sv->v, sv->n);
  *sv = (struct strv){0};
}

void cairn_report_free(cairn_report *r) {
  cn_strv_free(r->lines, r->n_lines);
  r->lines = NULL;
  r->n_lines = 0;
}

void cairn_human_size(uint64_t bytes, char *buf, size_t len) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)bytes;
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    u++;
  }
  snprintf(buf, len, u ? "%.1f %s" : "%.0f %s", v, units[u]);
}

/* A line of r: prefix, then fmt formatted. */
static void report_vline(cairn_report *r, const char *prefix, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));
static void report_vline(cairn_report *r, const char *prefix, const char *fmt, va_list ap) {
  char buf[1024];
  size_t n = (size_t)snprintf(buf, sizeof(buf), "%s", prefix);
  vsnprintf(buf + n, sizeof(buf) - n, fmt, ap);
  char **v = realloc(r->lines, (r->n_lines + 1) * sizeof(*v));
  if (!v) return;
  r->lines = v;
  if ((v[r->n_lines] = strdup(buf))) r->n_lines++;
}

void cn_report_line(cairn_report *r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  report_vline(r, "", fmt, ap);
  va_end(ap);
}

void cn_report_problem(cairn_report *r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  report_vline(r, "problem: ", fmt, ap);
  va_end(ap);
  r->problems++;
}

DIR *cn_opendirat(int dirfd, const char *name) {
  int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return NULL;
  DIR *d = fdopendir(fd);
  if (!d) close(fd);
  return d;
}

size_t cairn_edit_distance(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  if (la > 256 || lb > 256) return SIZE_MAX;
  size_t row[257];
  for (size_t j = 0; j <= lb; j++) row[j] = j;
  for (size_t i = 1; i <= la; i++) {
    size_t diag = row[0]; /* row[i-1][j-1] */
    row[0] = i;
    for (size_t j = 1; j <= lb; j++) {
      size_t up = row[j], best = diag + (a[i - 1] != b[j - 1]);
      if (up + 1 < best) best = up + 1;
      if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
      diag = up;
      row[j] = best;
    }
  }
  return row[lb];
}

bool cairn_near(const char *typed, const char *cand) {
  size_t d = cairn_edit_distance(typed, cand), n = strlen(typed);
  return d > 0 && d <= 2 && d * 3 <= n + 1;
}

/* openat(dirfd, rel) following no symlink, on the way or at its end, and
 * never leaving dirfd: openat2, or (a kernel before 5.6) one name at a
 * time with O_NOFOLLOW. */
static int open_beneath(int dirfd, const char *rel, int flags, mode_t mode) {
  struct open_how how = {.flags = (uint64_t)(flags | O_CLOEXEC),
                         .mode = (flags & (O_CREAT | O_TMPFILE)) ? mode : 0,
                         .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS};
  int fd = (int)syscall(SYS_openat2, dirfd, rel, &how, sizeof(how));
  if (fd >= 0 || errno != ENOSYS) return fd;
  char buf[PATH_MAX];
  if (snprintf(buf, sizeof(buf), "%s", rel) >= (int)sizeof(buf)) {
    errno = ENAMETOOLONG;
    return -1;
  }
  int cur = dirfd;
  char *name = buf, *slash;
  while ((slash = strchr(name, '/'))) {
    *slash = '\0';
    int next = strcmp(name, "..") == 0
                   ? (errno = EXDEV, -1)
                   : openat(cur, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int e = errno;
    if (cur != dirfd) close(cur);
    if (next < 0) {
      errno = e;
      return -1;
    }
    cur = next;
    name = slash + 1;
  }
  fd = strcmp(name, "..") == 0 ? (errno = EXDEV, -1)
                               : openat(cur, name, flags | O_NOFOLLOW | O_CLOEXEC, mode);
  int e = errno;
  if (cur != dirfd) close(cur);
  errno = e;
  return fd;
}

int cn_store_openat(cairn_store *st, const char *rel, int flags, mode_t mode) {
  return open_beneath(st->dirfd, rel, flags, mode);
}

DIR *cn_store_opendir(cairn_store *st, const char *rel) {
  int fd = open_beneath(st->dirfd, rel, O_RDONLY | O_DIRECTORY, 0);
  if (fd < 0) return NULL;
  DIR *d = fdopendir(fd);
  if (!d) close(fd);
  return d;
}

int cn_store_tmpfile(cairn_store *st, mode_t mode) {
  int fd = openat(st->tmp_fd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, mode);
  if (fd < 0)
    return cairn_fail(st, -errno, "temporary file in %s/tmp: %s", st->dir, strerror(errno));
  return fd;
}

int cn_store_tmp_create(cairn_store *st, const char *prefix, char *name, size_t len, int flags) {
  static const char chars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  for (int attempt = 0; attempt < 100; attempt++) {
    unsigned char rnd[6];
    if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
      return cairn_fail(st, -EIO, "getrandom: %s", strerror(errno));
    char suffix[7];
    for (int i = 0; i < 6; i++) suffix[i] = chars[rnd[i] % (sizeof(chars) - 1)];
    suffix[6] = '\0';
    if (snprintf(name, len, "%s%s", prefix, suffix) >= (int)len)
      return cairn_fail(st, -ENAMETOOLONG, "%s/tmp/%s: name too long", st->dir, prefix);
    int fd =
        openat(st->tmp_fd, name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | flags, 0600);
    if (fd >= 0 || errno != EEXIST) {
      if (fd < 0) return cairn_fail(st, -errno, "%s/tmp/%s: %s", st->dir, name, strerror(errno));
      return fd;
    }
  }
  return cairn_fail(st, -EEXIST, "%s/tmp: no free name for %s", st->dir, prefix);
}

void cn_store_tmp_path(cairn_store *st, char *buf, size_t len) {
  snprintf(buf, len, "/proc/self/fd/%d", st->tmp_fd);
}
