/* SPDX-License-Identifier: Apache-2.0 */
/*
 * toc.c — the records both TOC parsers fill (libcairn_toc.h): the JSON entries of
 * an eStargz or zstd:chunked table of contents into cn_toc_entry records,
 * checked as hostile input; the decompression (libarchive), path
 * normalisation, digests and lookup they share.
 *
 * The two formats write the same entry objects (zstd:chunked took
 * eStargz's): "name", "type" (dir reg symlink hardlink char block fifo
 * chunk), "mode", "uid", "gid", "size", "linkName", "devMajor",
 * "devMinor", "modtime" (RFC 3339), "xattrs" (name: base64 value),
 * "digest" (of a regular file's content), "offset" (where its compressed
 * data starts), "chunkOffset", "chunkSize", "chunkDigest" (a file cut in
 * pieces: the "reg" entry is the first piece, each "chunk" entry that
 * follows it the next), eStargz's "innerOffset", zstd:chunked's
 * "endOffset" (where the file's compressed data ends). Where a piece ends
 * without "endOffset" is where the next piece of any file starts (the
 * next larger offset in the TOC), the last one's at the TOC.
 */
#include "libcairn_toc.h"

#include <archive.h>
#include <errno.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char hexdig[] = "0123456789abcdef";

void cn_toc_sha256(const void *buf, size_t len, char out[CAIRN_DIGEST_LEN + 1]) {
  unsigned char md[32];
  unsigned int n = 0;
  EVP_Digest(buf, len, md, &n, EVP_sha256(), NULL);
  memcpy(out, "sha256:", 7);
  for (int i = 0; i < 32; i++) {
    out[7 + 2 * i] = hexdig[md[i] >> 4];
    out[8 + 2 * i] = hexdig[md[i] & 15];
  }
  out[CAIRN_DIGEST_LEN] = '\0';
}

bool cn_toc_digest_valid(const char *s) {
  if (!s || strncmp(s, "sha256:", 7) != 0) return false;
  for (int i = 0; i < 64; i++)
    if (!strchr(hexdig, s[7 + i]) || s[7 + i] == '\0') return false;
  return s[CAIRN_DIGEST_LEN] == '\0';
}

int cn_toc_decompress(const void *buf, size_t len, size_t max, unsigned char **out, size_t *out_len,
                      const char *what, cairn_store *st) {
  *out = NULL;
  *out_len = 0;
  /* One filter, by the data's magic: libarchive's bidding would stack
   * another on content that is itself compressed (a .gz file's frame). */
  static const unsigned char gz[] = {0x1f, 0x8b}, zs[] = {0x28, 0xb5, 0x2f, 0xfd};
  int filter = len >= sizeof gz && memcmp(buf, gz, sizeof gz) == 0   ? ARCHIVE_FILTER_GZIP
               : len >= sizeof zs && memcmp(buf, zs, sizeof zs) == 0 ? ARCHIVE_FILTER_ZSTD
                                                                     : ARCHIVE_FILTER_NONE;
  if (filter == ARCHIVE_FILTER_NONE)
    return cairn_fail(st, -EBADMSG, "%s: not gzip or zstd data", what);
  struct archive *a = archive_read_new();
  if (!a) return -ENOMEM;
  int r = 0;
  size_t cap = 0, n = 0;
  unsigned char *b = NULL;
  archive_read_support_format_raw(a);
  if (archive_read_append_filter(a, filter) != ARCHIVE_OK) {
    r = cairn_fail(st, -EBADMSG, "%s: %s", what,
                   archive_error_string(a) ? archive_error_string(a) : "no decompressor");
    goto out;
  }
  struct archive_entry *e;
  if (archive_read_open_memory(a, buf, len) != ARCHIVE_OK ||
      archive_read_next_header(a, &e) != ARCHIVE_OK) {
    r = cairn_fail(st, -EBADMSG, "%s: not compressed data: %s", what,
                   archive_error_string(a) ? archive_error_string(a) : "unknown format");
    goto out;
  }
  if (archive_filter_code(a, 0) == ARCHIVE_FILTER_NONE) {
    r = cairn_fail(st, -EBADMSG, "%s: not gzip or zstd data", what);
    goto out;
  }
  for (;;) {
    if (cap - n < 65536) {
      size_t want = cap ? cap * 2 : 65536;
      if (want > max + 1) want = max + 1;
      if (want <= n) { /* n == max + 1: over the bound */
        r = cairn_fail(st, -EFBIG, "%s: larger than %zu bytes uncompressed", what, max);
        goto out;
      }
      unsigned char *nb = realloc(b, want + 1);
      if (!nb) {
        r = -ENOMEM;
        goto out;
      }
      b = nb;
      cap = want;
    }
    la_ssize_t got = archive_read_data(a, b + n, cap - n);
    if (got < 0) {
      r = cairn_fail(st, -EBADMSG, "%s: corrupt compressed data: %s", what,
                     archive_error_string(a) ? archive_error_string(a) : "read error");
      goto out;
    }
    if (got == 0) break;
    n += (size_t)got;
    if (n > max) {
      r = cairn_fail(st, -EFBIG, "%s: larger than %zu bytes uncompressed", what, max);
      goto out;
    }
  }
  if (!b) b = malloc(1);
  if (!b) {
    r = -ENOMEM;
    goto out;
  }
  b[n] = '\0';
  *out = b;
  *out_len = n;
  b = NULL;
out:
  free(b);
  archive_read_free(a);
  return r;
}

