/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_tarsplit.c — exact layers: a tar imported (plain or gzip) is written
 * again byte for byte by cn_layer_tar, for tars made by GNU tar (gnu
 * and posix formats, long names, hardlinks, sparse files), Python's
 * tarfile (gnu, pax, ustar), libarchive, with trailing bytes after the end
 * blocks and with a path given twice; the record goes with its layer (rm,
 * gc), a layer stored without one is -ENODATA until imported again, and a
 * damaged record or blob is -EBADMSG, which fsck reports.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "libcairn_store.h" /* st->db */
#include "remote/libcairn_chunked_write.h"
#include "testutil.h"

static tu_store T;
static void setup(void) { tu_store_setup(&T); }
static void teardown(void) { tu_store_teardown(&T); }
TestSuite(tarsplit, .init = setup, .fini = teardown);

struct membuf {
  char *p;
  size_t len, cap;
};

static int mem_write(const void *buf, size_t len, void *arg) {
  struct membuf *m = arg;
  if (m->len + len > m->cap) {
    m->cap = (m->len + len) * 2;
    m->p = realloc(m->p, m->cap);
    cr_assert(m->p);
  }
  memcpy(m->p + m->len, buf, len);
  m->len += len;
  return 0;
}

/* Runs a shell script in a fresh directory of T.root (cwd), which has a
 * tree "src" prepared; the script writes OUT (the tar). */
static char *make_tar(const char *script, size_t *len) {
  char *cmd = NULL;
  cr_assert(asprintf(&cmd,
                     "set -e; cd '%s'; rm -rf src out.tar; mkdir -p src/d/sub;"
                     " printf 'hello\\n' > src/a; printf '' > src/empty;"
                     " head -c 70000 /dev/urandom > src/d/big; ln src/a src/d/hard;"
                     " ln -s ../a src/d/sym; mkdir -p src/%0100d; echo long >"
                     " src/%0100d/%0120d; chmod 0751 src/d; %s",
                     T.root, 1, 1, 2, script) > 0);
  int rc = system(cmd);
  free(cmd);
  cr_assert_eq(rc, 0, "tar script failed: %s", script);
  char path[4096];
  snprintf(path, sizeof(path), "%s/out.tar", T.root);
  return tu_read_file(path, len);
}

/* Imports the bytes (compressed as flags say) and checks the tar written
 * back equals the uncompressed ones. */
static void round_trip(const void *tar, size_t len, unsigned flags) {
  void *in = (void *)tar;
  size_t in_len = len;
  if (flags) tu_compress(tar, len, flags, &in, &in_len);
  cairn_id id;
  int r = tu_ingest_bytes(T.st, in, in_len, NULL, NULL, id);
  cr_assert_eq(r, 0, "ingest: %s", cairn_errmsg(T.st));
  cr_assert_eq(cn_layer_tar_recorded(T.st, id), 1);
  struct membuf m = {0};
  uint64_t size = 0;
  r = cn_layer_tar(T.st, id, mem_write, &m, &size);
  cr_assert_eq(r, 0, "regenerate: %s", cairn_errmsg(T.st));
  cr_assert_eq(size, len);
  cr_assert_eq(m.len, len);
  cr_assert(memcmp(m.p, tar, len) == 0, "the tar written back differs");
  free(m.p);
  if (in != tar) free(in);
}

static size_t tar_rows(void);

/* The largest record stored: content is referenced, not copied (src/d/big
 * is 70,000 random bytes, which no compression shrinks). */
static size_t record_max(void) {
  sqlite3_stmt *q;
  cr_assert_eq(
      sqlite3_prepare_v2(T.st->db, "SELECT max(length(data)) FROM layer_tars", -1, &q, NULL),
      SQLITE_OK);
  cr_assert_eq(sqlite3_step(q), SQLITE_ROW);
  size_t n = (size_t)sqlite3_column_int64(q, 0);
  sqlite3_finalize(q);
  return n;
}

