/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_snapshot.c — containerd's snapshots in the store (store/snapshot.c)
 * where containerd's conformance suite (test_snapshotter_suite.sh) does not
 * look: the mounts of a committed snapshot are refused, as containerd's
 * overlayfs snapshotter refuses them; the errors of commit, remove and
 * update; List's filters (regular expressions, quoted label keys, a filter
 * that does not parse); usage counted and recorded; Cleanup removes the
 * directories no snapshot owns and keeps the others; a remote snapshot of
 * a stored layer unpacks nothing, and one taken out of service is not one;
 * a chain image pinned (by its background fill) when its last snapshot goes
 * is left to gc, which removes it once nothing pins it.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <limits.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "libcairn_store.h"
#include "testutil.h"

static tu_store T;
static void setup(void) { tu_store_setup(&T); }
static void teardown(void) { tu_store_teardown(&T); }
TestSuite(snapshot, .init = setup, .fini = teardown);

static void prepare(const char *key, const char *parent, enum cairn_snapshot_kind kind) {
  cr_assert_eq(cairn_snapshot_prepare(T.st, kind, key, parent, NULL, 0), 0, "%s",
               cairn_errmsg(T.st));
}
static void commit(const char *name, const char *key) {
  cr_assert_eq(cairn_snapshot_commit(T.st, name, key, NULL, 0), 0, "%s", cairn_errmsg(T.st));
}

Test(snapshot, mounts_of_a_committed_snapshot_are_refused) {
  prepare("a", NULL, CAIRN_SNAPSHOT_ACTIVE);
  commit("c", "a");
  cairn_snapshot_mount m;
  cr_assert_eq(cairn_snapshot_mounts(T.st, "c", &m), -EBUSY);
  cr_assert(strstr(cairn_errmsg(T.st), "not active"), "%s", cairn_errmsg(T.st));
  prepare("v", NULL, CAIRN_SNAPSHOT_VIEW);
  cr_assert_eq(cairn_snapshot_mounts(T.st, "v", &m), 0, "%s", cairn_errmsg(T.st));
  cr_assert_str_eq(m.type, "bind");
  cr_assert_str_eq(m.options[0], "ro");
  cairn_snapshot_mount_free(&m);
  cr_assert_eq(cairn_snapshot_mounts(T.st, "nosuch", &m), -ENOENT);
}

Test(snapshot, errors_as_containerd_gives_them) {
  prepare("a", NULL, CAIRN_SNAPSHOT_ACTIVE);
  cr_assert_eq(cairn_snapshot_prepare(T.st, CAIRN_SNAPSHOT_ACTIVE, "a", NULL, NULL, 0), -EEXIST);
  cr_assert_eq(cairn_snapshot_prepare(T.st, CAIRN_SNAPSHOT_ACTIVE, "b", "nosuch", NULL, 0),
               -ENOENT);
  cr_assert_eq(cairn_snapshot_prepare(T.st, CAIRN_SNAPSHOT_ACTIVE, "b", "a", NULL, 0), -EINVAL);
  prepare("v", NULL, CAIRN_SNAPSHOT_VIEW);
  cr_assert_eq(cairn_snapshot_commit(T.st, "c", "v", NULL, 0), -EBUSY);
  cr_assert_eq(cairn_snapshot_commit(T.st, "v", "a", NULL, 0), -EEXIST);
  commit("c", "a");
  prepare("child", "c", CAIRN_SNAPSHOT_ACTIVE);
  cr_assert_eq(cairn_snapshot_remove(T.st, "c"), -EBUSY);
  cr_assert_eq(cairn_snapshot_remove(T.st, "a"), -ENOENT);
  cairn_snapshot s;
  cr_assert_eq(cairn_snapshot_stat(T.st, "c", &s), 0);
  const char *paths[] = {"parent"};
  cairn_snapshot out;
  cr_assert_eq(cairn_snapshot_update(T.st, &s, paths, 1, &out), -EINVAL);
  cairn_snapshot_free(&s);
  cr_assert_eq(cairn_snapshot_remove(T.st, "child"), 0);
  cr_assert_eq(cairn_snapshot_remove(T.st, "c"), 0);
}

static int collect(const cairn_snapshot *s, void *arg) {
  char *out = arg;
  strcat(out, s->name);
  strcat(out, " ");
  return 0;
}
static const char *walk(const char *filter) {
  static char out[256];
  out[0] = '\0';
  const char *f[] = {filter};
  int r = cairn_snapshot_walk(T.st, f, 1, collect, out);
  return r < 0 ? "error" : out;
}

