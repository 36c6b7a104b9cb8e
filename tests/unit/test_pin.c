/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_pin.c — pins are kernel flocks: shared pins of two processes
 * coexist; a pin makes rm fail with -EBUSY naming its holder; kill -9 of the
 * holder frees the target at once; annotations show pid, command and
 * purpose and turn stale (then vanish) when their lock is gone; and a lock
 * won on an unlinked pin file never counts — neither one taken on a stale
 * fd, nor one that cn_pin_take wins after a deleter unlinked the file;
 * and the annotation of a live pin is never deleted, whether it was written
 * right after a deleter unlinked the pin file, while a listing read, or
 * between a listing and its delete of stale annotations.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "libcairn_store.h" /* cn_store_test_hook */
#include "testutil.h"

static tu_store T;
static cairn_id image;

static void setup(void) {
  tu_store_setup(&T);
  static const tu_entry base[] = {{.path = "bin", .type = 'd'},
                                  {.path = "bin/sh", .content = "sh"}};
  static const tu_entry top[] = {{.path = "etc", .type = 'd'},
                                 {.path = "etc/motd", .content = "hi"}};
  tu_layer layers[] = {{base, 2}, {top, 2}};
  cr_assert_eq(tu_import(&T, "app:1", layers, 2, image), 0, "%s", cairn_errmsg(T.st));
}
static void teardown(void) { tu_store_teardown(&T); }
TestSuite(pin, .init = setup, .fini = teardown);

/* ---- a child that pins the image --------------------------------------- */

struct holder {
  const char *purpose;
  int ready[2]; /* child → parent: 'k' once pinned */
  int go[2];    /* parent → child: 'q' to release and exit */
  bool until_killed;
};

static int hold_image(void *arg) {
  struct holder *h = arg;
  cairn_store *st = tu_child_store(T.dir);
  if (!st) return 10;
  cairn_pinset *ps = cairn_pinset_new(h->purpose, true);
  if (!ps || cairn_pin_image(st, ps, image) != 0) return 11;
  tu_write_byte(h->ready[1], 'k');
  if (h->until_killed)
    pause(); /* SIGKILL by the test, or alarm after 30 s */
  else if (tu_read_byte(h->go[0], 20000) != 'q')
    return 12;
  cairn_pinset_release(st, ps);
  cairn_store_close(st);
  return 0;
}

static pid_t holder_start(struct holder *h, const char *purpose, bool until_killed) {
  h->purpose = purpose;
  h->until_killed = until_killed;
  cr_assert_eq(pipe2(h->ready, O_CLOEXEC), 0);
  cr_assert_eq(pipe2(h->go, O_CLOEXEC), 0);
  pid_t pid = tu_spawn(hold_image, h);
  int c = tu_read_byte(h->ready[0], 10000);
  if (c != 'k') tu_kill_reap(pid);
  cr_assert_eq(c, 'k', "the holder did not pin the image");
  return pid;
}

/* Lets the holder release and exit; asserts it exited cleanly. */
static void holder_stop(struct holder *h, pid_t pid) {
  tu_write_byte(h->go[1], 'q');
  int status = tu_reap(pid, 10000);
  cr_assert(status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0,
            "holder ended with status %d", status);
}

static void holder_close(struct holder *h) {
  for (int i = 0; i < 2; i++) {
    close(h->ready[i]);
    close(h->go[i]);
  }
}

static char *my_command(void) {
  char buf[64] = "";
  FILE *f = fopen("/proc/self/comm", "re");
  cr_assert(f);
  cr_assert(fgets(buf, sizeof(buf), f));
  fclose(f);
  buf[strcspn(buf, "\n")] = '\0';
  return strdup(buf);
}

/* ---- tests -------------------------------------------------------------- */