static void gnu_tar_case(const char *script) {
  size_t len;
  char *tar = make_tar(script, &len);
  round_trip(tar, len, TU_PLAIN);
  cr_assert_lt(record_max(), 20000, "record of %zu bytes for a %zu-byte tar", record_max(), len);
  round_trip(tar, len, TU_GZIP);
  free(tar);
}

Test(tarsplit, gnu_tar_gnu_format) { gnu_tar_case("tar --format=gnu -cf out.tar -C src ."); }
Test(tarsplit, gnu_tar_posix_format) { gnu_tar_case("tar --format=posix -cf out.tar -C src ."); }
Test(tarsplit, gnu_tar_ustar_short_names) {
  gnu_tar_case("tar --format=ustar -cf out.tar -C src a empty d");
}
Test(tarsplit, gnu_tar_sparse) {
  gnu_tar_case("truncate -s 3M src/sparse; printf data | dd of=src/sparse bs=1 seek=1M"
               " conv=notrunc status=none; tar --format=gnu -S -cf out.tar -C src .");
}
Test(tarsplit, gnu_tar_posix_sparse) {
  gnu_tar_case("truncate -s 3M src/sparse; printf data | dd of=src/sparse bs=1 seek=1M"
               " conv=notrunc status=none; tar --format=posix -S -cf out.tar -C src .");
}
/* More than the 4 extents an old GNU header holds: extension blocks follow
 * the header; a file that is all hole; names sorted so that the sparse
 * files come before d/big, whose content must still be referenced. */
Test(tarsplit, gnu_tar_sparse_extended_and_all_hole) {
  gnu_tar_case("truncate -s 3M src/0sparse src/0hole; for i in 1 2 3 4 5 6 7 8 9; do"
               " printf data | dd of=src/0sparse bs=1 seek=${i}00000 conv=notrunc status=none;"
               " done; head -c 512 /dev/urandom | dd of=src/0sparse bs=1 seek=3145216"
               " conv=notrunc status=none; tar --format=gnu -S --sort=name -cf out.tar -C src .");
}
Test(tarsplit, gnu_tar_posix_sparse_extended_and_all_hole) {
  gnu_tar_case("truncate -s 3M src/0sparse src/0hole; for i in 1 2 3 4 5 6 7 8 9; do"
               " printf data | dd of=src/0sparse bs=1 seek=${i}00000 conv=notrunc status=none;"
               " done; head -c 512 /dev/urandom | dd of=src/0sparse bs=1 seek=3145216"
               " conv=notrunc status=none; tar --format=posix -S --sort=name -cf out.tar -C src .");
}
Test(tarsplit, gnu_tar_blocking_and_trailing_bytes) {
  /* a 10 KiB record size pads the end; then bytes after the tar */
  gnu_tar_case("tar --format=gnu -b 20 -cf out.tar -C src .; printf 'trailing junk' >> out.tar");
}
Test(tarsplit, gnu_tar_path_twice) {
  /* the first content of "a" is replaced by the second: its span is kept
   * inline, since no entry names its blob */
  gnu_tar_case("tar --format=gnu -cf out.tar -C src .; printf 'second version\\n' > src/a;"
               " tar --format=gnu -rf out.tar -C src ./a");
}
Test(tarsplit, python_tarfile) {
  static const char *const formats[] = {"GNU_FORMAT", "PAX_FORMAT", "USTAR_FORMAT"};
  for (size_t i = 0; i < TU_N(formats); i++) {
    char script[1024];
    snprintf(script, sizeof(script),
             "python3 -c 'import tarfile,sys; t=tarfile.open(\"out.tar\",\"w\","
             "format=tarfile.%s); t.add(\"src/a\"); t.add(\"src/d\"); %s t.close()'",
             formats[i],
             i == 2 ? ""
                    : "t.add(\"src\"); ti=tarfile.TarInfo(\"x\"*150+\"/caf\\u00e9\");"
                      " ti.size=3; import io; t.addfile(ti, io.BytesIO(b\"abc\"));"
                      " ti=tarfile.TarInfo(\"withxattr\"); ti.size=2;"
                      " ti.pax_headers={\"SCHILY.xattr.user.k\":\"v\"};"
                      " t.addfile(ti, io.BytesIO(b\"xy\"));");
    gnu_tar_case(script);
  }
}
Test(tarsplit, libarchive_pax) {
  static const tu_entry e[] = {
      {.path = "dir", .type = 'd'},
      {.path = "dir/f", .content = "content of f", .mtime = 1600000000, .mtime_nsec = 5},
      {.path = "dir/h", .type = 'h', .target = "dir/f"},
      {.path = "dir/x", .content = "x", .xattrs = {{"user.a", "b", 0}}},
      {.path = "dir/.wh.gone", .content = ""},
  };
  void *tar;
  size_t len;
  tu_tar(e, TU_N(e), TU_PAX_FULL, &tar, &len);
  round_trip(tar, len, TU_PLAIN);
  round_trip(tar, len, TU_ZSTD);
  free(tar);
}

