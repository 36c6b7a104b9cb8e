/* SPDX-License-Identifier: Apache-2.0 */
/*
 * chunked_write.c — a layer's tar as a lazily-pullable blob (push
 * --format), the formats toc_zstd_chunked.c and toc_estargz.c read.
 *
 * The tar's bytes go through as they come (a streaming reader of its
 * headers: ustar, GNU long names, PAX records) into one compressor, cut
 * into frames (zstd) or members (gzip) so that every regular file's data
 * starts one, each CN_CHUNKED_CHUNK bytes of it starts the next, and its
 * end closes the last: the headers and padding between files share frames.
 * Each file gets a TOC entry (tar metadata, sha256 of the content, where
 * each piece starts, its sha256); the entries of other types their
 * metadata.
 *
 * zstd:chunked (containers/storage's layout, as podman 4.3 writes it): the
 * whole tar goes through unchanged, its end-of-archive blocks included, so
 * the blob decompresses to the same bytes and the diff_id holds; then a
 * skippable frame (magic 0x184D2A50, LE32 length) holding the TOC
 * ({"version":1,"entries":[...]}, one zstd frame), and the 48-byte footer
 * frame (LE64 offset, length, uncompressed length of the TOC frame, type
 * 1, "GnUlInUx"). The manifest's annotations (push.c) carry the position
 * "OFF:LEN:ULEN:1" and the sha256 of the TOC frame.
 *
 * eStargz (containerd's estargz package): the tar's entries unchanged, but
 * its end-of-archive blocks (and anything after them) replaced by an entry
 * stargz.index.json holding the TOC, then the end-of-archive, in a gzip
 * member of their own; then the 51-byte footer (an empty gzip member whose
 * extra field "SG" holds "%016x" of the TOC member's offset and "STARGZ").
 * The TOC is part of the tar, so the layer's diff_id is not the original's
 * (the result gives it); the toc.digest annotation is the JSON's sha256.
 */
#include "libcairn_chunked_write.h"
#include "libcairn_toc.h"

#include <errno.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zlib.h>
#include <zstd.h>

#define BLOCK CN_TAR_BLOCK
#define META_MAX (16u << 20) /* a PAX header's or long name's bytes */
#define SKIPPABLE_MAGIC 0x184D2A50u

enum state { ST_HEADER, ST_META, ST_DATA, ST_OTHER, ST_PAD, ST_TRAILER };

/* What a PAX header or GNU long name says of the next entry. */
typedef struct pending {
  char *path, *linkpath;
  bool has_size, has_uid, has_gid, has_mtime, has_atime, has_ctime, has_major, has_minor;
  uint64_t size, uid, gid, major, minor;
  int64_t mtime, atime, ctime;
  long mtime_ns, atime_ns, ctime_ns;
  json_t *xattrs; /* name: base64 value */
  bool sparse;
} pending;

struct cn_chunked_writer {
  enum cn_chunked_format fmt;
  cn_chunked_out_fn out;
  void *arg;
  uint64_t out_pos; /* bytes given to out */
  char err[256];
  /* the compressor */
  ZSTD_CCtx *zc;
  z_stream z;
  bool z_ready;
  bool frame_open;    /* bytes went into the current frame */
  EVP_MD_CTX *tar_md; /* the tar's bytes as the blob decompresses to them */
  /* the tar reader */
  enum state st;
  unsigned char blk[BLOCK];
  size_t blk_n;
  char meta_kind; /* 'x', 'g', 'L', 'K' */
  unsigned char *meta;
  size_t meta_n, meta_len;
  uint64_t left, pad;
  pending p;
  json_t *entries;
  json_t *prefetch;  /* normalised path: rank (cn_chunked_prefetch), or NULL */
  size_t n_prefetch; /* entries given a rank */
  /* the regular file whose data passes */
  json_t *file;  /* its entry */
  json_t *piece; /* the entry of its current piece */
  EVP_MD_CTX *file_md, *piece_md;
  uint64_t file_size, file_done, piece_left;
};

