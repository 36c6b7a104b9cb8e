/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_import.c — a layer tar becomes rows exactly: every entry type with
 * its mode, owner, time, target, device number and xattrs; the diff_id is
 * the sha256 of the uncompressed stream whatever the compression; a layer
 * is stored once; and hostile, truncated or non-tar input is -EBADMSG with
 * the store unchanged and nothing written outside it.
 */
#include <archive.h>
#include <archive_entry.h>
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "libcairn_store.h" /* cn_store_test_hook */
#include "testutil.h"

static tu_store T;
static void setup(void) { tu_store_setup(&T); }
static void teardown(void) { tu_store_teardown(&T); }
TestSuite(import, .init = setup, .fini = teardown);

/* struct vfs_cap_data, revision 2: cap_net_raw permitted and effective. */
static const unsigned char capability[20] = {0x01, 0x00, 0x00, 0x02, 0x00, 0x20,
                                             0x00, 0x00, 0x00, 0x20, 0x00, 0x00};

static const tu_entry every_type[] = {
    {.path = "bin", .type = 'd', .mode = 0751, .mtime = 1600000000},
    {.path = "bin/su", .mode = 04755, .content = "su program", .mtime = 1600000001},
    {.path = "bin/wall", .mode = 02711, .gid = 5, .content = "wall program"},
    {.path = "bin/both", .mode = 06555, .content = "both"},
    {.path = "tmp", .type = 'd', .mode = 01777, .uid = 0, .gid = 0},
    {.path = "bin/ping",
     .mode = 0755,
     .content = "ping program",
     .xattrs = {{"security.capability", capability, sizeof(capability)},
                {"user.note", "hello", 0}}},
    {.path = "bin/sh", .type = 'l', .target = "dash"},
    {.path = "bin/env", .type = 'l', .target = "/usr/bin/env"},
    {.path = "bin/dangling", .type = 'l', .target = "../nowhere/at/all"},
    /* a tar writer gives a hardlink the stat of its file */
    {.path = "bin/su2", .type = 'h', .mode = 04755, .target = "bin/su", .mtime = 1600000001},
    {.path = "bin/su3", .type = 'h', .mode = 04755, .target = "bin/su2", .mtime = 1600000001},
    {.path = "dev", .type = 'd'},
    {.path = "dev/null", .type = 'c', .mode = 0666, .rdev_major = 1, .rdev_minor = 3},
    {.path = "dev/sda", .type = 'b', .mode = 0660, .gid = 6, .rdev_major = 8, .rdev_minor = 16},
    {.path = "dev/big", .type = 'c', .rdev_major = 511, .rdev_minor = 70000},
    {.path = "fifo", .type = 'p', .mode = 0620, .uid = 7, .gid = 8},
    {.path = "owned", .uid = 1000, .gid = 1001, .mode = 0640, .content = "mine", .mtime = 1234},
    {.path = "bigid", .uid = 4000000000u, .gid = 3000000000u, .content = "x"},
    {.path = "empty", .mode = 0600},
    {.path = "usr", .type = 'd'},
    {.path = "usr/.wh.gone"},
    {.path = "etc", .type = 'd'},
    {.path = "etc/.wh..wh..opq"},
};

static tu_got *get(const char *diff_id, const char *path) {
  tu_got *g = tu_layer_get(T.st, diff_id, path);
  cr_assert(g->found, "no entry %s in the layer", path);
  return g;
}

static void expect(const char *diff_id, const char *path, enum cairn_entry_type type, uint32_t mode,
                   uint32_t uid, uint32_t gid) {
  tu_got *g = get(diff_id, path);
  cr_expect_eq(g->e.type, type, "%s: type %d, want %d", path, g->e.type, type);
  cr_expect_eq(g->e.mode, mode, "%s: mode %o, want %o", path, g->e.mode, mode);
  cr_expect_eq(g->e.uid, uid, "%s: uid %u, want %u", path, g->e.uid, uid);
  cr_expect_eq(g->e.gid, gid, "%s: gid %u, want %u", path, g->e.gid, gid);
  free(g);
}

static void expect_target(const char *diff_id, const char *path, const char *target) {
  tu_got *g = get(diff_id, path);
  cr_assert(g->e.target, "%s: no target", path);
  cr_expect_str_eq(g->e.target, target, "%s: target %s, want %s", path, g->e.target, target);
  cr_expect_null(g->e.blob, "%s: has a blob", path);
  free(g);
}

static void expect_content(const char *diff_id, const char *path, const char *content) {
  tu_got *g = get(diff_id, path);
  cr_assert_eq(g->e.size, strlen(content), "%s: size %llu", path, (unsigned long long)g->e.size);
  cr_assert(g->e.blob, "%s: no blob", path);
  char *data = tu_blob_read(T.st, g->e.blob, NULL);
  cr_expect_str_eq(data, content, "%s reads back %s", path, data);
  free(data);
  free(g);
}

