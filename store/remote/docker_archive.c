/* SPDX-License-Identifier: Apache-2.0 */
/*
 * docker_archive.c — the "docker-archive:FILE" pull source: a `docker save`
 * tar (manifest.json naming a Config file and Layers, bottom first).
 *
 * The archive carries no descriptors, so this source makes an image
 * manifest from what it has: the config's digest is the sha256 of its
 * bytes, and each layer (an uncompressed tar in docker save) is described
 * by the config's diff_id and the tar entry's size. A layer whose bytes
 * differ from its diff_id then fails verification like a bad download.
 * The archive is read with libarchive, once per blob; tar entries are
 * skipped without being read, so this stays linear in the blob sizes.
 */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "libcairn_remote.h"

typedef struct docker_archive {
  pull_source base;
  char *path;
  char *manifest; /* synthesized OCI image manifest */
  char **layer_paths, **layer_digests;
  size_t n_layers;
} docker_archive;

static const char *entry_name(struct archive_entry *ae) {
  const char *p = archive_entry_pathname(ae);
  while (p && p[0] == '.' && p[1] == '/') p += 2;
  return p ? p : "";
}

static struct archive *open_archive(docker_archive *da, cairn_store *st) {
  struct archive *a = archive_read_new();
  if (!a) {
    cairn_fail(st, -ENOMEM, "out of memory");
    return NULL;
  }
  archive_read_support_filter_all(a);
  archive_read_support_format_tar(a);
  if (archive_read_open_filename(a, da->path, 1 << 16) != ARCHIVE_OK) {
    int err = archive_errno(a);
    cairn_fail(st, err == ENOENT ? -ENOENT : -EBADMSG, "%s: %s", da->path, archive_error_string(a));
    archive_read_free(a);
    return NULL;
  }
  return a;
}

/* Streams the entry named name into s (or, s NULL, only reads its size);
 * -ENOENT if the archive lacks it. */
static int read_entry(docker_archive *da, const char *name, blob_sink *s, int64_t *size,
                      cairn_store *st) {
  struct archive *a = open_archive(da, st);
  if (!a) return -ENOENT;
  struct archive_entry *ae;
  int r = cairn_fail(st, -ENOENT, "%s: no %s in the archive", da->path, name);
  int ar;
  while ((ar = archive_read_next_header(a, &ae)) == ARCHIVE_OK) {
    if (strcmp(entry_name(ae), name) != 0) continue;
    *size = archive_entry_size(ae);
    r = 0;
    if (!s) break; /* only the size was asked for */
    const void *buf;
    size_t len;
    int64_t off;
    while (r == 0 && (ar = archive_read_data_block(a, &buf, &len, &off)) == ARCHIVE_OK) {
      r = cn_blob_sink_write(s, buf, len);
      if (r == -EFBIG)
        r = cairn_fail(st, -EBADMSG, "%s: %s is larger than expected", da->path, name);
      else if (r < 0)
        r = cairn_fail(st, r, "writing %s: %s", name, strerror(-r));
    }
    if (r == 0 && ar != ARCHIVE_EOF)
      r = cairn_fail(st, -EBADMSG, "%s: %s: %s", da->path, name, archive_error_string(a));
    break;
  }
  if (ar != ARCHIVE_OK && ar != ARCHIVE_EOF && r == -ENOENT)
    r = cairn_fail(st, -EBADMSG, "%s: %s", da->path, archive_error_string(a));
  archive_read_free(a);
  return r;
}

static int read_small(docker_archive *da, const char *name, char **body, size_t *len,
                      cairn_store *st) {
  blob_sink s;
  int64_t size = 0;
  int r = cn_blob_sink_init(&s, -1, PULL_MANIFEST_MAX, NULL);
  if (r == 0) r = read_entry(da, name, &s, &size, st);
  if (r == 0) {
    *body = s.mem ? s.mem : strdup("");
    *len = s.written;
    s.mem = NULL;
  }
  cn_blob_sink_free(&s);
  return r;
}

static int archive_manifest(pull_source *src, const pull_desc *d, char **body, size_t *len,
                            cairn_store *st) {
  docker_archive *da = (docker_archive *)src;
  if (d)
    return cairn_fail(st, -ENOENT, "%s: no manifest %s in a docker archive", da->path, d->digest);
  *body = strdup(da->manifest);
  *len = strlen(da->manifest);
  return *body ? 0 : cairn_fail(st, -ENOMEM, "out of memory");
}

static int archive_blob(pull_source *src, const pull_desc *d, blob_sink *s, cairn_store *st) {
  docker_archive *da = (docker_archive *)src;
  for (size_t i = 0; i < da->n_layers; i++) {
    if (strcmp(da->layer_digests[i], d->digest) != 0) continue;
    int64_t size;
    int r = read_entry(da, da->layer_paths[i], s, &size, st);
    return r < 0 ? r : cn_blob_sink_finish(s, d, st);
  }
  return cairn_fail(st, -ENOENT, "%s: no blob %s in the archive", da->path, d->digest);
}

static void docker_archive_free(pull_source *src) {
  docker_archive *da = (docker_archive *)src;
  for (size_t i = 0; i < da->n_layers; i++) {
    free(da->layer_paths[i]);
    free(da->layer_digests[i]);
  }
  free(da->layer_paths);
  free(da->layer_digests);
  free(da->manifest);
  free(da->path);
  free(da->base.default_name);
  free(da);
}

