/* SPDX-License-Identifier: Apache-2.0 */
/*
 * oci_layout.c — the "oci:DIR[:REF]" pull source: an OCI image layout
 * directory (index.json, blobs/sha256/...), as skopeo or umoci write it.
 *
 * DIR is everything up to the first ':'; REF (which may hold ':') picks the
 * index.json entry whose org.opencontainers.image.ref.name equals it. With
 * no REF the layout must hold exactly one entry. Every blob read is checked
 * against its descriptor like a download.
 *
 * The image is named as podman (4.3, libimage) names an oci: pull:
 * "localhost/" and DIR as typed, less its leading (and trailing) slashes,
 * ":latest" (oci:lay:v2 is localhost/lay:latest, oci:/srv/lay is
 * localhost/srv/lay:latest), whatever REF is. Where that is no valid name
 * (DIR has capitals, "./"...: podman refuses the pull) it is named after
 * the entry's own name annotation, as podman names an oci-archive:
 * io.containerd.image.name if set (buildkit writes it), else
 * org.opencontainers.image.ref.name, normalized (cairn_name_normalize). An
 * entry with neither annotation, or one that is no valid name, gives the
 * image no name (it is listed by id).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "libcairn_remote.h"

void cn_oci_layout_remove_unpacked(const char *dir) {
  char path[4096];
  snprintf(path, sizeof path, "%s/blobs/sha256", dir);
  DIR *d = opendir(path);
  if (d) {
    struct dirent *e;
    while ((e = readdir(d)))
      if (e->d_name[0] != '.') unlinkat(dirfd(d), e->d_name, 0);
    closedir(d);
  }
  rmdir(path);
  snprintf(path, sizeof path, "%s/blobs", dir);
  rmdir(path);
  snprintf(path, sizeof path, "%s/index.json", dir);
  unlink(path);
  snprintf(path, sizeof path, "%s/oci-layout", dir);
  unlink(path);
  rmdir(dir);
}

typedef struct oci_layout {
  pull_source base;
  char *dir;
  char *ref;
  bool unpacked; /* an oci-archive's, in a directory of its own */
  char *label;   /* what messages name: dir, or the archive */
} oci_layout;

static int open_blob(oci_layout *l, const pull_desc *d, cairn_store *st) {
  char path[4096];
  snprintf(path, sizeof path, "%s/blobs/sha256/%s", l->dir, d->digest + 7);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return cairn_fail(st, errno == ENOENT ? -ENOENT : -errno, "blob %s: %s", d->digest,
                      strerror(errno));
  return fd;
}

static int layout_blob(pull_source *src, const pull_desc *d, blob_sink *s, cairn_store *st) {
  cairn_autoclose int fd = open_blob((oci_layout *)src, d, st);
  if (fd < 0) return fd;
  int r = cn_blob_copy_fd(fd, s, st);
  if (r == -EBADMSG)
    return cairn_fail(st, r, "blob %s is larger than its descriptor says (%llu bytes)", d->digest,
                      (unsigned long long)d->size);
  return r < 0 ? r : cn_blob_sink_finish(s, d, st);
}

static int read_small_blob(pull_source *src, const pull_desc *d, char **body, size_t *len,
                           cairn_store *st) {
  if (d->size > PULL_MANIFEST_MAX)
    return cairn_fail(st, -EBADMSG, "manifest %s is too large (%llu bytes)", d->digest,
                      (unsigned long long)d->size);
  blob_sink s;
  int r = cn_blob_sink_init(&s, -1, d->size, NULL);
  if (r == 0) r = layout_blob(src, d, &s, st);
  if (r == 0) {
    *body = s.mem ? s.mem : strdup("");
    *len = s.written;
    s.mem = NULL;
  }
  cn_blob_sink_free(&s);
  return r;
}

/* The name of the image an index.json entry describes (see the top), or
 * NULL. */
static char *entry_name(json_t *entry) {
  json_t *ann = json_object_get(entry, "annotations");
  const char *a = json_string_value(json_object_get(ann, "io.containerd.image.name"));
  if (!a || !*a) a = json_string_value(json_object_get(ann, "org.opencontainers.image.ref.name"));
  if (!a || !*a) return NULL;
  const char *slash = strchr(a, '/');
  size_t first = slash ? (size_t)(slash - a) : 0;
  bool has_host = slash && (memchr(a, '.', first) || memchr(a, ':', first) ||
                            (first == 9 && strncmp(a, "localhost", 9) == 0));
  cairn_autofree char *full = NULL;
  char norm[1024];
  if (asprintf(&full, "%s%s", has_host ? "" : "localhost/", a) < 0) return NULL;
  return cairn_name_normalize(full, norm, sizeof norm) == 0 ? strdup(norm) : NULL;
}

/* The name podman gives a pull of the layout dir (see the top), or NULL. */
static char *dir_name(const char *dir) {
  dir += strspn(dir, "/");
  size_t n = strlen(dir);
  while (n > 0 && dir[n - 1] == '/') n--;
  char full[1024], norm[1024];
  if (n == 0 || snprintf(full, sizeof full, "localhost/%.*s", (int)n, dir) >= (int)sizeof full ||
      cairn_name_normalize(full, norm, sizeof norm) < 0)
    return NULL;
  return strdup(norm);
}