Test(import, every_entry_type_recorded_exactly) {
  cairn_id id;
  int r = tu_ingest(T.st, every_type, TU_N(every_type), TU_PLAIN, NULL, id);
  cr_assert_eq(r, 0, "ingest: %d %s", r, cairn_errmsg(T.st));
  cr_assert_eq(tu_layer_entries(T.st, id), TU_N(every_type));

  expect(id, "bin", CAIRN_DIR, 0751, 0, 0);
  expect(id, "bin/su", CAIRN_REG, 04755, 0, 0);
  expect(id, "bin/wall", CAIRN_REG, 02711, 0, 5);
  expect(id, "bin/both", CAIRN_REG, 06555, 0, 0);
  expect(id, "tmp", CAIRN_DIR, 01777, 0, 0);
  expect(id, "owned", CAIRN_REG, 0640, 1000, 1001);
  expect(id, "bigid", CAIRN_REG, 0644, 4000000000u, 3000000000u);
  expect(id, "fifo", CAIRN_FIFO, 0620, 7, 8);
  expect_content(id, "bin/su", "su program");
  expect_content(id, "owned", "mine");

  tu_got *g = get(id, "bin");
  cr_expect_eq(g->e.mtime_sec, 1600000000);
  free(g);
  g = get(id, "owned");
  cr_expect_eq(g->e.mtime_sec, 1234);
  free(g);

  g = get(id, "empty");
  cr_expect_eq(g->e.type, CAIRN_REG);
  cr_expect_eq(g->e.size, 0);
  cr_expect_null(g->e.blob, "an empty file has no blob");
  free(g);

  expect(id, "bin/sh", CAIRN_SYMLINK, 0777, 0, 0);
  expect_target(id, "bin/sh", "dash");
  expect_target(id, "bin/env", "/usr/bin/env");
  expect_target(id, "bin/dangling", "../nowhere/at/all");

  /* a hardlink group has one root: the first name */
  expect(id, "bin/su2", CAIRN_HARDLINK, 04755, 0, 0);
  expect_target(id, "bin/su2", "bin/su");
  expect_target(id, "bin/su3", "bin/su");

  expect(id, "dev/null", CAIRN_CHR, 0666, 0, 0);
  expect(id, "dev/sda", CAIRN_BLK, 0660, 0, 6);
  g = get(id, "dev/null");
  cr_expect_eq(g->e.rdev, makedev(1, 3));
  free(g);
  g = get(id, "dev/sda");
  cr_expect_eq(g->e.rdev, makedev(8, 16));
  free(g);
  g = get(id, "dev/big");
  cr_expect_eq(major(g->e.rdev), 511);
  cr_expect_eq(minor(g->e.rdev), 70000);
  free(g);

  g = get(id, "bin/ping");
  cr_assert_eq(g->e.n_xattrs, 2, "bin/ping: %zu xattrs", g->e.n_xattrs);
  bool cap = false, note = false;
  for (size_t i = 0; i < g->e.n_xattrs; i++) {
    const cairn_xattr *x = &g->e.xattrs[i];
    if (strcmp(x->name, "security.capability") == 0)
      cap = x->len == sizeof(capability) && memcmp(x->value, capability, x->len) == 0;
    if (strcmp(x->name, "user.note") == 0) note = x->len == 5 && memcmp(x->value, "hello", 5) == 0;
  }
  cr_expect(cap, "security.capability is not recorded byte for byte");
  cr_expect(note, "user.note is not recorded");
  free(g);

  expect(id, "usr/.wh.gone", CAIRN_WHITEOUT, 0644, 0, 0);
  expect(id, "etc/.wh..wh..opq", CAIRN_OPAQUE, 0644, 0, 0);
}

Test(import, mtime_nanoseconds_via_pax) {
  static const tu_entry e[] = {
      {.path = "a", .content = "a", .mtime = 1700000000, .mtime_nsec = 123456789},
      {.path = "d", .type = 'd', .mtime = 1500000000, .mtime_nsec = 1},
  };
  cairn_id id;
  cr_assert_eq(tu_ingest(T.st, e, 2, TU_PAX_FULL, NULL, id), 0, "%s", cairn_errmsg(T.st));
  tu_got *g = get(id, "a");
  cr_expect_eq(g->e.mtime_sec, 1700000000);
  cr_expect_eq(g->e.mtime_nsec, 123456789);
  free(g);
  g = get(id, "d");
  cr_expect_eq(g->e.mtime_sec, 1500000000);
  cr_expect_eq(g->e.mtime_nsec, 1);
  free(g);
}

Test(import, absolute_and_dot_names_are_made_relative) {
  static const tu_entry e[] = {
      {.path = "/cairn-ut-confined/x", .content = "abs"},
      {.path = "./rel/./y", .content = "dot"},
      {.path = "//z//", .type = 'd'},
  };
  cairn_id id;
  cr_assert_eq(tu_ingest(T.st, e, 3, TU_PLAIN, NULL, id), 0, "%s", cairn_errmsg(T.st));
  expect_content(id, "cairn-ut-confined/x", "abs");
  expect_content(id, "rel/y", "dot");
  expect(id, "z", CAIRN_DIR, 0755, 0, 0);
  cr_assert_eq(tu_layer_entries(T.st, id), 3);
  cr_expect_neq(access("/cairn-ut-confined", F_OK), 0, "an absolute name reached the host");
}

