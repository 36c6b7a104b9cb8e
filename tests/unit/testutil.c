/* SPDX-License-Identifier: Apache-2.0 */
/*
 * testutil.c — helpers shared by the unit tests (see testutil.h): temporary
 * stores, layer tars written with libarchive, looking at a store, and
 * forked children with bounded waits.
 */
#include "testutil.h"

#include <archive.h>
#include <archive_entry.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <openssl/evp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- temporary directories and stores ---------------------------------- */

char *tu_tmpdir(void) {
  char *dir = strdup("/tmp/cairn-ut-XXXXXX");
  cr_assert(dir && mkdtemp(dir), "mkdtemp: %s", strerror(errno));
  return dir;
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  remove(path);
  return 0;
}

void tu_rmrf(const char *path) {
  if (path) nftw(path, rm_one, 32, FTW_DEPTH | FTW_PHYS);
}

cairn_store *tu_store_open(const char *dir) {
  cairn_store *st = NULL;
  int r = cairn_store_open(dir, &st);
  cr_assert_eq(r, 0, "cairn_store_open %s: %d %s", dir, r, cairn_errmsg(st));
  return st;
}

cairn_store *tu_child_store(const char *dir) {
  cairn_store *st = NULL;
  if (cairn_store_open(dir, &st) == 0) return st;
  cairn_store_close(st);
  return NULL;
}

void tu_store_setup(tu_store *t) {
  t->root = tu_tmpdir();
  cr_assert(asprintf(&t->dir, "%s/store", t->root) > 0);
  t->st = tu_store_open(t->dir);
}

void tu_store_teardown(tu_store *t) {
  cairn_store_close(t->st);
  t->st = NULL;
  tu_rmrf(t->root);
  free(t->root);
  free(t->dir);
  t->root = t->dir = NULL;
}

void tu_store_reopen(tu_store *t) {
  cairn_store_close(t->st);
  t->st = tu_store_open(t->dir);
}

/* ---- layer tars ---------------------------------------------------------- */

static struct archive_entry *entry_make(const tu_entry *e) {
  struct archive_entry *ae = archive_entry_new();
  cr_assert(ae);
  archive_entry_set_pathname(ae, e->path);
  unsigned mode = e->mode;
  size_t len = e->content ? (e->len ? e->len : strlen(e->content)) : 0;
  switch (e->type) {
  case 0:
  case 'f':
    archive_entry_set_filetype(ae, AE_IFREG);
    archive_entry_set_size(ae, (la_int64_t)len);
    break;
  case 'd':
    archive_entry_set_filetype(ae, AE_IFDIR);
    if (!mode) mode = 0755;
    break;
  case 'l':
    archive_entry_set_filetype(ae, AE_IFLNK);
    archive_entry_set_symlink(ae, e->target);
    if (!mode) mode = 0777;
    break;
  case 'h':
    archive_entry_set_filetype(ae, AE_IFREG);
    archive_entry_set_hardlink(ae, e->target);
    archive_entry_set_size(ae, 0);
    break;
  case 'c':
  case 'b':
    archive_entry_set_filetype(ae, e->type == 'c' ? AE_IFCHR : AE_IFBLK);
    archive_entry_set_rdevmajor(ae, e->rdev_major);
    archive_entry_set_rdevminor(ae, e->rdev_minor);
    break;
  case 'p': archive_entry_set_filetype(ae, AE_IFIFO); break;
  default: cr_assert_fail("tu_entry %s: unknown type %c", e->path, e->type);
  }
  archive_entry_set_perm(ae, mode ? mode : 0644);
  archive_entry_set_uid(ae, (la_int64_t)e->uid);
  archive_entry_set_gid(ae, (la_int64_t)e->gid);
  archive_entry_set_mtime(ae, (time_t)e->mtime, e->mtime_nsec);
  for (size_t i = 0; i < TU_MAX_XATTRS && e->xattrs[i].name; i++) {
    const tu_xattr *x = &e->xattrs[i];
    archive_entry_xattr_add_entry(ae, x->name, x->value,
                                  x->len ? x->len : strlen((const char *)x->value));
  }
  return ae;
}

/* A writer into a growing buffer (open_memstream). */
static struct archive *writer_open(FILE **f, char **buf, size_t *len) {
  *f = open_memstream(buf, len);
  cr_assert(*f);
  struct archive *a = archive_write_new();
  cr_assert(a);
  return a;
}