Test(snapshot, filters) {
  /* a chain id the store has no layer of: prepared as any other */
  cairn_snapshot_label l[] = {{(char *)"a b", (char *)"1"},
                              {(char *)"containerd.io/snapshot.ref", (char *)"sha256:ab"}};
  cr_assert_eq(cairn_snapshot_prepare(T.st, CAIRN_SNAPSHOT_ACTIVE, "app-1", NULL, l, 2), 0);
  prepare("base", NULL, CAIRN_SNAPSHOT_ACTIVE);
  commit("base-c", "base");
  prepare("app-2", "base-c", CAIRN_SNAPSHOT_VIEW);
  cr_assert_str_eq(walk("name~=^app-"), "app-1 app-2 ");
  cr_assert_str_eq(walk("labels.\"a b\"==1"), "app-1 ");
  cr_assert_str_eq(walk("kind==committed"), "base-c ");
  cr_assert_str_eq(walk("parent!=\"\""), "app-2 ");
  cr_assert_str_eq(walk("parent~=^$,kind==active"), "app-1 ");
  /* as containerd's adaptor: parent is present when empty (what its
   * metadata asks of a remote snapshot with no parent) */
  cr_assert_str_eq(walk("parent==\"\""), "app-1 base-c ");
  cr_assert_str_eq(walk("labels.\"containerd.io/snapshot.ref\"==sha256:ab,parent==\"\""), "app-1 ");
  cr_assert_str_eq(walk("name=="), "");
  cr_assert_str_eq(walk("name==\"open"), "error");
  cr_assert_eq(
      cairn_snapshot_walk(T.st, (const char *[]){"kind==view,"}, 1, collect, (char[64]){0}),
      -EINVAL);
}

Test(snapshot, usage_and_cleanup) {
  prepare("a", NULL, CAIRN_SNAPSHOT_ACTIVE);
  int64_t size0, inodes0, size, inodes;
  cr_assert_eq(cairn_snapshot_usage(T.st, "a", &size0, &inodes0), 0);
  char path[PATH_MAX];
  snprintf(path, sizeof(path), "%s/snapshots/1/fs/f", T.dir);
  char buf[10000];
  memset(buf, 'x', sizeof(buf));
  tu_write_file(path, buf, sizeof(buf));
  cr_assert_eq(cairn_snapshot_usage(T.st, "a", &size, &inodes), 0);
  cr_assert_eq(inodes, inodes0 + 1);
  cr_assert_geq(size, size0 + (int64_t)sizeof(buf));
  commit("c", "a");
  int64_t csize, cinodes;
  cr_assert_eq(cairn_snapshot_usage(T.st, "c", &csize, &cinodes), 0);
  cr_assert_eq(csize, size);
  cr_assert_eq(cinodes, inodes);
  /* a directory no snapshot owns (an interrupted prepare) goes; c's stays */
  snprintf(path, sizeof(path), "%s/snapshots/99", T.dir);
  cr_assert_eq(mkdir(path, 0700), 0);
  /* and so does an older cairn's remote snapshot unpack whose process is gone (pid 1
   * is there: its unpack stays) */
  char gone[PATH_MAX], live[PATH_MAX];
  snprintf(gone, sizeof(gone), "%s/snapshots/tmp-2147483646-0", T.dir);
  snprintf(live, sizeof(live), "%s/snapshots/tmp-1-0", T.dir);
  cr_assert_eq(mkdir(gone, 0700), 0);
  cr_assert_eq(mkdir(live, 0700), 0);
  cr_assert_eq(cairn_snapshot_cleanup(T.st), 0, "%s", cairn_errmsg(T.st));
  struct stat sb;
  cr_assert_eq(stat(path, &sb), -1);
  cr_assert_eq(stat(gone, &sb), -1);
  cr_assert_eq(stat(live, &sb), 0);
  /* c's directory stays, emptied: its file is its layer's */
  snprintf(path, sizeof(path), "%s/snapshots/1/fs", T.dir);
  cr_assert_eq(stat(path, &sb), 0);
  snprintf(path, sizeof(path), "%s/snapshots/1/fs/f", T.dir);
  cr_assert_eq(stat(path, &sb), -1);
}

/* A Prepare labelled with the chain id of a stored layer is answered with
 * the committed snapshot of it (-EEXIST), its directory empty (nothing
 * unpacked: the chain's cairnfs mount serves it); a layer a lazy pull's
 * finish refuted is no remote snapshot: the Prepare is an ordinary one. */