Test(pin, shared_pins_of_two_processes_coexist) {
  cairn_pinset *mine = cairn_pinset_new("parent hold", true);
  cr_assert_eq(cairn_pin_image(T.st, mine, image), 0, "%s", cairn_errmsg(T.st));
  struct holder h;
  pid_t pid = holder_start(&h, "child hold", false); /* would block if pins were exclusive */

  size_t n;
  tu_pin *rows = tu_pins(T.st, image, &n);
  tu_pin *p = tu_pin_of(rows, n, image, getpid()), *c = tu_pin_of(rows, n, image, pid);
  cr_assert(p && c, "both pins listed: %zu pins", n);
  cr_expect_str_eq(p->purpose, "parent hold");
  cr_expect_str_eq(c->purpose, "child hold");
  cr_expect(!p->stale);
  cr_expect(!c->stale);
  free(rows);
  cr_expect_eq(cairn_rm(T.st, "app:1"), -EBUSY);

  holder_stop(&h, pid);
  cr_expect(cn_pin_is_held(T.st, CAIRN_PIN_IMAGE, image), "the parent's pin is gone too");
  cr_expect_eq(cairn_rm(T.st, "app:1"), -EBUSY);
  cairn_pinset_release(T.st, mine);
  cr_expect(!cn_pin_is_held(T.st, CAIRN_PIN_IMAGE, image));
  cr_expect_eq(cairn_rm(T.st, "app:1"), 0, "%s", cairn_errmsg(T.st));
  holder_close(&h);
}

Test(pin, pin_makes_rm_busy_naming_the_holder) {
  struct holder h;
  pid_t pid = holder_start(&h, "hold for the test", false);
  cr_assert(cn_pin_is_held(T.st, CAIRN_PIN_IMAGE, image));
  char **layers;
  size_t n;
  cr_assert_eq(cn_image_layers(T.st, image, &layers, &n), 0);
  cr_assert_eq(n, 2);
  for (size_t i = 0; i < n; i++)
    cr_expect(cn_pin_is_held(T.st, CAIRN_PIN_LAYER, layers[i]), "layer %zu not pinned", i);

  char want[64];
  snprintf(want, sizeof(want), "pid %d ", (int)pid);
  static const char *const refs[] = {"app:1", image, NULL};
  char prefix[13];
  snprintf(prefix, sizeof(prefix), "%.12s", image);
  for (size_t i = 0; i < 3; i++) {
    const char *ref = refs[i] ? refs[i] : prefix;
    cr_expect_eq(cairn_rm(T.st, ref), -EBUSY, "rm %s", ref);
    cr_expect(strstr(cairn_errmsg(T.st), want), "rm %s: \"%s\" does not name %s", ref,
              cairn_errmsg(T.st), want);
    cr_expect(strstr(cairn_errmsg(T.st), "hold for the test"), "no purpose in \"%s\"",
              cairn_errmsg(T.st));
  }
  cairn_id id;
  cr_expect_eq(cairn_image_resolve(T.st, "app:1", id), 0, "the name went");
  cr_expect_eq(tu_layers_count(T.st), 2);
  cr_expect_eq(tu_blob_count(T.dir), 2);
  for (size_t i = 0; i < n; i++) cr_expect_eq(cn_layer_exists(T.st, layers[i]), 1);
  cn_strv_free(layers, n);

  holder_stop(&h, pid);
  cr_expect_eq(cairn_rm(T.st, "app:1"), 0, "%s", cairn_errmsg(T.st));
  holder_close(&h);
}

Test(pin, kill_9_releases_at_once) {
  struct holder h;
  pid_t pid = holder_start(&h, "killed soon", true);
  cr_assert_eq(cairn_rm(T.st, "app:1"), -EBUSY);
  tu_kill_reap(pid);
  cr_expect(!cn_pin_is_held(T.st, CAIRN_PIN_IMAGE, image));
  int r = cairn_rm(T.st, "app:1");
  cr_assert_eq(r, 0, "rm after kill -9: %d %s", r, cairn_errmsg(T.st));
  cr_expect_eq(tu_images_count(T.st), 0);
  cr_expect_eq(tu_layers_count(T.st), 0);
  cr_expect_eq(tu_blob_count(T.dir), 0);
  holder_close(&h);
}