static int fail(cn_chunked_writer *w, int r, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(cn_chunked_writer *w, int r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(w->err, sizeof w->err, fmt, ap);
  va_end(ap);
  return r;
}

const char *cn_chunked_error(const cn_chunked_writer *w) { return w->err; }

static int put(cn_chunked_writer *w, const void *buf, size_t len) {
  if (!len) return 0;
  int r = w->out(buf, len, w->arg);
  if (r < 0) return fail(w, r, "writing the blob: %s", strerror(-r));
  w->out_pos += len;
  return 0;
}

/* ---- the compressor ------------------------------------------------------ */

static int zstd_run(cn_chunked_writer *w, const void *buf, size_t len, ZSTD_EndDirective end) {
  unsigned char ob[1 << 16];
  ZSTD_inBuffer in = {buf, len, 0};
  for (;;) {
    ZSTD_outBuffer o = {ob, sizeof ob, 0};
    size_t rem = ZSTD_compressStream2(w->zc, &o, &in, end);
    if (ZSTD_isError(rem)) return fail(w, -EIO, "zstd: %s", ZSTD_getErrorName(rem));
    int r = put(w, ob, o.pos);
    if (r < 0) return r;
    if (end == ZSTD_e_end ? rem == 0 : in.pos == in.size) return 0;
  }
}

static int gz_run(cn_chunked_writer *w, const void *buf, size_t len, int flush) {
  unsigned char ob[1 << 16];
  w->z.next_in = (unsigned char *)buf;
  w->z.avail_in = (uInt)len;
  for (;;) {
    w->z.next_out = ob;
    w->z.avail_out = sizeof ob;
    int zr = deflate(&w->z, flush);
    if (zr == Z_STREAM_ERROR) return fail(w, -EIO, "gzip: deflate failed");
    int r = put(w, ob, sizeof ob - w->z.avail_out);
    if (r < 0) return r;
    if (flush == Z_FINISH ? zr == Z_STREAM_END : w->z.avail_out != 0) return 0;
  }
}

/* Tar bytes into the current frame. */
static int emit(cn_chunked_writer *w, const void *buf, size_t len) {
  if (!len) return 0;
  EVP_DigestUpdate(w->tar_md, buf, len);
  w->frame_open = true;
  while (len > 0) { /* zlib counts in uInt */
    size_t n = len > (1u << 30) ? (1u << 30) : len;
    int r = w->fmt == CN_CHUNKED_ZSTD ? zstd_run(w, buf, n, ZSTD_e_continue)
                                      : gz_run(w, buf, n, Z_NO_FLUSH);
    if (r < 0) return r;
    buf = (const char *)buf + n;
    len -= n;
  }
  return 0;
}

/* Ends the current frame (member), if any bytes went into it. */
static int cut(cn_chunked_writer *w) {
  if (!w->frame_open) return 0;
  w->frame_open = false;
  if (w->fmt == CN_CHUNKED_ZSTD) return zstd_run(w, NULL, 0, ZSTD_e_end);
  int r = gz_run(w, NULL, 0, Z_FINISH);
  if (r == 0 && deflateReset(&w->z) != Z_OK) r = fail(w, -EIO, "gzip: deflateReset failed");
  return r;
}

/* ---- small helpers ------------------------------------------------------- */

static void sha256_of(const void *buf, size_t len, char out[72]) {
  EVP_MD_CTX *md = EVP_MD_CTX_new();
  EVP_DigestInit_ex(md, EVP_sha256(), NULL);
  EVP_DigestUpdate(md, buf, len);
  cn_sha256_final_digest(md, out);
  EVP_MD_CTX_free(md);
}

static char *base64(const unsigned char *v, size_t len) {
  char *s = malloc(4 * ((len + 2) / 3) + 1);
  if (s) EVP_EncodeBlock((unsigned char *)s, v, (int)len);
  return s;
}

/* "SECONDS[.FRACTION]" of a PAX time. */
static int pax_time(const char *s, int64_t *sec, long *ns) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || end == s) return -1;
  *sec = v;
  *ns = 0;
  if (*end == '.') {
    long mul = 100000000;
    for (end++; *end >= '0' && *end <= '9'; end++, mul /= 10) *ns += (*end - '0') * mul;
    if (v < 0 || s[0] == '-') *ns = -*ns;
  }
  if (*ns < 0) {
    *sec -= 1;
    *ns += 1000000000;
  }
  return *end ? -1 : 0;
}

/* RFC 3339 in UTC, with nanoseconds as Go's RFC3339Nano (trailing zeros
 * dropped). eStargz's too: its reference writer rounds to the second, but
 * its reader (Go's time.Parse(time.RFC3339)) takes the fraction, and a
 * lazily pulled layer's times are its TOC's, so rounding would serve
 * another time than the tar's (containerd's overlayfs applies the tar's). */
static int rfc3339(int64_t sec, long ns, char out[48]) {
  time_t t = (time_t)sec;
  struct tm tm;
  if (!gmtime_r(&t, &tm) || tm.tm_year + 1900 < 0 || tm.tm_year + 1900 > 9999) return -1;
  size_t n = strftime(out, 48, "%Y-%m-%dT%H:%M:%S", &tm);
  if (ns > 0) {
    char f[24];
    snprintf(f, sizeof f, ".%09ld", ns % 1000000000);
    size_t k = strlen(f);
    while (f[k - 1] == '0') f[--k] = '\0';
    snprintf(out + n, 48 - n, "%s", f);
    n += k;
  }
  snprintf(out + n, 48 - n, "Z");
  return 0;
}

static void pending_clear(pending *p) {
  free(p->path);
  free(p->linkpath);
  json_decref(p->xattrs);
  *p = (pending){0};
}

/* ---- the tar's meta entries ---------------------------------------------- */