/* ---- diff_id -------------------------------------------------------------- */

static const tu_entry small_layer[] = {
    {.path = "etc", .type = 'd'},
    {.path = "etc/hostname", .content = "cairn\n"},
    {.path = "etc/motd", .content = "welcome\n"},
};

Test(import, diff_id_is_sha256_of_uncompressed_tar) {
  void *plain;
  size_t plain_len;
  tu_tar(small_layer, TU_N(small_layer), TU_PLAIN, &plain, &plain_len);
  char want[65];
  tu_sha256_hex(plain, plain_len, want);
  static const unsigned filters[] = {TU_PLAIN, TU_GZIP, TU_ZSTD};
  static const char *const names[] = {"plain", "gzip", "zstd"};
  for (size_t i = 0; i < 3; i++) {
    void *buf = plain;
    size_t len = plain_len;
    if (filters[i] != TU_PLAIN) {
      tu_compress(plain, plain_len, filters[i], &buf, &len);
      cr_assert(len != plain_len || memcmp(buf, plain, len) != 0, "%s: not compressed", names[i]);
    }
    cairn_id id;
    int r = tu_ingest_bytes(T.st, buf, len, NULL, NULL, id);
    cr_assert_eq(r, 0, "%s: %d %s", names[i], r, cairn_errmsg(T.st));
    cr_expect_str_eq(id, want, "%s: diff_id %s, want %s", names[i], id, want);
    if (buf != plain) free(buf);
  }
  free(plain);
  cr_expect_eq(tu_layers_count(T.st), 1, "three forms of one tar are one layer");
  cr_expect_eq(tu_layer_entries(T.st, want), 3);
  expect_content(want, "etc/motd", "welcome\n");
}

Test(import, expected_diff_id_is_checked_and_given_one_is_accepted) {
  void *plain;
  size_t len;
  tu_tar(small_layer, TU_N(small_layer), TU_PLAIN, &plain, &len);
  char right[65];
  tu_sha256_hex(plain, len, right);
  cairn_id id;
  cr_assert_eq(tu_ingest_bytes(T.st, plain, len, right, NULL, id), 0, "%s", cairn_errmsg(T.st));
  cr_assert_str_eq(id, right);
  free(plain);
}

/* A blob whose tar lost its record padding (podman 4.3's zstd:chunked
 * writer): the diff_id of the padded tar is proven with the zero blocks,
 * which the exact tar keeps; anything but zeros, or more than 64 KiB of
 * them, stays a mismatch. */
static int tar_sha(const void *buf, size_t len, void *arg) {
  EVP_DigestUpdate(arg, buf, len);
  return 0;
}

Test(import, missing_record_padding_is_proven_with_zeros_and_kept) {
  void *plain;
  size_t len;
  tu_tar(small_layer, TU_N(small_layer), TU_PLAIN, &plain, &len);
  size_t pad = 7168, big = 65536;
  unsigned char *padded = calloc(1, len + big + 512);
  memcpy(padded, plain, len);
  char want[65], too_far[65], not_zero[65];
  tu_sha256_hex(padded, len + pad, want);
  tu_sha256_hex(padded, len + big, too_far);
  padded[len + 511] = 1;
  tu_sha256_hex(padded, len + 512, not_zero);
  cairn_id id;
  cr_expect_eq(tu_ingest_bytes(T.st, plain, len, not_zero, NULL, id), -EBADMSG, "non-zero bytes");
  cr_expect_eq(tu_ingest_bytes(T.st, plain, len, too_far, NULL, id), -EBADMSG, "64 KiB of zeros");
  cr_expect_eq(tu_layers_count(T.st), 0);
  cr_assert_eq(tu_ingest_bytes(T.st, plain, len, want, NULL, id), 0, "%s", cairn_errmsg(T.st));
  cr_expect_str_eq(id, want);
  cr_expect_eq(cn_layer_ingest_padding(T.st), pad);
  EVP_MD_CTX *c = EVP_MD_CTX_new();
  EVP_DigestInit_ex(c, EVP_sha256(), NULL);
  uint64_t size = 0;
  cr_assert_eq(cn_layer_tar(T.st, want, tar_sha, c, &size), 0, "%s", cairn_errmsg(T.st));
  unsigned char d[32];
  EVP_DigestFinal_ex(c, d, NULL);
  EVP_MD_CTX_free(c);
  char got[65];
  for (int i = 0; i < 32; i++) snprintf(got + 2 * i, 3, "%02x", d[i]);
  cr_expect_str_eq(got, want, "the exact tar is the padded one");
  cr_expect_eq(size, len + pad);
  free(padded);
  free(plain);
}

