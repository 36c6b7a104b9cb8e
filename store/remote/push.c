/* SPDX-License-Identifier: Apache-2.0 */
/*
 * push.c — `cairn push`: an image of the store to a registry
 * ("docker://HOST[:PORT]/REPO[:TAG]", the OCI distribution API), to an
 * OCI image layout ("oci:DIR[:TAG]") or to an archive: "oci-archive:FILE[:TAG]"
 * (that layout as a tar) or "docker-archive:FILE[:NAME[:TAG]]" (docker
 * save's tar, its layers uncompressed). Built on cairn.h alone, like the
 * pull sources, and on their registry client (registry*.c: curl, auth,
 * TLS, the retry policy). Over 1,000 lines: one run's state (pins, the
 * layers' blobs, the progress, the access list) serves four kinds of
 * destination and three layer formats; split, it would travel between files.
 *
 * Invariants:
 *  - the image and its layers are pinned (cairn_pin_image) before anything
 *    is read and until the push returns, so no rm or gc removes them
 *    midway; the image is resolved again after pinning;
 *  - a layer a pull kept (cn_layer_blobs_of) goes as it was pulled: the
 *    same bytes, digest, size and media type, which the pull checked
 *    against the diff_id; its bytes are checked against the digest before
 *    they are first read out (a blob damaged since is dropped: the layer
 *    is compressed anew), and a HEAD or a mount reads none of them;
 *  - every other layer is its exact tar (cn_layer_tar): the pushed
 *    layer's uncompressed sha256 is the diff_id the image's config names,
 *    or the push fails before the manifest is sent (a layer stored without
 *    its tar record is refused before any upload);
 *  - the config is sent as stored, so the pushed image's id (the config's
 *    digest) is the local one;
 *  - the manifest goes last, after every blob it names is in place (a
 *    registry shows the tag only once the whole image can be pulled); in a
 *    layout, index.json is replaced by rename after the blobs are written;
 *  - a layout's files are written by cairn_file_put_at, its directories
 *    opened O_NOFOLLOW: nothing planted in DIR redirects a root push; an
 *    archive is written whole in STORE/tmp, then put in place by
 *    cairn_file_put_at (replacing FILE for an oci-archive, refusing an
 *    existing one for a docker-archive, as podman).
 *
 * Each layer not kept is written, compressed, to an anonymous file in STORE/tmp
 * (its digest and size are needed before the upload), then sent whole
 * (POST for an upload session, then one PUT ?digest=) unless the registry
 * has it (HEAD) or can mount it from the repository the image was pulled
 * from (POST ?mount=&from=). Each request follows pull's retry policy; a
 * PUT that still fails starts over in a new upload session.
 */
#include <archive.h>
#include <archive_entry.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <zlib.h>

#include "libcairn_chunked_write.h"
#include "libcairn_registry.h"

#define MT_MANIFEST "application/vnd.oci.image.manifest.v1+json"
#define PUSH_SESSIONS 3 /* upload sessions a blob is tried in */
#define MT_CONFIG "application/vnd.oci.image.config.v1+json"

static const char *layer_media_type(enum cairn_compress c) {
  switch (c) {
  case CAIRN_COMPRESS_ZSTD: return "application/vnd.oci.image.layer.v1.tar+zstd";
  case CAIRN_COMPRESS_NONE: return "application/vnd.oci.image.layer.v1.tar";
  default: return "application/vnd.oci.image.layer.v1.tar+gzip";
  }
}

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* One blob to send: a layer (compressed into fd, or the blob a pull kept)
 * or the config (mem). */
typedef struct push_blob {
  int fd;
  const char *mem;
  uint64_t size;
  char digest[CAIRN_DIGEST_LEN + 1];
  const char *media_type;
  bool kept;     /* fd is the kept blob of a pull: its bytes are checked */
  bool verified; /* against digest before they are first read out */
  bool chunked;  /* written by chunked_write.c: res holds its annotations */
  cn_chunked_result res;
} push_blob;

typedef struct push_run {
  cairn_store *st;
  const cairn_push_opts *o;
  cairn_pull_layer *layers; /* the progress view */
  size_t n;
  _Atomic uint64_t sent;
  size_t current;
  uint64_t last_tick;
  char **access; /* push --format: the image's access list (store/access.c) */
  size_t n_access;
  size_t prefetched; /* files the layers' TOCs rank by it */
} push_run;

static void run_progress(push_run *p, bool force) {
  if (!p->o->net.progress) return;
  uint64_t t = now_ms();
  if (!force && t - p->last_tick < 100) return;
  p->last_tick = t;
  if (p->current < p->n && p->layers[p->current].state == CAIRN_PULL_FETCHING)
    p->layers[p->current].fetched = atomic_load(&p->sent);
  p->o->net.progress(p->layers, p->n, p->o->net.arg);
}

/* ---- compressing a layer ------------------------------------------------- */

/* Where the compressed bytes go: the blob file, hashed as they pass. */
typedef struct out_file {
  int fd;
  EVP_MD_CTX *md;
  uint64_t size;
} out_file;

static int out_write(out_file *f, const void *buf, size_t len) {
  const char *p = buf;
  EVP_DigestUpdate(f->md, buf, len);
  f->size += len;
  while (len > 0) {
    ssize_t k = write(f->fd, p, len);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) return -errno;
    p += k;
    len -= (size_t)k;
  }
  return 0;
}

typedef struct compressor {
  enum cairn_compress kind;
  cn_chunked_writer *cw; /* push --format: the lazily-pullable layout */
  out_file *out;
  z_stream z;
  struct archive *ar;
  push_run *run;
  uint64_t in;
  int err;
} compressor;

static la_ssize_t ar_write(struct archive *a, void *arg, const void *buf, size_t len) {
  compressor *c = arg;
  int r = out_write(c->out, buf, len);
  if (r < 0) {
    archive_set_error(a, -r, "%s", strerror(-r));
    return -1;
  }
  return (la_ssize_t)len;
}

static int gz_run(compressor *c, const void *buf, size_t len, int flush) {
  unsigned char out[64 * 1024];
  c->z.next_in = (unsigned char *)buf;
  c->z.avail_in = (uInt)len;
  int zr;
  do {
    c->z.next_out = out;
    c->z.avail_out = sizeof(out);
    zr = deflate(&c->z, flush);
    if (zr == Z_STREAM_ERROR) return -EIO;
    int r = out_write(c->out, out, sizeof(out) - c->z.avail_out);
    if (r < 0) return r;
  } while (c->z.avail_out == 0 || (flush == Z_FINISH && zr != Z_STREAM_END));
  return 0;
}

/* cairn_write_fn: the tar's bytes into the compressor. */
static int compress_write(const void *buf, size_t len, void *arg) {
  compressor *c = arg;
  int r = 0;
  switch (c->cw ? CAIRN_COMPRESS_NONE : c->kind) {
  case CAIRN_COMPRESS_NONE:
    r = c->cw ? cn_chunked_write(c->cw, buf, len) : out_write(c->out, buf, len);
    break;
  case CAIRN_COMPRESS_GZIP: r = gz_run(c, buf, len, Z_NO_FLUSH); break;
  case CAIRN_COMPRESS_ZSTD:
    if (archive_write_data(c->ar, buf, len) != (la_ssize_t)len) r = -EIO;
    break;
  }
  if (r < 0) {
    c->err = r;
    return r;
  }
  c->in += len;
  push_run *p = c->run;
  p->layers[p->current].stored = c->in;
  run_progress(p, false);
  return 0;
}