Test(pin, annotations_show_holder_and_turn_stale) {
  struct holder h;
  pid_t pid = holder_start(&h, "pull registry/app:1", true);
  size_t n;
  tu_pin *rows = tu_pins(T.st, NULL, &n);
  cr_expect_eq(n, 3, "image and two layers: %zu pins", n);
  tu_pin *row = tu_pin_of(rows, n, image, pid);
  cr_assert(row, "no pin row of pid %d", (int)pid);
  char *cmd = my_command();
  cr_expect_eq(row->kind, CAIRN_PIN_IMAGE);
  cr_expect_str_eq(row->purpose, "pull registry/app:1");
  cr_expect_str_eq(row->command, cmd);
  cr_expect_gt(row->since, 0);
  cr_expect(!row->stale);
  free(cmd);
  free(rows);

  tu_kill_reap(pid);
  rows = tu_pins(T.st, NULL, &n);
  row = tu_pin_of(rows, n, image, pid);
  cr_assert(row, "the dead holder's annotation is not reported");
  cr_expect(row->stale, "a dead holder's pin is not stale");
  free(rows);
  cr_expect_eq(cairn_pins_clean_stale(T.st), 3, "%s", cairn_errmsg(T.st));
  rows = tu_pins(T.st, NULL, &n);
  cr_expect_eq(n, 0, "stale annotations stay: %zu pins", n);
  free(rows);
  holder_close(&h);
}

Test(pin, wait_free_waits_for_the_holder) {
  struct holder h;
  pid_t pid = holder_start(&h, "held", true);
  cr_expect_eq(cairn_pin_wait_free(T.st, image, 200), -ETIMEDOUT);
  tu_kill_reap(pid);
  cr_expect_eq(cairn_pin_wait_free(T.st, image, 5000), 0);
  holder_close(&h);
}

Test(pin, take_is_idempotent_within_a_set_and_checks_ids) {
  cairn_pinset *ps = cairn_pinset_new("twice", true);
  cr_assert_eq(cn_pin_take(T.st, ps, CAIRN_PIN_IMAGE, image), 0);
  cr_assert_eq(cn_pin_take(T.st, ps, CAIRN_PIN_IMAGE, image), 0);
  size_t n;
  free(tu_pins(T.st, image, &n));
  cr_expect_eq(n, 1);
  cr_expect_eq(cn_pin_take(T.st, ps, CAIRN_PIN_IMAGE, "../../etc/passwd"), -EINVAL);
  cr_expect_eq(cn_pin_take(T.st, ps, CAIRN_PIN_LAYER, "ABC"), -EINVAL);
  cairn_pinset_release(T.st, ps);
  cr_expect(!cn_pin_is_held(T.st, CAIRN_PIN_IMAGE, image));
}

/* ---- the unlinked pin file ------------------------------------------------ */

static char *image_pin_path(void) {
  char *path;
  cr_assert(asprintf(&path, "%s/pins/image/%s", T.dir, image) > 0);
  return path;
}

static int rm_app(void *arg) {
  (void)arg;
  cairn_store *st = tu_child_store(T.dir);
  if (!st) return 10;
  int r = cairn_rm(st, "app:1");
  cairn_store_close(st);
  return r == 0 ? 0 : 20;
}

static void rm_in_another_process(void) {
  int status = tu_reap(tu_spawn(rm_app, NULL), 20000);
  cr_assert(status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0,
            "rm in another process: status %d", status);
}