Test(import, no_pin_set_needs_a_known_diff_id) {
  void *plain;
  size_t len;
  tu_tar(small_layer, TU_N(small_layer), TU_PLAIN, &plain, &len);
  char right[65];
  tu_sha256_hex(plain, len, right);
  cairn_id id;
  int fd = tu_memfd(plain, len);
  cr_expect_eq(cn_layer_ingest(T.st, fd, NULL, NULL, id), -EINVAL, "unpinned, unknown layer");
  cr_expect_eq(tu_layers_count(T.st), 0);
  cr_assert_eq(lseek(fd, 0, SEEK_SET), 0);
  /* the caller pinned it already: a pull's download thread */
  cairn_pinset *ps = cairn_pinset_new("caller", true);
  cr_assert_eq(cn_pin_take(T.st, ps, CAIRN_PIN_LAYER, right), 0);
  cr_expect_eq(cn_layer_ingest(T.st, fd, right, NULL, id), 0, "%s", cairn_errmsg(T.st));
  cr_expect_str_eq(id, right);
  cairn_pinset_release(T.st, ps);
  close(fd);
  free(plain);
}

/* The images count of the layer with 3 entries (the shared one). */
static int shared_layer_images(const struct cairn_layer_rec *l, void *arg) {
  if (l->entries == 3) *(unsigned *)arg = l->images;
  return 0;
}

Test(import, same_layer_twice_is_stored_once) {
  static const tu_entry other[] = {{.path = "other", .content = "other layer"}};
  tu_layer a[] = {{small_layer, TU_N(small_layer)}};
  tu_layer b[] = {{small_layer, TU_N(small_layer)}, {other, 1}};
  cairn_id ia, ia2, ib;
  cr_assert_eq(tu_import(&T, "a:1", a, 1, ia), 0, "%s", cairn_errmsg(T.st));
  long blobs = tu_blob_count(T.dir);
  cr_assert_eq(blobs, 2);
  cr_assert_eq(tu_import(&T, "a:2", a, 1, ia2), 0, "%s", cairn_errmsg(T.st));
  cr_expect_str_eq(ia, ia2, "the same layers make the same image");
  cr_assert_eq(tu_import(&T, "b:1", b, 2, ib), 0, "%s", cairn_errmsg(T.st));
  cr_expect_eq(tu_layers_count(T.st), 2);
  cr_expect_eq(tu_images_count(T.st), 2);
  cr_expect_eq(tu_blob_count(T.dir), blobs + 1);

  unsigned shared_images = 0;
  cr_assert_eq(cairn_layers_foreach(T.st, shared_layer_images, &shared_images), 0);
  cr_expect_eq(shared_images, 2, "the shared layer (3 entries) is used by both images");
}

/* ---- hostile input ---------------------------------------------------------- */

struct snapshot {
  char *images, *layers, *blobs, *outside;
};

static int image_line(const struct cairn_image_rec *im, void *f) {
  fprintf(f, "%s %u %llu %lld %d", im->id, im->layers, (unsigned long long)im->size,
          (long long)im->created, im->pinned);
  for (size_t i = 0; i < im->n_names; i++) fprintf(f, " %s", im->names[i]);
  fputc('\n', f);
  return 0;
}

static int layer_line(const struct cairn_layer_rec *l, void *f) {
  fprintf(f, "%s %llu %llu %u %d\n", l->id, (unsigned long long)l->size,
          (unsigned long long)l->entries, l->images, l->pinned);
  return 0;
}

/* A listing as text, one line per record. */
static char *listing_text(bool images) {
  char *out = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&out, &len);
  cr_assert(f);
  int r = images ? cairn_images_foreach(T.st, image_line, f)
                 : cairn_layers_foreach(T.st, layer_line, f);
  fclose(f);
  cr_assert_eq(r, 0, "%s", cairn_errmsg(T.st));
  return out;
}

static void snapshot_take(struct snapshot *s) {
  s->images = listing_text(true);
  s->layers = listing_text(false);
  s->blobs = tu_blob_names(T.dir);
  s->outside = tu_dir_listing(T.root, "store");
}

static void snapshot_free(struct snapshot *s) {
  free(s->images);
  free(s->layers);
  free(s->blobs);
  free(s->outside);
}

/* The reason refused_bytes got (its snapshot after the ingest starts new
 * calls, and each call starts with a clean message). */
static char refused_why[1024];

/* Ingests bytes that must be refused: -EBADMSG, the store as it was
 * (images, layers, blob files) and nothing new outside it. The process
 * works in a directory of its own, where a "../x" would land nearby. */
static void refused_bytes(const char *what, const void *buf, size_t len) {
  static const tu_entry base[] = {{.path = "kept", .content = "kept content"}};
  tu_layer layer[] = {{base, 1}};
  cairn_id image;
  if (tu_images_count(T.st) == 0)
    cr_assert_eq(tu_import(&T, "base:1", layer, 1, image), 0, "%s", cairn_errmsg(T.st));
  char *cwd;
  cr_assert(asprintf(&cwd, "%s/cwd/deeper", T.root) > 0);
  char *cwd_parent = strndup(cwd, strlen(cwd) - strlen("/deeper"));
  mkdir(cwd_parent, 0755);
  mkdir(cwd, 0755);
  cr_assert_eq(chdir(cwd), 0);

  struct snapshot before, after;
  snapshot_take(&before);
  cairn_id id;
  int r = tu_ingest_bytes(T.st, buf, len, NULL, NULL, id);
  cr_expect_eq(r, -EBADMSG, "%s: ingest returned %d (%s), want -EBADMSG", what, r,
               cairn_errmsg(T.st));
  cr_expect(strlen(cairn_errmsg(T.st)) > 0, "%s: no message", what);
  snprintf(refused_why, sizeof(refused_why), "%s", cairn_errmsg(T.st));
  snapshot_take(&after);
  cr_expect_str_eq(after.images, before.images, "%s: images changed", what);
  cr_expect_str_eq(after.layers, before.layers, "%s: layers changed", what);
  cr_expect_str_eq(after.blobs, before.blobs, "%s: blob files changed:\nbefore:\n%safter:\n%s",
                   what, before.blobs, after.blobs);
  cr_expect_str_eq(after.outside, before.outside, "%s: written outside the store:\n%s", what,
                   after.outside);
  snapshot_free(&before);
  snapshot_free(&after);
  cr_assert_eq(chdir("/"), 0);
  free(cwd);
  free(cwd_parent);
}