static size_t tar_rows(void) {
  sqlite3_stmt *q;
  cr_assert_eq(sqlite3_prepare_v2(T.st->db, "SELECT count(*) FROM layer_tars", -1, &q, NULL),
               SQLITE_OK);
  cr_assert_eq(sqlite3_step(q), SQLITE_ROW);
  size_t n = (size_t)sqlite3_column_int64(q, 0);
  sqlite3_finalize(q);
  return n;
}

static const tu_entry small[] = {
    {.path = "f", .content = "some content"},
    {.path = "g", .content = "other content"},
};

Test(tarsplit, removed_with_its_layer) {
  cairn_id image;
  tu_layer l = {small, TU_N(small)};
  cr_assert_eq(tu_import(&T, "app", &l, 1, image), 0, "%s", cairn_errmsg(T.st));
  cr_assert_eq(tar_rows(), 1);
  cr_assert_eq(cairn_rm(T.st, "app"), 0, "%s", cairn_errmsg(T.st));
  cairn_report rep = {0};
  cr_assert_eq(cairn_gc(T.st, false, &rep), 0, "%s", cairn_errmsg(T.st));
  cairn_report_free(&rep);
  cr_assert_eq(tu_layers_count(T.st), 0);
  cr_assert_eq(tar_rows(), 0);
}

Test(tarsplit, layer_without_record_then_imported_again) {
  cairn_id id;
  cr_assert_eq(tu_ingest(T.st, small, TU_N(small), TU_PLAIN, NULL, id), 0);
  cr_assert_eq(sqlite3_exec(T.st->db, "DELETE FROM layer_tars", NULL, NULL, NULL), SQLITE_OK);
  cr_assert_eq(cn_layer_tar_recorded(T.st, id), 0);
  cr_assert_eq(cn_layer_tar(T.st, id, NULL, NULL, NULL), -ENODATA);
  cr_assert(strstr(cairn_errmsg(T.st), "without its tar headers"), "%s", cairn_errmsg(T.st));
  cairn_id again;
  cr_assert_eq(tu_ingest(T.st, small, TU_N(small), TU_GZIP, NULL, again), 0);
  cr_assert_str_eq(again, id);
  cr_assert_eq(cn_layer_tar(T.st, id, NULL, NULL, NULL), 0, "%s", cairn_errmsg(T.st));
  cr_assert_eq(cn_layer_tar(T.st, "00", NULL, NULL, NULL), -ENOENT);
}

Test(tarsplit, damage_is_detected_and_fsck_reports_it) {
  cairn_id id;
  cr_assert_eq(tu_ingest(T.st, small, TU_N(small), TU_PLAIN, NULL, id), 0);
  cairn_report rep = {0};
  cr_assert_eq(cairn_fsck(T.st, false, &rep), 0, "%s", cairn_errmsg(T.st));
  cairn_report_free(&rep);
  /* a record that is not one */
  cr_assert_eq(sqlite3_exec(T.st->db, "UPDATE layer_tars SET data = x'00112233'", NULL, NULL, NULL),
               SQLITE_OK);
  cr_assert_eq(cn_layer_tar(T.st, id, NULL, NULL, NULL), -EBADMSG);
  memset(&rep, 0, sizeof(rep));
  cr_assert_eq(cairn_fsck(T.st, false, &rep), -EBADMSG);
  bool named = false;
  for (size_t i = 0; i < rep.n_lines; i++) named |= strstr(rep.lines[i], "tar record") != NULL;
  cr_assert(named, "fsck does not name the tar record");
  cairn_report_free(&rep);
}