static void import_app_again(void) {
  static const tu_entry base[] = {{.path = "bin", .type = 'd'},
                                  {.path = "bin/sh", .content = "sh"}};
  static const tu_entry top[] = {{.path = "etc", .type = 'd'},
                                 {.path = "etc/motd", .content = "hi"}};
  tu_layer layers[] = {{base, 2}, {top, 2}};
  cairn_id again;
  cr_assert_eq(tu_import(&T, "app:1", layers, 2, again), 0, "%s", cairn_errmsg(T.st));
  cr_assert_str_eq(again, image);
}

Test(pin, lock_on_a_stale_pin_file_holds_nothing) {
  char *path = image_pin_path();
  /* a locker opens the pin file ... */
  int stale = open(path, O_RDONLY | O_CREAT | O_CLOEXEC, 0600);
  cr_assert_geq(stale, 0, "%s: %s", path, strerror(errno));
  struct stat old;
  cr_assert_eq(fstat(stale, &old), 0);
  /* ... a deleter removes the image and its pin file before the lock ... */
  rm_in_another_process();
  struct stat now;
  cr_expect_eq(stat(path, &now), -1, "the pin file of a removed image is still there");
  /* ... and the locker wins its lock on the unlinked file */
  cr_assert_eq(flock(stale, LOCK_SH | LOCK_NB), 0);
  cr_expect(!cn_pin_is_held(T.st, CAIRN_PIN_IMAGE, image), "a stale lock counts as a pin");

  /* it protects nothing: the image comes back and a deleter is not stopped */
  import_app_again();
  cr_expect(!cn_pin_is_held(T.st, CAIRN_PIN_IMAGE, image));
  cr_expect_eq(cairn_rm(T.st, "app:1"), 0, "a stale lock stopped rm: %s", cairn_errmsg(T.st));

  /* a real pin locks the inode the path names now */
  import_app_again();
  cairn_pinset *ps = cairn_pinset_new("real", true);
  cr_assert_eq(cn_pin_take(T.st, ps, CAIRN_PIN_IMAGE, image), 0, "%s", cairn_errmsg(T.st));
  cr_assert_eq(stat(path, &now), 0);
  cr_expect(now.st_ino != old.st_ino, "the pin took the unlinked inode");
  cr_expect(cn_pin_is_held(T.st, CAIRN_PIN_IMAGE, image));
  cr_expect_eq(cairn_rm(T.st, "app:1"), -EBUSY);
  cairn_pinset_release(T.st, ps);
  close(stale);
  free(path);
}

/* The child: pins the image while the parent, as a deleter, holds the pin
 * file's exclusive lock; reports 'p' (pinned) or 'e' (error). */
struct late {
  int started[2], pinned[2], go[2];
};

static int late_pin(void *arg) {
  struct late *l = arg;
  cairn_store *st = tu_child_store(T.dir);
  if (!st) return 10;
  cairn_pinset *ps = cairn_pinset_new("late pin", true);
  if (tu_read_byte(l->go[0], 20000) != 'g') return 13;
  tu_write_byte(l->started[1], 's');
  int r = cn_pin_take(st, ps, CAIRN_PIN_IMAGE, image); /* blocks */
  tu_write_byte(l->pinned[1], r == 0 ? 'p' : 'e');
  if (tu_read_byte(l->go[0], 20000) != 'q') return 12;
  cairn_pinset_release(st, ps);
  cairn_store_close(st);
  return r == 0 ? 0 : 11;
}

/* True while pid waits for a flock (a "->" line of /proc/locks). */
static bool waits_for_flock(void *arg) {
  pid_t pid = *(pid_t *)arg;
  FILE *f = fopen("/proc/locks", "re");
  cr_assert(f);
  char line[512];
  bool waiting = false;
  while (!waiting && fgets(line, sizeof(line), f)) {
    int p;
    waiting = sscanf(line, "%*d: -> FLOCK %*s %*s %d", &p) == 1 && p == pid;
  }
  fclose(f);
  return waiting;
}

