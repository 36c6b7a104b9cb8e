/* SPDX-License-Identifier: Apache-2.0 */
/*
 * toc_estargz.c — the table of contents of an eStargz layer (libcairn_toc.h).
 *
 * An eStargz blob is a gzip-compressed tar in which every file's data
 * starts a new gzip member (large files are cut in chunks, each its own
 * member), so that one file can be fetched and decompressed alone. After
 * the last file, one more member holds a tar of one entry,
 * "stargz.index.json": the TOC (toc.c reads its entries). The blob ends
 * with a footer, an empty gzip member whose extra field says where the
 * TOC's member starts:
 *   10 bytes gzip header (flags: FEXTRA), XLEN = 26 (LE16), subfield
 *   'S' 'G' with LEN = 22 (LE16), then "%016x" of the offset and "STARGZ";
 *   an empty stored block and the gzip trailer: 51 bytes.
 * The legacy stargz footer (47 bytes) has XLEN = 22 and the 22 bytes with
 * no subfield header. The manifest may name the TOC JSON's sha256
 * ("containerd.io/snapshot/stargz/toc.digest"), which is checked here.
 * Files named ".prefetch.landmark" or ".no.prefetch.landmark" at the root
 * mark the end of the files to prefetch, or that none are.
 */
#include "libcairn_toc.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define TOC_NAME "stargz.index.json"

/* The offset in a footer of flen bytes, or -EBADMSG if it is not one. */
static int footer_at(const unsigned char *f, size_t flen, uint64_t *off) {
  static const unsigned char head[] = {0x1f, 0x8b, 0x08, 0x04};
  if (memcmp(f, head, sizeof head) != 0) return -EBADMSG;
  const unsigned char *x;
  if (flen == CN_TOC_ESTARGZ_FOOTER) {
    if (f[10] != 26 || f[11] != 0 || f[12] != 'S' || f[13] != 'G' || f[14] != 22 || f[15] != 0)
      return -EBADMSG;
    x = f + 16;
  } else {
    if (f[10] != 22 || f[11] != 0) return -EBADMSG;
    x = f + 12;
  }
  if (memcmp(x + 16, "STARGZ", 6) != 0) return -EBADMSG;
  uint64_t v = 0;
  for (int i = 0; i < 16; i++) {
    unsigned char c = x[i];
    unsigned d = c >= '0' && c <= '9'   ? (unsigned)(c - '0')
                 : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
                 : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10)
                                        : 16u;
    if (d == 16) return -EBADMSG;
    v = v << 4 | d;
  }
  *off = v;
  return 0;
}

/* The footer's size (51 or 47) and the TOC's offset. */
static int footer(const void *tail, size_t len, uint64_t blob_size, uint64_t *toc_off, size_t *flen,
                  cairn_store *st) {
  const unsigned char *t = tail;
  if (len > blob_size) return cairn_fail(st, -EINVAL, "eStargz: more bytes than the blob has");
  if (len >= CN_TOC_ESTARGZ_FOOTER &&
      footer_at(t + len - CN_TOC_ESTARGZ_FOOTER, CN_TOC_ESTARGZ_FOOTER, toc_off) == 0)
    *flen = CN_TOC_ESTARGZ_FOOTER;
  else if (len >= CN_TOC_ESTARGZ_FOOTER_LEGACY &&
           footer_at(t + len - CN_TOC_ESTARGZ_FOOTER_LEGACY, CN_TOC_ESTARGZ_FOOTER_LEGACY,
                     toc_off) == 0)
    *flen = CN_TOC_ESTARGZ_FOOTER_LEGACY;
  else
    return cairn_fail(st, -EBADMSG, "eStargz: no footer at the end of the blob");
  if (*toc_off >= blob_size - *flen)
    return cairn_fail(st, -EBADMSG,
                      "eStargz: the footer's TOC offset %llu is past the blob's "
                      "end (%llu bytes)",
                      (unsigned long long)*toc_off, (unsigned long long)blob_size);
  return 0;
}

int cn_toc_estargz_footer(const void *tail, size_t len, uint64_t blob_size, uint64_t *toc_off,
                          cairn_store *st) {
  size_t flen;
  return footer(tail, len, blob_size, toc_off, &flen, st);
}

/* The JSON of the TOC member's tar (its one entry, stargz.index.json);
 * self (may be NULL) gets that entry's tar header. */