static void refused(const char *what, const tu_entry *e, size_t n) {
  void *buf;
  size_t len;
  tu_tar(e, n, TU_PLAIN, &buf, &len);
  refused_bytes(what, buf, len);
  free(buf);
}

Test(import, dotdot_names_refused) {
  static const tu_entry up[] = {{.path = "fine", .content = "fine"},
                                {.path = "../x", .content = "evil"}};
  refused("../x", up, 2);
  static const tu_entry deep[] = {{.path = "a", .type = 'd'},
                                  {.path = "a/../../x", .content = "evil"}};
  refused("a/../../x", deep, 2);
  static const tu_entry dir[] = {{.path = "../../evil-dir", .type = 'd'}};
  refused("../../evil-dir/", dir, 1);
}

Test(import, hardlinks_outside_the_layer_refused) {
  static const tu_entry passwd[] = {{.path = "fine", .content = "fine"},
                                    {.path = "h", .type = 'h', .target = "../etc/passwd"}};
  refused("hardlink to ../etc/passwd", passwd, 2);
  static const tu_entry abs[] = {{.path = "h", .type = 'h', .target = "/etc/passwd"}};
  refused("hardlink to /etc/passwd (not in the layer)", abs, 1);
  static const tu_entry unknown[] = {{.path = "a", .content = "a"},
                                     {.path = "h", .type = 'h', .target = "not-here"}};
  refused("hardlink to a name not in the layer", unknown, 2);
  static const tu_entry later[] = {{.path = "h", .type = 'h', .target = "b"},
                                   {.path = "b", .content = "b"}};
  refused("hardlink to a name defined later", later, 2);
  static const tu_entry self[] = {{.path = "h", .type = 'h', .target = "h"}};
  refused("hardlink to itself", self, 1);
  static const tu_entry to_dir[] = {{.path = "d", .type = 'd'},
                                    {.path = "h", .type = 'h', .target = "d"}};
  refused("hardlink to a directory", to_dir, 2);
}

Test(import, names_through_a_symlink_refused) {
  static const tu_entry abs[] = {{.path = "l", .type = 'l', .target = "/etc"},
                                 {.path = "l/passwd", .content = "root::0:0::/:/bin/sh\n"}};
  refused("l -> /etc then l/passwd", abs, 2);
  static const tu_entry deep[] = {{.path = "a", .type = 'd'},
                                  {.path = "a/l", .type = 'l', .target = "../.."},
                                  {.path = "a/l/b/c", .content = "x"}};
  refused("a/l -> ../.. then a/l/b/c", deep, 3);
  static const tu_entry dir[] = {{.path = "l", .type = 'l', .target = "/"},
                                 {.path = "l/etc", .type = 'd'}};
  refused("directory below a symlink", dir, 2);
  static const tu_entry link[] = {{.path = "f", .content = "f"},
                                  {.path = "l", .type = 'l', .target = "/etc"},
                                  {.path = "l/passwd", .type = 'h', .target = "f"}};
  refused("hardlink named below a symlink", link, 3);
  static const tu_entry through[] = {{.path = "l", .type = 'l', .target = "/etc"},
                                     {.path = "h", .type = 'h', .target = "l/passwd"}};
  refused("hardlink to a name through a symlink", through, 2);
  static const tu_entry file[] = {{.path = "f", .content = "f"}, {.path = "f/x", .content = "x"}};
  refused("name below a regular file", file, 2);
  /* a hardlink to a symlink is that symlink: names below it go through it */
  static const tu_entry alias[] = {{.path = "l", .type = 'l', .target = "/etc"},
                                   {.path = "h", .type = 'h', .target = "l"},
                                   {.path = "h/passwd", .content = "x"}};
  refused("name below a hardlink to a symlink", alias, 3);
}

/* cairn_entry's owners are 32 bits, as the kernel's are: a wider id would
 * wrap (2^32 to 0, root) if it were stored. */
Test(import, owners_beyond_32_bits_refused) {
  static const tu_entry uid[] = {{.path = "f", .uid = 4294967296ull, .content = "x"}};
  refused("uid 2^32", uid, 1);
  static const tu_entry gid[] = {{.path = "f", .gid = 4294967296ull + 5, .content = "x"}};
  refused("gid 2^32 + 5", gid, 1);
}