Test(tarsplit, a_changed_blob_fails_the_diff_id) {
  cairn_id id;
  cr_assert_eq(tu_ingest(T.st, small, TU_N(small), TU_PLAIN, NULL, id), 0);
  /* same size, other bytes: only the sha256 of the whole can tell */
  tu_got *g = tu_layer_get(T.st, id, "f");
  char path[4096];
  cr_assert_eq(cn_blob_path(T.st, g->blob, path, sizeof(path)), 0);
  chmod(path, 0644);
  FILE *f = fopen(path, "r+");
  cr_assert(f);
  fputs("SOME", f);
  fclose(f);
  free(g);
  cr_assert_eq(cn_layer_tar(T.st, id, NULL, NULL, NULL), -EBADMSG);
  cr_assert(strstr(cairn_errmsg(T.st), "hashes to"), "%s", cairn_errmsg(T.st));
}

/* A ustar header block for name, of type and size (octal fields, checksum). */
static void ustar_header(unsigned char *h, const char *name, char type, size_t size) {
  memset(h, 0, 512);
  snprintf((char *)h, 100, "%s", name);
  memcpy(h + 100, "0000644", 8);
  memcpy(h + 108, "0000000", 8);
  memcpy(h + 116, "0000000", 8);
  char octal[32];
  snprintf(octal, sizeof(octal), "%011o", (unsigned)size);
  memcpy(h + 124, octal, 12);
  memcpy(h + 136, "00000000000", 12);
  h[156] = (unsigned char)type;
  memcpy(h + 257, "ustar", 6);
  memcpy(h + 263, "00", 2);
  memset(h + 148, ' ', 8);
  unsigned sum = 0;
  for (size_t i = 0; i < 512; i++) sum += h[i];
  snprintf(octal, sizeof(octal), "%06o", sum);
  memcpy(h + 148, octal, 7);
}

/* Pax data is len bytes with no terminator: a record of digits only (the
 * fuzzer's crash-270792fd, tests/fuzz/corpus/tarsplit) was read past its
 * end, which AddressSanitizer stops. The import either takes the layer or
 * refuses it, and the store stays sound. */
Test(tarsplit, a_pax_record_of_digits_only_is_read_within_its_bytes) {
  static const char *const data[] = {"1", "12", "9 a=b"};
  for (size_t k = 0; k < TU_N(data); k++) {
    size_t dlen = strlen(data[k]);
    unsigned char *tar = calloc(5, 512);
    cr_assert(tar);
    ustar_header(tar, "./PaxHeaders/d", 'x', dlen);
    memcpy(tar + 512, data[k], dlen);
    ustar_header(tar + 1024, "d", '0', 0); /* then two zero blocks */
    cairn_id id;
    int r = tu_ingest_bytes(T.st, tar, 5 * 512, NULL, NULL, id);
    cr_expect(r == 0 || r == -EBADMSG || r == -EINVAL, "pax data \"%s\": %d %s", data[k], r,
              cairn_errmsg(T.st));
    free(tar);
  }
  cairn_report rep = {0};
  cr_expect_eq(cairn_fsck(T.st, false, &rep), 0, "%s", cairn_errmsg(T.st));
  cairn_report_free(&rep);
}

/* A header after the end blocks whose checksum holds and whose content is
 * cut short by the end of the stream (the fuzzer's crash-08cf53ee):
 * libarchive never reads it, and the recorder had hashed those bytes
 * without keeping them, so the tar written again lacked them (fsck: "its
 * tar rebuilt hashes to ..."). The layer is now stored without a record. */