Test(pin, take_blocked_by_a_deleter_ends_on_the_new_inode) {
  char *path = image_pin_path();
  /* the child comes first: it must not inherit the deleter's lock */
  struct late l;
  cr_assert_eq(pipe2(l.started, O_CLOEXEC), 0);
  cr_assert_eq(pipe2(l.pinned, O_CLOEXEC), 0);
  cr_assert_eq(pipe2(l.go, O_CLOEXEC), 0);
  pid_t pid = tu_spawn(late_pin, &l);

  /* the deleter: the pin file's exclusive lock, as rm and gc take it */
  int del = open(path, O_RDONLY | O_CREAT | O_CLOEXEC, 0600);
  cr_assert_geq(del, 0);
  cr_assert_eq(flock(del, LOCK_EX | LOCK_NB), 0);
  struct stat old;
  cr_assert_eq(fstat(del, &old), 0);
  int keep = open(path, O_RDONLY | O_CLOEXEC); /* the old inode's number stays taken */
  cr_assert_geq(keep, 0);

  tu_write_byte(l.go[1], 'g');
  bool started = tu_read_byte(l.started[0], 10000) == 's';
  bool blocked = started && tu_wait_until(waits_for_flock, &pid, 10000);
  if (!blocked) tu_kill_reap(pid);
  cr_assert(blocked, "the child never blocked on the pin file's lock");
  cr_expect_eq(tu_read_byte(l.pinned[0], 0), -1, "the pin went through an exclusive lock");

  /* the deleter finishes: unlinks the pin file, then drops its lock */
  cr_assert_eq(unlink(path), 0);
  close(del);
  int c = tu_read_byte(l.pinned[0], 10000);
  if (c != 'p') tu_kill_reap(pid);
  cr_assert_eq(c, 'p', "the late pin failed or never returned");

  struct stat now;
  cr_assert_eq(stat(path, &now), 0, "the late pin did not make a new pin file");
  cr_expect(now.st_ino != old.st_ino);
  cr_expect(cn_pin_is_held(T.st, CAIRN_PIN_IMAGE, image), "the late pin holds the old inode");
  cr_expect_eq(cairn_rm(T.st, "app:1"), -EBUSY, "rm is not stopped by the late pin");
  char want[32];
  snprintf(want, sizeof(want), "pid %d ", (int)pid);
  cr_expect(strstr(cairn_errmsg(T.st), want), "\"%s\" does not name %s", cairn_errmsg(T.st), want);

  tu_write_byte(l.go[1], 'q');
  int status = tu_reap(pid, 10000);
  cr_expect(status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d",
            status);
  close(keep);
  for (int i = 0; i < 2; i++) {
    close(l.started[i]);
    close(l.pinned[i]);
    close(l.go[i]);
  }
  free(path);
}

/* ---- annotations of pins taken in a race window -------------------------- */

/* Takes a pin on the image, once, when libcairn reaches a named point of a
 * race window, through a second store handle (its own SQLite connection
 * and open file descriptions, as another pinner has). */
static struct {
  const char *point;
  cairn_store *st;
  cairn_pinset *ps;
  int r;
} window;

static void window_pin(cairn_store *st, const char *point) {
  (void)st;
  if (window.ps || strcmp(point, window.point) != 0) return;
  window.st = tu_store_open(T.dir);
  window.ps = cairn_pinset_new("pinned in the window", true);
  window.r = cn_pin_take(window.st, window.ps, CAIRN_PIN_IMAGE, image);
}

static void window_arm(const char *point) {
  window = (typeof(window)){.point = point};
  cn_store_test_hook = window_pin;
}

static void window_closed(void) {
  cn_store_test_hook = NULL;
  cr_assert(window.ps, "libcairn never reached %s", window.point);
  cr_assert_eq(window.r, 0, "the pin in the window failed: %s", cairn_errmsg(window.st));
}

