/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_index.c — the image index (store/index.c): written when an image is
 * committed, mapped by cairn_tree_build and equal to the tree built from
 * the layers; a corrupt, truncated or hostile index file is refused
 * (-EBADMSG) and rebuilt, never read; rm, gc and fsck keep index files in
 * step with the images, and a pinned image keeps its index.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "libcairn_image.h"
#include "testutil.h"
#include "libcairn_tree.h"

static tu_store T;
static void setup(void) { tu_store_setup(&T); }
static void teardown(void) { tu_store_teardown(&T); }
TestSuite(index, .init = setup, .fini = teardown);

static const tu_entry l1[] = {
    {.path = "etc", .type = 'd', .mode = 0755, .mtime = 100},
    {.path = "etc/os-release", .content = "ID=test\n"},
    {.path = "bin", .type = 'd'},
    {.path = "bin/ping",
     .content = "ping",
     .xattrs = {{"security.capability", "\x01\x02\x00\x03", 4}}},
    {.path = "bin/ping2", .type = 'h', .target = "bin/ping"},
    {.path = "bin/sh", .type = 'l', .target = "dash"},
    {.path = "bin/dash", .content = "#!dash"},
    {.path = "dev", .type = 'd'},
    {.path = "dev/null", .type = 'c', .mode = 0666, .rdev_major = 1, .rdev_minor = 3},
};
static const tu_entry l2[] = {
    {.path = "etc/.wh.os-release", .content = ""},
    {.path = "etc/hostname", .content = "box\n"},
};

static void import(const char *name, cairn_id id) {
  tu_layer layers[] = {{l1, TU_N(l1)}, {l2, TU_N(l2)}};
  cr_assert_eq(tu_import(&T, name, layers, 2, id), 0, "%s", cairn_errmsg(T.st));
}

static char *index_file(const char *id) {
  char *p;
  cr_assert(asprintf(&p, "%s/index/%s", T.dir, id) > 0);
  return p;
}

static bool exists(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0;
}

/* The tree built from the layers, ignoring the index. */
static cairn_tree *built(const char *id) {
  cairn_tree *t;
  cr_assert_eq(cn_image_tree_build(T.st, id, &t), 0, "%s", cairn_errmsg(T.st));
  return t;
}

/* cairn_tree_build serves the image's index, which equals the built tree. */
static void expect_served_and_equal(const char *id) {
  cairn_tree *t, *b = built(id), *m;
  cr_assert_eq(cairn_tree_build(T.st, id, &t), 0, "%s", cairn_errmsg(T.st));
  tu_assert_same_tree(t, b);
  cr_assert_eq(cn_index_map(T.st, id, false, &m), 0, "the index was not rewritten: %s",
               cairn_errmsg(T.st));
  tu_assert_same_tree(m, b);
  cairn_tree_free(m);
  cairn_tree_free(b);
  cairn_tree_free(t);
}

Test(index, commit_writes_the_index_and_a_mount_maps_it) {
  cairn_id id;
  import("app:1", id);
  cairn_autofree char *path = index_file(id);
  cr_assert(exists(path), "import wrote no index");
  struct stat before;
  cr_assert_eq(stat(path, &before), 0);
  cr_expect_eq(before.st_mode & 0777, 0444, "the index is not read-only");
  expect_served_and_equal(id);
  struct stat after;
  cr_assert_eq(stat(path, &after), 0);
  cr_expect_eq(before.st_ino, after.st_ino, "a valid index was rewritten");
}

Test(index, an_image_without_one_gets_it_on_first_build) {
  cairn_id id;
  import("app:1", id);
  cairn_autofree char *path = index_file(id);
  cr_assert_eq(unlink(path), 0);
  expect_served_and_equal(id);
  cr_expect(exists(path));
}

/* Rewrites the index file with fn applied to its bytes. */
static void tamper(const char *id, void (*fn)(unsigned char *buf, size_t *len)) {
  cairn_autofree char *path = index_file(id);
  int fd = open(path, O_RDONLY);
  cr_assert(fd >= 0);
  struct stat sb;
  cr_assert_eq(fstat(fd, &sb), 0);
  size_t len = (size_t)sb.st_size;
  unsigned char *buf = malloc(len);
  cr_assert_eq(read(fd, buf, len), (ssize_t)len);
  close(fd);
  fn(buf, &len);
  cr_assert_eq(unlink(path), 0);
  tu_write_file(path, buf, len);
  free(buf);
}