static int pax_parse(cn_chunked_writer *w) {
  const char *s = (const char *)w->meta, *end = s + w->meta_len;
  pending *p = &w->p;
  while (s < end) {
    char *e;
    unsigned long len = strtoul(s, &e, 10);
    if (e == s || *e != ' ' || len < 5 || len > (size_t)(end - s) || (size_t)(e - s) >= len - 1 ||
        s[len - 1] != '\n')
      return fail(w, -EBADMSG, "a PAX header's record is malformed");
    const char *key = e + 1, *rec_end = s + len - 1;
    const char *eq = memchr(key, '=', (size_t)(rec_end - key));
    if (!eq) return fail(w, -EBADMSG, "a PAX record without '='");
    size_t klen = (size_t)(eq - key), vlen = (size_t)(rec_end - eq - 1);
    const char *val = eq + 1;
    char *v = strndup(val, vlen);
    if (!v) return fail(w, -ENOMEM, "out of memory");
#define KEY(k) (klen == sizeof(k) - 1 && memcmp(key, k, klen) == 0)
    int bad = 0;
    char *ve;
    if (KEY("path")) {
      free(p->path);
      p->path = v;
      v = NULL;
    } else if (KEY("linkpath")) {
      free(p->linkpath);
      p->linkpath = v;
      v = NULL;
    } else if (KEY("size") || KEY("uid") || KEY("gid") || KEY("SCHILY.devmajor") ||
               KEY("SCHILY.devminor")) {
      errno = 0;
      unsigned long long x = strtoull(v, &ve, 10);
      bad = errno || ve == v || *ve || v[0] == '-';
      if (KEY("size"))
        p->size = x, p->has_size = true;
      else if (KEY("uid"))
        p->uid = x, p->has_uid = true;
      else if (KEY("gid"))
        p->gid = x, p->has_gid = true;
      else if (KEY("SCHILY.devmajor"))
        p->major = x, p->has_major = true;
      else
        p->minor = x, p->has_minor = true;
    } else if (KEY("mtime")) {
      bad = pax_time(v, &p->mtime, &p->mtime_ns) < 0;
      p->has_mtime = true;
    } else if (KEY("atime")) {
      bad = pax_time(v, &p->atime, &p->atime_ns) < 0;
      p->has_atime = true;
    } else if (KEY("ctime")) {
      bad = pax_time(v, &p->ctime, &p->ctime_ns) < 0;
      p->has_ctime = true;
    } else if (klen > 13 && memcmp(key, "SCHILY.xattr.", 13) == 0) {
      if (!p->xattrs) p->xattrs = json_object();
      char *name = strndup(key + 13, klen - 13);
      char *b = base64((const unsigned char *)val, vlen);
      if (!name || !b || !p->xattrs || json_object_set_new(p->xattrs, name, json_string(b)) < 0)
        bad = -1;
      free(name);
      free(b);
    } else if (klen > 11 && memcmp(key, "GNU.sparse.", 11) == 0) {
      p->sparse = true;
    }
#undef KEY
    free(v);
    if (bad) return fail(w, -EBADMSG, "a PAX record's value is malformed");
    s += len;
  }
  return 0;
}

/* ---- the entries --------------------------------------------------------- */

static int set_u(json_t *o, const char *k, uint64_t v) {
  return v ? json_object_set_new(o, k, json_integer((json_int_t)v)) : 0;
}

/* Starts the next piece of the file whose data passes: a new frame. */
static int piece_start(cn_chunked_writer *w) {
  int r = cut(w);
  if (r < 0) return r;
  uint64_t remain = w->file_size - w->file_done;
  w->piece_left = remain > CN_CHUNKED_CHUNK ? CN_CHUNKED_CHUNK : remain;
  if (w->file_done > 0) {
    w->piece = json_pack("{s:s, s:O}", "type", "chunk", "name", json_object_get(w->file, "name"));
    if (!w->piece || json_array_append_new(w->entries, w->piece) < 0)
      return fail(w, -ENOMEM, "out of memory");
  } else {
    w->piece = w->file;
  }
  set_u(w->piece, "offset", w->out_pos);
  set_u(w->piece, "chunkOffset", w->file_done);
  /* eStargz: the size of each piece but a file's last; zstd:chunked: of
   * each piece of a file in several */
  if (w->fmt == CN_CHUNKED_ESTARGZ ? remain > CN_CHUNKED_CHUNK : w->file_size > CN_CHUNKED_CHUNK)
    set_u(w->piece, "chunkSize", w->piece_left);
  EVP_DigestInit_ex(w->piece_md, EVP_sha256(), NULL);
  return 0;
}

static int piece_end(cn_chunked_writer *w) {
  char d[72];
  cn_sha256_final_digest(w->piece_md, d);
  if (w->fmt == CN_CHUNKED_ESTARGZ || w->file_size > CN_CHUNKED_CHUNK)
    json_object_set_new(w->piece, "chunkDigest", json_string(d));
  return 0;
}