/* The pin taken in the window is listed with its annotation, live. */
static void expect_window_pin_annotated(void) {
  size_t n;
  tu_pin *rows = tu_pins(T.st, image, &n);
  tu_pin *row = tu_pin_of(rows, n, image, getpid());
  cr_expect_str_eq(row ? row->purpose : "", "pinned in the window",
                   "the annotation of a live pin went");
  cr_expect(row && !row->stale);
  free(rows);
  cairn_pinset_release(window.st, window.ps);
  cairn_store_close(window.st);
}

Test(pin, an_annotation_written_after_a_deleter_unlinked_the_pin_file_stays) {
  window_arm("pin: unlinked"); /* rm deletes the image: its pin file goes */
  cr_assert_eq(cairn_rm(T.st, "app:1"), 0, "%s", cairn_errmsg(T.st));
  window_closed();
  expect_window_pin_annotated();
}

Test(pin, a_listing_keeps_the_annotation_of_a_pin_taken_while_it_reads) {
  window_arm("pins: annotations read");
  size_t n;
  free(tu_pins(T.st, NULL, &n));
  window_closed();
  cr_expect_geq(cairn_pins_clean_stale(T.st), 0, "%s", cairn_errmsg(T.st));
  expect_window_pin_annotated();
}

/* Writes an annotation straight into the store's database, with no lock
 * behind it. */
static void annotation_insert(enum cairn_pin_kind kind, const char *id, pid_t pid,
                              const char *purpose, int64_t since) {
  char *db_path;
  cr_assert(asprintf(&db_path, "%s/meta.db", T.dir) > 0);
  sqlite3 *db;
  cr_assert_eq(sqlite3_open(db_path, &db), SQLITE_OK);
  sqlite3_busy_timeout(db, 10000);
  char *sql = sqlite3_mprintf("INSERT INTO pins VALUES(%d, %Q, %d, 0, %Q, %lld)", kind, id,
                              (int)pid, purpose, (long long)since);
  cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK, "%s", sqlite3_errmsg(db));
  sqlite3_free(sql);
  sqlite3_close(db);
  free(db_path);
}

Test(pin, a_stale_annotation_pinned_again_before_its_delete_stays) {
  /* this process's annotation with no lock behind it: stale */
  annotation_insert(CAIRN_PIN_IMAGE, image, getpid(), "released", 0);

  size_t n;
  tu_pin *rows = tu_pins(T.st, NULL, &n);
  tu_pin *row = tu_pin_of(rows, n, image, getpid());
  cr_expect(row && row->stale, "not listed stale");
  free(rows);
  window_arm("pins: cleaning stale"); /* the same pid pins again */
  cr_expect_geq(cairn_pins_clean_stale(T.st), 0, "%s", cairn_errmsg(T.st));
  window_closed();
  expect_window_pin_annotated();
}

/* A listing reads the host's locks on a thread (cairn_pins_prefetch) while
 * it reads the annotations, in a read transaction of its own: the pins are
 * listed as before, the transaction is over when the listing is (the store
 * can pin and annotate right after), and a prefetch that no listing used
 * ends when its store closes. */
Test(pin, a_prefetched_listing_lists_the_same_and_leaves_no_transaction) {
  struct holder h;
  pid_t pid = holder_start(&h, "child hold", false);
  cairn_pins_prefetch(T.st);
  size_t n;
  tu_pin *rows = tu_pins(T.st, NULL, &n);
  tu_pin *c = tu_pin_of(rows, n, image, pid);
  cr_assert(c, "the holder's image pin is listed (%zu pins)", n);
  cr_expect(!c->stale);
  cr_expect_str_eq(c->purpose, "child hold");
  cr_expect_eq(n, 3, "an image pin and two layer pins, %zu listed", n);
  free(rows);

  cairn_pinset *mine = cairn_pinset_new("parent hold", true);
  cr_assert_eq(cairn_pin_image(T.st, mine, image), 0, "pinning after a listing: %s",
               cairn_errmsg(T.st));
  cairn_pinset_release(T.st, mine);

  cairn_store *other = tu_store_open(T.dir);
  cairn_pins_prefetch(other);
  cairn_store_close(other); /* joins the read, frees it (LeakSanitizer) */
  holder_stop(&h, pid);
  holder_close(&h);
}