static void expect_refused_then_rebuilt(const char *id, const char *why) {
  cairn_tree *t = (cairn_tree *)1;
  cr_assert_eq(cn_index_map(T.st, id, false, &t), -EBADMSG, "a bad index (%s) was accepted", why);
  cr_expect_null(t);
  cr_expect(strstr(cairn_errmsg(T.st), why), "%s", cairn_errmsg(T.st));
  expect_served_and_equal(id);
}

static void flip_a_node_byte(unsigned char *buf, size_t *len) {
  (void)len;
  buf[sizeof(struct cn_index_header) + 3] ^= 0x40;
}

static void cut_in_half(unsigned char *buf, size_t *len) {
  (void)buf;
  *len /= 2;
}

static void cut_to_nothing(unsigned char *buf, size_t *len) {
  (void)buf;
  *len = 0;
}

static void other_version(unsigned char *buf, size_t *len) {
  (void)len;
  ((struct cn_index_header *)buf)->version = CN_INDEX_VERSION + 1;
  cn_index_seal(buf);
}

/* Resealed after the change: the checksum holds, the offsets do not. */
static void entry_out_of_range(unsigned char *buf, size_t *len) {
  (void)len;
  struct cn_index_header *h = (struct cn_index_header *)buf;
  ((cairn_dirent *)(buf + h->dirents_off))[0].ino = h->n_nodes + 1;
  cn_index_seal(buf);
}

static void string_out_of_range(unsigned char *buf, size_t *len) {
  (void)len;
  struct cn_index_header *h = (struct cn_index_header *)buf;
  ((cairn_dirent *)(buf + h->dirents_off))[0].name = (uint32_t)h->strings_size;
  cn_index_seal(buf);
}

/* The root lists itself: a walk from the root would never end. */
static void directory_cycle(unsigned char *buf, size_t *len) {
  (void)len;
  struct cn_index_header *h = (struct cn_index_header *)buf;
  const cairn_node *root = (const cairn_node *)(buf + h->nodes_off);
  ((cairn_dirent *)(buf + h->dirents_off))[root->children].ino = 1;
  cn_index_seal(buf);
}

/* bin is listed twice in the root: a walk would visit it twice (and
 * nested twins, exponentially often). */
static void directory_twice(unsigned char *buf, size_t *len) {
  (void)len;
  struct cn_index_header *h = (struct cn_index_header *)buf;
  const cairn_node *root = (const cairn_node *)(buf + h->nodes_off);
  cairn_dirent *c = (cairn_dirent *)(buf + h->dirents_off) + root->children;
  c[1].ino = c[0].ino; /* bin, dev */
  cn_index_seal(buf);
}

/* bin's first entry points past the last node: bin is corrupt, the root
 * and etc are not. */
static void bin_entry_out_of_range(unsigned char *buf, size_t *len) {
  (void)len;
  struct cn_index_header *h = (struct cn_index_header *)buf;
  cairn_node *nodes = (cairn_node *)(buf + h->nodes_off);
  cairn_dirent *d = (cairn_dirent *)(buf + h->dirents_off);
  const char *strings = (const char *)buf + h->strings_off;
  for (uint32_t k = 0; k < nodes[0].n_children; k++) {
    const cairn_dirent *c = &d[nodes[0].children + k];
    if (strcmp(strings + c->name, "bin") == 0) d[nodes[c->ino - 1].children].ino = h->n_nodes + 1;
  }
  cn_index_seal(buf);
}

/* A mount's tree (cairn_tree_open) checks the root at open and every
 * other node when it is first handed out: a corrupt node is refused
 * (NULL), what is sound is served; a corrupt root is refused at open and
 * the index rebuilt, as cairn_tree_build does. */
Test(index, a_mount_checks_each_node_when_first_handed_out) {
  cairn_id id;
  import("app:1", id);
  tamper(id, bin_entry_out_of_range);
  cairn_tree *t;
  cr_assert_eq(cairn_tree_open(T.st, id, &t), 0, "%s", cairn_errmsg(T.st));
  const cairn_node *root = cairn_tree_node(t, 1);
  cr_assert(root);
  const cairn_dirent *bin = cairn_tree_lookup(t, root, "bin");
  const cairn_dirent *etc = cairn_tree_lookup(t, root, "etc");
  cr_assert(bin && etc);
  cr_expect_null(cairn_tree_node(t, bin->ino), "a node pointing outside the file was handed out");
  cr_expect_null(cairn_tree_node(t, bin->ino), "refused once, handed out the second time");
  const cairn_node *e = cairn_tree_node(t, etc->ino);
  cr_assert(e && S_ISDIR(e->mode));
  cr_expect(cairn_tree_lookup(t, e, "hostname"));
  cairn_tree_free(t);
  expect_refused_then_rebuilt(id, "outside the file"); /* the full check */

  tamper(id, directory_cycle);
  cr_assert_eq(cairn_tree_open(T.st, id, &t), 0, "%s", cairn_errmsg(T.st));
  cairn_tree *b = built(id);
  tu_assert_same_tree(t, b);
  cairn_tree_free(b);
  cairn_tree_free(t);
  expect_served_and_equal(id); /* rewritten */
}