Test(snapshot, remote_snapshot_unpacks_nothing_and_no_refuted_layer) {
  static const tu_entry e[] = {{.path = "etc/f", .content = "x\n"}};
  cairn_id diff;
  cr_assert_eq(tu_ingest(T.st, e, TU_N(e), TU_PLAIN, NULL, diff), 0, "%s", cairn_errmsg(T.st));
  char ref[80], name[96];
  snprintf(ref, sizeof(ref), "sha256:%s", diff);
  snprintf(name, sizeof(name), "ns/1/%s", ref);
  cairn_snapshot_label l[] = {{(char *)"containerd.io/snapshot.ref", ref}};
  cr_assert_eq(cairn_snapshot_prepare(T.st, CAIRN_SNAPSHOT_ACTIVE, "ns/1/extract", "", l, 1),
               -EEXIST, "%s", cairn_errmsg(T.st));
  cairn_snapshot s;
  cr_assert_eq(cairn_snapshot_stat(T.st, name, &s), 0, "%s", cairn_errmsg(T.st));
  cr_assert_eq(s.kind, CAIRN_SNAPSHOT_COMMITTED);
  cairn_snapshot_free(&s);
  char dir[PATH_MAX];
  snprintf(dir, sizeof(dir), "%s/snapshots/1/fs", T.dir);
  char *listing = tu_dir_listing(dir, NULL);
  cr_assert_str_eq(listing, "", "unpacked: %s", listing);
  free(listing);
  char sql[160];
  snprintf(sql, sizeof(sql), "INSERT INTO layer_refuted VALUES('%s', 'test', 0)", diff);
  cr_assert_eq(sqlite3_exec(T.st->db, sql, NULL, NULL, NULL), SQLITE_OK);
  cr_assert_eq(cairn_snapshot_prepare(T.st, CAIRN_SNAPSHOT_ACTIVE, "ns/2/extract", "", l, 1), 0,
               "%s", cairn_errmsg(T.st));
  cr_assert_eq(cairn_snapshot_stat(T.st, "ns/2/extract", &s), 0, "%s", cairn_errmsg(T.st));
  cr_assert_eq(s.kind, CAIRN_SNAPSHOT_ACTIVE);
  cairn_snapshot_free(&s);
}

static int count(const char *sql) {
  sqlite3_stmt *s = NULL;
  cr_assert_eq(sqlite3_prepare_v2(T.st->db, sql, -1, &s, NULL), SQLITE_OK, "%s", sql);
  cr_assert_eq(sqlite3_step(s), SQLITE_ROW);
  int n = sqlite3_column_int(s, 0);
  sqlite3_finalize(s);
  return n;
}

/* The chain image a background fill pins (here the test's pinset) outlives
 * the removal of the chain's last snapshot, which succeeds; gc leaves it
 * while it is pinned, then removes it and frees its layer. */
Test(snapshot, a_pinned_chain_image_is_left_to_gc) {
  static const tu_entry e[] = {{.path = "etc/f", .content = "x\n"}};
  cairn_id diff;
  cr_assert_eq(tu_ingest(T.st, e, TU_N(e), TU_PLAIN, NULL, diff), 0, "%s", cairn_errmsg(T.st));
  char ref[80], name[96], sql[200];
  snprintf(ref, sizeof(ref), "sha256:%s", diff);
  snprintf(name, sizeof(name), "ns/1/%s", ref);
  cairn_snapshot_label l[] = {{(char *)"containerd.io/snapshot.ref", ref}};
  cr_assert_eq(cairn_snapshot_prepare(T.st, CAIRN_SNAPSHOT_ACTIVE, "ns/1/extract", "", l, 1),
               -EEXIST, "%s", cairn_errmsg(T.st));
  prepare("ns/1/run", name, CAIRN_SNAPSHOT_ACTIVE);
  cairn_snapshot_mount m;
  cr_assert_eq(cairn_snapshot_mounts_chain(T.st, "ns/1/run", "/bin/true", &m), 0, "%s",
               cairn_errmsg(T.st));
  cairn_snapshot_mount_free(&m);
  sqlite3_stmt *s = NULL;
  cr_assert_eq(sqlite3_prepare_v2(T.st->db, "SELECT image_id FROM snapshot_mounts", -1, &s, NULL),
               SQLITE_OK);
  cr_assert_eq(sqlite3_step(s), SQLITE_ROW);
  cairn_id img;
  snprintf(img, sizeof(img), "%s", (const char *)sqlite3_column_text(s, 0));
  sqlite3_finalize(s);
  cairn_pinset *ps = cairn_pinset_new("test: a fill", true);
  cr_assert_eq(cairn_pin_image(T.st, ps, img), 0, "%s", cairn_errmsg(T.st));
  cr_assert_eq(cairn_snapshot_remove(T.st, "ns/1/run"), 0, "%s", cairn_errmsg(T.st));
  cr_assert_eq(cairn_snapshot_remove(T.st, name), 0, "%s", cairn_errmsg(T.st));
  snprintf(sql, sizeof(sql), "SELECT count(*) FROM images WHERE id = '%s'", img);
  cr_assert_eq(count(sql), 1, "the pinned chain image was deleted");
  cairn_report r = {0};
  cr_assert_eq(cairn_gc(T.st, false, &r), 0, "%s", cairn_errmsg(T.st));
  cairn_report_free(&r);
  cr_assert_eq(count(sql), 1, "gc removed the pinned chain image");
  cairn_pinset_release(T.st, ps);
  r = (cairn_report){0};
  cr_assert_eq(cairn_gc(T.st, false, &r), 0, "%s", cairn_errmsg(T.st));
  cairn_report_free(&r);
  cr_assert_eq(count(sql), 0, "gc left the chain image no snapshot uses");
  snprintf(sql, sizeof(sql), "SELECT count(*) FROM layers WHERE id = '%s'", diff);
  cr_assert_eq(count(sql), 0, "gc left its layer");
}