static int chunked_out(const void *buf, size_t len, void *arg) { return out_write(arg, buf, len); }

static int pick_write(const void *buf, size_t len, void *arg) {
  return cn_tar_pick_write(arg, buf, len);
}

/* The layer's tar into the compressor; eStargz with an access list: the
 * files it names first, then .prefetch.landmark, then the rest (the tar
 * read twice: cn_tar_pick), as eStargz readers expect prioritized files. */
static int layer_write(push_run *p, compressor *c, const char *diff_id) {
  if (!c->cw || p->o->format != CAIRN_PUSH_FORMAT_ESTARGZ || !p->n_access)
    return cn_layer_tar(p->st, diff_id, compress_write, c, NULL);
  int r = 0;
  for (int pass = 0; r == 0 && pass < 2; pass++) {
    cn_tar_pick *pk = NULL;
    r = cn_tar_pick_new(c->cw, pass == 0, compress_write, c, &pk);
    if (r == 0) r = cn_layer_tar(p->st, diff_id, pick_write, pk, NULL);
    if (r == 0 && pass == 0 && cn_tar_pick_count(pk) && (r = cn_chunked_landmark(c->cw)) < 0)
      c->err = r;
    cn_tar_pick_free(pk);
  }
  return r;
}

static int compressor_open(compressor *c, uint64_t tar_size, enum cairn_push_format fmt) {
  if (fmt != CAIRN_PUSH_FORMAT_PLAIN)
    return cn_chunked_new(fmt == CAIRN_PUSH_FORMAT_ESTARGZ ? CN_CHUNKED_ESTARGZ : CN_CHUNKED_ZSTD,
                          chunked_out, c->out, &c->cw);
  if (c->kind == CAIRN_COMPRESS_GZIP) {
    /* gzip with no name and no time (as gzip -n): the same tar gives the
     * same blob */
    if (deflateInit2(&c->z, 6, Z_DEFLATED, 16 + 15, 8, Z_DEFAULT_STRATEGY) != Z_OK) return -ENOMEM;
    return 0;
  }
  if (c->kind != CAIRN_COMPRESS_ZSTD) return 0;
  /* zstd through libarchive's filter (raw format: one entry, its data) */
  if (!(c->ar = archive_write_new())) return -ENOMEM;
  struct archive_entry *e = archive_entry_new();
  if (!e) return -ENOMEM;
  archive_entry_set_pathname(e, "layer.tar");
  archive_entry_set_filetype(e, AE_IFREG);
  archive_entry_set_size(e, (la_int64_t)tar_size);
  int ok = archive_write_add_filter_zstd(c->ar) == ARCHIVE_OK &&
           archive_write_set_format_raw(c->ar) == ARCHIVE_OK &&
           archive_write_set_bytes_in_last_block(c->ar, 1) == ARCHIVE_OK &&
           archive_write_open(c->ar, c, NULL, ar_write, NULL) == ARCHIVE_OK &&
           archive_write_header(c->ar, e) == ARCHIVE_OK;
  archive_entry_free(e);
  return ok ? 0 : -EIO;
}

static int compressor_close(compressor *c, push_blob *b) {
  int r = 0;
  if (c->cw) {
    b->chunked = true;
    r = cn_chunked_finish(c->cw, &b->res);
  } else if (c->kind == CAIRN_COMPRESS_GZIP) {
    r = gz_run(c, NULL, 0, Z_FINISH);
    deflateEnd(&c->z);
  } else if (c->ar) {
    if (archive_write_close(c->ar) != ARCHIVE_OK) r = -EIO;
    archive_write_free(c->ar);
    c->ar = NULL;
  }
  return r;
}

static int tmp_file(cairn_store *st, int *fd) {
  *fd = cn_store_tmpfile(st, 0600);
  return *fd < 0 ? *fd : 0;
}

/* ---- a blob a pull kept -------------------------------------------------- */

/* The OCI media type of a kept blob of media type mt (a Docker one is
 * named by its OCI equivalent: the same bytes) and its compression. */
static const char *kept_media_type(const char *mt, enum cairn_compress *c) {
  *c = strstr(mt, "zstd")   ? CAIRN_COMPRESS_ZSTD
       : strstr(mt, "gzip") ? CAIRN_COMPRESS_GZIP
                            : CAIRN_COMPRESS_NONE;
  if (strncmp(mt, "application/vnd.oci.image.layer.", 32) == 0) return mt;
  return layer_media_type(*c);
}

typedef struct kept_pick {
  cairn_store *st;
  const cairn_push_opts *o;
  push_blob *b;
  char mt[128];
} kept_pick;

static int kept_pick_cb(const struct cairn_layer_blob *kb, void *arg) {
  kept_pick *k = arg;
  enum cairn_compress c;
  const char *mt = kept_media_type(kb->media_type, &c);
  if (k->o->kept == CAIRN_PUSH_KEPT_SAME && c != k->o->compress) return 0;
  int fd = cairn_layer_blob_open(k->st, kb->digest);
  struct stat sb;
  if (fd < 0) return 0; /* its file went (gc --check repairs the record) */
  if (fstat(fd, &sb) < 0 || (uint64_t)sb.st_size != kb->size) {
    close(fd);
    return 0;
  }
  k->b->fd = fd;
  k->b->size = kb->size;
  k->b->kept = true;
  snprintf(k->b->digest, sizeof k->b->digest, "%s", kb->digest);
  snprintf(k->mt, sizeof k->mt, "%s", mt);
  return 1;
}

/* Takes the blob a pull kept of layer diff_id, if the options let it be
 * sent as it is: 1 (b set, mt its media type), 0 if none. */
static int kept_take(push_run *p, const char *diff_id, push_blob *b, char mt[128]) {
  if (p->o->kept == CAIRN_PUSH_KEPT_NONE) return 0;
  kept_pick k = {.st = p->st, .o = p->o, .b = b};
  int r = cn_layer_blobs_of(p->st, diff_id, kept_pick_cb, &k);
  if (r == 1) snprintf(mt, 128, "%s", k.mt);
  return r;
}

/* Checks a kept blob's bytes against its digest before they leave the
 * store: -EBADMSG if they changed since the pull. */