Test(index, a_corrupt_index_is_refused_and_rebuilt) {
  cairn_id id;
  import("app:1", id);
  static const struct {
    void (*fn)(unsigned char *, size_t *);
    const char *why;
  } cases[] = {
      {flip_a_node_byte, "checksum mismatch"},
      {cut_in_half, "truncated"},
      {cut_to_nothing, "shorter than its header"},
      {other_version, "another version"},
      {entry_out_of_range, "outside the file"},
      {string_out_of_range, "outside the file"},
      {directory_cycle, "not a child of its parent"},
      {directory_twice, "not a child of its parent"},
  };
  for (size_t i = 0; i < TU_N(cases); i++) {
    tamper(id, cases[i].fn);
    expect_refused_then_rebuilt(id, cases[i].why);
  }
}

Test(index, rm_removes_the_index_and_a_pinned_image_keeps_it) {
  cairn_id id;
  import("app:1", id);
  cairn_autofree char *path = index_file(id);
  cairn_pinset *ps = cairn_pinset_new("mount /mnt/x", true);
  cr_assert_eq(cairn_pin_image(T.st, ps, id), 0, "%s", cairn_errmsg(T.st));
  cr_expect_eq(cairn_rm(T.st, "app:1"), -EBUSY);
  cr_expect(exists(path), "rm of a pinned image removed its index");
  cairn_report r = {0};
  cr_expect_eq(cairn_gc(T.st, false, &r), 0, "%s", cairn_errmsg(T.st));
  cairn_report_free(&r);
  cr_expect(exists(path), "gc removed the index of a pinned image");
  cairn_pinset_release(T.st, ps);
  cr_assert_eq(cairn_rm(T.st, "app:1"), 0, "%s", cairn_errmsg(T.st));
  cr_expect_not(exists(path), "rm left the index");
}

Test(index, gc_sweeps_the_index_of_a_gone_image) {
  cairn_id id;
  import("app:1", id);
  cairn_autofree char *path = index_file(id);
  char *kept;
  cr_assert(asprintf(&kept, "%s.kept", path) > 0);
  cr_assert_eq(link(path, kept), 0);
  cr_assert_eq(cairn_rm(T.st, "app:1"), 0, "%s", cairn_errmsg(T.st));
  cr_assert_eq(rename(kept, path), 0); /* as if rm died before its unlink */
  free(kept);
  cairn_report r = {0};
  cr_expect_eq(cairn_gc(T.st, true, &r), 0, "%s", cairn_errmsg(T.st));
  cr_expect(exists(path), "gc --dry-run removed a file");
  cr_expect_eq(cairn_gc(T.st, false, &r), 0, "%s", cairn_errmsg(T.st));
  cairn_report_free(&r);
  cr_expect_not(exists(path), "gc left the index of a removed image");
}

static bool report_has(const cairn_report *r, const char *s) {
  for (size_t i = 0; i < r->n_lines; i++)
    if (strstr(r->lines[i], s)) return true;
  return false;
}

Test(index, fsck_finds_a_corrupt_index_and_repair_rewrites_it) {
  cairn_id id;
  import("app:1", id);
  tamper(id, flip_a_node_byte);
  cairn_report r = {0};
  cr_expect_eq(cairn_fsck(T.st, false, &r), -EBADMSG, "fsck passed a corrupt index");
  cr_expect(report_has(&r, "checksum mismatch"), "no problem line for the index");
  cairn_report_free(&r);
  cairn_report fix = {0};
  cr_expect_eq(cairn_fsck(T.st, true, &fix), 0, "%s", cairn_errmsg(T.st));
  cr_expect(report_has(&fix, "rewrote the index"));
  cairn_report_free(&fix);
  cairn_tree *m;
  cr_assert_eq(cn_index_map(T.st, id, false, &m), 0, "%s", cairn_errmsg(T.st));
  cairn_tree_free(m);
  /* A missing index is no problem; --repair writes it. */
  cairn_autofree char *path = index_file(id);
  cr_assert_eq(unlink(path), 0);
  cairn_report again = {0};
  cr_expect_eq(cairn_fsck(T.st, false, &again), 0, "%s", cairn_errmsg(T.st));
  cr_expect_eq(cairn_fsck(T.st, true, &again), 0, "%s", cairn_errmsg(T.st));
  cairn_report_free(&again);
  cr_expect(exists(path), "fsck --repair wrote no index");
}