int cn_toc_path_normalize(const char *in, char *out, cairn_store *st) {
  size_t o = 0;
  const char *p = in;
  for (;;) {
    while (*p == '/') p++;
    if (!*p) break;
    const char *s = p;
    while (*p && *p != '/') p++;
    size_t n = (size_t)(p - s);
    if (n == 1 && s[0] == '.') continue;
    if (n == 2 && s[0] == '.' && s[1] == '.')
      return cairn_fail(st, -EBADMSG, "path \"%.200s\" has a \"..\" component", in);
    if (n > CN_TOC_NAME_MAX)
      return cairn_fail(st, -EBADMSG, "path \"%.200s\": a component longer than %d bytes", in,
                        CN_TOC_NAME_MAX);
    if (o + (o > 0) + n > CN_TOC_PATH_MAX)
      return cairn_fail(st, -EBADMSG, "path \"%.200s...\" longer than %d bytes", in,
                        CN_TOC_PATH_MAX);
    if (o > 0) out[o++] = '/';
    memcpy(out + o, s, n);
    o += n;
  }
  out[o] = '\0';
  return 0;
}

static void entry_free(cn_toc_entry *e) {
  free(e->path);
  free(e->link);
  for (size_t i = 0; i < e->n_xattrs; i++) {
    free(e->xattrs[i].name);
    free(e->xattrs[i].value);
  }
  free(e->xattrs);
  free(e->chunks);
}

void cn_toc_free(cn_toc *toc) {
  if (!toc) return;
  for (size_t i = 0; i < toc->n_entries; i++) entry_free(&toc->entries[i]);
  free(toc->entries);
  free(toc->sorted);
  memset(toc, 0, sizeof *toc);
}

/* ---- JSON fields ---------------------------------------------------------- */

/* A parse in progress: the entry index and name for messages. */
struct ep {
  cairn_store *st;
  size_t i;
  const char *name;
};

static int bad(struct ep *p, const char *what) {
  return cairn_fail(p->st, -EBADMSG, "TOC entry %zu (\"%.200s\"): %s", p->i,
                    p->name ? p->name : "?", what);
}

/* An optional non-negative integer field <= max; absent: 0. */
static int get_u64(struct ep *p, json_t *o, const char *key, uint64_t max, uint64_t *v) {
  json_t *j = json_object_get(o, key);
  *v = 0;
  if (!j || json_is_null(j)) return 0;
  if (!json_is_integer(j) || json_integer_value(j) < 0 || (uint64_t)json_integer_value(j) > max) {
    char m[96];
    snprintf(m, sizeof m, "\"%s\" is not an integer in [0, %llu]", key, (unsigned long long)max);
    return bad(p, m);
  }
  *v = (uint64_t)json_integer_value(j);
  return 0;
}

