/* SPDX-License-Identifier: Apache-2.0 */
/*
 * toc_zstd_chunked.c — the table of contents of a zstd:chunked layer
 * (libcairn_toc.h), as containers/storage (podman, skopeo, buildah) writes it.
 *
 * A zstd:chunked blob is a zstd-compressed tar in which every file's data
 * starts a new zstd frame (large files in several, cut where a rolling
 * checksum says). After the files, skippable frames (magic 0x184D2A50,
 * LE32 length, data) hold the TOC, a zstd frame of JSON (toc.c reads its
 * entries), then, in later versions, the tar-split part (the tar's
 * headers, zstd-compressed JSON lines) and last a footer. The manifest's
 * layer annotations say where the TOC's zstd frame lies and its sha256:
 *   io.github.containers.zstd-chunked.manifest-position  OFF:LEN:ULEN:1
 *   io.github.containers.zstd-chunked.manifest-checksum  sha256:...
 *   io.github.containers.zstd-chunked.tarsplit-position  OFF:LEN:ULEN
 *   io.github.containers.zstd-chunked.tarsplit-checksum  sha256:...
 * (podman 4.3 writes the first two with the prefix "io.containers.").
 * The footer frame holds LE64 OFF, LEN, ULEN, TYPE [, the tar-split's OFF,
 * LEN, ULEN] and the magic "GnUlInUx"; it carries no checksum, so a lazy
 * pull takes the position from the manifest, whose digest it trusts.
 */
#include "libcairn_toc.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SKIPPABLE_MAGIC 0x184D2A50u
#define FOOTER_MAGIC "GnUlInUx"

/* Strict decimal fields "N:N[:N...]" into v[0..n): each in uint64. */
static int parse_fields(const char *s, uint64_t *v, int n) {
  for (int i = 0; i < n; i++) {
    if (*s < '0' || *s > '9') return -1;
    uint64_t x = 0;
    for (; *s >= '0' && *s <= '9'; s++) {
      if (x > (UINT64_MAX - 9) / 10) return -1;
      x = x * 10 + (uint64_t)(*s - '0');
    }
    v[i] = x;
    if (i + 1 < n && *s++ != ':') return -1;
  }
  return *s ? -1 : 0;
}

/* Checks a part [off, off + len) of a blob, uncompressed to ulen. */
static int check_part(const char *what, uint64_t off, uint64_t len, uint64_t ulen,
                      uint64_t blob_size, cairn_store *st) {
  if (len == 0 || off > blob_size || len > blob_size - off)
    return cairn_fail(st, -EBADMSG,
                      "zstd:chunked: the %s (%llu bytes at %llu) is not inside "
                      "the blob (%llu bytes)",
                      what, (unsigned long long)len, (unsigned long long)off,
                      (unsigned long long)blob_size);
  if (len > CN_TOC_JSON_MAX || ulen > CN_TOC_JSON_MAX)
    return cairn_fail(st, -EFBIG, "zstd:chunked: the %s is larger than %u bytes", what,
                      CN_TOC_JSON_MAX);
  return 0;
}