/* The file's data passed: its digest, the end of its last frame. */
static int file_end(cn_chunked_writer *w) {
  int r = piece_end(w);
  if (r == 0) r = cut(w);
  if (r < 0) return r;
  char d[72];
  cn_sha256_final_digest(w->file_md, d);
  json_object_set_new(w->file, "digest", json_string(d));
  if (w->fmt == CN_CHUNKED_ZSTD) set_u(w->file, "endOffset", w->out_pos);
  w->file = w->piece = NULL;
  return 0;
}

/* An entry's header block (b) passed through: its TOC entry; starts its
 * data. */
static int header_toc_entry(cn_chunked_writer *w, const cn_tar_header *b) {
  pending *p = &w->p;
  const char *type;
  char tf = b->typeflag;
  switch (tf) {
  case '0':
  case '\0':
  case '7': type = "reg"; break;
  case '1': type = "hardlink"; break;
  case '2': type = "symlink"; break;
  case '3': type = "char"; break;
  case '4': type = "block"; break;
  case '5': type = "dir"; break;
  case '6': type = "fifo"; break;
  default:
    return fail(w, -ENOTSUP, "a tar entry of type '%c' (the format has none)",
                tf >= 32 && tf < 127 ? tf : '?');
  }
  if (p->sparse) return fail(w, -ENOTSUP, "a sparse file (the format has none)");
  uint64_t mode, uid, gid, size, mtime, major = 0, minor = 0;
  if (CN_TAR_NUMBER(b, mode, &mode) < 0 || CN_TAR_NUMBER(b, uid, &uid) < 0 ||
      CN_TAR_NUMBER(b, gid, &gid) < 0 || CN_TAR_NUMBER(b, size, &size) < 0)
    return fail(w, -EBADMSG, "a tar header's number is malformed");
  /* (a time before 1970 in base-256, which tar readers differ on: none) */
  bool has_mtime = CN_TAR_NUMBER(b, mtime, &mtime) == 0 && mtime <= INT64_MAX;
  bool ustar = memcmp(b->magic, "ustar", 5) == 0;
  if (ustar && (CN_TAR_NUMBER(b, devmajor, &major) < 0 || CN_TAR_NUMBER(b, devminor, &minor) < 0))
    major = minor = 0;
  if (p->has_size) size = p->size;
  if (p->has_uid) uid = p->uid;
  if (p->has_gid) gid = p->gid;
  if (p->has_major) major = p->major;
  if (p->has_minor) minor = p->minor;
  char *name = p->path ? strdup(p->path) : cn_tar_name(b);
  char *link = p->linkpath ? strdup(p->linkpath) : strndup(b->linkname, sizeof(b->linkname));
  json_t *o = name && link ? json_pack("{s:s, s:s}", "type", type, "name", name) : NULL;
  int r = o                ? 0
          : (name && link) ? fail(w, -EBADMSG, "a tar entry's name is not UTF-8")
                           : fail(w, -ENOMEM, "out of memory");
  if (r == 0 && (tf == '1' || tf == '2')) json_object_set_new(o, "linkName", json_string(link));
  free(name);
  free(link);
  if (r < 0) return r;
  if (!json_object_get(o, "name") ||
      ((tf == '1' || tf == '2') && !json_object_get(o, "linkName"))) {
    json_decref(o);
    return fail(w, -EBADMSG, "a tar entry's name is not UTF-8");
  }
  set_u(o, "mode", mode & 07777);
  bool reg = strcmp(type, "reg") == 0;
  if (reg) set_u(o, "size", size);
  set_u(o, "uid", uid);
  set_u(o, "gid", gid);
  char t[48];
  int64_t msec = p->has_mtime ? p->mtime : (int64_t)mtime;
  if ((has_mtime || p->has_mtime) && rfc3339(msec, p->has_mtime ? p->mtime_ns : 0, t) == 0)
    json_object_set_new(o, "modtime", json_string(t));
  if (w->fmt == CN_CHUNKED_ZSTD) {
    if (p->has_atime && rfc3339(p->atime, p->atime_ns, t) == 0)
      json_object_set_new(o, "accesstime", json_string(t));
    if (p->has_ctime && rfc3339(p->ctime, p->ctime_ns, t) == 0)
      json_object_set_new(o, "changetime", json_string(t));
  }
  if (tf == '3' || tf == '4') {
    set_u(o, "devMajor", major);
    set_u(o, "devMinor", minor);
  }
  if (p->xattrs && json_object_size(p->xattrs)) json_object_set(o, "xattrs", p->xattrs);
  if (json_array_append_new(w->entries, o) < 0) return fail(w, -ENOMEM, "out of memory");
  pending_clear(p);
  w->left = size;
  w->pad = cn_tar_padding(size);
  if (reg && size > 0) {
    w->file = o;
    w->file_size = size;
    w->file_done = 0;
    EVP_DigestInit_ex(w->file_md, EVP_sha256(), NULL);
    w->st = ST_DATA;
    return piece_start(w);
  }
  w->st = size > 0 ? ST_OTHER : ST_HEADER;
  return 0;
}