/* An optional string field; absent: NULL. */
static int get_str(struct ep *p, json_t *o, const char *key, const char **v) {
  json_t *j = json_object_get(o, key);
  *v = NULL;
  if (!j || json_is_null(j)) return 0;
  if (!json_is_string(j)) {
    char m[64];
    snprintf(m, sizeof m, "\"%s\" is not a string", key);
    return bad(p, m);
  }
  *v = json_string_value(j);
  if (strlen(*v) != json_string_length(j)) {
    char m[64];
    snprintf(m, sizeof m, "\"%s\" holds a NUL", key);
    return bad(p, m);
  }
  return 0;
}

static int get_digest(struct ep *p, json_t *o, const char *key, char out[CAIRN_DIGEST_LEN + 1]) {
  const char *s;
  int r = get_str(p, o, key, &s);
  out[0] = '\0';
  if (r < 0 || !s || !*s) return r;
  if (!cn_toc_digest_valid(s)) {
    char m[64];
    snprintf(m, sizeof m, "\"%s\" is not a sha256 digest", key);
    return bad(p, m);
  }
  memcpy(out, s, CAIRN_DIGEST_LEN + 1);
  return 0;
}

/* RFC 3339, as Go writes it: 2006-01-02T15:04:05[.frac](Z|+hh:mm|-hh:mm). */
static int parse_time(const char *s, int64_t *sec, uint32_t *nsec) {
  int y, mo, d, h, mi, se, n = 0;
  if (sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d%n", &y, &mo, &d, &h, &mi, &se, &n) != 6 || n != 19)
    return -1;
  if (y < 0 || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || se > 60 || h < 0 ||
      mi < 0 || se < 0)
    return -1;
  const char *q = s + n;
  uint32_t ns = 0;
  if (*q == '.') {
    int digits = 0;
    for (q++; *q >= '0' && *q <= '9'; q++, digits++)
      if (digits < 9) ns = ns * 10 + (uint32_t)(*q - '0');
    if (digits == 0) return -1;
    for (; digits < 9; digits++) ns *= 10;
  }
  int off = 0;
  if (*q == 'Z') {
    q++;
  } else if ((*q == '+' || *q == '-') && q[1] >= '0' && q[1] <= '2' && q[2] >= '0' && q[2] <= '9' &&
             q[3] == ':' && q[4] >= '0' && q[4] <= '5' && q[5] >= '0' && q[5] <= '9') {
    off = ((q[1] - '0') * 10 + (q[2] - '0')) * 3600 + ((q[4] - '0') * 10 + (q[5] - '0')) * 60;
    if (*q == '-') off = -off;
    q += 6;
  } else {
    return -1;
  }
  if (*q) return -1;
  struct tm tm = {.tm_year = y - 1900,
                  .tm_mon = mo - 1,
                  .tm_mday = d,
                  .tm_hour = h,
                  .tm_min = mi,
                  .tm_sec = se};
  *sec = (int64_t)timegm(&tm) - off;
  *nsec = ns;
  return 0;
}

static int parse_xattrs(struct ep *p, json_t *o, cn_toc_entry *e) {
  json_t *x = json_object_get(o, "xattrs");
  if (!x || json_is_null(x)) return 0;
  if (!json_is_object(x)) return bad(p, "\"xattrs\" is not an object");
  size_t n = json_object_size(x);
  if (n > CN_TOC_XATTRS_MAX) return bad(p, "too many extended attributes");
  if (n == 0) return 0;
  e->xattrs = calloc(n, sizeof *e->xattrs);
  if (!e->xattrs) return -ENOMEM;
  const char *k;
  json_t *v;
  json_object_foreach(x, k, v) {
    if (!json_is_string(v)) return bad(p, "an extended attribute's value is not a string");
    size_t slen = json_string_length(v);
    if (!*k || strlen(k) > 255) return bad(p, "an extended attribute's name is empty or too long");
    if (slen > (CN_TOC_XATTR_VALUE_MAX / 3 + 1) * 4 || slen % 4 != 0)
      return bad(p, "an extended attribute's value is not base64 of at most 64 KiB");
    cn_toc_xattr *a = &e->xattrs[e->n_xattrs];
    a->name = strdup(k);
    a->value = malloc(slen / 4 * 3 + 1);
    if (!a->name || !a->value) {
      free(a->name);
      free(a->value);
      a->name = NULL;
      a->value = NULL;
      return -ENOMEM;
    }
    e->n_xattrs++;
    const char *s = json_string_value(v);
    int len = slen ? EVP_DecodeBlock(a->value, (const unsigned char *)s, (int)slen) : 0;
    if (len < 0) return bad(p, "an extended attribute's value is not base64");
    /* EVP_DecodeBlock counts the padding's zero bytes */
    if (slen >= 1 && s[slen - 1] == '=') len--;
    if (slen >= 2 && s[slen - 2] == '=') len--;
    if (len < 0 || (size_t)len > CN_TOC_XATTR_VALUE_MAX)
      return bad(p, "an extended attribute's value is larger than 64 KiB");
    a->len = (size_t)len;
  }
  return 0;
}

static const struct {
  const char *name;
  cn_toc_type type;
} types[] = {
    {"reg", CN_TOC_REG},           {"dir", CN_TOC_DIR},   {"symlink", CN_TOC_SYMLINK},
    {"hardlink", CN_TOC_HARDLINK}, {"char", CN_TOC_CHAR}, {"block", CN_TOC_BLOCK},
    {"fifo", CN_TOC_FIFO},
};

/* ---- the entries ---------------------------------------------------------- */

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static int cmp_path(const void *a, const void *b, void *arg) {
  const cn_toc *toc = arg;
  size_t x = *(const size_t *)a, y = *(const size_t *)b;
  int c = strcmp(toc->entries[x].path, toc->entries[y].path);
  return c ? c : (x < y ? -1 : x > y);
}

static void sort_index(cn_toc *toc) {
  for (size_t i = 0; i < toc->n_entries; i++) toc->sorted[i] = i;
  qsort_r(toc->sorted, toc->n_entries, sizeof *toc->sorted, cmp_path, toc);
}

const cn_toc_entry *cn_toc_find(const cn_toc *toc, const char *path) {
  size_t lo = 0, hi = toc->n_entries;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = strcmp(toc->entries[toc->sorted[mid]].path, path);
    if (c == 0) return &toc->entries[toc->sorted[mid]];
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return NULL;
}

/* The compressed end of a piece starting at off: the next larger offset. */
static uint64_t next_offset(const uint64_t *offs, size_t n, uint64_t off, uint64_t end) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (offs[mid] <= off)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < n ? offs[lo] : end;
}