/* The index.json entry REF names (or the only one), and its name. */
static int pick_entry(oci_layout *l, pull_desc *d, cairn_store *st) {
  char path[4096];
  json_error_t je;
  snprintf(path, sizeof path, "%s/index.json", l->dir);
  json_t *idx = json_load_file(path, 0, &je);
  if (!idx) {
    if (access(path, F_OK) < 0)
      return cairn_fail(st, -ENOENT, "%s is not an OCI image layout (no index.json)", l->label);
    return cairn_fail(st, -EBADMSG, "%s/index.json: %s", l->label, je.text);
  }
  json_t *list = json_object_get(idx, "manifests"), *m, *found = NULL;
  size_t i, count = 0;
  json_array_foreach(list, i, m) {
    const char *name = json_string_value(
        json_object_get(json_object_get(m, "annotations"), "org.opencontainers.image.ref.name"));
    if (!l->ref || (name && strcmp(name, l->ref) == 0)) {
      found = m;
      count++;
    }
  }
  int r;
  if (count == 0)
    r = cairn_fail(st, -ENOENT, "%s: no image%s%s in the layout", l->label, l->ref ? " named " : "",
                   l->ref ? l->ref : "");
  else if (count > 1) {
    /* say which: their REFs (ref.name annotations), as many as fit */
    char refs[512] = "";
    size_t o = 0, unnamed = 0;
    json_array_foreach(list, i, m) {
      const char *name = json_string_value(
          json_object_get(json_object_get(m, "annotations"), "org.opencontainers.image.ref.name"));
      if (!name)
        unnamed++;
      else if (o < sizeof refs)
        o += (size_t)snprintf(refs + o, sizeof refs - o, "%s%s", o ? ", " : "", name);
    }
    if (o >= sizeof refs) snprintf(refs + sizeof refs - 5, 5, "...");
    r = cairn_fail(st, -EINVAL, "%s holds %zu images (%s%s%s); name one as %s:%s:REF", l->label,
                   count, refs, unnamed && o ? ", " : "", unnamed ? "some with no name" : "",
                   l->unpacked ? "oci-archive" : "oci", l->label);
  } else
    r = cn_pull_desc_parse(found, d, st);
  if (r == 0) {
    free(l->base.default_name);
    l->base.default_name = l->unpacked ? NULL : dir_name(l->dir);
    if (!l->base.default_name) l->base.default_name = entry_name(found);
  }
  json_decref(idx);
  return r;
}

static int layout_manifest(pull_source *src, const pull_desc *d, char **body, size_t *len,
                           cairn_store *st) {
  if (d) return read_small_blob(src, d, body, len, st);
  pull_desc top = {0}; /* pick_entry fills it only when it finds the entry */
  int r = pick_entry((oci_layout *)src, &top, st);
  if (r == 0) r = read_small_blob(src, &top, body, len, st);
  cn_pull_desc_clear(&top);
  return r;
}

static void layout_free(pull_source *src) {
  oci_layout *l = (oci_layout *)src;
  if (l->unpacked) cn_oci_layout_remove_unpacked(l->dir);
  free(l->dir);
  free(l->ref);
  if (l->label != l->dir) free(l->label);
  free(l->base.default_name);
  free(l);
}

static const pull_source_ops layout_ops = {
    .manifest = layout_manifest,
    .blob = layout_blob,
    .free = layout_free,
};

int cn_oci_layout_open(const char *spec, pull_source **out, cairn_store *st) {
  oci_layout *l = calloc(1, sizeof *l);
  if (!l) return cairn_fail(st, -ENOMEM, "out of memory");
  const char *colon = strchr(spec, ':');
  l->dir = colon ? strndup(spec, (size_t)(colon - spec)) : strdup(spec);
  l->ref = colon && colon[1] ? strdup(colon + 1) : NULL;
  l->base.ops = &layout_ops;
  l->label = l->dir;
  if (!l->dir || (colon && colon[1] && !l->ref)) {
    layout_free(&l->base);
    return cairn_fail(st, -ENOMEM, "out of memory");
  }
  if (!*l->dir) {
    layout_free(&l->base);
    return cairn_fail(st, -EINVAL, "oci: needs a directory (oci:DIR[:REF])");
  }
  *out = &l->base;
  return 0;
}

int cn_oci_layout_open_unpacked(const char *dir, const char *ref, const char *label,
                                pull_source **out, cairn_store *st) {
  oci_layout *l = calloc(1, sizeof *l);
  if (!l) return cairn_fail(st, -ENOMEM, "out of memory");
  l->base.ops = &layout_ops;
  l->dir = strdup(dir);
  l->ref = ref ? strdup(ref) : NULL;
  l->label = strdup(label);
  if (!l->dir || (ref && !l->ref) || !l->label) {
    layout_free(&l->base);
    return cairn_fail(st, -ENOMEM, "out of memory");
  }
  l->unpacked = true;
  *out = &l->base;
  return 0;
}
