/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sweep.c — reclaiming what nothing uses: unreferenced, unpinned layers and
 * the blob rows and files nothing references, with stale pin annotations
 * and mount records. rm, a failed import, fsck --repair and gc use it.
 *
 * A layer a containerd snapshot holds (cn_snapshot_holders) stays.
 * A sweep runs in one transaction: unreferenced layers whose pin file this
 * process can lock exclusively lose their rows, then blob rows nothing
 * references; only after the commit are files unlinked, so a crash leaves
 * files without rows (orphans, swept next time), never rows without files.
 * A dry run does the same work and rolls it back.
 */
#include "libcairn_sweep.h"

#include "libcairn_blob.h"
#include "libcairn_layer.h"
#include "libcairn_pin.h"
#include "libcairn_tree.h"
#include "libcairn_upper.h"

#include <dirent.h>
#include <fcntl.h>
#include <string.h>

int cn_held_add(cairn_store *st, struct held_set *h, enum cairn_pin_kind kind, const char *id,
                int fd) {
  struct held *v = cn_array_grow(h->v, h->n, &h->cap, sizeof(*v));
  if (!v) {
    cn_pin_unlock(fd);
    return cairn_fail(st, -ENOMEM, "out of memory locking what goes");
  }
  h->v = v;
  h->v[h->n] = (struct held){.kind = kind, .fd = fd};
  snprintf(h->v[h->n].id, sizeof(h->v[0].id), "%s", id);
  h->n++;
  return 0;
}

bool cn_held_has(const struct held_set *h, enum cairn_pin_kind kind, const char *id) {
  for (size_t i = 0; i < h->n; i++)
    if (h->v[i].kind == kind && strcmp(h->v[i].id, id) == 0) return true;
  return false;
}

void cn_held_release(cairn_store *st, struct held_set *h, bool deleted) {
  for (size_t i = 0; i < h->n; i++) {
    if (deleted && h->v[i].kind == CAIRN_PIN_IMAGE) cn_index_remove(st, h->v[i].id);
    if (deleted)
      cn_pin_delete_unlock(st, h->v[i].kind, h->v[i].id, h->v[i].fd);
    else
      cn_pin_unlock(h->v[i].fd);
  }
  free(h->v);
  *h = (struct held_set){0};
}

/* Locks and deletes the rows of unreferenced layers; their locks go to
 * held. */
static int sweep_layers(cairn_store *st, bool dry_run, cairn_report *r, struct held_set *held) {
  cn_autostmt sqlite3_stmt *q = NULL;
  int rc = cn_db_prepare(st, &q,
                         "SELECT id, size FROM layers WHERE NOT EXISTS"
                         " (SELECT 1 FROM image_layers WHERE layer_id = layers.id)");
  if (rc < 0) return rc;
  /* The candidates are read before any of their rows is deleted. */
  struct layer_size {
    cairn_id id;
    int64_t size;
  } *v = NULL;
  size_t n = 0, cap = 0;
  while (sqlite3_step(q) == SQLITE_ROW) {
    struct layer_size *more = cn_array_grow(v, n, &cap, sizeof(*v));
    if (!more) {
      free(v);
      return cairn_fail(st, -ENOMEM, "out of memory listing unused layers");
    }
    v = more;
    snprintf(v[n].id, sizeof(v[n].id), "%s", (const char *)sqlite3_column_text(q, 0));
    v[n++].size = sqlite3_column_int64(q, 1);
  }
  cairn_autofree struct layer_size *all = v;
  for (size_t i = 0; i < n; i++) {
    const char *id = all[i].id;
    cairn_autofree char *snaps = cn_snapshot_holders(st, CAIRN_PIN_LAYER, id);
    if (snaps) { /* a record, while the snapshotter runs or not */
      cn_report_line(r, "kept layer sha256:%s: held by %s", id, snaps);
      continue;
    }
    int fd = cn_pin_lock_exclusive(st, CAIRN_PIN_LAYER, id);
    if (fd == -EBUSY) {
      cairn_autofree char *who = cairn_pin_holders(st, CAIRN_PIN_LAYER, id);
      cn_report_line(r, "kept layer sha256:%s: pinned by %s", id, who && *who ? who : "a process");
      continue;
    }
    if (fd < 0) return fd;
    if ((rc = cn_held_add(st, held, CAIRN_PIN_LAYER, id, fd)) < 0 ||
        (rc = cn_layer_delete_rows(st, id)) < 0)
      return rc;
    r->layers++;
    char size[32];
    cairn_human_size((uint64_t)all[i].size, size, sizeof(size));
    cn_report_line(r, "%s layer sha256:%s (%s)", dry_run ? "would remove" : "removed", id, size);
  }
  return 0;
}