Test(import, bad_whiteouts_refused) {
  static const tu_entry dotdot[] = {{.path = "a/.wh.."}};
  refused(".wh..", dotdot, 1);
  static const tu_entry bare[] = {{.path = "a/.wh."}};
  refused(".wh.", bare, 1);
}

/* A tar whose second file is large, so that a cut lands in its data. */
static const char *big_content(void) {
  static char big[20000];
  for (size_t i = 0; i < sizeof(big) - 1; i++) big[i] = (char)('a' + i % 26);
  return big;
}

static void two_files(void **buf, size_t *len, unsigned flags) {
  tu_entry e[] = {{.path = "first", .content = "the first file, complete"},
                  {.path = "second", .content = big_content()}};
  tu_tar(e, 2, flags, buf, len);
}

Test(import, truncated_tar_refused) {
  void *buf;
  size_t len;
  two_files(&buf, &len, TU_PLAIN);
  const char *data = memmem(buf, len, "abcdefghij", 10);
  cr_assert(data);
  size_t cut = (size_t)(data - (const char *)buf) + 7000;
  refused_bytes("tar cut in the middle of a file", buf, cut);
  refused_bytes("tar cut in the middle of a header", buf, 512 + 100);
  free(buf);
}

Test(import, truncated_compressed_refused) {
  void *buf;
  size_t len;
  two_files(&buf, &len, TU_GZIP);
  refused_bytes("gzip cut in half", buf, len / 2);
  refused_bytes("gzip without its trailer", buf, len - 6);
  free(buf);
  two_files(&buf, &len, TU_ZSTD);
  refused_bytes("zstd cut in half", buf, len / 2);
  refused_bytes("zstd without its last bytes", buf, len - 3);
  free(buf);
}

Test(import, corrupt_header_refused) {
  void *buf;
  size_t len;
  two_files(&buf, &len, TU_PLAIN);
  char *h = memmem(buf, len, "second", 7);
  cr_assert(h && (h - (char *)buf) % 512 == 0, "the second header is not where expected");
  memcpy(h, "SECOND", 6); /* breaks its checksum */
  refused_bytes("a header with a wrong checksum", buf, len);
  free(buf);
}

Test(import, not_a_tar_refused) {
  char garbage[4096];
  for (size_t i = 0; i < sizeof(garbage); i++) garbage[i] = "this is not a tar\n"[i % 18];
  refused_bytes("text", garbage, sizeof(garbage));
  unsigned char noise[3000];
  unsigned s = 12345;
  for (size_t i = 0; i < sizeof(noise); i++)
    noise[i] = (unsigned char)((s = s * 1103515245 + 12345) >> 16);
  refused_bytes("noise", noise, sizeof(noise));
  refused_bytes("empty input", "", 0);
}

Test(import, expected_diff_id_mismatch_commits_nothing) {
  void *buf;
  size_t len;
  two_files(&buf, &len, TU_GZIP);
  static const tu_entry base[] = {{.path = "kept", .content = "kept content"}};
  tu_layer layer[] = {{base, 1}};
  cairn_id image, id;
  cr_assert_eq(tu_import(&T, "base:1", layer, 1, image), 0, "%s", cairn_errmsg(T.st));
  struct snapshot before, after;
  snapshot_take(&before);
  const char *wrong = "0000000000000000000000000000000000000000000000000000000000000000";
  int r = tu_ingest_bytes(T.st, buf, len, wrong, NULL, id);
  cr_expect_eq(r, -EBADMSG, "ingest returned %d (%s)", r, cairn_errmsg(T.st));
  cr_expect(strstr(cairn_errmsg(T.st), "mismatch"), "message: %s", cairn_errmsg(T.st));
  snapshot_take(&after);
  cr_expect_str_eq(after.layers, before.layers);
  cr_expect_str_eq(after.images, before.images);
  cr_expect_str_eq(after.blobs, before.blobs, "blob files changed:\nbefore:\n%safter:\n%s",
                   before.blobs, after.blobs);
  snapshot_free(&before);
  snapshot_free(&after);
  free(buf);
}

/* ---- the layer as a mount merges it ---------------------------------------- */

/* Later entries replace earlier ones of the same name. What remains must be
 * a layer a mount can merge, or the import is refused (exit 5) with nothing
 * stored, rather than committed and failing at every mount. */
Test(import, hardlink_whose_target_becomes_a_directory_refused) {
  static const tu_entry e[] = {{.path = "x", .content = "file x"},
                               {.path = "y", .type = 'h', .target = "x"},
                               {.path = "x", .type = 'd'}};
  refused("x, y -> x, then x a directory", e, 3);
  cr_expect(strstr(refused_why, "hardlink y points at x, which is not a file"), "message: %s",
            refused_why);
  /* through cairn import: the file is named, no image, no layer */
  tu_layer layer[] = {{e, 3}};
  size_t images = tu_images_count(T.st), layers = tu_layers_count(T.st);
  cairn_id id;
  cr_expect_eq(tu_import(&T, "bad:1", layer, 1, id), -EBADMSG);
  cr_expect(strstr(cairn_errmsg(T.st), "layer-0.tar: hardlink y points at x, which is not a file"),
            "message: %s", cairn_errmsg(T.st));
  cr_expect_eq(tu_images_count(T.st), images);
  cr_expect_eq(tu_layers_count(T.st), layers);
}

