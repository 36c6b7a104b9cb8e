/* SPDX-License-Identifier: Apache-2.0 */
/*
 * staging.c — journals of the blob files an import links into the store
 * before it commits the rows that reference them.
 *
 * An import opens a journal, STORE/tmp/staging.XXXXXX, and holds an
 * exclusive flock(2) on it for as long as it runs (taken before the
 * journal has that name); each blob file it is
 * about to link is written to the journal first (its path below blobs/),
 * so no file it links can be missing from it. The import ends it: after
 * its commit the journal goes; after a failure the journaled files that no
 * committed row names go with it. An import that dies instead (^C,
 * SIGTERM, SIGKILL, a crash) leaves a journal nobody locks: every opening
 * of the store recovers such journals the same way, so the next command of
 * any kind removes what a killed import left.
 *
 * A journaled file goes only while this process holds the store lock
 * exclusive: no import is running then, so none can be about to commit a
 * row naming it (an import that finds a file with no row and the same
 * bytes uses it instead of linking its own). Without that lock the journal
 * stays for a later command. A journaled file that a committed row names
 * stays, whoever committed it. Journals are not synced: after a power cut
 * the blobs they name are not durable either, and fsck and gc remove any
 * file with no row.
 */
#include "libcairn_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>

#define JOURNAL_PREFIX "staging."
#define JOURNAL_NEW_PREFIX "staging-new."

bool cn_staging_is_journal(const char *name) {
  return strncmp(name, JOURNAL_PREFIX, strlen(JOURNAL_PREFIX)) == 0;
}

int cn_staging_begin(cairn_store *st) {
  /* A journal gets its name only once locked: a recovery (any process
   * opening the store) locks every journal it can, and one it found in the
   * moment between our create and our lock would make our lock fail. So it
   * is created as NEW_PREFIX..., which no recovery reads, locked, then
   * linked to its name (link: never over another journal). */
  /* In STORE/tmp as the store's opening checked it (st->tmp_fd). */
  for (int attempt = 0; attempt < 100; attempt++) {
    char fresh[64], name[64];
    int fd = cn_store_tmp_create(st, JOURNAL_NEW_PREFIX, fresh, sizeof(fresh), O_APPEND);
    if (fd < 0) return fd;
    store_test_point(st, "staging: created");
    int r = flock(fd, LOCK_EX | LOCK_NB) == 0 ? 0 : -errno;
    snprintf(name, sizeof(name), JOURNAL_PREFIX "%s", fresh + strlen(fresh) - 6);
    if (r == 0 && linkat(st->tmp_fd, fresh, st->tmp_fd, name, 0) < 0) r = -errno;
    unlinkat(st->tmp_fd, fresh, 0);
    if (r == 0) {
      st->staging_fd = fd;
      snprintf(st->staging_path, sizeof(st->staging_path), "%s", name);
      return 0;
    }
    close(fd);
    if (r != -EEXIST) return cairn_fail(st, r, "%s/tmp/%s: %s", st->dir, name, strerror(-r));
  }
  return cairn_fail(st, -EEXIST, "%s/tmp: no free journal name", st->dir);
}

int cn_staging_note(cairn_store *st, const char *rel) {
  if (st->staging_fd < 0) return 0;
  char line[160];
  int n = snprintf(line, sizeof(line), "%s\n", rel);
  if (n < 0 || (size_t)n >= sizeof(line))
    return cairn_fail(st, -ENAMETOOLONG, "blob %s: name too long", rel);
  if (write(st->staging_fd, line, (size_t)n) != n)
    return cairn_fail(st, errno == ENOSPC ? -ENOSPC : -EIO, "%s/tmp/%s: %s", st->dir,
                      st->staging_path, strerror(errno ? errno : EIO));
  return 0;
}

/* Removes the files the journal open on fd names that no row names. The
 * caller holds the store lock exclusive. */
static void journal_undo(cairn_store *st, int fd) {
  cairn_autofclose FILE *f = fdopen(dup(fd), "r");
  if (!f) return;
  cn_autostmt sqlite3_stmt *q = NULL;
  if (!cn_db(st) ||
      sqlite3_prepare_v2(st->db, "SELECT 1 FROM blobs WHERE name = ?", -1, &q, NULL) != SQLITE_OK)
    return;
  rewind(f);
  char line[160];
  while (fgets(line, sizeof(line), f)) {
    line[strcspn(line, "\n")] = '\0';
    const char *name = strrchr(line, '/');
    if (!name || strstr(line, "..")) continue; /* not a line this file wrote */
    sqlite3_bind_text(q, 1, name + 1, -1, SQLITE_STATIC);
    bool referenced = sqlite3_step(q) == SQLITE_ROW;
    sqlite3_reset(q);
    if (!referenced) unlinkat(st->blobs_fd, line, 0);
  }
}

/* Undoes the journal name (of STORE/tmp), open on fd, if the store lock
 * can be had exclusive now; then the journal goes. Otherwise it stays,
 * for later. */
static void journal_finish(cairn_store *st, int fd, const char *name) {
  cairn_autoclose int lock = cn_store_lock(st, STORE_LOCK_EXCLUSIVE_NB);
  if (lock < 0) return;
  journal_undo(st, fd);
  unlinkat(st->tmp_fd, name, 0);
}

void cn_staging_end(cairn_store *st, bool failed) {
  if (st->staging_fd < 0) return;
  char saved[sizeof(st->err)];
  memcpy(saved, st->err, sizeof(saved));
  if (failed)
    journal_finish(st, st->staging_fd, st->staging_path);
  else
    unlinkat(st->tmp_fd, st->staging_path, 0);
  memcpy(st->err, saved, sizeof(saved));
  close(st->staging_fd);
  st->staging_fd = -1;
}

void cn_staging_recover(cairn_store *st) {
  cairn_autoclosedir DIR *d = cn_store_opendir(st, "tmp");
  if (!d) return;
  int dfd = dirfd(d);
  struct dirent *de;
  while ((de = readdir(d))) {
    if (!cn_staging_is_journal(de->d_name)) continue;
    cairn_autoclose int fd = openat(dfd, de->d_name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB) < 0) continue; /* a running import's */
    journal_finish(st, fd, de->d_name);
  }
  st->err[0] = '\0';
}