static int add_chunk(struct ep *p, cn_toc_entry *e, size_t *cap, const cn_toc_chunk *c) {
  if (e->n_chunks >= CN_TOC_CHUNKS_MAX) return bad(p, "too many chunks");
  if (e->n_chunks == *cap) {
    size_t nc = *cap ? *cap * 2 : 1;
    cn_toc_chunk *n = realloc(e->chunks, nc * sizeof *n);
    if (!n) return -ENOMEM;
    e->chunks = n;
    *cap = nc;
  }
  e->chunks[e->n_chunks++] = *c;
  return 0;
}

/* One piece of a regular file from its "reg" or "chunk" object. */
static int parse_piece(struct ep *p, json_t *o, cn_toc_entry *e, bool first, cn_toc_chunk *c) {
  uint64_t off, inner, coff, csize;
  int r;
  if ((r = get_u64(p, o, "offset", INT64_MAX, &off)) < 0 ||
      (r = get_u64(p, o, "innerOffset", CN_TOC_FILE_MAX, &inner)) < 0 ||
      (r = get_u64(p, o, "chunkOffset", CN_TOC_FILE_MAX, &coff)) < 0 ||
      (r = get_u64(p, o, "chunkSize", CN_TOC_FILE_MAX, &csize)) < 0 ||
      (r = get_digest(p, o, "chunkDigest", c->digest)) < 0)
    return r;
  uint64_t done =
      e->n_chunks ? e->chunks[e->n_chunks - 1].uoff + e->chunks[e->n_chunks - 1].usize : 0;
  if (off == 0) return bad(p, "a file's data has no \"offset\"");
  if (done >= e->size) return bad(p, "a chunk past the file's end");
  if (first ? coff != 0 : coff != done)
    return bad(p, "\"chunkOffset\" does not follow the previous chunk");
  if (csize == 0 || csize > e->size - done) csize = e->size - done;
  c->off = off;
  c->csize = 0; /* set when the ends are known */
  c->inner = inner;
  c->uoff = done;
  c->usize = csize;
  return 0;
}