/* Unlinks the files of dir that sql (given the name) finds no row of: the
 * kept compressed layers (STORE/compressed/HEX, als.c) that no layer_blobs
 * row names, the kept TOCs (STORE/toc/HEX, lazy.c) no layer_sources row
 * names: their layer went (or completed), or a crash came between the
 * file and its row. Runs under the exclusive store lock, which every
 * keeper holds shared from linking its file to inserting its row. */
static void kept_files_sweep(cairn_store *st, const char *dir, const char *sql) {
  cairn_autoclose int dirfd = cn_store_openat(st, dir, O_RDONLY | O_DIRECTORY, 0);
  if (dirfd < 0) return; /* none kept yet */
  cairn_autoclosedir DIR *d = fdopendir(dup(dirfd));
  cn_autostmt sqlite3_stmt *q = NULL;
  if (!d || cn_db_prepare(st, &q, sql) < 0) return;
  for (struct dirent *de; (de = readdir(d));) {
    if (de->d_name[0] == '.') continue;
    sqlite3_reset(q);
    sqlite3_bind_text(q, 1, de->d_name, -1, SQLITE_TRANSIENT);
    if (sqlite3_step(q) == SQLITE_DONE) unlinkat(dirfd, de->d_name, 0);
  }
}

int cn_sweep_unused(cairn_store *st, bool dry_run, bool have_lock, cairn_report *r) {
  struct held_set held = {0};
  cn_autostrv struct strv blobs = {0};
  int rc = cn_db_begin(st);
  if (rc == 0) rc = sweep_layers(st, dry_run, r, &held);
  if (rc == 0 && have_lock) rc = cn_blob_rows_unreferenced(st, dry_run, &blobs, r);
  if (rc == 0 && !dry_run)
    rc = cn_db_commit_durable(st);
  else
    cn_db_rollback(st);
  cn_held_release(st, &held, rc == 0 && !dry_run);
  if (rc < 0 || dry_run || !have_lock) return rc;
  kept_files_sweep(st, "compressed", "SELECT 1 FROM layer_blobs WHERE digest = 'sha256:' || ?");
  /* and the kept TOCs of partial layers (lazy.c) that went or completed */
  kept_files_sweep(st, "toc", "SELECT 1 FROM layer_sources WHERE digest = 'sha256:' || ?");
  /* and the access lists (access.c) of images that went */
  kept_files_sweep(st, "access", "SELECT 1 FROM images WHERE id = ?");
  return cn_blob_files_remove(st, &blobs);
}

void cn_sweep_stale_records(cairn_store *st) {
  cn_mount_clean_stale(st, cn_upper_left_of_dir); /* a crashed --rw mount's record stays */
  cairn_pins_clean_stale(st);
}

int cn_store_sweep(cairn_store *st, bool dry_run, enum store_lock_mode mode, cairn_report *r) {
  cairn_autoclose int lock = cn_store_lock(st, mode);
  if (lock < 0 && lock != -EBUSY) return lock;
  if (!dry_run) cn_sweep_stale_records(st);
  return cn_sweep_unused(st, dry_run, lock >= 0, r);
}