int cn_toc_zstd_position(const char *position, const char *checksum, const char *ts_position,
                         const char *ts_checksum, uint64_t blob_size, cn_toc_zstd_pos *pos,
                         cairn_store *st) {
  memset(pos, 0, sizeof *pos);
  if (!position) return cairn_fail(st, -ENOENT, "not a zstd:chunked layer (no TOC position)");
  uint64_t v[4];
  if (parse_fields(position, v, 4) < 0)
    return cairn_fail(st, -EBADMSG,
                      "zstd:chunked: TOC position \"%.80s\" is not "
                      "OFFSET:LENGTH:UNCOMPRESSED:TYPE",
                      position);
  if (v[3] != 1)
    return cairn_fail(st, -EBADMSG, "zstd:chunked: TOC type %llu (only 1 is known)",
                      (unsigned long long)v[3]);
  int r = check_part("TOC", v[0], v[1], v[2], blob_size, st);
  if (r < 0) return r;
  pos->off = v[0];
  pos->len = v[1];
  pos->ulen = v[2];
  if (checksum) {
    if (!cn_toc_digest_valid(checksum))
      return cairn_fail(st, -EBADMSG,
                        "zstd:chunked: TOC checksum \"%.80s\" is not a sha256 "
                        "digest",
                        checksum);
    memcpy(pos->digest, checksum, CAIRN_DIGEST_LEN + 1);
  }
  if (ts_position) {
    if (parse_fields(ts_position, v, 3) < 0)
      return cairn_fail(st, -EBADMSG,
                        "zstd:chunked: tar-split position \"%.80s\" is not "
                        "OFFSET:LENGTH:UNCOMPRESSED",
                        ts_position);
    if ((r = check_part("tar-split", v[0], v[1], v[2], blob_size, st)) < 0) return r;
    if (v[0] < pos->off + pos->len && pos->off < v[0] + v[1])
      return cairn_fail(st, -EBADMSG, "zstd:chunked: the tar-split overlaps the TOC");
    if (!ts_checksum || !cn_toc_digest_valid(ts_checksum))
      return cairn_fail(st, -EBADMSG, "zstd:chunked: the tar-split has no sha256 checksum");
    pos->ts_off = v[0];
    pos->ts_len = v[1];
    pos->ts_ulen = v[2];
    memcpy(pos->ts_digest, ts_checksum, CAIRN_DIGEST_LEN + 1);
  }
  return 0;
}

/* An annotation by its name after the prefix, the newer prefix first;
 * NULL when absent or not a string. */
static const char *annotation(json_t *a, const char *name) {
  static const char *const prefixes[] = {"io.github.containers.zstd-chunked.",
                                         "io.containers.zstd-chunked."};
  for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++) {
    char key[96];
    snprintf(key, sizeof key, "%s%s", prefixes[i], name);
    json_t *v = json_object_get(a, key);
    if (json_is_string(v)) return json_string_value(v);
  }
  return NULL;
}

int cn_toc_zstd_annotations(json_t *annotations, uint64_t blob_size, cn_toc_zstd_pos *pos,
                            cairn_store *st) {
  return cn_toc_zstd_position(annotation(annotations, "manifest-position"),
                              annotation(annotations, "manifest-checksum"),
                              annotation(annotations, "tarsplit-position"),
                              annotation(annotations, "tarsplit-checksum"), blob_size, pos, st);
}

static uint64_t le64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

static uint32_t le32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int cn_toc_zstd_footer(const void *tail, size_t len, uint64_t blob_size, cn_toc_zstd_pos *pos,
                       cairn_store *st) {
  memset(pos, 0, sizeof *pos);
  const unsigned char *t = tail;
  if (len > blob_size) return cairn_fail(st, -EINVAL, "zstd:chunked: more bytes than the blob has");
  static const size_t sizes[] = {CN_TOC_ZSTD_FOOTER_TARSPLIT, CN_TOC_ZSTD_FOOTER};
  for (size_t k = 0; k < 2; k++) {
    size_t fl = sizes[k];
    if (len < fl) continue;
    const unsigned char *f = t + len - fl;
    if (le32(f) != SKIPPABLE_MAGIC || le32(f + 4) != fl - 8 ||
        memcmp(t + len - 8, FOOTER_MAGIC, 8) != 0)
      continue;
    const unsigned char *d = f + 8;
    if (le64(d + 24) != 1)
      return cairn_fail(st, -EBADMSG, "zstd:chunked: TOC type %llu (only 1 is known)",
                        (unsigned long long)le64(d + 24));
    int r = check_part("TOC", le64(d), le64(d + 8), le64(d + 16), blob_size - fl, st);
    if (r < 0) return r;
    pos->off = le64(d);
    pos->len = le64(d + 8);
    pos->ulen = le64(d + 16);
    if (fl == CN_TOC_ZSTD_FOOTER_TARSPLIT && le64(d + 40) > 0) {
      if ((r = check_part("tar-split", le64(d + 32), le64(d + 40), le64(d + 48), blob_size - fl,
                          st)) < 0)
        return r;
      pos->ts_off = le64(d + 32);
      pos->ts_len = le64(d + 40);
      pos->ts_ulen = le64(d + 48);
    }
    return 0;
  }
  return cairn_fail(st, -EBADMSG, "zstd:chunked: no footer at the end of the blob");
}