/* Sets each piece's compressed size and checks they lie before data_end. */
static int piece_ends(struct ep *p, cn_toc_entry *e, uint64_t end_off, const uint64_t *offs,
                      size_t n_offs, uint64_t data_end) {
  for (size_t k = 0; k < e->n_chunks; k++) {
    cn_toc_chunk *c = &e->chunks[k];
    if (c->off >= data_end) return bad(p, "a chunk's data starts past the file data of the blob");
    uint64_t end;
    if (end_off) /* zstd:chunked: up to the next piece, the last to endOffset */
      end = k + 1 < e->n_chunks ? e->chunks[k + 1].off : end_off;
    else
      end = next_offset(offs, n_offs, c->off, data_end);
    if (end <= c->off) return bad(p, "a chunk ends before it starts");
    if (end > data_end) return bad(p, "a chunk's data reaches past the file data of the blob");
    c->csize = end - c->off;
    if (c->inner > CN_TOC_FILE_MAX - c->usize) return bad(p, "\"innerOffset\" too large");
  }
  return 0;
}

static int parse_entry(struct ep *p, json_t *o, cn_toc_entry *e) {
  const char *type, *name, *link;
  int r;
  if ((r = get_str(p, o, "type", &type)) < 0) return r;
  if (!type) return bad(p, "no \"type\"");
  size_t t;
  for (t = 0; t < sizeof types / sizeof *types; t++)
    if (strcmp(type, types[t].name) == 0) break;
  if (t == sizeof types / sizeof *types) return bad(p, "unknown \"type\"");
  e->type = types[t].type;
  if ((r = get_str(p, o, "name", &name)) < 0) return r;
  if (!name) return bad(p, "no \"name\"");
  p->name = name;
  char norm[CN_TOC_PATH_MAX + 1];
  if ((r = cn_toc_path_normalize(name, norm, p->st)) < 0)
    return cn_fail_context(p->st, r, "TOC entry %zu", p->i);
  if (!norm[0] && e->type != CN_TOC_DIR) return bad(p, "the root is not a directory");
  if (!(e->path = strdup(norm))) return -ENOMEM;

  uint64_t v;
  if ((r = get_u64(p, o, "mode", UINT32_MAX, &v)) < 0) return r;
  e->mode = (uint32_t)v & 07777;
  if ((r = get_u64(p, o, "uid", UINT32_MAX - 1, &v)) < 0) return r;
  e->uid = (uint32_t)v;
  if ((r = get_u64(p, o, "gid", UINT32_MAX - 1, &v)) < 0) return r;
  e->gid = (uint32_t)v;
  if ((r = get_u64(p, o, "devMajor", UINT32_MAX, &v)) < 0) return r;
  e->dev_major = (uint32_t)v;
  if ((r = get_u64(p, o, "devMinor", UINT32_MAX, &v)) < 0) return r;
  e->dev_minor = (uint32_t)v;
  const char *mt;
  if ((r = get_str(p, o, "modtime", &mt)) < 0) return r;
  if (mt && *mt && parse_time(mt, &e->mtime_sec, &e->mtime_nsec) < 0)
    return bad(p, "\"modtime\" is not an RFC 3339 time");
  if ((r = parse_xattrs(p, o, e)) < 0) return r;

  if ((r = get_str(p, o, "linkName", &link)) < 0) return r;
  if (e->type == CN_TOC_SYMLINK || e->type == CN_TOC_HARDLINK) {
    if (!link || !*link) return bad(p, "a link without \"linkName\"");
    if (strlen(link) > CN_TOC_PATH_MAX) return bad(p, "\"linkName\" too long");
    if (e->type == CN_TOC_HARDLINK) {
      if ((r = cn_toc_path_normalize(link, norm, p->st)) < 0)
        return cn_fail_context(p->st, r, "TOC entry %zu: \"linkName\"", p->i);
      link = norm;
    }
    if (!(e->link = strdup(link))) return -ENOMEM;
  }
  if (e->type == CN_TOC_REG) {
    if ((r = get_u64(p, o, "size", CN_TOC_FILE_MAX, &e->size)) < 0) return r;
    if ((r = get_digest(p, o, "digest", e->digest)) < 0) return r;
    if (e->size > 0 && !e->digest[0]) return bad(p, "a regular file without \"digest\"");
    if ((r = get_u64(p, o, CN_TOC_PREFETCH, UINT32_MAX, &v)) < 0) return r;
    e->prefetch_rank = (uint32_t)v;
  }
  return 0;
}