Test(tarsplit, content_cut_short_after_the_end_blocks_is_not_recorded) {
  unsigned char *tar = calloc(5, 512);
  cr_assert(tar);
  ustar_header(tar, "d/", '5', 0); /* then two end blocks */
  ustar_header(tar + 3 * 512, "d/e", '0', 4096);
  memset(tar + 4 * 512, 'c', 300);
  size_t len = 4 * 512 + 300;
  cairn_id id;
  cr_assert_eq(tu_ingest_bytes(T.st, tar, len, NULL, NULL, id), 0, "%s", cairn_errmsg(T.st));
  free(tar);
  cr_expect_eq(cn_layer_tar_recorded(T.st, id), 0, "a record that cannot be exact was kept");
  cr_expect_eq(cn_layer_tar(T.st, id, NULL, NULL, NULL), -ENODATA, "%s", cairn_errmsg(T.st));
  cairn_report rep = {0};
  cr_expect_eq(cairn_fsck(T.st, false, &rep), 0, "%s", cairn_errmsg(T.st));
  cairn_report_free(&rep);
}

static int discard(const void *buf, size_t len, void *arg) {
  (void)buf, (void)len, (void)arg;
  return 0;
}

/* What the chunked writer (push's zstd:chunked) says of a tar: 0 or its
 * error. */
static int chunked_writes(const void *tar, size_t len) {
  cn_chunked_writer *w;
  cr_assert_eq(cn_chunked_new(CN_CHUNKED_ZSTD, discard, NULL, &w), 0);
  cn_chunked_result res;
  int r = cn_chunked_write(w, tar, len);
  if (r == 0) r = cn_chunked_finish(w, &res);
  cn_chunked_free(w);
  return r;
}

/* A tar of a directory "d/" then a file, "d/caf\xc3\xa9" (bytes above
 * 127), of 70,000 random bytes; the file header's checksum summed signed if
 * signed_sum, its size field followed by garbage if garbage (libarchive
 * refuses a first header with garbage, not a later one). */
static unsigned char *odd_tar(bool signed_sum, bool garbage, size_t *len) {
  size_t data = 70000, blocks = 2 + (data + 511) / 512 + 2;
  unsigned char *tar = calloc(blocks, 512), *h = tar + 512;
  cr_assert(tar);
  ustar_header(tar, "d/", '5', 0);
  ustar_header(h, "d/caf\xc3\xa9", '0', data);
  if (garbage) h[124 + 11] = (unsigned char)'x'; /* "00000210560x" */
  memset(h + 148, ' ', 8);
  int sum = 0;
  for (size_t i = 0; i < 512; i++) sum += signed_sum ? (signed char)h[i] : h[i];
  char octal[16];
  snprintf(octal, sizeof(octal), "%06o", (unsigned)sum);
  memcpy(h + 148, octal, 7);
  FILE *f = fopen("/dev/urandom", "r");
  cr_assert(f && fread(h + 512, 1, data, f) == data);
  fclose(f);
  *len = blocks * 512;
  return tar;
}

/* The recorder of exact layers and the chunked writer read a header by the
 * same rules: a checksum summed signed is a checksum (as GNU tar and
 * libarchive say), a number with garbage after it is not a number. */
Test(tarsplit, both_tar_readers_agree_on_signed_checksums_and_garbage) {
  size_t len;
  unsigned char *tar = odd_tar(true, false, &len);
  cr_expect_eq(chunked_writes(tar, len), 0, "the chunked writer refused a signed checksum");
  round_trip(tar, len, TU_PLAIN);
  cr_expect_lt(record_max(), 20000, "the recorder did not take the signed checksum's header");
  free(tar);

  tar = odd_tar(false, true, &len);
  cr_expect_eq(chunked_writes(tar, len), -EBADMSG, "the chunked writer took a size with garbage");
  sqlite3_exec(T.st->db, "DELETE FROM layer_tars", NULL, NULL, NULL);
  round_trip(tar, len, TU_PLAIN);
  cr_expect_gt(record_max(), 70000, "the recorder read a size with garbage as a number");
  free(tar);
}