/* The bytes of path that are in the page cache. */
static size_t resident(const char *path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  cr_assert(fd >= 0);
  struct stat sb;
  cr_assert_eq(fstat(fd, &sb), 0);
  void *p = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_SHARED, fd, 0);
  cr_assert(p != MAP_FAILED);
  size_t pages = ((size_t)sb.st_size + 4095) / 4096, n = 0;
  unsigned char *vec = malloc(pages);
  cr_assert(vec);
  cr_assert_eq(mincore(p, (size_t)sb.st_size, vec), 0);
  for (size_t i = 0; i < pages; i++) n += vec[i] & 1;
  free(vec);
  munmap(p, (size_t)sb.st_size);
  close(fd);
  return n * 4096;
}

/* A mount of a big image reads the parts of its index that it serves, not
 * the disk's read-ahead around each of them (8 MiB on a virtio disk: a
 * million entries' mount read 60 MiB of its 113 MiB index, 100 ms), and
 * still serves the whole tree. 300 directories of 200 empty files make an
 * index of 5.4 MiB, over the 4 MiB that a mount reads whole. The timeout
 * only stops a hang: under valgrind (test_valgrind.sh), beside other tests
 * on 2 cores, this took over 120 s. */
Test(index, a_mount_reads_little_of_a_big_index, .timeout = 900) {
  enum { DIRS = 300, FILES = 200 };
  size_t n = DIRS * (FILES + 1);
  tu_entry *e = calloc(n, sizeof(*e));
  char(*paths)[16] = calloc(n, sizeof(*paths));
  cr_assert(e && paths);
  for (size_t d = 0, k = 0; d < DIRS; d++) {
    snprintf(paths[k], sizeof(paths[k]), "d%04zu", d);
    e[k] = (tu_entry){.path = paths[k], .type = 'd'};
    k++;
    for (size_t f = 0; f < FILES; f++, k++) {
      snprintf(paths[k], sizeof(paths[k]), "d%04zu/f%04zu", d, f);
      e[k] = (tu_entry){.path = paths[k], .content = ""};
    }
  }
  tu_layer layers[] = {{e, n}};
  cairn_id id;
  cr_assert_eq(tu_import(&T, "big:1", layers, 1, id), 0, "%s", cairn_errmsg(T.st));
  free(e);
  free(paths);
  cairn_autofree char *path = index_file(id);
  struct stat sb;
  cr_assert_eq(stat(path, &sb), 0);
  cr_assert_gt(sb.st_size, 4 << 20, "the index is %lld bytes, not a big one",
               (long long)sb.st_size);

  /* cold: the index was fsync'd when written, so its pages are clean */
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  cr_assert(fd >= 0);
  cr_assert_eq(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
  close(fd);
  if (resident(path) >= 64 << 10) /* tmpfs, say: nothing to read from */
    cr_skip_test("the index cannot be dropped from the page cache on this file system");

  cairn_tree *t;
  cr_assert_eq(cairn_tree_open(T.st, id, &t), 0, "%s", cairn_errmsg(T.st));
  const cairn_node *root = cairn_tree_node(t, 1);
  const cairn_dirent *d = root ? cairn_tree_lookup(t, root, "d0299") : NULL;
  const cairn_node *dn = d ? cairn_tree_node(t, d->ino) : NULL;
  const cairn_dirent *f = dn ? cairn_tree_lookup(t, dn, "f0199") : NULL;
  cr_assert(f && cairn_tree_node(t, f->ino), "d0299/f0199 not found");
  size_t read = resident(path);
  cr_expect_leq(read, 2 << 20, "serving one path read %zu of the index's %lld bytes", read,
                (long long)sb.st_size);

  cairn_tree *b = built(id); /* and every node is served as built */
  tu_assert_same_tree(t, b);
  cairn_tree_free(b);
  cairn_tree_free(t);
}