/* A listing that can take its rows back (cairn-pin ls) is given them while
 * the host's locks are read, every annotation taken for live; when the
 * locks show a stale annotation or a lock that no annotation explains, it
 * is told to drop them and given every row again: what it ends with is
 * what cairn_pins_foreach lists, once each. Nothing is given ahead while
 * an annotating process has exited. */
struct ahead_rows {
  tu_pin v[16];
  size_t n;
  int undone;
};

static int ahead_row(const struct cairn_pin_rec *p, void *arg) {
  struct ahead_rows *a = arg;
  cr_assert_lt(a->n, 16, "more rows than pins");
  tu_pin *t = &a->v[a->n++];
  *t = (tu_pin){.kind = p->kind, .pid = p->pid, .since = p->since, .stale = p->stale};
  snprintf(t->target, sizeof(t->target), "%s", p->target);
  snprintf(t->purpose, sizeof(t->purpose), "%s", p->purpose);
  return 0;
}

static void ahead_undo(void *arg) {
  struct ahead_rows *a = arg;
  a->undone++;
  a->n = 0;
}

/* Lists ahead (after a prefetch) and expects what cairn_pins_foreach lists,
 * after undone drops. */
static void expect_ahead_lists_the_same(int undone) {
  struct ahead_rows a = {0};
  cairn_pins_prefetch(T.st);
  cr_assert_eq(cairn_pins_foreach_ahead(T.st, NULL, ahead_row, ahead_undo, &a), 0, "%s",
               cairn_errmsg(T.st));
  cr_expect_eq(a.undone, undone, "rows dropped %d times, not %d", a.undone, undone);
  size_t n;
  tu_pin *want = tu_pins(T.st, NULL, &n);
  cr_assert_eq(a.n, n, "%zu rows listed ahead, %zu pins", a.n, n);
  for (size_t i = 0; i < n; i++) {
    cr_expect_str_eq(a.v[i].target, want[i].target, "row %zu", i);
    cr_expect_eq(a.v[i].pid, want[i].pid, "row %zu", i);
    cr_expect_eq(a.v[i].stale, want[i].stale, "row %zu", i);
    cr_expect_str_eq(a.v[i].purpose, want[i].purpose, "row %zu", i);
  }
  free(want);
}

Test(pin, rows_given_ahead_of_the_locks_are_given_again_when_the_locks_differ) {
  struct holder h;
  pid_t pid = holder_start(&h, "child hold", false);
  expect_ahead_lists_the_same(0); /* three live pins: right ahead */

  /* a lock on the first layer's pin file that no annotation explains */
  size_t n;
  tu_pin *rows = tu_pins(T.st, NULL, &n);
  const tu_pin *layer = NULL;
  for (size_t i = 0; i < n && !layer; i++)
    if (rows[i].kind == CAIRN_PIN_LAYER) layer = &rows[i];
  cr_assert(layer, "no layer pin among %zu", n);
  char *path;
  cr_assert(asprintf(&path, "%s/pins/layer/%s", T.dir, layer->target) > 0);
  free(rows);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  cr_assert_geq(fd, 0, "%s: %s", path, strerror(errno));
  free(path);
  cr_assert_eq(flock(fd, LOCK_SH | LOCK_NB), 0);
  expect_ahead_lists_the_same(1);
  close(fd);

  /* an annotation of this process's with no lock behind it: stale */
  annotation_insert(CAIRN_PIN_IMAGE, image, getpid(), "released", 0);
  expect_ahead_lists_the_same(1);

  /* a holder killed: whether its annotations are stale or its locks live
   * on in what inherited them, only the locks say; nothing is given ahead */
  struct holder dead;
  pid_t dead_pid = holder_start(&dead, "killed hold", true);
  tu_kill_reap(dead_pid);
  expect_ahead_lists_the_same(0);
  holder_close(&dead);
  holder_stop(&h, pid);
  holder_close(&h);
}