Test(import, hardlink_into_a_replaced_directory_refused) {
  static const tu_entry e[] = {{.path = "d", .type = 'd'},
                               {.path = "d/f", .content = "f"},
                               {.path = "h", .type = 'h', .target = "d/f"},
                               {.path = "d", .content = "d is a file now"}};
  refused("h -> d/f, then d a file", e, 4);
  cr_expect(strstr(refused_why, "hardlink h points at d/f, which is not a file"), "message: %s",
            refused_why);
}

static cairn_tree *import_tree(const tu_entry *e, size_t n) {
  tu_layer layer[] = {{e, n}};
  cairn_id id;
  cr_assert_eq(tu_import(&T, "ok:1", layer, 1, id), 0, "import: %s", cairn_errmsg(T.st));
  cairn_tree *t;
  cr_assert_eq(cairn_tree_build(T.st, id, &t), 0, "merge: %s", cairn_errmsg(T.st));
  return t;
}

static const cairn_node *tree_at(const cairn_tree *t, const char *name, uint64_t *ino) {
  const cairn_dirent *de = cairn_tree_lookup(t, cairn_tree_node(t, 1), name);
  cr_assert(de, "%s is missing from the merged tree", name);
  if (ino) *ino = de->ino;
  return cairn_tree_node(t, de->ino);
}

/* Every other replacement within a layer is accepted and merges as the tar
 * would extract. */
Test(import, replacements_within_a_layer_merge_as_extracted) {
  static const tu_entry dir_to_file[] = {{.path = "d", .type = 'd'},
                                         {.path = "d/child", .content = "c"},
                                         {.path = "d/sub", .type = 'd'},
                                         {.path = "d/sub/x", .content = "x"},
                                         {.path = "d", .content = "d is a file now"},
                                         {.path = "d0", .content = "a neighbour"}};
  cairn_tree *t = import_tree(dir_to_file, TU_N(dir_to_file));
  const cairn_node *d = tree_at(t, "d", NULL);
  cr_expect(S_ISREG(d->mode), "d: mode %o, want a regular file", d->mode);
  cr_expect_eq(d->size, strlen("d is a file now"));
  tree_at(t, "d0", NULL);
  cr_expect_eq(cairn_tree_count(t), 3, "%zu nodes: the old children of d are kept",
               cairn_tree_count(t));
  cairn_tree_free(t);

  static const tu_entry to_symlink[] = {{.path = "x", .content = "file x"},
                                        {.path = "y", .type = 'h', .target = "x"},
                                        {.path = "x", .type = 'l', .target = "elsewhere"}};
  t = import_tree(to_symlink, TU_N(to_symlink));
  uint64_t x, y;
  cr_expect(S_ISLNK(tree_at(t, "x", &x)->mode));
  tree_at(t, "y", &y);
  cr_expect_eq(x, y, "y is not the inode x names");
  cairn_tree_free(t);

  /* the first name of a group replaced by a hardlink to another file: the
   * group follows it, whatever order the names sort in */
  static const tu_entry to_hardlink[] = {{.path = "w", .content = "file w"},
                                         {.path = "x", .content = "file x"},
                                         {.path = "a", .type = 'h', .target = "x"},
                                         {.path = "x", .type = 'h', .target = "w"}};
  t = import_tree(to_hardlink, TU_N(to_hardlink));
  uint64_t a, w;
  tree_at(t, "a", &a);
  tree_at(t, "w", &w);
  tree_at(t, "x", &x);
  cr_expect(a == w && x == w, "a, x and w are not one inode");
  cr_expect_eq(cairn_tree_node(t, w)->nlink, 3);
  cairn_tree_free(t);

  static const tu_entry to_file[] = {{.path = "x", .content = "old x"},
                                     {.path = "y", .type = 'h', .target = "x"},
                                     {.path = "x", .content = "new x!"}};
  t = import_tree(to_file, TU_N(to_file));
  tree_at(t, "x", &x);
  tree_at(t, "y", &y);
  cr_expect_eq(x, y);
  cr_expect_eq(cairn_tree_node(t, x)->size, strlen("new x!"));
  cairn_tree_free(t);

  /* whiteouts act on lower layers only, also next to the name they hide */
  static const tu_entry whiteouts[] = {
      {.path = "d", .type = 'd'}, {.path = "d/.wh.f"},          {.path = "d/f", .content = "f"},
      {.path = "d/.wh..wh..opq"}, {.path = "d/g", .type = 'd'}, {.path = "d/g", .content = "g"}};
  t = import_tree(whiteouts, TU_N(whiteouts));
  cr_expect_eq(tree_at(t, "d", &x)->n_children, 2);
  cairn_tree_free(t);
}

/* ---- xattrs beyond 64 ----------------------------------------------------- */

#define MANY_XATTRS 100