static void writer_close(struct archive *a, FILE *f) {
  cr_assert_eq(archive_write_close(a), ARCHIVE_OK, "archive_write_close: %s",
               archive_error_string(a));
  archive_write_free(a);
  cr_assert_eq(fclose(f), 0);
}

void tu_compress(const void *in, size_t len, unsigned flags, void **out, size_t *out_len) {
  FILE *f;
  char *buf = NULL;
  struct archive *a = writer_open(&f, &buf, out_len);
  archive_write_set_format_raw(a);
  int r = flags & TU_ZSTD ? archive_write_add_filter_zstd(a) : archive_write_add_filter_gzip(a);
  cr_assert_eq(r, ARCHIVE_OK, "compression filter: %s", archive_error_string(a));
  archive_write_set_bytes_in_last_block(a, 1); /* no zero padding after the stream */
  cr_assert_eq(archive_write_open_FILE(a, f), ARCHIVE_OK, "%s", archive_error_string(a));
  struct archive_entry *ae = archive_entry_new();
  archive_entry_set_pathname(ae, "data");
  archive_entry_set_filetype(ae, AE_IFREG);
  archive_entry_set_size(ae, (la_int64_t)len);
  cr_assert_eq(archive_write_header(a, ae), ARCHIVE_OK, "%s", archive_error_string(a));
  cr_assert_eq(archive_write_data(a, in, len), (la_ssize_t)len, "%s", archive_error_string(a));
  archive_entry_free(ae);
  writer_close(a, f);
  *out = buf;
}

void tu_tar(const tu_entry *e, size_t n, unsigned flags, void **buf, size_t *len) {
  FILE *f;
  char *plain = NULL;
  size_t plain_len = 0;
  struct archive *a = writer_open(&f, &plain, &plain_len);
  if (flags & TU_PAX_FULL)
    archive_write_set_format_pax(a);
  else
    archive_write_set_format_pax_restricted(a);
  cr_assert_eq(archive_write_open_FILE(a, f), ARCHIVE_OK, "%s", archive_error_string(a));
  for (size_t i = 0; i < n; i++) {
    struct archive_entry *ae = entry_make(&e[i]);
    cr_assert_eq(archive_write_header(a, ae), ARCHIVE_OK, "tar entry %s: %s", e[i].path,
                 archive_error_string(a));
    size_t clen = archive_entry_size(ae);
    if (clen > 0)
      cr_assert_eq(archive_write_data(a, e[i].content, clen), (la_ssize_t)clen, "%s",
                   archive_error_string(a));
    archive_entry_free(ae);
  }
  writer_close(a, f);
  if (!(flags & (TU_GZIP | TU_ZSTD))) {
    *buf = plain;
    *len = plain_len;
    return;
  }
  tu_compress(plain, plain_len, flags, buf, len);
  free(plain);
}

int tu_memfd(const void *buf, size_t len) {
  int fd = memfd_create("cairn-ut-layer", MFD_CLOEXEC);
  cr_assert(fd >= 0, "memfd_create: %s", strerror(errno));
  cr_assert_eq(write(fd, buf, len), (ssize_t)len);
  cr_assert_eq(lseek(fd, 0, SEEK_SET), 0);
  return fd;
}

void tu_write_file(const char *path, const void *buf, size_t len) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  cr_assert(fd >= 0, "%s: %s", path, strerror(errno));
  cr_assert_eq(write(fd, buf, len), (ssize_t)len, "%s: short write", path);
  close(fd);
}

void *tu_read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rbe");
  cr_assert(f, "%s: %s", path, strerror(errno));
  char *buf = NULL;
  size_t cap = 0;
  *len = 0;
  for (;;) {
    if (*len + 65537 > cap) {
      cap = cap * 2 + 65537;
      buf = realloc(buf, cap);
      cr_assert(buf);
    }
    size_t n = fread(buf + *len, 1, 65536, f);
    *len += n;
    if (n == 0) break;
  }
  cr_assert(!ferror(f), "%s: read error", path);
  fclose(f);
  return buf;
}

int tu_ingest_bytes(cairn_store *st, const void *buf, size_t len, const char *expected_diff_id,
                    cairn_pinset *ps, cairn_id diff_id) {
  int fd = tu_memfd(buf, len);
  cairn_pinset *own = ps ? NULL : cairn_pinset_new("unit test", true);
  int r = cn_layer_ingest(st, fd, expected_diff_id, ps ? ps : own, diff_id);
  cairn_pinset_release(st, own);
  close(fd);
  return r;
}