static int kept_verify(push_run *p, push_blob *b) {
  if (!b->kept || b->verified) return 0;
  EVP_MD_CTX *md = EVP_MD_CTX_new();
  if (!md) return cairn_fail(p->st, -ENOMEM, "out of memory");
  EVP_DigestInit_ex(md, EVP_sha256(), NULL);
  char buf[1 << 16];
  off_t off = 0;
  int r = 0;
  for (;;) {
    ssize_t n = pread(b->fd, buf, sizeof buf, off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      r = cairn_fail(p->st, -errno, "reading the kept blob %s: %s", b->digest, strerror(errno));
    if (n <= 0) break;
    EVP_DigestUpdate(md, buf, (size_t)n);
    off += n;
  }
  cairn_id hex;
  cn_sha256_final_hex(md, hex);
  EVP_MD_CTX_free(md);
  if (r < 0) return r;
  if ((uint64_t)off != b->size || strcmp(hex, b->digest + 7) != 0)
    return cairn_fail(p->st, -EBADMSG, "the kept blob %s is not its digest's bytes any more",
                      b->digest);
  b->verified = true;
  return 0;
}

/* Writes layer i's exact tar, compressed, into a new temporary file. */
static int layer_prepare(push_run *p, size_t i, push_blob *b) {
  cairn_store *st = p->st;
  cairn_pull_layer *l = &p->layers[i];
  int r = tmp_file(st, &b->fd);
  if (r < 0) return r;
  out_file out = {.fd = b->fd, .md = EVP_MD_CTX_new()};
  if (!out.md) return cairn_fail(st, -ENOMEM, "out of memory");
  EVP_DigestInit_ex(out.md, EVP_sha256(), NULL);
  compressor c = {.kind = p->o->compress, .out = &out, .run = p};
  p->current = i;
  l->state = CAIRN_PULL_STORING;
  l->stored = 0;
  run_progress(p, true);
  if ((r = compressor_open(&c, l->size, p->o->format)) < 0 ||
      (c.cw && p->n_access &&
       (r = cn_chunked_prefetch(c.cw, (const char *const *)p->access, p->n_access)) < 0)) {
    cairn_fail(st, r, "layer %.12s: starting the compressor", l->diff_id);
  } else {
    r = layer_write(p, &c, l->diff_id);
    if (r < 0 && c.err)
      cairn_fail(st, c.err, "layer %.12s: compressing: %s", l->diff_id,
                 c.cw && cn_chunked_error(c.cw)[0] ? cn_chunked_error(c.cw) : strerror(-c.err));
    int cr = r < 0 && c.cw ? 0 : compressor_close(&c, b);
    if (r == 0 && cr == 0 && c.cw) p->prefetched += cn_chunked_prefetched(c.cw);
    if (r == 0 && cr < 0)
      r = cairn_fail(st, cr, "layer %.12s: compressing: %s", l->diff_id,
                     c.cw && cn_chunked_error(c.cw)[0] ? cn_chunked_error(c.cw) : strerror(-cr));
  }
  cn_chunked_free(c.cw);
  if (r == 0) {
    cairn_id hex;
    cn_sha256_final_hex(out.md, hex);
    snprintf(b->digest, sizeof(b->digest), "sha256:%s", hex);
    b->size = out.size;
  }
  EVP_MD_CTX_free(out.md);
  return r;
}

/* ---- the registry -------------------------------------------------------- */

static char *url_join(registry *rg, const char *location, const char *digest) {
  char *u = NULL;
  const char *sep = strchr(location, '?') ? "&" : "?";
  int n = location[0] == '/' ? asprintf(&u, "%s%s%sdigest=%s", rg->server, location, sep, digest)
                             : asprintf(&u, "%s%sdigest=%s", location, sep, digest);
  return n < 0 ? NULL : u;
}

/* 1 if the registry has the blob (HEAD), 0 if not. */
static int blob_present(registry *rg, const char *digest, cairn_store *st) {
  char url[4096];
  http_reply reply;
  snprintf(url, sizeof url, "%s/v2/%s/blobs/%s", rg->server, rg->repo, digest);
  registry_req q = {.method = "HEAD", .url = url, .body_fd = -1};
  int r = cn_registry_request(rg, &q, NULL, false, &reply, st);
  return r == 0 ? 1 : r == -ENOENT ? 0 : r;
}

/* Sends a blob unless the registry has it; *skipped says it had (or
 * mounted it from `from`, a repository of the same registry). */
static int blob_send(push_run *p, registry *rg, push_blob *b, const char *from, bool *skipped) {
  cairn_store *st = p->st;
  *skipped = false;
  int r = blob_present(rg, b->digest, st);
  if (r != 0) {
    *skipped = r > 0;
    return r < 0 ? r : 0;
  }
  char url[4096];
  http_reply reply;
  cairn_autofree char *from_esc = NULL;
  if (from) {
    CURL *h = curl_easy_init();
    char *e = h ? curl_easy_escape(h, from, 0) : NULL;
    from_esc = e ? strdup(e) : NULL;
    curl_free(e);
    if (h) curl_easy_cleanup(h);
  }
  /* An upload session whose PUT failed (its retries included: after a
   * transfer cut midway the registry holds part of the body, and a PUT
   * again to the same session fails its digest) is dropped, and the blob
   * sent again in a new one, up to PUSH_SESSIONS times. */
  for (unsigned session = 0;; session++) {
    if (from_esc && session == 0)
      snprintf(url, sizeof url, "%s/v2/%s/blobs/uploads/?mount=%s&from=%s", rg->server, rg->repo,
               b->digest, from_esc);
    else
      snprintf(url, sizeof url, "%s/v2/%s/blobs/uploads/", rg->server, rg->repo);
    registry_req post = {.method = "POST", .url = url, .body_fd = -1};
    if ((r = cn_registry_request(rg, &post, NULL, false, &reply, st)) < 0) return r;
    if (reply.status == 201 && from_esc && session == 0) {
      *skipped = true; /* mounted */
      return 0;
    }
    if ((r = kept_verify(p, b)) < 0) return r; /* the bytes are about to be read */
    if (!reply.location[0])
      return cairn_fail(st, -EIO, "POST %s: HTTP %ld without a Location", url, reply.status);
    cairn_autofree char *put_url = url_join(rg, reply.location, b->digest);
    if (!put_url) return cairn_fail(st, -ENOMEM, "out of memory");
    atomic_store(&p->sent, 0);
    registry_req put = {.method = "PUT",
                        .url = put_url,
                        .content_type = "application/octet-stream",
                        .body_fd = b->fd,
                        .body_len = b->size,
                        .body_mem = b->mem,
                        .progress = &p->sent};
    r = cn_registry_request(rg, &put, NULL, false, &reply, st);
    if (r != -EIO || session + 1 >= PUSH_SESSIONS) return r;
    cn_pull_log(&rg->base, "%s; sending %s again in a new upload session (%u/%u)", cairn_errmsg(st),
                b->digest, session + 1, PUSH_SESSIONS - 1);
  }
}

static int manifest_send(registry *rg, const char *tag, const char *body, cairn_store *st) {
  char url[4096];
  http_reply reply;
  snprintf(url, sizeof url, "%s/v2/%s/manifests/%s", rg->server, rg->repo, tag);
  registry_req put = {.method = "PUT",
                      .url = url,
                      .content_type = MT_MANIFEST,
                      .body_fd = -1,
                      .body_len = strlen(body),
                      .body_mem = body};
  return cn_registry_request(rg, &put, NULL, false, &reply, st);
}

/* ---- the layout ----------------------------------------------------------- */

/* Writes DIR/name whole (cairn_file_put_at: never through a name planted
 * in DIR, which another user may control). */
static int layout_file(cairn_store *st, int dirfd, const char *dir, const char *name, int src_fd,
                       const char *mem, uint64_t len) {
  int r = cairn_file_put_at(dirfd, name, src_fd, mem, len, 0644, 0);
  return r < 0 ? cairn_fail(st, r, "%s/%s: %s", dir, name, strerror(-r)) : 0;
}

typedef struct layout {
  char *dir;
  int fd, blobs_fd;
} layout;

static int layout_open(cairn_store *st, layout *l, const char *dir) {
  l->fd = l->blobs_fd = -1;
  /* DIR may be in another user's directory: resolved as such (a symlink
   * another user could have put on the way is refused), then made and
   * opened under its parent's fd, never through a symlink at DIR. */
  char real[PATH_MAX];
  int pfd = -1;
  int r = cairn_path_resolve(dir, real, sizeof(real), &pfd);
  if (r < 0) return cairn_fail(st, r, "%s: %s", dir, cairn_path_why(r));
  cairn_autoclose int parent = pfd;
  const char *slash = strrchr(real, '/'), *base = slash && slash[1] ? slash + 1 : ".";
  mkdirat(parent, base, 0755);
  if ((l->fd = openat(parent, base, O_DIRECTORY | O_NOFOLLOW | O_RDONLY | O_CLOEXEC)) < 0)
    return cairn_fail(st, -errno, "%s: %s", dir,
                      errno == ELOOP ? "a symlink, not a directory: refused" : strerror(errno));
  /* O_NOFOLLOW: a symlink planted as blobs or sha256 is refused, not
   * followed to a directory of its maker's choosing. */
  mkdirat(l->fd, "blobs", 0755);
  cairn_autoclose int b = openat(l->fd, "blobs", O_DIRECTORY | O_NOFOLLOW | O_RDONLY | O_CLOEXEC);
  if (b < 0) return cairn_fail(st, -errno, "%s/blobs: %s", dir, strerror(errno));
  mkdirat(b, "sha256", 0755);
  if ((l->blobs_fd = openat(b, "sha256", O_DIRECTORY | O_NOFOLLOW | O_RDONLY | O_CLOEXEC)) < 0)
    return cairn_fail(st, -errno, "%s/blobs/sha256: %s", dir, strerror(errno));
  static const char oci_layout[] = "{\"imageLayoutVersion\":\"1.0.0\"}";
  return layout_file(st, l->fd, dir, "oci-layout", -1, oci_layout, sizeof oci_layout - 1);
}

static int layout_blob(push_run *p, layout *l, push_blob *b, bool *skipped) {
  cairn_store *st = p->st;
  struct stat sb;
  *skipped = fstatat(l->blobs_fd, b->digest + 7, &sb, 0) == 0 && (uint64_t)sb.st_size == b->size;
  if (*skipped) return 0;
  int r = kept_verify(p, b);
  if (r < 0) return r;
  char dir[4200];
  snprintf(dir, sizeof dir, "%s/blobs/sha256", l->dir);
  return layout_file(st, l->blobs_fd, dir, b->digest + 7, b->fd, b->mem, b->size);
}

/* index.json with the manifest, replacing an entry of the same ref.name. */
static int layout_index(cairn_store *st, layout *l, const char *tag, const char *digest,
                        size_t size) {
  json_t *index = NULL;
  {
    cairn_autoclose int fd = openat(l->fd, "index.json", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) index = json_loadfd(fd, 0, NULL);
  }
  if (!json_is_object(index) || !json_is_array(json_object_get(index, "manifests"))) {
    json_decref(index);
    index = json_pack("{s:i, s:s, s:[]}", "schemaVersion", 2, "mediaType",
                      "application/vnd.oci.image.index.v1+json", "manifests");
  }
  json_t *ms = json_object_get(index, "manifests");
  for (size_t i = json_array_size(ms); i-- > 0;) {
    const char *name =
        json_string_value(json_object_get(json_object_get(json_array_get(ms, i), "annotations"),
                                          "org.opencontainers.image.ref.name"));
    if (name && strcmp(name, tag) == 0) json_array_remove(ms, i);
  }
  json_array_append_new(ms, json_pack("{s:s, s:s, s:I, s:{s:s}}", "mediaType", MT_MANIFEST,
                                      "digest", digest, "size", (json_int_t)size, "annotations",
                                      "org.opencontainers.image.ref.name", tag));
  char *body = json_dumps(index, JSON_COMPACT);
  json_decref(index);
  if (!body) return cairn_fail(st, -ENOMEM, "out of memory");
  int r = layout_file(st, l->fd, l->dir, "index.json", -1, body, strlen(body));
  free(body);
  return r;
}

/* ---- an archive ------------------------------------------------------------ */

/* An oci-archive or docker-archive: a tar written into an anonymous file
 * of STORE/tmp, put in place whole at the end (cairn_file_put_at). */
typedef struct tar_out {
  struct archive *a;
  int fd;
} tar_out;

static int tar_open(push_run *p, tar_out *t) {
  int r = tmp_file(p->st, &t->fd);
  if (r < 0) return r;
  if (!(t->a = archive_write_new())) return cairn_fail(p->st, -ENOMEM, "out of memory");
  if (archive_write_set_format_pax_restricted(t->a) != ARCHIVE_OK ||
      archive_write_open_fd(t->a, t->fd) != ARCHIVE_OK)
    return cairn_fail(p->st, -EIO, "writing the archive: %s", archive_error_string(t->a));
  return 0;
}

/* Adds b (its bytes: mem, or fd from offset 0) as name, mode 0644. */
static int tar_add(push_run *p, tar_out *t, const char *name, push_blob *b) {
  cairn_store *st = p->st;
  int r = kept_verify(p, b);
  if (r < 0) return r;
  struct archive_entry *e = archive_entry_new();
  if (!e) return cairn_fail(st, -ENOMEM, "out of memory");
  archive_entry_set_pathname(e, name);
  archive_entry_set_filetype(e, AE_IFREG);
  archive_entry_set_perm(e, 0644);
  archive_entry_set_size(e, (la_int64_t)b->size);
  int ar = archive_write_header(t->a, e);
  archive_entry_free(e);
  if (ar != ARCHIVE_OK) return cairn_fail(st, -EIO, "%s: %s", name, archive_error_string(t->a));
  if (b->mem) {
    if (archive_write_data(t->a, b->mem, b->size) != (la_ssize_t)b->size)
      return cairn_fail(st, -EIO, "%s: %s", name, archive_error_string(t->a));
    return 0;
  }
  char buf[1 << 16];
  uint64_t off = 0;
  while (off < b->size) {
    ssize_t n = pread(b->fd, buf, sizeof buf, (off_t)off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return cairn_fail(st, n < 0 ? -errno : -EIO, "%s: short read", name);
    if (archive_write_data(t->a, buf, (size_t)n) != n)
      return cairn_fail(st, -EIO, "%s: %s", name, archive_error_string(t->a));
    off += (uint64_t)n;
  }
  return 0;
}

/* Ends the tar and puts it at path: replacing a file there (oci-archive,
 * as podman) or failing if one is (noreplace: docker-archive, as podman,
 * which adds nothing to an existing archive); never through a symlink
 * planted as path. */
static int tar_finish(push_run *p, tar_out *t, const char *path, bool noreplace) {
  cairn_store *st = p->st;
  int ar = archive_write_close(t->a);
  archive_write_free(t->a);
  t->a = NULL;
  if (ar != ARCHIVE_OK) return cairn_fail(st, -EIO, "%s: writing the archive", path);
  struct stat sb;
  if (fstat(t->fd, &sb) < 0) return cairn_fail(st, -errno, "%s: %s", path, strerror(errno));
  const char *slash = strrchr(path, '/');
  cairn_autofree char *dir = slash ? strndup(path, (size_t)(slash - path + 1)) : strdup(".");
  const char *base = slash ? slash + 1 : path;
  if (!dir) return cairn_fail(st, -ENOMEM, "out of memory");
  if (!*base || strcmp(base, ".") == 0 || strcmp(base, "..") == 0)
    return cairn_fail(st, -EINVAL, "%s: not a file name", path);
  cairn_autoclose int dfd = open(dir, O_DIRECTORY | O_RDONLY | O_CLOEXEC);
  if (dfd < 0) return cairn_fail(st, -errno, "%s: %s", dir, strerror(errno));
  int r = cairn_file_put_at(dfd, base, t->fd, NULL, (uint64_t)sb.st_size, 0644,
                            noreplace ? CAIRN_PUT_NOREPLACE : 0);
  if (r == -EEXIST)
    return cairn_fail(st, r, "%s exists (a docker-archive is written whole, never added to)", path);
  return r < 0 ? cairn_fail(st, r, "%s: %s", path, strerror(-r)) : 0;
}

static void tar_close(tar_out *t) {
  if (t->a) archive_write_free(t->a);
  if (t->fd >= 0) close(t->fd);
}

/* oci-archive's index.json: the one manifest, annotated with the tag. */
static char *index_build(const char *tag, const char *digest, size_t size) {
  json_t *index = json_pack("{s:i, s:s, s:[{s:s, s:s, s:I, s:{s:s}}]}", "schemaVersion", 2,
                            "mediaType", "application/vnd.oci.image.index.v1+json", "manifests",
                            "mediaType", MT_MANIFEST, "digest", digest, "size", (json_int_t)size,
                            "annotations", "org.opencontainers.image.ref.name", tag);
  char *s = index ? json_dumps(index, JSON_COMPACT) : NULL;
  json_decref(index);
  return s;
}

/* docker-archive's manifest.json: the config, the tag (if any) and the
 * layers, bottom first, each its uncompressed tar named HEX.tar. */
static char *docker_manifest(const char *id, const char *tag, push_blob *blobs, size_t n) {
  json_t *layers = json_array(), *tags = json_array();
  char name[CAIRN_DIGEST_LEN + 8];
  for (size_t i = 0; i < n; i++) {
    snprintf(name, sizeof name, "%s.tar", blobs[i].digest + 7);
    json_array_append_new(layers, json_string(name));
  }
  if (tag) json_array_append_new(tags, json_string(tag));
  snprintf(name, sizeof name, "%s.json", id);
  json_t *m = json_pack("[{s:s, s:o, s:o}]", "Config", name, "RepoTags", tags, "Layers", layers);
  char *s = m ? json_dumps(m, JSON_COMPACT) : NULL;
  json_decref(m);
  return s;
}

/* ---- the push -------------------------------------------------------------- */

typedef struct image_view {
  char *config;
  char **layers;
  uint64_t *sizes;
  size_t n;
  char **names;
  size_t n_names;
} image_view;

/* The name an archive records when DEST gives none: IMAGE's own full name
 * (localhost/app:1), as podman save records it, if IMAGE was given by one
 * of its names; else NULL (by id: a docker-archive has no RepoTags, an
 * oci-archive's ref.name is "latest"). */
static const char *archive_name(const char *ref, const image_view *v, char *buf, size_t len) {
  if (cairn_name_normalize(ref, buf, len) < 0 || strchr(buf, '@')) return NULL;
  for (size_t i = 0; i < v->n_names; i++)
    if (strcmp(v->names[i], buf) == 0) return buf;
  return NULL;
}

static int inspect_cb(const struct cairn_image_info *info, void *arg) {
  image_view *v = arg;
  v->config = strdup(info->config);
  v->layers = calloc(info->n_layers + 1, sizeof *v->layers);
  v->sizes = calloc(info->n_layers + 1, sizeof *v->sizes);
  v->names = calloc(info->image.n_names + 1, sizeof *v->names);
  if (!v->config || !v->layers || !v->sizes || !v->names) return -ENOMEM;
  for (size_t i = 0; i < info->n_layers; i++) {
    if (!(v->layers[i] = strdup(info->layers[i].id))) return -ENOMEM;
    v->sizes[i] = info->layers[i].size;
    v->n = i + 1;
  }
  for (size_t i = 0; i < info->image.n_names; i++) {
    if (!(v->names[i] = strdup(info->image.names[i]))) return -ENOMEM;
    v->n_names = i + 1;
  }
  return 0;
}

static void image_view_free(image_view *v) {
  free(v->config);
  cn_strv_free(v->layers, v->n);
  cn_strv_free(v->names, v->n_names);
  free(v->sizes);
}

/* A repository of host the image was pulled from (one of its names is
 * HOST/REPO:TAG), other than repo: where a registry may mount its blobs
 * from; NULL if none. */
static char *mount_source(const image_view *v, const char *host, const char *repo) {
  size_t hl = strlen(host);
  for (size_t i = 0; i < v->n_names; i++) {
    const char *n = v->names[i];
    if (strncmp(n, host, hl) != 0 || n[hl] != '/') continue;
    const char *r = n + hl + 1;
    const char *colon = strrchr(r, ':');
    size_t rl = colon ? (size_t)(colon - r) : strlen(r);
    if (rl == strlen(repo) && strncmp(r, repo, rl) == 0) continue;
    return strndup(r, rl);
  }
  return NULL;
}

static char *manifest_build(const char *config_digest, size_t config_size, push_blob *blobs,
                            size_t n) {
  json_t *layers = json_array();
  for (size_t i = 0; i < n; i++) {
    json_t *l = json_pack("{s:s, s:s, s:I}", "mediaType", blobs[i].media_type, "digest",
                          blobs[i].digest, "size", (json_int_t)blobs[i].size);
    if (blobs[i].chunked)
      json_object_set_new(l, "annotations", cn_chunked_annotations(&blobs[i].res));
    json_array_append_new(layers, l);
  }
  json_t *m = json_pack("{s:i, s:s, s:{s:s, s:s, s:I}, s:o}", "schemaVersion", 2, "mediaType",
                        MT_MANIFEST, "config", "mediaType", MT_CONFIG, "digest", config_digest,
                        "size", (json_int_t)config_size, "layers", layers);
  char *s = m ? json_dumps(m, JSON_COMPACT) : NULL;
  json_decref(m);
  return s;
}

/* The config with rootfs.diff_ids those of the layers written (eStargz),
 * in v->config; id its digest. */
static int config_rediff(cairn_store *st, image_view *v, const push_blob *blobs, cairn_id id) {
  json_error_t err;
  json_t *c = json_loads(v->config, 0, &err);
  json_t *ids = json_object_get(json_object_get(c, "rootfs"), "diff_ids");
  if (!json_is_array(ids) || json_array_size(ids) != v->n) {
    json_decref(c);
    return cairn_fail(st, -EBADMSG, "the image's config has no diff_ids for its %zu layers", v->n);
  }
  for (size_t i = 0; i < v->n; i++)
    if (blobs[i].chunked) json_array_set_new(ids, i, json_string(blobs[i].res.diff_id));
  char *s = json_dumps(c, JSON_COMPACT);
  json_decref(c);
  if (!s) return cairn_fail(st, -ENOMEM, "out of memory");
  free(v->config);
  v->config = s;
  char d[CAIRN_DIGEST_LEN + 1];
  cn_pull_sha256(s, strlen(s), d);
  snprintf(id, sizeof(cairn_id), "%s", d + 7);
  return 0;
}

enum dest_kind { DEST_REGISTRY, DEST_LAYOUT, DEST_OCI_ARCHIVE, DEST_DOCKER_ARCHIVE };

/* Splits DEST into the registry spec (HOST[:PORT]/REPO), layout dir or
 * archive file, and the tag (NULL: an archive with none, archive_name). */
static int dest_parse(const char *dest, enum dest_kind *kind, char **where, char **tag,
                      cairn_store *st) {
  *where = *tag = NULL;
  const char *rest;
  if (strncmp(dest, "docker-archive:", 15) == 0 || strncmp(dest, "oci-archive:", 12) == 0) {
    bool docker = dest[0] == 'd';
    *kind = docker ? DEST_DOCKER_ARCHIVE : DEST_OCI_ARCHIVE;
    rest = dest + (docker ? 15 : 12);
    const char *colon = strchr(rest, ':');
    *where = colon ? strndup(rest, (size_t)(colon - rest)) : strdup(rest);
    if (!*where) return cairn_fail(st, -ENOMEM, "out of memory");
    if (colon && !colon[1])
      return cairn_fail(st, -EINVAL, "%s: empty file name or reference", dest);
    if (colon && !(*tag = strdup(colon + 1))) return cairn_fail(st, -ENOMEM, "out of memory");
    if (!**where) return cairn_fail(st, -EINVAL, "%s: empty file name or reference", dest);
    return 0;
  }
  if (strncmp(dest, "docker://", 9) == 0) {
    *kind = DEST_REGISTRY;
    rest = dest + 9;
    const char *slash = strchr(rest, '/');
    const char *colon = strrchr(slash ? slash : rest, ':');
    if (!slash || slash == rest || !slash[1] || strchr(rest, '@'))
      return cairn_fail(st, -EINVAL, "%s: expected docker://HOST[:PORT]/REPO[:TAG]", dest);
    *where = colon ? strndup(rest, (size_t)(colon - rest)) : strdup(rest);
    *tag = strdup(colon ? colon + 1 : "latest");
  } else if (strncmp(dest, "oci:", 4) == 0) {
    *kind = DEST_LAYOUT;
    rest = dest + 4;
    const char *colon = strchr(rest, ':');
    *where = colon ? strndup(rest, (size_t)(colon - rest)) : strdup(rest);
    *tag = strdup(colon ? colon + 1 : "latest");
  } else {
    return cairn_fail(st, -EINVAL,
                      "%s: expected docker://HOST[:PORT]/REPO[:TAG], oci:DIR[:TAG], "
                      "oci-archive:FILE[:TAG] or docker-archive:FILE[:NAME:TAG]",
                      dest);
  }
  if (!*where || !*tag) return cairn_fail(st, -ENOMEM, "out of memory");
  if (!**where || !**tag)
    return cairn_fail(st, -EINVAL, "%s: empty repository, directory or tag", dest);
  return 0;
}

/* ---- destinations: a table of the four kinds, as pull's sources ---- */

/* A push under way: its image, its blobs, its destination. */
typedef struct push_job {
  cairn_store *st;
  const char *ref, *dest;
  enum dest_kind kind;
  const struct dest_ops *ops;
  cairn_push_opts eff; /* the options, as the destination's kind takes them */
  char *where, *tag;
  push_run run;
  pull_source logger;
  image_view v;
  push_blob *blobs;
  char (*mts)[128];
  cairn_pinset *ps;
  cairn_id id;
  tar_out ta;
  layout lo;
  registry *rg;
  char *from; /* a registry's repository to mount blobs from */
} push_job;

/* What each kind of destination does: opens it, writes a blob (name: its
 * name in a layout or archive), and writes the manifest (mb, the OCI one;
 * manifest its body), setting mb->digest to what the push prints. */
typedef struct dest_ops {
  const char *layer_name, *config_name; /* formats of the digest's hex */
  int (*open)(push_job *j);
  int (*blob)(push_job *j, const char *name, push_blob *b, const char *from, bool *skipped);
  int (*manifest)(push_job *j, const char *manifest, push_blob *mb);
} dest_ops;

static int registry_open_dest(push_job *j) {
  int r = cn_registry_open(j->where, &j->eff.net, true, &j->rg, j->st);
  if (r == 0) j->from = mount_source(&j->v, j->rg->host, j->rg->repo);
  return r;
}

static int registry_blob(push_job *j, const char *name, push_blob *b, const char *from,
                         bool *skipped) {
  (void)name;
  return blob_send(&j->run, j->rg, b, from, skipped);
}

static int registry_manifest(push_job *j, const char *manifest, push_blob *mb) {
  (void)mb;
  return manifest_send(j->rg, j->tag, manifest, j->st);
}

static int layout_open_dest(push_job *j) {
  j->lo.dir = j->where;
  return layout_open(j->st, &j->lo, j->where);
}

static int layout_blob_dest(push_job *j, const char *name, push_blob *b, const char *from,
                            bool *skipped) {
  (void)name, (void)from;
  return layout_blob(&j->run, &j->lo, b, skipped);
}

static int layout_manifest(push_job *j, const char *manifest, push_blob *mb) {
  (void)manifest;
  bool skipped;
  int r = layout_blob(&j->run, &j->lo, mb, &skipped);
  return r == 0 ? layout_index(j->st, &j->lo, j->tag, mb->digest, mb->size) : r;
}

static int archive_open(push_job *j) {
  int r = tar_open(&j->run, &j->ta);
  if (r < 0 || j->kind != DEST_OCI_ARCHIVE) return r;
  static const char oci_layout[] = "{\"imageLayoutVersion\":\"1.0.0\"}";
  push_blob lb = {.fd = -1, .mem = oci_layout, .size = sizeof oci_layout - 1};
  return tar_add(&j->run, &j->ta, "oci-layout", &lb);
}

static int archive_blob(push_job *j, const char *name, push_blob *b, const char *from,
                        bool *skipped) {
  (void)from, (void)skipped;
  return tar_add(&j->run, &j->ta, name, b);
}

/* The name an archive records: DEST's, else the image's (archive_name). */
static const char *job_archive_name(const push_job *j, char *buf, size_t len) {
  return j->tag ? j->tag : archive_name(j->ref, &j->v, buf, len);
}

static int oci_archive_manifest(push_job *j, const char *manifest, push_blob *mb) {
  (void)manifest;
  char mname[CAIRN_DIGEST_LEN + 32], named[1024];
  snprintf(mname, sizeof mname, "blobs/sha256/%.64s", mb->digest + 7);
  const char *aname = job_archive_name(j, named, sizeof named);
  cairn_autofree char *idx = index_build(aname ? aname : "latest", mb->digest, mb->size);
  push_blob ib = {.fd = -1, .mem = idx, .size = idx ? strlen(idx) : 0};
  int r = tar_add(&j->run, &j->ta, mname, mb);
  if (r == 0)
    r = idx ? tar_add(&j->run, &j->ta, "index.json", &ib)
            : cairn_fail(j->st, -ENOMEM, "out of memory");
  return r == 0 ? tar_finish(&j->run, &j->ta, j->where, false) : r;
}

static int docker_archive_manifest(push_job *j, const char *manifest, push_blob *mb) {
  (void)manifest;
  char named[1024];
  const char *aname = job_archive_name(j, named, sizeof named);
  cairn_autofree char *dm = docker_manifest(j->id, aname, j->blobs, j->v.n);
  push_blob db = {.fd = -1, .mem = dm, .size = dm ? strlen(dm) : 0};
  int r = dm ? tar_add(&j->run, &j->ta, "manifest.json", &db)
             : cairn_fail(j->st, -ENOMEM, "out of memory");
  if (r == 0) r = tar_finish(&j->run, &j->ta, j->where, true);
  /* no registry manifest: the digest printed is the image id's */
  snprintf(mb->digest, sizeof mb->digest, "sha256:%s", j->id);
  return r;
}

static const dest_ops DEST_OPS[] = {
    [DEST_REGISTRY] = {"blobs/sha256/%s", "blobs/sha256/%s", registry_open_dest, registry_blob,
                       registry_manifest},
    [DEST_LAYOUT] = {"blobs/sha256/%s", "blobs/sha256/%s", layout_open_dest, layout_blob_dest,
                     layout_manifest},
    [DEST_OCI_ARCHIVE] = {"blobs/sha256/%s", "blobs/sha256/%s", archive_open, archive_blob,
                          oci_archive_manifest},
    [DEST_DOCKER_ARCHIVE] = {"%s.tar", "%s.json", archive_open, archive_blob,
                             docker_archive_manifest},
};

/* The options as the destination takes them: a --format writes every
 * layer anew; a docker-archive's layers are uncompressed. */
static int job_options(push_job *j) {
  const cairn_push_opts *o = j->run.o;
  if (j->kind == DEST_DOCKER_ARCHIVE && o->format != CAIRN_PUSH_FORMAT_PLAIN)
    return cairn_fail(j->st, -EINVAL, "%s: a docker-archive's layers are plain tars (no --format)",
                      j->dest);
  if (o->format != CAIRN_PUSH_FORMAT_PLAIN) {
    /* every layer written anew in the format (a kept blob has no TOC) */
    j->eff.kept = CAIRN_PUSH_KEPT_NONE;
    j->eff.compress =
        o->format == CAIRN_PUSH_FORMAT_ESTARGZ ? CAIRN_COMPRESS_GZIP : CAIRN_COMPRESS_ZSTD;
  }
  if (j->kind == DEST_DOCKER_ARCHIVE) {
    /* docker load reads uncompressed layers: a kept blob only if it is one */
    j->eff.compress = CAIRN_COMPRESS_NONE;
    if (j->eff.kept == CAIRN_PUSH_KEPT_ANY) j->eff.kept = CAIRN_PUSH_KEPT_SAME;
  }
  return 0;
}

/* Pins the image ref, fills it if a lazy pull left files to fetch, and
 * reads it: its layers, each a kept blob or one its tar record rebuilds. */
static int job_image(push_job *j, const char *ref) {
  cairn_store *st = j->st;
  const cairn_push_opts *o = j->run.o;
  cairn_autofree char *purpose = NULL;
  int r = cairn_image_resolve(st, ref, j->id);
  if (r < 0) return r;
  if (asprintf(&purpose, "push %s", j->dest) < 0 || !(j->ps = cairn_pinset_new(purpose, true)))
    return cairn_fail(st, -ENOMEM, "out of memory");
  /* Pin, then read: the image as it is once nothing can remove it. */
  if ((r = cairn_pin_image(st, j->ps, j->id)) < 0) return r;
  if ((r = cairn_fill_lazy(st, j->id, o->net.log, o->net.arg)) < 0) return r; /* a lazy pull's */
  /* the files a recorded run read first go first (cairn mount --record-access) */
  if (o->format != CAIRN_PUSH_FORMAT_PLAIN &&
      (r = cn_access_list_read(st, j->id, &j->run.access, &j->run.n_access)) < 0)
    return r;
  if ((r = cairn_inspect(st, j->id, inspect_cb, &j->v)) < 0)
    return r == -ENOMEM ? cairn_fail(st, r, "out of memory") : r;
  size_t n = j->v.n;
  if (!(j->run.layers = calloc(n + 1, sizeof *j->run.layers)) ||
      !(j->blobs = calloc(n + 1, sizeof *j->blobs)) || !(j->mts = calloc(n + 1, sizeof *j->mts)))
    return cairn_fail(st, -ENOMEM, "out of memory");
  j->run.n = n;
  /* The blobs a pull kept go as they are; the other layers are rebuilt
   * from their tar records, which they must have. */
  for (size_t i = 0; i < n; i++) {
    push_blob *b = &j->blobs[i];
    b->fd = -1;
    j->run.layers[i] =
        (cairn_pull_layer){.digest = b->digest, .diff_id = j->v.layers[i], .size = j->v.sizes[i]};
    if ((r = kept_take(&j->run, j->v.layers[i], b, j->mts[i])) < 0) return r;
    if (r == 1) {
      b->media_type = j->mts[i];
      continue;
    }
    int have = cn_layer_tar_recorded(st, j->v.layers[i]);
    if (have < 0) return have;
    if (!have)
      return cairn_fail(st, -ENODATA,
                        "layer sha256:%.12s was stored without its tar headers (imported before"
                        " cairn kept them), so its exact tar cannot be rebuilt: import or pull it"
                        " again",
                        j->v.layers[i]);
  }
  return 0;
}

/* Writes layer i (once: a layer the image has twice is skipped), its blob
 * made first unless kept; a kept blob found damaged is made anew once. */
static int job_layer(push_job *j, size_t i) {
  push_blob *b = &j->blobs[i];
  bool seen = false, skipped = false;
  for (size_t k = 0; k < i && !seen; k++) seen = strcmp(j->v.layers[k], j->v.layers[i]) == 0;
  cairn_pull_layer *l = &j->run.layers[i];
  int r = 0;
  for (int attempt = 0;; attempt++) {
    if (!b->kept) {
      l->size = j->v.sizes[i]; /* the tar's, while it is compressed */
      if ((r = layer_prepare(&j->run, i, b)) < 0) return r;
      b->media_type = layer_media_type(j->eff.compress);
    }
    l->size = b->size;
    l->state = CAIRN_PULL_FETCHING;
    l->fetched = 0;
    j->run.current = i;
    run_progress(&j->run, true);
    char name[CAIRN_DIGEST_LEN + 32];
    snprintf(name, sizeof name, j->ops->layer_name, b->digest + 7);
    if (seen)
      skipped = true;
    else
      r = j->ops->blob(j, name, b, j->from, &skipped);
    if (r == -EBADMSG && b->kept && !b->verified && attempt == 0) {
      /* a kept blob damaged since its pull: the layer is compressed anew */
      cn_pull_log(&j->logger, "%s; compressing layer %.12s anew", cairn_errmsg(j->st),
                  j->v.layers[i]);
      close(b->fd);
      *b = (push_blob){.fd = -1};
      continue;
    }
    break;
  }
  if (r < 0) return cn_fail_context(j->st, r, "layer %.12s", j->v.layers[i]), r;
  l->state = skipped ? CAIRN_PULL_REUSED : CAIRN_PULL_DONE;
  run_progress(&j->run, true);
  close(b->fd); /* its digest and size are all the manifest needs */
  b->fd = -1;
  return 0;
}

/* The config (eStargz: a new image's, naming the new diff_ids), then the
 * manifest; the digest the push prints to digest_out. */
static int job_config_manifest(push_job *j, char *digest_out) {
  cairn_store *st = j->st;
  int r;
  if (j->run.o->format == CAIRN_PUSH_FORMAT_ESTARGZ) {
    /* eStargz's TOC is an entry of each tar: the config names the new
     * diff_ids, and is a new image's */
    if ((r = config_rediff(st, &j->v, j->blobs, j->id)) < 0) return r;
    cn_pull_log(&j->logger,
                "eStargz: the layers' diff_ids include their TOC; the image pushed is %.12s",
                j->id);
  }
  push_blob config = {.fd = -1, .mem = j->v.config, .size = strlen(j->v.config)};
  snprintf(config.digest, sizeof config.digest, "sha256:%s", j->id);
  bool skipped;
  char cname[CAIRN_DIGEST_LEN + 32];
  snprintf(cname, sizeof cname, j->ops->config_name, j->id);
  if ((r = j->ops->blob(j, cname, &config, NULL, &skipped)) < 0)
    return cn_fail_context(st, r, "config"), r;
  cairn_autofree char *manifest = manifest_build(config.digest, config.size, j->blobs, j->v.n);
  if (!manifest) return cairn_fail(st, -ENOMEM, "out of memory");
  push_blob mb = {.fd = -1, .mem = manifest, .size = strlen(manifest)};
  cn_pull_sha256(manifest, mb.size, mb.digest);
  if ((r = j->ops->manifest(j, manifest, &mb)) < 0) return cn_fail_context(st, r, "manifest"), r;
  snprintf(digest_out, CAIRN_DIGEST_LEN + 1, "%s", mb.digest);
  return 0;
}

static void job_free(push_job *j) {
  if (j->blobs)
    for (size_t i = 0; i < j->v.n; i++)
      if (j->blobs[i].fd >= 0) close(j->blobs[i].fd);
  free(j->blobs);
  free(j->mts);
  free(j->run.layers);
  cn_strv_free(j->run.access, j->run.n_access);
  tar_close(&j->ta);
  if (j->lo.fd >= 0) close(j->lo.fd);
  if (j->lo.blobs_fd >= 0) close(j->lo.blobs_fd);
  if (j->rg) j->rg->base.ops->free(&j->rg->base);
  if (j->ps) cairn_pinset_release(j->st, j->ps); /* only now: everything is sent */
  image_view_free(&j->v);
  free(j->where);
  free(j->tag);
  free(j->from);
}

static int push_into(cairn_store *st, const char *ref, const char *dest,
                     const cairn_push_opts *opts, char *digest_out) {
  push_job j = {.st = st, .ref = ref, .dest = dest, .eff = *opts};
  j.ta = (tar_out){.fd = -1};
  j.lo = (layout){.fd = -1, .blobs_fd = -1};
  j.run = (push_run){.st = st, .o = &j.eff};
  j.logger = (pull_source){.opts = &j.eff.net};
  int r = dest_parse(dest, &j.kind, &j.where, &j.tag, st);
  if (r == 0) {
    j.ops = &DEST_OPS[j.kind];
    r = job_options(&j);
  }
  if (r == 0) r = job_image(&j, ref);
  if (r == 0) r = j.ops->open(&j);
  if (r == 0) run_progress(&j.run, true);
  for (size_t i = 0; r == 0 && i < j.v.n; i++) r = job_layer(&j, i);
  if (r == 0 && j.run.n_access)
    cn_pull_log(&j.logger, "the access list: %zu files of the layers' TOCs first (%zu recorded)",
                j.run.prefetched, j.run.n_access);
  if (r == 0) r = job_config_manifest(&j, digest_out);
  job_free(&j);
  return r;
}

/* As podman: a name's own registry, "docker://NAME" when its first
 * component is a host (has a '.' or ':', or is localhost). */
static int own_registry(const char *ref, char **dest, cairn_store *st) {
  const char *slash = strchr(ref, '/');
  size_t n = slash ? (size_t)(slash - ref) : 0;
  bool host = n && (memchr(ref, '.', n) || memchr(ref, ':', n) ||
                    (n == 9 && strncmp(ref, "localhost", 9) == 0));
  if (!host)
    return cairn_fail(st, -EINVAL,
                      "%s: no registry in the name (HOST[:PORT]/REPO[:TAG]); give a DEST", ref);
  return asprintf(dest, "docker://%s", ref) < 0 ? (*dest = NULL, -ENOMEM) : 0;
}

/* Whether dest names no transport ("127.0.0.1:5000/app:1"): what comes
 * before its first ':' is no transport's name, and it has no "://". */
static bool no_transport(const char *dest) {
  static const char *const transports[] = {
      "docker",        "oci", "oci-archive", "docker-archive", "dir", "containers-storage",
      "docker-daemon", "sif", "tarball",     "ostree"};
  const char *colon = strchr(dest, ':');
  if (strstr(dest, "://")) return false;
  if (!colon) return true;
  for (size_t i = 0; i < sizeof transports / sizeof *transports; i++)
    if (strlen(transports[i]) == (size_t)(colon - dest) &&
        strncmp(dest, transports[i], (size_t)(colon - dest)) == 0)
      return false;
  return true;
}

int cairn_push(cairn_store *st, const char *ref, const char *dest, const cairn_push_opts *opts,
               char digest_out[CAIRN_DIGEST_BUF]) {
  cairn_push_opts o = opts ? *opts : (cairn_push_opts){0};
  cairn_fail(st, 0, "%s", ""); /* no reason of an earlier call survives */
  digest_out[0] = '\0';
  cairn_autofree char *own = NULL, *docker = NULL;
  int r = 0;
  if (!dest && (r = own_registry(ref, &own, st)) == 0) dest = own;
  if (r == 0 && no_transport(dest)) {
    /* as pull, and podman: no transport is docker:// */
    if (asprintf(&docker, "docker://%s", dest) < 0) docker = NULL, r = -ENOMEM;
    dest = docker;
  }
  if (r == 0) r = push_into(st, ref, dest, &o, digest_out);
  if (r < 0 && !cairn_errmsg(st)[0]) cairn_fail(st, r, "%s", strerror(-r));
  return r;
}