/* cairn images and cairn layers read the host's locks on a thread while
 * they read the store (the rows are kept until the read is joined): the
 * held image and its layers are listed pinned, released ones not, and the
 * store writes right after (no read transaction is left open). */
static int image_pinned_of(const struct cairn_image_rec *im, void *arg) {
  if (strcmp(im->id, image) == 0) *(int *)arg = im->pinned;
  return 0;
}

static int layers_pinned(const struct cairn_layer_rec *l, void *arg) {
  *(int *)arg += l->pinned;
  return 0;
}

Test(pin, images_and_layers_are_listed_pinned_while_the_locks_are_read) {
  struct holder h;
  pid_t pid = holder_start(&h, "child hold", false);
  int pinned = -1;
  cr_assert_eq(cairn_images_foreach(T.st, image_pinned_of, &pinned), 0, "%s", cairn_errmsg(T.st));
  cr_expect_eq(pinned, 1, "the held image is not listed pinned");
  int n_pinned = 0;
  cr_assert_eq(cairn_layers_foreach(T.st, layers_pinned, &n_pinned), 0, "%s", cairn_errmsg(T.st));
  cr_expect_eq(n_pinned, 2, "%d of the held image's 2 layers listed pinned", n_pinned);
  cairn_pinset *mine = cairn_pinset_new("parent hold", true);
  cr_assert_eq(cairn_pin_image(T.st, mine, image), 0, "pinning after a listing: %s",
               cairn_errmsg(T.st));
  cairn_pinset_release(T.st, mine);
  holder_stop(&h, pid);
  holder_close(&h);
  pinned = -1;
  cr_assert_eq(cairn_images_foreach(T.st, image_pinned_of, &pinned), 0, "%s", cairn_errmsg(T.st));
  cr_expect_eq(pinned, 0, "a released image is listed pinned");
  n_pinned = 0;
  cr_assert_eq(cairn_layers_foreach(T.st, layers_pinned, &n_pinned), 0, "%s", cairn_errmsg(T.st));
  cr_expect_eq(n_pinned, 0, "%d released layers listed pinned", n_pinned);
}

/* Annotations of targets with no pin file (stale, listed once) come after
 * the pin files' targets, in listing order: by since, then pid. */
Test(pin, targets_with_no_pin_file_are_listed_by_their_first_annotation) {
  static const struct {
    char hex;
    int pid;
    int since;
  } notes[] = {{'a', 7, 300}, {'b', 5, 100}, {'c', 9, 200}, {'b', 3, 400}};
  for (size_t i = 0; i < sizeof(notes) / sizeof(notes[0]); i++) {
    char id[65];
    memset(id, notes[i].hex, 64);
    id[64] = '\0';
    annotation_insert(CAIRN_PIN_LAYER, id, notes[i].pid, "gone", notes[i].since);
  }
  size_t n;
  tu_pin *rows = tu_pins(T.st, NULL, &n);
  cr_assert_eq(n, 4, "%zu rows", n);
  static const char want_hex[] = "bbca";
  static const int want_pid[] = {5, 3, 9, 7};
  for (size_t i = 0; i < n; i++) {
    cr_expect_eq(rows[i].target[0], want_hex[i], "row %zu is of %c…, not %c…", i, rows[i].target[0],
                 want_hex[i]);
    cr_expect_eq(rows[i].pid, want_pid[i], "row %zu: pid %d", i, (int)rows[i].pid);
    cr_expect(rows[i].stale);
  }
  free(rows);
}