static int toc_json(const void *buf, size_t len, unsigned char **out, size_t *out_len,
                    cn_toc_estargz_self *self, cairn_store *st) {
  *out = NULL;
  struct archive *a = archive_read_new();
  if (!a) return -ENOMEM;
  archive_read_support_filter_gzip(a);
  archive_read_support_format_tar(a);
  struct archive_entry *e;
  int r;
  if (archive_read_open_memory(a, buf, len) != ARCHIVE_OK ||
      archive_read_next_header(a, &e) != ARCHIVE_OK) {
    r = cairn_fail(st, -EBADMSG, "eStargz: the TOC is not a gzip-compressed tar: %s",
                   archive_error_string(a) ? archive_error_string(a) : "unknown format");
    goto out;
  }
  if (archive_filter_code(a, 0) != ARCHIVE_FILTER_GZIP) {
    r = cairn_fail(st, -EBADMSG, "eStargz: the TOC is not gzip-compressed");
    goto out;
  }
  const char *name = archive_entry_pathname(e);
  if (!name || strcmp(name, TOC_NAME) != 0 || archive_entry_filetype(e) != AE_IFREG) {
    r = cairn_fail(st, -EBADMSG, "eStargz: the TOC's tar holds no " TOC_NAME);
    goto out;
  }
  la_int64_t size = archive_entry_size(e);
  if (self) {
    la_int64_t uid = archive_entry_uid(e), gid = archive_entry_gid(e);
    if (uid < 0 || uid > UINT32_MAX || gid < 0 || gid > UINT32_MAX) {
      r = cairn_fail(st, -EBADMSG, "eStargz: the TOC's tar entry has an owner out of range");
      goto out;
    }
    *self = (cn_toc_estargz_self){.mode = (uint32_t)(archive_entry_perm(e) & 07777),
                                  .uid = (uint32_t)uid,
                                  .gid = (uint32_t)gid,
                                  .mtime_sec = archive_entry_mtime(e),
                                  .mtime_nsec = (uint32_t)archive_entry_mtime_nsec(e)};
  }
  if (size < 0 || (uint64_t)size > CN_TOC_JSON_MAX) {
    r = cairn_fail(st, -EFBIG, "eStargz: the TOC is larger than %u bytes", CN_TOC_JSON_MAX);
    goto out;
  }
  unsigned char *b = malloc((size_t)size + 1);
  if (!b) {
    r = -ENOMEM;
    goto out;
  }
  size_t n = 0;
  while (n < (size_t)size) {
    la_ssize_t got = archive_read_data(a, b + n, (size_t)size - n);
    if (got <= 0) {
      free(b);
      r = cairn_fail(st, -EBADMSG, "eStargz: the TOC is truncated or corrupt%s%s",
                     got < 0 ? ": " : "",
                     got < 0 && archive_error_string(a) ? archive_error_string(a) : "");
      goto out;
    }
    n += (size_t)got;
  }
  b[n] = '\0';
  *out = b;
  *out_len = n;
  r = 0;
out:
  archive_read_free(a);
  return r;
}

int cn_toc_estargz_parse(const void *tail, size_t len, uint64_t blob_size, const char *digest,
                         cn_toc *toc, cairn_store *st) {
  return cn_toc_estargz_parse_self(tail, len, blob_size, digest, toc, NULL, st);
}

void cn_toc_estargz_self_free(cn_toc_estargz_self *self) {
  if (!self) return;
  free(self->json);
  memset(self, 0, sizeof *self);
}

int cn_toc_estargz_parse_self(const void *tail, size_t len, uint64_t blob_size, const char *digest,
                              cn_toc *toc, cn_toc_estargz_self *self, cairn_store *st) {
  memset(toc, 0, sizeof *toc);
  if (self) memset(self, 0, sizeof *self);
  toc->format = CN_TOC_ESTARGZ;
  toc->blob_size = blob_size;
  uint64_t toc_off = 0;
  size_t flen = 0;
  int r = footer(tail, len, blob_size, &toc_off, &flen, st);
  if (r < 0) return r;
  uint64_t start = blob_size - len; /* the blob offset of tail[0] */
  if (toc_off < start)
    return cairn_fail(st, -ERANGE, "eStargz: the TOC starts at %llu, before the bytes read",
                      (unsigned long long)toc_off);
  toc->toc_off = toc_off;
  toc->toc_len = blob_size - flen - toc_off;
  toc->data_end = toc_off;
  if (toc->toc_len > CN_TOC_JSON_MAX)
    return cairn_fail(st, -EFBIG, "eStargz: the TOC is larger than %u bytes", CN_TOC_JSON_MAX);

  unsigned char *js;
  size_t js_len = 0;
  if ((r = toc_json((const unsigned char *)tail + (toc_off - start), (size_t)toc->toc_len, &js,
                    &js_len, self, st)) < 0) {
    if (self) memset(self, 0, sizeof *self);
    return r;
  }
  cn_toc_sha256(js, js_len, toc->toc_digest);
  if (digest && strcmp(digest, toc->toc_digest) != 0) {
    free(js);
    if (self) memset(self, 0, sizeof *self);
    return cairn_fail(st, -EBADMSG, "eStargz: the TOC's digest is %s, the manifest says %.80s",
                      toc->toc_digest, digest);
  }
  json_error_t jerr;
  json_t *root = json_loadb((const char *)js, js_len, JSON_REJECT_DUPLICATES, &jerr);
  if (self) {
    self->json = js;
    self->json_len = js_len;
  } else {
    free(js);
  }
  if (!root) {
    cn_toc_estargz_self_free(self);
    return cairn_fail(st, -EBADMSG, "eStargz: the TOC is not JSON: %s", jerr.text);
  }
  json_t *ver = json_object_get(root, "version");
  if (!json_is_integer(ver) || json_integer_value(ver) != 1)
    r = cairn_fail(st, -EBADMSG, "eStargz: the TOC's version is not 1");
  else
    r = cn_toc_entries_parse(json_object_get(root, "entries"), toc, st);
  json_decref(root);
  if (r < 0) {
    cn_fail_context(st, r, "eStargz");
    cn_toc_free(toc);
    cn_toc_estargz_self_free(self);
  }
  return r;
}