/* A whole header block. */
static int header_block(cn_chunked_writer *w) {
  const cn_tar_header *b = (const cn_tar_header *)w->blk;
  w->blk_n = 0;
  if (cn_tar_block_zero(b)) { /* the end of the archive: kept as it is in zstd:chunked */
    w->st = ST_TRAILER;
    return w->fmt == CN_CHUNKED_ZSTD ? emit(w, b, BLOCK) : 0;
  }
  if (!cn_tar_checksum_ok(b)) return fail(w, -EBADMSG, "a tar header's checksum is wrong");
  int r = emit(w, b, BLOCK);
  if (r < 0) return r;
  char tf = b->typeflag;
  if (cn_tar_is_meta(tf)) {
    uint64_t size;
    if (CN_TAR_NUMBER(b, size, &size) < 0 || size > META_MAX)
      return fail(w, -EBADMSG, "a tar meta entry's size is malformed or too large");
    free(w->meta);
    if (!(w->meta = malloc(size + 1))) return fail(w, -ENOMEM, "out of memory");
    w->meta_kind = tf;
    w->meta_len = size;
    w->meta_n = 0;
    w->pad = cn_tar_padding(size);
    w->st = ST_META;
    return size ? 0 : (w->st = ST_PAD, 0);
  }
  if (tf == 'S') return fail(w, -ENOTSUP, "a GNU sparse file (the format has none)");
  return header_toc_entry(w, b);
}

static int meta_end(cn_chunked_writer *w) {
  w->meta[w->meta_len] = '\0';
  int r = 0;
  pending *p = &w->p;
  switch (w->meta_kind) {
  case 'x': r = pax_parse(w); break;
  case 'L':
    free(p->path);
    if (!(p->path = strdup((char *)w->meta))) r = fail(w, -ENOMEM, "out of memory");
    break;
  case 'K':
    free(p->linkpath);
    if (!(p->linkpath = strdup((char *)w->meta))) r = fail(w, -ENOMEM, "out of memory");
    break;
  default: break; /* 'g': a global PAX header (nothing cairn writes reads it) */
  }
  free(w->meta);
  w->meta = NULL;
  w->st = ST_PAD;
  return r;
}

int cn_chunked_write(cn_chunked_writer *w, const void *buf, size_t len) {
  const unsigned char *s = buf;
  int r = 0;
  while (len > 0 && r == 0) {
    size_t n = 0;
    switch (w->st) {
    case ST_HEADER:
      n = BLOCK - w->blk_n < len ? BLOCK - w->blk_n : len;
      memcpy(w->blk + w->blk_n, s, n);
      w->blk_n += n;
      if (w->blk_n == BLOCK) r = header_block(w);
      break;
    case ST_META:
      n = w->meta_len - w->meta_n < len ? w->meta_len - w->meta_n : len;
      memcpy(w->meta + w->meta_n, s, n);
      w->meta_n += n;
      r = emit(w, s, n);
      if (r == 0 && w->meta_n == w->meta_len) r = meta_end(w);
      break;
    case ST_DATA:
      n = w->piece_left < len ? w->piece_left : len;
      EVP_DigestUpdate(w->file_md, s, n);
      EVP_DigestUpdate(w->piece_md, s, n);
      r = emit(w, s, n);
      w->piece_left -= n;
      w->file_done += n;
      if (r == 0 && w->file_done == w->file_size) {
        r = file_end(w);
        w->st = ST_PAD;
      } else if (r == 0 && w->piece_left == 0) {
        r = piece_end(w);
        if (r == 0) r = piece_start(w);
      }
      break;
    case ST_OTHER:
      n = w->left < len ? w->left : len;
      r = emit(w, s, n);
      if ((w->left -= n) == 0) w->st = ST_PAD;
      break;
    case ST_PAD:
      n = w->pad < len ? w->pad : len;
      r = emit(w, s, n);
      w->pad -= n;
      break;
    case ST_TRAILER:
      n = len;
      if (w->fmt == CN_CHUNKED_ZSTD) r = emit(w, s, n);
      break;
    }
    if (w->st == ST_PAD && w->pad == 0) w->st = ST_HEADER;
    s += n;
    len -= n;
  }
  return r;
}

/* ---- the end -------------------------------------------------------------- */

