/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_als.c — what podman's Additional Layer Store asks of the store
 * (store/als.c): a layer's kept compressed blob and its record (linked from
 * an anonymous file, or copied from any fd), the info JSON, removal of the
 * record and file with the layer, and the one-layer tree in overlayfs's
 * encoding (whiteouts as 0/0 character devices, opaque directories with
 * trusted.overlay.opaque=y, the rest as the layer has it).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"

static tu_store T;
static void setup(void) { tu_store_setup(&T); }
static void teardown(void) { tu_store_teardown(&T); }
TestSuite(als, .init = setup, .fini = teardown);

static const tu_entry upper[] = {
    {.path = "data/", .type = 'd'},
    {.path = "data/.wh.gone"},
    {.path = "data/hello", .content = "hello\n"},
    {.path = "opq/", .type = 'd', .mode = 0700},
    {.path = "opq/.wh..wh..opq"},
    {.path = "opq/new", .content = "new\n"},
    {.path = "implicit/.wh..wh..opq"},
};

/* Ingests upper as gzip and keeps its compressed bytes from fd kind:
 * 0 a memfd (copied), 1 an anonymous file of the store (linked). */
static void keep_upper(int kind, cairn_id diff_id, char digest[CAIRN_DIGEST_LEN + 1],
                       size_t *size) {
  void *gz;
  size_t len;
  tu_tar(upper, TU_N(upper), TU_GZIP, &gz, &len);
  cr_assert_eq(tu_ingest_bytes(T.st, gz, len, NULL, NULL, diff_id), 0, "%s", cairn_errmsg(T.st));
  char hex[65];
  tu_sha256_hex(gz, len, hex);
  snprintf(digest, CAIRN_DIGEST_LEN + 1, "sha256:%s", hex);
  int fd;
  if (kind == 0) {
    fd = tu_memfd(gz, len);
  } else {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s/tmp", cairn_store_dir(T.st));
    fd = open(tmp, O_TMPFILE | O_RDWR, 0444);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, gz, len), (ssize_t)len);
  }
  cr_assert_eq(cn_layer_blob_keep(T.st, diff_id, digest,
                                     "application/vnd.oci.image.layer.v1.tar+gzip", len, fd),
               0, "%s", cairn_errmsg(T.st));
  close(fd);
  free(gz);
  *size = len;
}

static void check_kept(const cairn_id diff_id, const char *digest, size_t size) {
  struct cairn_layer_blob b;
  cr_assert_eq(cairn_layer_blob_get(T.st, digest, &b), 0, "%s", cairn_errmsg(T.st));
  cr_expect_str_eq(b.diff_id, diff_id);
  cr_expect_eq(b.size, size);
  int fd = cairn_layer_blob_open(T.st, digest);
  cr_assert_geq(fd, 0);
  struct stat sb;
  cr_expect_eq(fstat(fd, &sb), 0);
  cr_expect_eq((size_t)sb.st_size, size);
  close(fd);
  char *info = cairn_layer_blob_info(&b);
  json_t *j = json_loads(info, 0, NULL);
  cr_assert(j, "info is not JSON: %s", info);
  cr_expect_str_eq(json_string_value(json_object_get(j, "compressed-diff-digest")), digest);
  cr_expect_eq(json_integer_value(json_object_get(j, "compressed-size")), (json_int_t)size);
  cr_expect_eq(json_integer_value(json_object_get(j, "compression")), 2);
  char diff[80];
  snprintf(diff, sizeof diff, "sha256:%s", diff_id);
  cr_expect_str_eq(json_string_value(json_object_get(j, "diff-digest")), diff);
  json_decref(j);
  free(info);
}

Test(als, keep_copied_and_linked) {
  for (int kind = 0; kind < 2; kind++) {
    cairn_id diff_id;
    char digest[CAIRN_DIGEST_LEN + 1];
    size_t size;
    keep_upper(kind, diff_id, digest, &size);
    check_kept(diff_id, digest, size);
  }
  struct cairn_layer_blob b;
  cr_expect_eq(cairn_layer_blob_get(T.st, "sha256:00", &b), -ENOENT);
  cr_expect_lt(cairn_layer_blob_open(T.st, "nope"), 0);
}

Test(als, record_and_file_go_with_the_layer) {
  cairn_id diff_id;
  char digest[CAIRN_DIGEST_LEN + 1];
  size_t size;
  keep_upper(1, diff_id, digest, &size);
  cairn_report r = {0};
  cr_assert_eq(cairn_gc(T.st, false, &r), 0, "%s", cairn_errmsg(T.st));
  cairn_report_free(&r);
  struct cairn_layer_blob b;
  cr_expect_eq(cairn_layer_blob_get(T.st, digest, &b), -ENOENT, "the record outlived its layer");
  char path[4096];
  snprintf(path, sizeof path, "%s/compressed/%s", cairn_store_dir(T.st), digest + 7);
  cr_expect_neq(access(path, F_OK), 0, "the kept file outlived its layer");
}

static const cairn_node *node_at(cairn_tree *t, const char *path) {
  const cairn_node *n = cairn_tree_node(t, 1);
  char buf[256];
  snprintf(buf, sizeof buf, "%s", path);
  for (char *save = NULL, *c = strtok_r(buf, "/", &save); c && n; c = strtok_r(NULL, "/", &save)) {
    const cairn_dirent *de = cairn_tree_lookup(t, n, c);
    n = de ? cairn_tree_node(t, de->ino) : NULL;
  }
  return n;
}

static bool opaque(cairn_tree *t, const cairn_node *n) {
  for (size_t i = 0; i < n->n_xattrs; i++) {
    cairn_xattr x = cairn_tree_xattr(t, n, i);
    if (strcmp(x.name, "trusted.overlay.opaque") == 0) return x.len == 1 && *(char *)x.value == 'y';
  }
  return false;
}

Test(als, diff_tree_in_overlay_encoding) {
  cairn_id diff_id;
  cr_assert_eq(tu_ingest(T.st, upper, TU_N(upper), TU_PLAIN, NULL, diff_id), 0);
  cairn_tree *t;
  cr_assert_eq(cairn_layer_diff_tree(T.st, diff_id, &t), 0, "%s", cairn_errmsg(T.st));
  const cairn_node *gone = node_at(t, "data/gone");
  cr_assert(gone, "no whiteout at data/gone");
  cr_expect(S_ISCHR(gone->mode) && gone->rdev == 0, "data/gone is not a 0/0 device");
  cr_expect_null(node_at(t, "data/.wh.gone"));
  cr_expect_null(node_at(t, "opq/.wh..wh..opq"));
  const cairn_node *hello = node_at(t, "data/hello");
  cr_assert(hello);
  cr_expect_eq(hello->size, 6);
  const cairn_node *opq = node_at(t, "opq");
  cr_assert(opq && S_ISDIR(opq->mode));
  cr_expect(opaque(t, opq), "opq is not marked opaque");
  cr_expect_eq(opq->mode & 07777, 0700, "opq lost its own mode");
  cr_expect(node_at(t, "opq/new"));
  const cairn_node *implicit = node_at(t, "implicit");
  cr_assert(implicit && S_ISDIR(implicit->mode));
  cr_expect(opaque(t, implicit), "a directory with only an opaque marker is not opaque");
  cr_expect(!opaque(t, node_at(t, "data")), "data is marked opaque");
  cairn_tree_free(t);
  cr_expect_eq(cairn_layer_diff_tree(
                   T.st, "0000000000000000000000000000000000000000000000000000000000000000", &t),
               -ENOENT);
}