static void many_xattrs_tar(const char *path) {
  FILE *f = fopen(path, "w");
  cr_assert(f);
  struct archive *a = archive_write_new();
  archive_write_set_format_pax(a);
  cr_assert_eq(archive_write_open_FILE(a, f), ARCHIVE_OK);
  struct archive_entry *ae = archive_entry_new();
  archive_entry_set_pathname(ae, "f");
  archive_entry_set_filetype(ae, AE_IFREG);
  archive_entry_set_perm(ae, 0644);
  archive_entry_set_size(ae, 1);
  for (int i = 0; i < MANY_XATTRS; i++) {
    char name[32], value[32];
    snprintf(name, sizeof(name), "user.x%03d", i);
    snprintf(value, sizeof(value), "value %d", i);
    archive_entry_xattr_add_entry(ae, name, value, strlen(value));
  }
  cr_assert_eq(archive_write_header(a, ae), ARCHIVE_OK, "%s", archive_error_string(a));
  cr_assert_eq(archive_write_data(a, "f", 1), 1);
  archive_entry_free(ae);
  cr_assert_eq(archive_write_close(a), ARCHIVE_OK);
  archive_write_free(a);
  cr_assert_eq(fclose(f), 0);
}

/* Each xattr once, with its value, in the tar's order. */
static void expect_many_xattrs(const cairn_xattr *x, size_t n, const char *where) {
  cr_assert_eq(n, MANY_XATTRS, "%s: %zu xattrs, want %d", where, n, MANY_XATTRS);
  for (int i = 0; i < MANY_XATTRS; i++) {
    char name[32], value[32];
    snprintf(name, sizeof(name), "user.x%03d", i);
    snprintf(value, sizeof(value), "value %d", i);
    cr_assert_str_eq(x[i].name, name, "%s: xattr %d is %s", where, i, x[i].name);
    cr_assert(x[i].len == strlen(value) && memcmp(x[i].value, value, x[i].len) == 0,
              "%s: %s has the wrong value", where, name);
  }
}

static int many_xattrs_entry(const cairn_entry *e, void *arg) {
  if (strcmp(e->path, "f") == 0) {
    expect_many_xattrs(e->xattrs, e->n_xattrs, "cn_layer_foreach");
    ++*(int *)arg;
  }
  return 0;
}

Test(import, every_xattr_kept_beyond_64) {
  char *path;
  cr_assert(asprintf(&path, "%s/xattrs.tar", T.root) > 0);
  many_xattrs_tar(path);
  cairn_id image;
  int r = cn_import_files(T.st, "xattrs:1", (const char *const[]){path}, 1, image);
  cr_assert_eq(r, 0, "import: %s", cairn_errmsg(T.st));
  free(path);
  char **layers;
  size_t n;
  cr_assert_eq(cn_image_layers(T.st, image, &layers, &n), 0);
  int seen = 0;
  cr_assert_eq(cn_layer_foreach(T.st, layers[0], many_xattrs_entry, &seen), 0);
  cr_expect_eq(seen, 1);
  cn_strv_free(layers, n);
  cairn_tree *t;
  cr_assert_eq(cairn_tree_build(T.st, image, &t), 0, "%s", cairn_errmsg(T.st));
  const cairn_node *f = tree_at(t, "f", NULL);
  cairn_xattr *x = calloc(f->n_xattrs + 1, sizeof(*x));
  for (size_t i = 0; i < f->n_xattrs; i++) x[i] = cairn_tree_xattr(t, f, i);
  expect_many_xattrs(x, f->n_xattrs, "merged tree");
  free(x);
  cairn_tree_free(t);
}

/* Another process opening the store recovers every journal it can lock (a
 * killed import's). One that does so in the moment an import creates its
 * journal must not take that journal from it: the hook, standing for that
 * process, locks every journal it sees there and keeps them locked. */
static int window_locks[16];
static size_t n_window_locks;

static void recover_in_the_window(cairn_store *st, const char *point) {
  (void)st;
  if (strcmp(point, "staging: created") != 0) return;
  char dir[PATH_MAX];
  snprintf(dir, sizeof(dir), "%s/tmp", T.dir);
  DIR *d = opendir(dir);
  cr_assert(d);
  struct dirent *de;
  while ((de = readdir(d)) && n_window_locks < 16) {
    if (strncmp(de->d_name, "staging.", 8) != 0) continue; /* what recovery reads */
    int fd = openat(dirfd(d), de->d_name, O_RDONLY | O_CLOEXEC);
    if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0)
      window_locks[n_window_locks++] = fd;
    else if (fd >= 0)
      close(fd);
  }
  closedir(d);
}

Test(import, a_recovery_while_the_journal_is_created_takes_nothing_from_the_import) {
  void *buf;
  size_t len;
  two_files(&buf, &len, TU_PLAIN);
  cn_store_test_hook = recover_in_the_window;
  cairn_id diff_id;
  int r = tu_ingest_bytes(T.st, buf, len, NULL, NULL, diff_id);
  cn_store_test_hook = NULL;
  for (size_t i = 0; i < n_window_locks; i++) close(window_locks[i]);
  cr_assert_eq(r, 0, "ingest: %d %s", r, cairn_errmsg(T.st));
  cr_assert_eq(n_window_locks, 0, "the recovery could lock the import's journal");
  free(buf);
}