static void le32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static void le64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static int finish_zstd(cn_chunked_writer *w, const char *js, size_t js_len,
                       cn_chunked_result *res) {
  size_t cap = ZSTD_compressBound(js_len);
  unsigned char *frame = malloc(cap);
  if (!frame) return fail(w, -ENOMEM, "out of memory");
  size_t clen = ZSTD_compress(frame, cap, js, js_len, ZSTD_CLEVEL_DEFAULT);
  int r = 0;
  if (ZSTD_isError(clen) || clen > UINT32_MAX) r = fail(w, -EIO, "zstd: compressing the TOC");
  unsigned char h[8];
  le32(h, SKIPPABLE_MAGIC);
  le32(h + 4, (uint32_t)clen);
  if (r == 0) r = put(w, h, sizeof h);
  uint64_t off = w->out_pos;
  if (r == 0) r = put(w, frame, clen);
  if (r == 0) {
    sha256_of(frame, clen, res->checksum);
    snprintf(res->position, sizeof res->position, "%llu:%zu:%zu:1", (unsigned long long)off, clen,
             js_len);
    unsigned char f[48];
    le32(f, SKIPPABLE_MAGIC);
    le32(f + 4, 40);
    le64(f + 8, off);
    le64(f + 16, clen);
    le64(f + 24, js_len);
    le64(f + 32, 1);
    memcpy(f + 40, "GnUlInUx", 8);
    r = put(w, f, sizeof f);
  }
  free(frame);
  return r;
}

/* h: the ustar header of a regular file NAME (0644, root, mtime 0) of
 * size bytes, its checksum set, as the estargz package writes its own
 * entries. */
static void file_header(cn_tar_header *h, const char *name, uint64_t size) {
  memset(h, 0, sizeof(*h));
  snprintf(h->name, sizeof(h->name), "%s", name);
  memcpy(h->mode, "0000644", 8);
  memcpy(h->uid, "0000000", 8);
  memcpy(h->gid, "0000000", 8);
  char num[24];
  snprintf(num, sizeof num, "%011llo", (unsigned long long)size & 077777777777ull);
  memcpy(h->size, num, 12);
  memcpy(h->mtime, "00000000000", 12);
  h->typeflag = '0';
  memcpy(h->magic, "ustar\0", 6);
  memcpy(h->version, "00", 2);
  snprintf(h->chksum, sizeof(h->chksum), "%06o", (unsigned)cn_tar_checksum(h).sum);
  h->chksum[7] = ' ';
}

static int finish_estargz(cn_chunked_writer *w, const char *js, size_t js_len,
                          cn_chunked_result *res) {
  uint64_t toc_off = w->out_pos;
  cn_tar_header h;
  file_header(&h, "stargz.index.json", js_len);
  static const unsigned char zeros[2 * BLOCK];
  int r = emit(w, &h, BLOCK);
  if (r == 0) r = emit(w, js, js_len);
  if (r == 0) r = emit(w, zeros, cn_tar_padding(js_len));
  if (r == 0) r = emit(w, zeros, sizeof zeros);
  if (r == 0) r = cut(w);
  if (r < 0) return r;
  sha256_of(js, js_len, res->toc_digest);
  /* the footer: an empty gzip member, FEXTRA "SG" = "%016xSTARGZ" */
  unsigned char f[51] = {0x1f, 0x8b, 8, 4, 0, 0, 0, 0, 0, 0xff, 26, 0, 'S', 'G', 22, 0};
  char x[23];
  snprintf(x, sizeof x, "%016llxSTARGZ", (unsigned long long)toc_off);
  memcpy(f + 16, x, 22);
  static const unsigned char empty[5] = {1, 0, 0, 0xff, 0xff}; /* a final stored block */
  memcpy(f + 38, empty, 5);                                    /* CRC32 and ISIZE: 0 */
  return put(w, f, sizeof f);
}

int cn_chunked_prefetch(cn_chunked_writer *w, const char *const *paths, size_t n) {
  if (!w->prefetch && !(w->prefetch = json_object())) return fail(w, -ENOMEM, "out of memory");
  char norm[CN_TOC_PATH_MAX + 1];
  for (size_t i = 0; i < n; i++) {
    if (cn_toc_path_normalize(paths[i], norm, NULL) < 0 || !norm[0] ||
        json_object_get(w->prefetch, norm))
      continue; /* (a path no TOC can name; the first rank of a path) */
    if (json_object_set_new(w->prefetch, norm, json_integer((json_int_t)i + 1)) < 0)
      return fail(w, -ENOMEM, "out of memory");
  }
  return 0;
}

/* Each regular file the access list names gets its rank, CN_TOC_PREFETCH
 * (an entry's first piece: the one with "type":"reg"). */
static int prefetch_mark(cn_chunked_writer *w) {
  size_t i;
  json_t *e;
  char norm[CN_TOC_PATH_MAX + 1];
  json_array_foreach(w->entries, i, e) {
    const char *type = json_string_value(json_object_get(e, "type"));
    const char *name = json_string_value(json_object_get(e, "name"));
    if (!type || !name || strcmp(type, "reg") != 0 || cn_toc_path_normalize(name, norm, NULL) < 0)
      continue;
    json_t *rank = json_object_get(w->prefetch, norm);
    if (rank && json_object_set(e, CN_TOC_PREFETCH, rank) < 0)
      return fail(w, -ENOMEM, "out of memory");
    if (rank) w->n_prefetch++;
  }
  return 0;
}

size_t cn_chunked_prefetched(const cn_chunked_writer *w) { return w->n_prefetch; }

/* ---- eStargz: the access list's files first ------------------------------ */