int tu_ingest(cairn_store *st, const tu_entry *e, size_t n, unsigned flags, cairn_pinset *ps,
              cairn_id diff_id) {
  void *buf;
  size_t len;
  tu_tar(e, n, flags, &buf, &len);
  int r = tu_ingest_bytes(st, buf, len, NULL, ps, diff_id);
  free(buf);
  return r;
}

int tu_import(tu_store *t, const char *name, const tu_layer *layers, size_t n, cairn_id image_id) {
  char **paths = calloc(n + 1, sizeof(*paths));
  cr_assert(paths);
  for (size_t i = 0; i < n; i++) {
    void *buf;
    size_t len;
    tu_tar(layers[i].entries, layers[i].n, TU_PLAIN, &buf, &len);
    cr_assert(asprintf(&paths[i], "%s/layer-%zu.tar", t->root, i) > 0);
    tu_write_file(paths[i], buf, len);
    free(buf);
  }
  int r = cn_import_files(t->st, name, (const char *const *)paths, n, image_id);
  for (size_t i = 0; i < n; i++) {
    unlink(paths[i]);
    free(paths[i]);
  }
  free(paths);
  return r;
}

/* ---- looking at a store --------------------------------------------------- */

char *tu_blob_names(const char *store_dir) {
  char *blobs;
  cr_assert(asprintf(&blobs, "%s/blobs", store_dir) > 0);
  char *list = tu_dir_listing(blobs, NULL);
  char *out = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&out, &len);
  cr_assert(f);
  for (char *line = strtok(list, "\n"); line; line = strtok(NULL, "\n")) {
    char *path;
    struct stat sb;
    cr_assert(asprintf(&path, "%s/%s", blobs, line) > 0);
    if (strchr(line, '/') && lstat(path, &sb) == 0 && S_ISREG(sb.st_mode)) fprintf(f, "%s\n", line);
    free(path);
  }
  fclose(f);
  free(list);
  free(blobs);
  return out;
}

long tu_blob_count(const char *store_dir) {
  char *names = tu_blob_names(store_dir);
  long n = 0;
  for (const char *p = names; *p; p++) n += *p == '\n';
  free(names);
  return n;
}

static int image_count(const struct cairn_image_rec *im, void *n) {
  (void)im;
  ++*(size_t *)n;
  return 0;
}

static int layer_count(const struct cairn_layer_rec *l, void *n) {
  (void)l;
  ++*(size_t *)n;
  return 0;
}

size_t tu_images_count(cairn_store *st) {
  size_t n = 0;
  int r = cairn_images_foreach(st, image_count, &n);
  cr_assert_eq(r, 0, "images: %s", cairn_errmsg(st));
  return n;
}

size_t tu_layers_count(cairn_store *st) {
  size_t n = 0;
  int r = cairn_layers_foreach(st, layer_count, &n);
  cr_assert_eq(r, 0, "layers: %s", cairn_errmsg(st));
  return n;
}

struct pins {
  tu_pin *v;
  size_t n;
};

static int pin_copy(const struct cairn_pin_rec *p, void *arg) {
  struct pins *ps = arg;
  ps->v = realloc(ps->v, (ps->n + 1) * sizeof(*ps->v));
  cr_assert(ps->v);
  tu_pin *t = &ps->v[ps->n++];
  *t = (tu_pin){.kind = p->kind, .pid = p->pid, .since = p->since, .stale = p->stale};
  snprintf(t->target, sizeof(t->target), "%s", p->target);
  snprintf(t->command, sizeof(t->command), "%s", p->command);
  snprintf(t->purpose, sizeof(t->purpose), "%s", p->purpose);
  return 0;
}

tu_pin *tu_pins(cairn_store *st, const char *filter_id, size_t *n) {
  struct pins ps = {0};
  int r = cairn_pins_foreach(st, filter_id, pin_copy, &ps);
  cr_assert_eq(r, 0, "pins: %s", cairn_errmsg(st));
  *n = ps.n;
  return ps.v ? ps.v : calloc(1, sizeof(tu_pin));
}

