/* SPDX-License-Identifier: Apache-2.0 */
/*
 * inject-undo.c — the second half of a simulated power cut (see inject.c):
 * after the process that ran under CAIRN_INJECT_MODE=cut was killed,
 * `inject-undo LOG` puts back, newest first, every change of a file's
 * bytes or size that no later fsync/fdatasync of that file (nor a syncfs)
 * made durable. Files are opened by their kernel handle
 * (open_by_handle_at, which needs CAP_DAC_READ_SEARCH: run as root); a
 * file that no longer exists was unlinked, which a cut keeps. Test-only.
 *
 * Prints one line: how many changes were forgotten, in how many files.
 * Exit 0, or 1 if the log cannot be read or a file cannot be restored.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "undo_log.h"

struct entry {
  struct undo_rec rec;
  const unsigned char *data;
  bool durable;
};

static bool same_file(const struct undo_rec *a, const struct undo_rec *b) {
  return a->handle_type == b->handle_type && a->handle_bytes == b->handle_bytes &&
         memcmp(a->handle, b->handle, a->handle_bytes) == 0;
}

static unsigned char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  unsigned char *buf = NULL;
  size_t cap = 0;
  *len = 0;
  for (;;) {
    if (*len == cap) {
      cap = cap ? cap * 2 : 1 << 20;
      unsigned char *grown = realloc(buf, cap);
      if (!grown) break;
      buf = grown;
    }
    size_t n = fread(buf + *len, 1, cap - *len, f);
    if (n == 0) break;
    *len += n;
  }
  fclose(f);
  return buf;
}

/* Restores one change; 1 if done, 0 if the file is gone, -1 on error. */
static int undo_one(int mount_fd, const struct entry *e) {
  union {
    struct file_handle fh;
    char buf[sizeof(struct file_handle) + UNDO_HANDLE_MAX];
  } h;
  h.fh.handle_bytes = e->rec.handle_bytes;
  h.fh.handle_type = e->rec.handle_type;
  memcpy(h.fh.f_handle, e->rec.handle, e->rec.handle_bytes);
  int fd = open_by_handle_at(mount_fd, &h.fh, O_RDWR | O_CLOEXEC);
  if (fd < 0) return errno == ESTALE || errno == ENOENT ? 0 : -1;
  int r = 1;
  if (e->rec.data_len &&
      pwrite(fd, e->data, e->rec.data_len, (off_t)e->rec.off) != (ssize_t)e->rec.data_len)
    r = -1;
  if (ftruncate(fd, (off_t)e->rec.size_before) < 0) r = -1;
  close(fd);
  return r;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: inject-undo LOG\n");
    return 2;
  }
  size_t len;
  unsigned char *log = read_file(argv[1], &len);
  if (!log) {
    fprintf(stderr, "inject-undo: %s: %s\n", argv[1], strerror(errno));
    return 1;
  }
  struct entry *v = calloc(len / sizeof(struct undo_rec) + 1, sizeof(*v));
  if (!v) {
    fprintf(stderr, "inject-undo: out of memory\n");
    return 1;
  }
  size_t n = 0;
  int mount_fd = -1;
  for (size_t off = 0; off + sizeof(struct undo_rec) <= len;) {
    struct entry *e = &v[n];
    memcpy(&e->rec, log + off, sizeof(e->rec));
    off += sizeof(e->rec);
    if (e->rec.data_len > len - off) break; /* torn by the kill: never applied */
    e->data = log + off;
    off += e->rec.data_len;
    if (e->rec.kind == UNDO_DIR && mount_fd < 0) {
      char dir[4096];
      snprintf(dir, sizeof(dir), "%.*s", (int)e->rec.data_len, (const char *)e->data);
      mount_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    } else if (e->rec.kind == UNDO_SYNC || e->rec.kind == UNDO_SYNCFS) {
      for (size_t i = 0; i < n; i++)
        if (v[i].rec.kind == UNDO_WRITE &&
            (e->rec.kind == UNDO_SYNCFS || same_file(&v[i].rec, &e->rec)))
          v[i].durable = true;
    } else if (e->rec.kind == UNDO_WRITE) {
      n++;
    }
  }
  int status = 0;
  size_t undone = 0, files = 0, gone = 0;
  for (size_t i = n; i-- > 0;) {
    if (v[i].durable) continue;
    int r = mount_fd >= 0 ? undo_one(mount_fd, &v[i]) : -1;
    if (r < 0) {
      fprintf(stderr, "inject-undo: cannot restore a file: %s\n", strerror(errno));
      status = 1;
      continue;
    }
    bool first = true; /* count each file once: at its newest change */
    for (size_t j = i + 1; j < n && first; j++)
      first = v[j].durable || !same_file(&v[j].rec, &v[i].rec);
    undone += (size_t)r;
    gone += r == 0 && first;
    files += r == 1 && first;
  }
  printf("inject-undo: forgot %zu unsynced changes in %zu files (%zu files gone)\n", undone, files,
         gone);
  if (mount_fd >= 0) close(mount_fd);
  free(v);
  free(log);
  return status;
}
