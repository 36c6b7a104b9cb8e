/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pull_blob.c — what every file of the pull uses: descriptors, verified blob
 * writing, the log.
 *
 * Every byte a pull takes from a source goes through a blob_sink: it is
 * hashed as it is written, the descriptor's size is a hard limit (a server
 * that sends more is cut off at the first byte over), and finish compares
 * size and sha256 before anything may be ingested.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "libcairn_remote.h"

bool cn_pull_digest_valid(const char *digest) {
  return digest && strncmp(digest, "sha256:", 7) == 0 && cairn_id_valid(digest + 7);
}

int cn_pull_desc_parse(json_t *obj, pull_desc *d, cairn_store *st) {
  memset(d, 0, sizeof *d);
  const char *digest = json_string_value(json_object_get(obj, "digest"));
  json_t *size = json_object_get(obj, "size");
  const char *mt = json_string_value(json_object_get(obj, "mediaType"));
  if (!cn_pull_digest_valid(digest))
    return cairn_fail(st, -EBADMSG, "descriptor has no valid sha256 digest (%s)",
                      digest ? digest : "none");
  if (!json_is_integer(size) || json_integer_value(size) < 0)
    return cairn_fail(st, -EBADMSG, "descriptor %s has no valid size", digest);
  memcpy(d->digest, digest, CAIRN_DIGEST_LEN + 1);
  d->size = (uint64_t)json_integer_value(size);
  json_t *ann = json_object_get(obj, "annotations");
  d->annotations = json_is_object(ann) ? json_incref(ann) : NULL;
  d->media_type = strdup(mt ? mt : "");
  return d->media_type ? 0 : cairn_fail(st, -ENOMEM, "out of memory");
}

void cn_pull_desc_clear(pull_desc *d) {
  free(d->media_type);
  d->media_type = NULL;
  json_decref(d->annotations);
  d->annotations = NULL;
}

static void hex_digest(const unsigned char *md, char out[CAIRN_DIGEST_LEN + 1]) {
  memcpy(out, "sha256:", 7);
  cn_sha256_hex(md, out + 7);
}

void cn_pull_sha256(const void *buf, size_t len, char out[CAIRN_DIGEST_LEN + 1]) {
  unsigned char md[32];
  unsigned int n = 0;
  EVP_Digest(buf, len, md, &n, EVP_sha256(), NULL);
  hex_digest(md, out);
}

int cn_blob_sink_init(blob_sink *s, int fd, uint64_t limit, _Atomic uint64_t *progress) {
  s->fd = fd;
  s->limit = limit;
  s->written = 0;
  s->progress = progress;
  s->mem = NULL;
  s->cancel = NULL;
  s->md = EVP_MD_CTX_new();
  if (!s->md || EVP_DigestInit_ex(s->md, EVP_sha256(), NULL) != 1) return -ENOMEM;
  if (progress) atomic_store(progress, 0);
  return 0;
}

int cn_blob_sink_reset(blob_sink *s) {
  if (s->fd >= 0 && (ftruncate(s->fd, 0) < 0 || lseek(s->fd, 0, SEEK_SET) < 0)) return -errno;
  s->written = 0;
  if (s->progress) atomic_store(s->progress, 0);
  return EVP_DigestInit_ex(s->md, EVP_sha256(), NULL) == 1 ? 0 : -ENOMEM;
}

int cn_blob_sink_write(blob_sink *s, const void *buf, size_t len) {
  if (s->cancel && atomic_load(s->cancel)) return -ECANCELED;
  if (len > s->limit - s->written) return -EFBIG;
  EVP_DigestUpdate(s->md, buf, len);
  if (s->fd < 0) {
    char *m = realloc(s->mem, s->written + len + 1);
    if (!m) return -ENOMEM;
    s->mem = m;
    memcpy(m + s->written, buf, len);
    s->written += len;
    m[s->written] = '\0';
    len = 0;
  }
  for (const char *p = buf; len > 0;) {
    ssize_t n = write(s->fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -errno;
    p += n;
    len -= (size_t)n;
    s->written += (uint64_t)n;
  }
  if (s->progress) atomic_store(s->progress, s->written);
  return 0;
}

int cn_blob_sink_finish(blob_sink *s, const pull_desc *d, cairn_store *st) {
  unsigned char md[32];
  unsigned int n = 0;
  char got[CAIRN_DIGEST_LEN + 1];
  if (s->written != d->size)
    return cairn_fail(st, -EBADMSG, "blob %s: got %llu bytes, descriptor says %llu", d->digest,
                      (unsigned long long)s->written, (unsigned long long)d->size);
  EVP_DigestFinal_ex(s->md, md, &n);
  hex_digest(md, got);
  if (strcmp(got, d->digest) != 0)
    return cairn_fail(st, -EBADMSG, "blob %s: digest mismatch (content is %s)", d->digest, got);
  return 0;
}

void cn_blob_sink_free(blob_sink *s) {
  EVP_MD_CTX_free(s->md);
  s->md = NULL;
  free(s->mem);
  s->mem = NULL;
}

int cn_blob_copy_fd(int in, blob_sink *s, cairn_store *st) {
  char buf[1 << 16];
  for (;;) {
    ssize_t n = read(in, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return cairn_fail(st, -errno, "read: %s", strerror(errno));
    if (n == 0) return 0;
    int r = cn_blob_sink_write(s, buf, (size_t)n);
    if (r == -EFBIG)
      return cairn_fail(st, -EBADMSG, "blob is larger than its descriptor says (%llu bytes)",
                        (unsigned long long)s->limit);
    if (r < 0) return cairn_fail(st, r, "write: %s", strerror(-r));
  }
}

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

void cn_pull_log(pull_source *src, const char *fmt, ...) {
  if (!src->opts || !src->opts->log) return;
  char line[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  pthread_mutex_lock(&log_lock);
  src->opts->log(line, src->opts->arg);
  pthread_mutex_unlock(&log_lock);
}