tu_pin *tu_pin_of(tu_pin *pins, size_t n, const char *target, pid_t pid) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(pins[i].target, target) == 0 && pins[i].pid == pid) return &pins[i];
  return NULL;
}

char *tu_blob_read(cairn_store *st, const char *blob, size_t *len) {
  int fd = cairn_blob_open(st, blob);
  cr_assert(fd >= 0, "cairn_blob_open %s: %s", blob, strerror(-fd));
  char *buf = NULL;
  size_t size = 0;
  FILE *f = open_memstream(&buf, &size);
  cr_assert(f);
  char chunk[65536];
  ssize_t n;
  while ((n = read(fd, chunk, sizeof(chunk))) > 0) fwrite(chunk, 1, (size_t)n, f);
  cr_assert(n == 0, "reading blob %s: %s", blob, strerror(errno));
  close(fd);
  fclose(f);
  if (len) *len = size;
  return buf;
}

/* nftw has no argument: the listing being built is static (tests are
 * single-threaded). */
static struct {
  size_t prefix;
  const char *skip;
  char **lines;
  size_t n, cap;
} listing;

static int list_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  if (ftw->level == 0) return 0;
  const char *rel = path + listing.prefix + 1;
  if (listing.skip) {
    size_t k = strlen(listing.skip);
    if (strncmp(rel, listing.skip, k) == 0 && (rel[k] == '\0' || rel[k] == '/')) return 0;
  }
  if (listing.n == listing.cap) {
    listing.cap = listing.cap ? 2 * listing.cap : 64;
    listing.lines = realloc(listing.lines, listing.cap * sizeof(char *));
    cr_assert(listing.lines);
  }
  listing.lines[listing.n++] = strdup(rel);
  return 0;
}

static int str_cmp(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

char *tu_dir_listing(const char *dir, const char *skip) {
  listing.prefix = strlen(dir);
  listing.skip = skip;
  listing.n = 0;
  nftw(dir, list_one, 32, FTW_PHYS);
  if (listing.n) qsort(listing.lines, listing.n, sizeof(char *), str_cmp);
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  cr_assert(f);
  for (size_t i = 0; i < listing.n; i++) {
    fprintf(f, "%s\n", listing.lines[i]);
    free(listing.lines[i]);
  }
  fclose(f);
  free(listing.lines);
  listing.lines = NULL;
  listing.cap = 0;
  return buf;
}

struct layer_get {
  const char *path;
  tu_got *got;
  size_t count;
};

static int layer_get_one(const cairn_entry *e, void *arg) {
  struct layer_get *lg = arg;
  lg->count++;
  if (!lg->path || strcmp(e->path, lg->path) != 0) return 0;
  tu_got *g = lg->got;
  g->found = true;
  g->e = *e;
  snprintf(g->path, sizeof(g->path), "%s", e->path);
  g->e.path = g->path;
  snprintf(g->target, sizeof(g->target), "%s", e->target ? e->target : "");
  g->e.target = e->target ? g->target : NULL;
  snprintf(g->blob, sizeof(g->blob), "%s", e->blob ? e->blob : "");
  g->e.blob = e->blob ? g->blob : NULL;
  cr_assert(e->n_xattrs <= TU_MAX_XATTRS, "%s: %zu xattrs", e->path, e->n_xattrs);
  for (size_t i = 0; i < e->n_xattrs; i++) {
    cr_assert(e->xattrs[i].len <= sizeof(g->xattr_values[i]));
    snprintf(g->xattr_names[i], sizeof(g->xattr_names[i]), "%s", e->xattrs[i].name);
    memcpy(g->xattr_values[i], e->xattrs[i].value, e->xattrs[i].len);
    g->xattrs[i] = (cairn_xattr){g->xattr_names[i], g->xattr_values[i], e->xattrs[i].len};
  }
  g->e.xattrs = g->xattrs;
  return 0;
}

tu_got *tu_layer_get(cairn_store *st, const char *diff_id, const char *path) {
  tu_got *g = calloc(1, sizeof(*g));
  cr_assert(g);
  struct layer_get lg = {path, g, 0};
  int r = cn_layer_foreach(st, diff_id, layer_get_one, &lg);
  cr_assert_eq(r, 0, "cn_layer_foreach: %d %s", r, cairn_errmsg(st));
  return g;
}

size_t tu_layer_entries(cairn_store *st, const char *diff_id) {
  tu_got g;
  struct layer_get lg = {NULL, &g, 0};
  int r = cn_layer_foreach(st, diff_id, layer_get_one, &lg);
  cr_assert_eq(r, 0, "cn_layer_foreach: %d %s", r, cairn_errmsg(st));
  return lg.count;
}

void tu_sha256_hex(const void *buf, size_t len, char out[65]) {
  unsigned char d[32];
  cr_assert_eq(EVP_Digest(buf, len, d, NULL, EVP_sha256(), NULL), 1);
  for (int i = 0; i < 32; i++) snprintf(out + 2 * i, 3, "%02x", d[i]);
}

/* ---- children -------------------------------------------------------------- */

pid_t tu_spawn(int (*fn)(void *), void *arg) {
  pid_t parent = getpid();
  pid_t pid = fork();
  cr_assert(pid >= 0, "fork: %s", strerror(errno));
  if (pid > 0) return pid;
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(126);
  alarm(30);
  _exit(fn(arg) & 0xff);
}

int tu_reap(pid_t pid, int timeout_ms) {
  int status;
  for (int waited = 0; waited <= timeout_ms; waited += 10) {
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (r < 0 && errno != EINTR) return -1;
    usleep(10 * 1000);
  }
  tu_kill_reap(pid);
  return -1;
}

void tu_kill_reap(pid_t pid) {
  kill(pid, SIGKILL);
  while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
  }
}