/* Decompresses a part checked against its digest, to exactly ulen bytes. */
static int part(const char *what, const void *buf, size_t len, uint64_t plen, uint64_t ulen,
                const char *digest, unsigned char **out, size_t *out_len, cairn_store *st) {
  if (len != plen)
    return cairn_fail(st, -EBADMSG, "zstd:chunked: the %s is %llu bytes, %zu were read", what,
                      (unsigned long long)plen, len);
  if (ulen > CN_TOC_JSON_MAX)
    return cairn_fail(st, -EFBIG, "zstd:chunked: the %s is larger than %u bytes", what,
                      CN_TOC_JSON_MAX);
  if (digest && digest[0]) {
    char got[CAIRN_DIGEST_LEN + 1];
    cn_toc_sha256(buf, len, got);
    if (strcmp(got, digest) != 0)
      return cairn_fail(st, -EBADMSG, "zstd:chunked: the %s's digest is %s, the manifest says %s",
                        what, got, digest);
  }
  char name[48];
  snprintf(name, sizeof name, "zstd:chunked: the %s", what);
  int r = cn_toc_decompress(buf, len, (size_t)ulen, out, out_len, name, st);
  if (r < 0) return r;
  if (*out_len != ulen) {
    free(*out);
    *out = NULL;
    return cairn_fail(st, -EBADMSG, "zstd:chunked: the %s is %zu bytes uncompressed, not %llu",
                      what, *out_len, (unsigned long long)ulen);
  }
  return 0;
}

int cn_toc_zstd_chunked_parse(const void *buf, size_t len, const cn_toc_zstd_pos *pos,
                              uint64_t blob_size, cn_toc *toc, cairn_store *st) {
  memset(toc, 0, sizeof *toc);
  toc->format = CN_TOC_ZSTD_CHUNKED;
  toc->blob_size = blob_size;
  if (pos->off > blob_size || pos->len > blob_size - pos->off)
    return cairn_fail(st, -EBADMSG, "zstd:chunked: the TOC is not inside the blob");
  toc->toc_off = pos->off;
  toc->toc_len = pos->len;
  memcpy(toc->toc_digest, pos->digest, sizeof toc->toc_digest);
  /* The files' frames come first; the skippable frames after them. */
  toc->data_end = pos->off;
  if (pos->ts_len) {
    if (pos->ts_off < toc->data_end) toc->data_end = pos->ts_off;
    toc->tarsplit_off = pos->ts_off;
    toc->tarsplit_len = pos->ts_len;
    toc->tarsplit_ulen = pos->ts_ulen;
    memcpy(toc->tarsplit_digest, pos->ts_digest, sizeof toc->tarsplit_digest);
  }
  unsigned char *js;
  size_t js_len = 0;
  int r = part("TOC", buf, len, pos->len, pos->ulen, pos->digest, &js, &js_len, st);
  if (r < 0) return r;
  json_error_t jerr;
  json_t *root = json_loadb((const char *)js, js_len, JSON_REJECT_DUPLICATES, &jerr);
  free(js);
  if (!root) return cairn_fail(st, -EBADMSG, "zstd:chunked: the TOC is not JSON: %s", jerr.text);
  json_t *ver = json_object_get(root, "version");
  if (!json_is_integer(ver) || json_integer_value(ver) != 1)
    r = cairn_fail(st, -EBADMSG, "zstd:chunked: the TOC's version is not 1");
  else
    r = cn_toc_entries_parse(json_object_get(root, "entries"), toc, st);
  json_decref(root);
  if (r < 0) {
    cn_fail_context(st, r, "zstd:chunked");
    cn_toc_free(toc);
  }
  return r;
}

int cn_toc_zstd_tarsplit(const void *buf, size_t len, const cn_toc_zstd_pos *pos,
                         unsigned char **out, size_t *out_len, cairn_store *st) {
  *out = NULL;
  *out_len = 0;
  if (!pos->ts_len) return cairn_fail(st, -ENOENT, "zstd:chunked: the layer has no tar-split");
  return part("tar-split", buf, len, pos->ts_len, pos->ts_ulen, pos->ts_digest, out, out_len, st);
}
