/* SPDX-License-Identifier: Apache-2.0 */
/*
 * oci_archive.c — the "oci-archive:FILE[:REF]" pull source: a tar of an OCI
 * image layout, as skopeo and podman write it (podman save
 * --format oci-archive).
 *
 * As skopeo does, the layout is unpacked into a private directory (a new
 * directory of STORE/tmp, mode 0700, removed when the source is freed),
 * then read by the oci: source (oci_layout.c), which checks every blob
 * against its descriptor. Only what a layout's reader needs is unpacked,
 * regular files named oci-layout, index.json and blobs/sha256/HEX (HEX 64
 * lowercase hex digits), each created O_EXCL|O_NOFOLLOW in directories
 * this file made: a path of the archive (.., a symlink, an absolute name)
 * never reaches anything outside that directory; any other entry is
 * skipped, a name given twice fails the pull.
 *
 * FILE is everything up to the first ':', REF the rest (as oci:). The
 * image is named as podman names an oci-archive pull: after the entry's
 * annotations (io.containerd.image.name, else
 * org.opencontainers.image.ref.name), never after FILE.
 */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "libcairn_remote.h"

static bool hex64(const char *s) {
  size_t n = 0;
  for (; s[n]; n++)
    if (!((s[n] >= '0' && s[n] <= '9') || (s[n] >= 'a' && s[n] <= 'f'))) return false;
  return n == 64;
}

/* Writes the current entry's data to dirfd/name, a new file. */
static int unpack_entry(struct archive *a, struct archive_entry *ae, int dirfd, const char *name,
                        const char *file, cairn_store *st) {
  cairn_autoclose int fd =
      openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0)
    return cairn_fail(st, errno == EEXIST ? -EBADMSG : -errno, "%s: %s: %s", file, name,
                      errno == EEXIST ? "given twice in the archive" : strerror(errno));
  const void *buf;
  size_t len;
  int64_t off;
  int ar;
  while ((ar = archive_read_data_block(a, &buf, &len, &off)) == ARCHIVE_OK) {
    if (lseek(fd, off, SEEK_SET) < 0)
      return cairn_fail(st, -errno, "%s: %s: %s", file, name, strerror(errno));
    for (const char *p = buf; len > 0;) {
      ssize_t w = write(fd, p, len);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) return cairn_fail(st, -errno, "unpacking %s: %s", name, strerror(errno));
      p += w;
      len -= (size_t)w;
    }
  }
  if (ar != ARCHIVE_EOF)
    return cairn_fail(st, -EBADMSG, "%s: %s: %s", file, name, archive_error_string(a));
  /* a sparse tail (holes at the end) still counts in the size */
  if (archive_entry_size(ae) > 0 && ftruncate(fd, archive_entry_size(ae)) < 0)
    return cairn_fail(st, -errno, "unpacking %s: %s", name, strerror(errno));
  return 0;
}

static int unpack(const char *file, const char *dir, cairn_store *st) {
  cairn_autoclose int top = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (top < 0) return cairn_fail(st, -errno, "%s: %s", dir, strerror(errno));
  if (mkdirat(top, "blobs", 0700) < 0)
    return cairn_fail(st, -errno, "%s/blobs: %s", dir, strerror(errno));
  cairn_autoclose int blobs = openat(top, "blobs", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (blobs < 0 || mkdirat(blobs, "sha256", 0700) < 0)
    return cairn_fail(st, -errno, "%s/blobs/sha256: %s", dir, strerror(errno));
  cairn_autoclose int sha =
      openat(blobs, "sha256", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (sha < 0) return cairn_fail(st, -errno, "%s/blobs/sha256: %s", dir, strerror(errno));
  struct archive *a = archive_read_new();
  if (!a) return cairn_fail(st, -ENOMEM, "out of memory");
  archive_read_support_filter_all(a);
  archive_read_support_format_tar(a);
  int r = 0, ar;
  if (archive_read_open_filename(a, file, 1 << 16) != ARCHIVE_OK) {
    int err = archive_errno(a);
    r = cairn_fail(st, err == ENOENT ? -ENOENT : -EBADMSG, "%s: %s", file, archive_error_string(a));
    archive_read_free(a);
    return r;
  }
  struct archive_entry *ae;
  while (r == 0 && (ar = archive_read_next_header(a, &ae)) == ARCHIVE_OK) {
    const char *p = archive_entry_pathname(ae);
    while (p && p[0] == '.' && p[1] == '/') p += 2;
    if (!p || archive_entry_filetype(ae) != AE_IFREG) continue;
    if (strcmp(p, "index.json") == 0 || strcmp(p, "oci-layout") == 0)
      r = unpack_entry(a, ae, top, p, file, st);
    else if (strncmp(p, "blobs/sha256/", 13) == 0 && hex64(p + 13))
      r = unpack_entry(a, ae, sha, p + 13, file, st);
  }
  if (r == 0 && ar != ARCHIVE_EOF)
    r = cairn_fail(st, -EBADMSG, "%s: %s", file, archive_error_string(a));
  archive_read_free(a);
  return r;
}

int cn_oci_archive_open(const char *spec, const char *tmp_parent, pull_source **out,
                        cairn_store *st) {
  const char *colon = strchr(spec, ':');
  cairn_autofree char *file = colon ? strndup(spec, (size_t)(colon - spec)) : strdup(spec);
  if (!file) return cairn_fail(st, -ENOMEM, "out of memory");
  if (!*file) return cairn_fail(st, -EINVAL, "oci-archive: needs a file (oci-archive:FILE[:REF])");
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/oci-archive-XXXXXX", tmp_parent);
  if (!mkdtemp(dir)) return cairn_fail(st, -errno, "%s: %s", dir, strerror(errno));
  int r = unpack(file, dir, st);
  if (r == 0)
    r = cn_oci_layout_open_unpacked(dir, colon && colon[1] ? colon + 1 : NULL, file, out, st);
  if (r < 0) cn_oci_layout_remove_unpacked(dir);
  return r;
}