int tu_read_byte(int fd, int timeout_ms) {
  struct pollfd p = {.fd = fd, .events = POLLIN};
  if (poll(&p, 1, timeout_ms) != 1) return -1;
  unsigned char c;
  return read(fd, &c, 1) == 1 ? c : -1;
}

void tu_write_byte(int fd, char c) {
  if (write(fd, &c, 1) != 1) abort();
}

bool tu_wait_until(bool (*cond)(void *), void *arg, int timeout_ms) {
  for (int waited = 0; waited < timeout_ms; waited += 10) {
    if (cond(arg)) return true;
    usleep(10 * 1000);
  }
  return cond(arg);
}

static void same_str(const cairn_tree *a, uint32_t x, const cairn_tree *b, uint32_t y, uint64_t ino,
                     const char *what) {
  const char *sa = cairn_tree_str(a, x), *sb = cairn_tree_str(b, y);
  cr_assert((!sa && !sb) || (sa && sb && strcmp(sa, sb) == 0), "ino %llu: %s %s != %s",
            (unsigned long long)ino, what, sa ? sa : "(none)", sb ? sb : "(none)");
}

void tu_assert_same_tree(const cairn_tree *a, const cairn_tree *b) {
  cr_assert_eq(cairn_tree_count(a), cairn_tree_count(b));
  for (uint64_t ino = 1; ino <= cairn_tree_count(a); ino++) {
    const cairn_node *x = cairn_tree_node(a, ino), *y = cairn_tree_node(b, ino);
    cr_assert(x->mode == y->mode && x->uid == y->uid && x->gid == y->gid && x->nlink == y->nlink &&
                  x->size == y->size && x->rdev == y->rdev && x->mtime_sec == y->mtime_sec &&
                  x->mtime_nsec == y->mtime_nsec && x->parent == y->parent &&
                  x->n_xattrs == y->n_xattrs && x->n_children == y->n_children,
              "ino %llu: attributes differ", (unsigned long long)ino);
    same_str(a, x->target, b, y->target, ino, "target");
    same_str(a, x->blob, b, y->blob, ino, "blob");
    for (size_t i = 0; i < x->n_xattrs; i++) {
      cairn_xattr xa = cairn_tree_xattr(a, x, i), xb = cairn_tree_xattr(b, y, i);
      cr_assert(strcmp(xa.name, xb.name) == 0 && xa.len == xb.len &&
                    memcmp(xa.value, xb.value, xa.len) == 0,
                "ino %llu: xattr %s differs", (unsigned long long)ino, xa.name);
    }
    const cairn_dirent *ca = cairn_tree_children(a, x), *cb = cairn_tree_children(b, y);
    for (size_t i = 0; i < x->n_children; i++) {
      cr_assert_eq(ca[i].ino, cb[i].ino, "ino %llu: entry %zu", (unsigned long long)ino, i);
      same_str(a, ca[i].name, b, cb[i].name, ino, "entry");
    }
  }
}