static const pull_source_ops archive_ops = {
    .manifest = archive_manifest,
    .blob = archive_blob,
    .free = docker_archive_free,
};

/* Reads manifest.json and the config, and builds the image manifest. The
 * config itself is served by the manifest's config descriptor through
 * blob(): it is listed among the "layers" paths so the same lookup finds it. */
static int read_manifest_and_config(docker_archive *da, cairn_store *st) {
  cairn_autofree char *mbody = NULL, *cbody = NULL;
  size_t mlen = 0, clen = 0;
  json_t *mj = NULL, *cj = NULL, *out = NULL;
  int r = read_small(da, "manifest.json", &mbody, &mlen, st);
  if (r < 0) goto done;
  mj = json_loadb(mbody, mlen, 0, NULL);
  json_t *first = json_array_get(mj, 0);
  const char *config = json_string_value(json_object_get(first, "Config"));
  json_t *layers = json_object_get(first, "Layers");
  if (!config || !json_is_array(layers)) {
    r = cairn_fail(st, -EBADMSG, "%s: manifest.json has no Config and Layers", da->path);
    goto done;
  }
  const char *tag = json_string_value(json_array_get(json_object_get(first, "RepoTags"), 0));
  char norm[1024];
  /* docker save's RepoTags are docker's short names (alpine:3.19 is
   * docker.io/library/alpine:3.19), as podman reads them */
  const char *slash = tag ? strchr(tag, '/') : NULL;
  size_t first_len = slash ? (size_t)(slash - tag) : 0;
  bool host = slash && (memchr(tag, '.', first_len) || memchr(tag, ':', first_len) ||
                        (first_len == 9 && strncmp(tag, "localhost", 9) == 0));
  char full[1024];
  if (tag &&
      snprintf(full, sizeof full, "%s%s", host ? "" : "docker.io/", tag) < (int)sizeof full &&
      cairn_name_normalize(full, norm, sizeof norm) == 0)
    da->base.default_name = strdup(norm);
  if ((r = read_small(da, config, &cbody, &clen, st)) < 0) goto done;
  cj = json_loadb(cbody, clen, 0, NULL);
  json_t *diff_ids = json_object_get(json_object_get(cj, "rootfs"), "diff_ids");
  size_t n = json_array_size(layers);
  if (json_array_size(diff_ids) != n) {
    r = cairn_fail(st, -EBADMSG, "%s: config lists %zu diff_ids for %zu layers", da->path,
                   json_array_size(diff_ids), n);
    goto done;
  }
  da->layer_paths = calloc(n + 1, sizeof *da->layer_paths);
  da->layer_digests = calloc(n + 1, sizeof *da->layer_digests);
  if (!da->layer_paths || !da->layer_digests) {
    r = cairn_fail(st, -ENOMEM, "out of memory");
    goto done;
  }
  char cdigest[CAIRN_DIGEST_LEN + 1];
  cn_pull_sha256(cbody, clen, cdigest);
  out = json_pack("{s:i, s:s, s:{s:s, s:s, s:I}, s:[]}", "schemaVersion", 2, "mediaType",
                  "application/vnd.oci.image.manifest.v1+json", "config", "mediaType",
                  "application/vnd.oci.image.config.v1+json", "digest", cdigest, "size",
                  (json_int_t)clen, "layers");
  for (size_t i = 0; i < n && r == 0; i++) {
    const char *lp = json_string_value(json_array_get(layers, i));
    const char *did = json_string_value(json_array_get(diff_ids, i));
    int64_t size = 0;
    if (!lp || !cn_pull_digest_valid(did)) {
      r = cairn_fail(st, -EBADMSG, "%s: bad layer %zu in manifest.json or config", da->path, i);
      break;
    }
    if ((r = read_entry(da, lp, NULL, &size, st)) < 0) break;
    da->layer_paths[da->n_layers] = strdup(lp);
    da->layer_digests[da->n_layers] = strdup(did);
    da->n_layers++;
    json_array_append_new(json_object_get(out, "layers"),
                          json_pack("{s:s, s:s, s:I}", "mediaType",
                                    "application/vnd.oci.image.layer.v1.tar", "digest", did, "size",
                                    (json_int_t)size));
  }
  if (r == 0) {
    da->layer_paths[da->n_layers] = strdup(config);
    da->layer_digests[da->n_layers] = strdup(cdigest);
    da->n_layers++;
    da->manifest = json_dumps(out, JSON_COMPACT);
    if (!da->manifest) r = cairn_fail(st, -ENOMEM, "out of memory");
  }
done:
  json_decref(out);
  json_decref(mj);
  json_decref(cj);
  return r;
}

int cn_docker_archive_open(const char *path, pull_source **out, cairn_store *st) {
  docker_archive *da = calloc(1, sizeof *da);
  if (!da || !(da->path = strdup(path))) {
    free(da);
    return cairn_fail(st, -ENOMEM, "out of memory");
  }
  da->base.ops = &archive_ops;
  int r = read_manifest_and_config(da, st);
  if (r < 0) {
    docker_archive_free(&da->base);
    return r;
  }
  *out = &da->base;
  return 0;
}