enum { PK_HEADER, PK_META, PK_DATA, PK_REST, PK_DROP };

struct cn_tar_pick {
  const cn_chunked_writer *w; /* its prefetch map names the files that move */
  bool moved;                 /* the first pass: those; the second: the others */
  cn_chunked_out_fn fwd;
  void *arg;
  int st;
  unsigned char blk[BLOCK];
  size_t blk_n;
  unsigned char *chain; /* the entry's meta headers and contents so far */
  size_t chain_n, chain_cap, meta_at;
  uint64_t meta_len, left;
  char meta_kind;
  char *path; /* a PAX path or GNU long name */
  bool has_size, keep;
  uint64_t size;
  size_t n; /* entries passed on */
};

int cn_tar_pick_new(const cn_chunked_writer *w, bool moved, cn_chunked_out_fn fwd, void *arg,
                    cn_tar_pick **out) {
  cn_tar_pick *p = calloc(1, sizeof *p);
  *out = p;
  if (!p) return -ENOMEM;
  *p = (cn_tar_pick){.w = w, .moved = moved, .fwd = fwd, .arg = arg};
  return 0;
}

void cn_tar_pick_free(cn_tar_pick *p) {
  if (!p) return;
  free(p->chain);
  free(p->path);
  free(p);
}

size_t cn_tar_pick_count(const cn_tar_pick *p) { return p->n; }

static int chain_add(cn_tar_pick *p, const void *buf, size_t len) {
  if (p->chain_n + len > p->chain_cap) {
    size_t cap = p->chain_cap ? p->chain_cap : 4096;
    while (cap < p->chain_n + len) cap *= 2;
    unsigned char *c = realloc(p->chain, cap);
    if (!c) return -ENOMEM;
    p->chain = c;
    p->chain_cap = cap;
  }
  memcpy(p->chain + p->chain_n, buf, len);
  p->chain_n += len;
  return 0;
}

/* A meta entry's content read: the path and size it gives the next entry. */
static int pick_meta(cn_tar_pick *p) {
  const char *m = (const char *)p->chain + p->meta_at, *end = m + p->meta_len;
  if (p->meta_kind == 'L') {
    free(p->path);
    return (p->path = strndup(m, p->meta_len)) ? 0 : -ENOMEM;
  }
  if (p->meta_kind != 'x') return 0;
  while (m < end) { /* "LEN KEY=VALUE\n" (malformed: the writer says so) */
    char *e;
    unsigned long len = strtoul(m, &e, 10);
    if (e == m || *e != ' ' || len < 5 || len > (size_t)(end - m) || m[len - 1] != '\n') break;
    const char *key = e + 1, *rec_end = m + len - 1;
    if (rec_end - key > 5 && memcmp(key, "path=", 5) == 0) {
      free(p->path);
      if (!(p->path = strndup(key + 5, (size_t)(rec_end - key - 5)))) return -ENOMEM;
    } else if (rec_end - key > 5 && memcmp(key, "size=", 5) == 0) {
      p->size = strtoull(key + 5, NULL, 10);
      p->has_size = true;
    }
    m += len;
  }
  return 0;
}

static int pick_header(cn_tar_pick *p) {
  const cn_tar_header *b = (const cn_tar_header *)p->blk;
  p->blk_n = 0;
  if (cn_tar_block_zero(b)) { /* the end of the archive: the second pass's */
    p->st = p->moved ? PK_DROP : PK_REST;
    return p->moved ? 0 : p->fwd(b, BLOCK, p->arg);
  }
  int r = chain_add(p, b, BLOCK);
  if (r < 0) return r;
  char tf = b->typeflag;
  uint64_t size;
  if (CN_TAR_NUMBER(b, size, &size) < 0) size = 0; /* (the writer says so) */
  if (cn_tar_is_meta(tf)) {
    if (size > META_MAX) size = 0;
    p->meta_kind = tf;
    p->meta_at = p->chain_n;
    p->meta_len = size;
    p->left = size + cn_tar_padding(size);
    p->st = p->left ? PK_META : PK_HEADER;
    return 0;
  }
  if (p->has_size) size = p->size;
  char *name = p->path;
  p->path = NULL;
  if (!name && !(name = cn_tar_name(b))) return -ENOMEM;
  char norm[CN_TOC_PATH_MAX + 1];
  bool reg = cn_tar_is_regular(tf);
  bool moves = reg && cn_toc_path_normalize(name, norm, NULL) == 0 &&
               json_object_get(p->w->prefetch, norm) != NULL;
  free(name);
  p->keep = moves == p->moved;
  r = p->keep ? p->fwd(p->chain, p->chain_n, p->arg) : 0;
  p->n += p->keep;
  p->chain_n = 0;
  p->has_size = false;
  p->left = size + cn_tar_padding(size);
  p->st = p->left ? PK_DATA : PK_HEADER;
  return r;
}