/* Drops earlier entries a later one of the same path replaces (as tar
 * extraction does), then checks links and parents against the rest. */
static int resolve(cn_toc *toc, cairn_store *st) {
  sort_index(toc);
  bool *drop = calloc(toc->n_entries ? toc->n_entries : 1, sizeof *drop);
  if (!drop) return -ENOMEM;
  for (size_t k = 0; k + 1 < toc->n_entries; k++)
    if (strcmp(toc->entries[toc->sorted[k]].path, toc->entries[toc->sorted[k + 1]].path) == 0)
      drop[toc->sorted[k]] = true; /* same path, earlier index: replaced */
  size_t w = 0;
  for (size_t k = 0; k < toc->n_entries; k++) {
    if (drop[k])
      entry_free(&toc->entries[k]);
    else
      toc->entries[w++] = toc->entries[k];
  }
  free(drop);
  toc->n_entries = w;
  sort_index(toc);

  for (size_t k = 0; k < toc->n_entries; k++) {
    cn_toc_entry *e = &toc->entries[k];
    struct ep p = {st, k, e->path};
    if (e->type == CN_TOC_HARDLINK) {
      const cn_toc_entry *t = cn_toc_find(toc, e->link);
      if (!t || t >= e) return bad(&p, "a hardlink to a path the TOC does not have before it");
      if (t->type == CN_TOC_DIR) return bad(&p, "a hardlink to a directory");
    }
    char *slash = strrchr(e->path, '/');
    if (e->path[0]) {
      const cn_toc_entry *parent;
      if (slash) {
        char dir[CN_TOC_PATH_MAX + 1];
        memcpy(dir, e->path, (size_t)(slash - e->path));
        dir[slash - e->path] = '\0';
        parent = cn_toc_find(toc, dir);
      } else {
        parent = cn_toc_find(toc, "");
      }
      if (parent && parent->type != CN_TOC_DIR) return bad(&p, "its parent is not a directory");
    }
    const char *base = slash ? slash + 1 : e->path;
    if (strcmp(base, ".prefetch.landmark") == 0 && !slash) {
      e->flags |= CN_TOC_F_LANDMARK;
      if (!toc->prefetch) toc->prefetch = k;
    } else if (strcmp(base, ".no.prefetch.landmark") == 0 && !slash) {
      e->flags |= CN_TOC_F_LANDMARK;
      toc->no_prefetch = true;
    }
    if (e->prefetch_rank) toc->n_ranked++;
  }
  return 0;
}