int cn_tar_pick_write(cn_tar_pick *p, const void *buf, size_t len) {
  const unsigned char *s = buf;
  int r = 0;
  while (len > 0 && r == 0) {
    size_t n = len;
    switch (p->st) {
    case PK_HEADER:
      n = BLOCK - p->blk_n < len ? BLOCK - p->blk_n : len;
      memcpy(p->blk + p->blk_n, s, n);
      p->blk_n += n;
      if (p->blk_n == BLOCK) r = pick_header(p);
      break;
    case PK_META:
      n = p->left < len ? (size_t)p->left : len;
      r = chain_add(p, s, n);
      if (r == 0 && (p->left -= n) == 0) {
        r = pick_meta(p);
        p->st = PK_HEADER;
      }
      break;
    case PK_DATA:
      n = p->left < len ? (size_t)p->left : len;
      r = p->keep ? p->fwd(s, n, p->arg) : 0;
      if ((p->left -= n) == 0) p->st = PK_HEADER;
      break;
    case PK_REST: r = p->fwd(s, n, p->arg); break;
    default: break; /* PK_DROP */
    }
    s += n;
    len -= n;
  }
  return r;
}

int cn_chunked_landmark(cn_chunked_writer *w) {
  struct {
    cn_tar_header h;
    unsigned char data[BLOCK];
  } e = {.data = {0xf}}; /* its one byte, as the estargz package writes it */
  file_header(&e.h, ".prefetch.landmark", 1);
  return cn_chunked_write(w, &e, sizeof e);
}

int cn_chunked_finish(cn_chunked_writer *w, cn_chunked_result *res) {
  memset(res, 0, sizeof *res);
  if (w->st != ST_TRAILER && !(w->st == ST_HEADER && w->blk_n == 0))
    return fail(w, -EBADMSG, "the tar ends inside an entry");
  int r = cut(w);
  if (r == 0 && w->prefetch) r = prefetch_mark(w);
  if (r < 0) return r;
  json_t *toc = json_pack("{s:i, s:O}", "version", 1, "entries", w->entries);
  char *js = toc ? json_dumps(toc, JSON_COMPACT) : NULL;
  json_decref(toc);
  if (!js) return fail(w, -ENOMEM, "out of memory");
  size_t js_len = strlen(js);
  r = w->fmt == CN_CHUNKED_ZSTD ? finish_zstd(w, js, js_len, res)
                                : finish_estargz(w, js, js_len, res);
  free(js);
  if (r == 0) cn_sha256_final_digest(w->tar_md, res->diff_id);
  return r;
}

json_t *cn_chunked_annotations(const cn_chunked_result *res) {
  /* zstd:chunked's with the prefix podman 4.3 reads (cairn reads it and
   * the later "io.github.containers." one) */
  if (res->position[0])
    return json_pack("{s:s, s:s}", "io.containers.zstd-chunked.manifest-position", res->position,
                     "io.containers.zstd-chunked.manifest-checksum", res->checksum);
  return json_pack("{s:s}", "containerd.io/snapshot/stargz/toc.digest", res->toc_digest);
}

int cn_chunked_new(enum cn_chunked_format fmt, cn_chunked_out_fn out, void *arg,
                   cn_chunked_writer **wp) {
  cn_chunked_writer *w = calloc(1, sizeof *w);
  *wp = w;
  if (!w) return -ENOMEM;
  w->fmt = fmt;
  w->out = out;
  w->arg = arg;
  w->entries = json_array();
  w->tar_md = EVP_MD_CTX_new();
  w->file_md = EVP_MD_CTX_new();
  w->piece_md = EVP_MD_CTX_new();
  if (!w->entries || !w->tar_md || !w->file_md || !w->piece_md)
    return fail(w, -ENOMEM, "out of memory");
  EVP_DigestInit_ex(w->tar_md, EVP_sha256(), NULL);
  if (fmt == CN_CHUNKED_ZSTD) {
    if (!(w->zc = ZSTD_createCCtx())) return fail(w, -ENOMEM, "out of memory");
    ZSTD_CCtx_setParameter(w->zc, ZSTD_c_compressionLevel, ZSTD_CLEVEL_DEFAULT);
  } else {
    /* gzip members with no name and no time: the same tar gives the same blob */
    if (deflateInit2(&w->z, 6, Z_DEFLATED, 16 + 15, 8, Z_DEFAULT_STRATEGY) != Z_OK)
      return fail(w, -ENOMEM, "out of memory");
    w->z_ready = true;
  }
  return 0;
}

void cn_chunked_free(cn_chunked_writer *w) {
  if (!w) return;
  json_decref(w->prefetch);
  if (w->zc) ZSTD_freeCCtx(w->zc);
  if (w->z_ready) deflateEnd(&w->z);
  EVP_MD_CTX_free(w->tar_md);
  EVP_MD_CTX_free(w->file_md);
  EVP_MD_CTX_free(w->piece_md);
  json_decref(w->entries);
  pending_clear(&w->p);
  free(w->meta);
  free(w);
}