int cn_toc_entries_parse(json_t *entries, cn_toc *toc, cairn_store *st) {
  if (!json_is_array(entries)) return cairn_fail(st, -EBADMSG, "TOC: \"entries\" is not an array");
  size_t n = json_array_size(entries);
  if (n > CN_TOC_ENTRIES_MAX)
    return cairn_fail(st, -EFBIG, "TOC: %zu entries, more than %u", n, CN_TOC_ENTRIES_MAX);
  toc->entries = calloc(n ? n : 1, sizeof *toc->entries);
  toc->sorted = calloc(n ? n : 1, sizeof *toc->sorted);
  uint64_t *offs = calloc(n ? n : 1, sizeof *offs);
  /* per entry: its "endOffset" (0: none), for piece_ends */
  uint64_t *ends = calloc(n ? n : 1, sizeof *ends);
  int r = 0;
  if (!toc->entries || !toc->sorted || !offs || !ends) {
    r = -ENOMEM;
    goto out;
  }
  size_t n_offs = 0;
  for (size_t i = 0; i < n; i++) {
    json_t *o = json_array_get(entries, i);
    json_t *j = json_object_get(o, "offset");
    if (json_is_integer(j) && json_integer_value(j) > 0)
      offs[n_offs++] = (uint64_t)json_integer_value(j);
  }
  qsort(offs, n_offs, sizeof *offs, cmp_u64);

  cn_toc_entry *cur = NULL; /* the regular file whose pieces are being read */
  size_t cur_i = 0, cap = 0;
  for (size_t i = 0; i < n; i++) {
    struct ep p = {st, i, NULL};
    json_t *o = json_array_get(entries, i);
    if (!json_is_object(o)) {
      r = bad(&p, "not an object");
      goto out;
    }
    const char *type;
    if ((r = get_str(&p, o, "type", &type)) < 0) goto out;
    if (type && strcmp(type, "chunk") == 0) {
      const char *name;
      char norm[CN_TOC_PATH_MAX + 1];
      if ((r = get_str(&p, o, "name", &name)) < 0) goto out;
      p.name = name;
      if (!cur) {
        r = bad(&p, "a chunk that follows no regular file with data");
        goto out;
      }
      if (name && ((r = cn_toc_path_normalize(name, norm, st)) < 0 || strcmp(norm, cur->path))) {
        r = r < 0 ? r : bad(&p, "a chunk of another file than the one before it");
        goto out;
      }
      cn_toc_chunk c = {0};
      struct ep cp = {st, i, cur->path};
      if ((r = parse_piece(&cp, o, cur, false, &c)) < 0 || (r = add_chunk(&cp, cur, &cap, &c)) < 0)
        goto out;
      continue;
    }
    if (cur) { /* the previous file's pieces are all read */
      struct ep cp = {st, cur_i, cur->path};
      if (cur->chunks[cur->n_chunks - 1].uoff + cur->chunks[cur->n_chunks - 1].usize != cur->size) {
        r = bad(&cp, "its chunks do not cover the file");
        goto out;
      }
      cur = NULL;
    }
    cn_toc_entry *e = &toc->entries[toc->n_entries++];
    if ((r = parse_entry(&p, o, e)) < 0) goto out;
    if (e->type == CN_TOC_REG && e->size > 0) {
      cn_toc_chunk c = {0};
      cap = 0;
      if ((r = get_u64(&p, o, "endOffset", INT64_MAX, &ends[toc->n_entries - 1])) < 0 ||
          (r = parse_piece(&p, o, e, true, &c)) < 0 || (r = add_chunk(&p, e, &cap, &c)) < 0)
        goto out;
      cur = e;
      cur_i = i;
    }
  }
  if (cur &&
      cur->chunks[cur->n_chunks - 1].uoff + cur->chunks[cur->n_chunks - 1].usize != cur->size) {
    struct ep cp = {st, cur_i, cur->path};
    r = bad(&cp, "its chunks do not cover the file");
    goto out;
  }
  for (size_t k = 0; k < toc->n_entries; k++) {
    cn_toc_entry *e = &toc->entries[k];
    struct ep p = {st, k, e->path};
    if (e->n_chunks && (r = piece_ends(&p, e, ends[k], offs, n_offs, toc->data_end)) < 0) goto out;
  }
  r = resolve(toc, st);
out:
  free(offs);
  free(ends);
  return r;
}
