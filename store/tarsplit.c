/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tarsplit.c — exact layers: a record of a layer tar's bytes minus its
 * files' contents, from which the tar is written again byte for byte, the
 * way containers/storage keeps tar-split data (layer.c records, push
 * regenerates, fsck verifies).
 *
 * The recorder segments the uncompressed stream itself, in 512-byte tar
 * blocks, independently of libarchive (which does not hand out raw
 * headers): a header block, its pax ('x', 'g') and GNU long-name ('L',
 * 'K') records, padding, the end blocks and anything after them are kept
 * raw (an old GNU sparse header's extension blocks too). A regular
 * file's content ('0', NUL, '7', not sparse, not a whiteout, not a
 * directory-by-trailing-slash) becomes a reference: its size and
 * XXH3-128, which is the name of the blob the import stored for it.
 * Invariants:
 *  - every byte of the stream is in the record, raw or by reference, in
 *    order: a misparse (a header we do not understand) only makes more
 *    bytes raw, it never loses one;
 *  - a reference is kept only if a staged entry of the layer names that
 *    blob (so gc, which keeps blobs entries name, keeps it) with that size;
 *    any other span is inlined at finish from its blob file, or the layer
 *    is not recorded at all (finish returns 1), as it is when the stream
 *    ends inside a content span (those bytes were hashed, not kept);
 *  - regeneration checks each blob's size, and its caller checks the
 *    sha256 of the whole against the diff_id, so a record never yields a
 *    wrong tar silently.
 *
 * Format (zlib-compressed as a whole): "CNTS" 0x01, then ops: 'R' varint N
 * and N raw bytes; 'F' varint SIZE and the 16-byte XXH3-128 (canonical) of
 * a content span; 'E' the end. Varints are LEB128.
 */
#include "libcairn_tarsplit.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>
#include <zlib.h>

#define TS_MAGIC "CNTS\x01"
#define TS_MAGIC_LEN 5
#define TS_RAW_MAX (64 * 1024)
#define TS_META_MAX (8u << 20) /* pax / long-name records parsed up to this size */

enum ts_mode { TS_HDR, TS_META, TS_DATA, TS_SKIP, TS_EXT, TS_TRAIL };

struct ts_file {
  unsigned char digest[16];
  uint64_t size;
};

struct cn_tarsplit {
  cairn_store *st;
  z_stream z;
  bool z_ok;
  unsigned char *out;
  size_t out_len, out_cap;
  int err; /* first failure (ENOMEM) */
  unsigned char raw[TS_RAW_MAX];
  size_t raw_len;
  /* the parser */
  enum ts_mode mode;
  unsigned char hdr[512];
  size_t hdr_len;
  uint64_t left, pad;
  char meta_type;
  char *meta;
  size_t meta_len;
  bool meta_whole;
  int64_t pax_size; /* -1: none */
  bool pax_sparse, uncertain;
  char *long_name, *pax_path;
  XXH3_state_t *xxh;
  uint64_t data_size;
  struct ts_file *files;
  size_t n_files, cap_files;
};

/* ---- output ------------------------------------------------------------- */

static void ts_deflate(cn_tarsplit *ts, const void *buf, size_t len, int flush) {
  if (ts->err) return;
  ts->z.next_in = (unsigned char *)buf;
  ts->z.avail_in = (uInt)len;
  do {
    if (ts->out_cap - ts->out_len < 4096) {
      size_t cap = ts->out_cap ? 2 * ts->out_cap : 64 * 1024;
      unsigned char *p = realloc(ts->out, cap);
      if (!p) {
        ts->err = -ENOMEM;
        return;
      }
      ts->out = p;
      ts->out_cap = cap;
    }
    ts->z.next_out = ts->out + ts->out_len;
    ts->z.avail_out = (uInt)(ts->out_cap - ts->out_len);
    int r = deflate(&ts->z, flush);
    ts->out_len = ts->out_cap - ts->z.avail_out;
    if (r == Z_STREAM_ERROR) {
      ts->err = -EIO;
      return;
    }
    if (flush == Z_FINISH && r == Z_STREAM_END) return;
  } while (ts->z.avail_in > 0 || ts->z.avail_out == 0 || flush == Z_FINISH);
}

static size_t varint_encode(uint64_t v, unsigned char *out) {
  size_t n = 0;
  do {
    unsigned char b = v & 0x7f;
    v >>= 7;
    out[n++] = b | (v ? 0x80 : 0);
  } while (v);
  return n;
}

static void ts_raw_flush(cn_tarsplit *ts) {
  if (ts->raw_len == 0) return;
  unsigned char h[11] = {'R'};
  size_t n = 1 + varint_encode(ts->raw_len, h + 1);
  ts_deflate(ts, h, n, Z_NO_FLUSH);
  ts_deflate(ts, ts->raw, ts->raw_len, Z_NO_FLUSH);
  ts->raw_len = 0;
}

static void ts_raw(cn_tarsplit *ts, const unsigned char *p, size_t len) {
  while (len > 0) {
    size_t k = TS_RAW_MAX - ts->raw_len;
    if (k > len) k = len;
    memcpy(ts->raw + ts->raw_len, p, k);
    ts->raw_len += k;
    p += k;
    len -= k;
    if (ts->raw_len == TS_RAW_MAX) ts_raw_flush(ts);
  }
}

static void ts_file_op(cn_tarsplit *ts, const unsigned char digest[16], uint64_t size) {
  ts_raw_flush(ts);
  unsigned char h[11 + 16] = {'F'};
  size_t n = 1 + varint_encode(size, h + 1);
  memcpy(h + n, digest, 16);
  ts_deflate(ts, h, n + 16, Z_NO_FLUSH);
}

/* ---- the parser --------------------------------------------------------- */

static void ts_overrides_clear(cn_tarsplit *ts) {
  ts->pax_size = -1;
  ts->pax_sparse = ts->uncertain = false;
  free(ts->long_name);
  free(ts->pax_path);
  ts->long_name = ts->pax_path = NULL;
}

/* Reads the pax records this parser cares about: size, path, GNU.sparse.*.
 * p is the pax data as the tar holds it: len bytes, no terminator, so the
 * record's length is read digit by digit within them (strtoul ran past a
 * record of digits only: the fuzzer's crash-270792fd). */
static void pax_parse(cn_tarsplit *ts, const char *p, size_t len) {
  while (len > 0) {
    size_t digits = 0, n = 0;
    while (digits < len && p[digits] >= '0' && p[digits] <= '9' && n <= len)
      n = n * 10 + (size_t)(p[digits++] - '0');
    if (digits == 0 || digits == len || p[digits] != ' ' || n == 0 || n > len || p[n - 1] != '\n') {
      ts->uncertain = true;
      return;
    }
    const char *kv = p + digits + 1, *stop = p + n - 1;
    const char *eq = memchr(kv, '=', (size_t)(stop - kv));
    if (!eq) {
      ts->uncertain = true;
      return;
    }
    size_t klen = (size_t)(eq - kv), vlen = (size_t)(stop - eq - 1);
    if (klen == 4 && memcmp(kv, "size", 4) == 0) {
      char buf[32];
      if (vlen == 0 || vlen >= sizeof(buf)) {
        ts->uncertain = true;
      } else {
        memcpy(buf, eq + 1, vlen);
        buf[vlen] = '\0';
        char *e;
        unsigned long long v = strtoull(buf, &e, 10);
        if (*e || v > INT64_MAX)
          ts->uncertain = true;
        else
          ts->pax_size = (int64_t)v;
      }
    } else if (klen == 4 && memcmp(kv, "path", 4) == 0) {
      free(ts->pax_path);
      ts->pax_path = strndup(eq + 1, vlen);
      if (!ts->pax_path) ts->uncertain = true;
    } else if (klen >= 10 && memcmp(kv, "GNU.sparse", 10) == 0) {
      ts->pax_sparse = true;
    }
    p += n;
    len -= n;
  }
}

static void ts_meta_done(cn_tarsplit *ts) {
  if (!ts->meta_whole) {
    ts->uncertain = true;
  } else if (ts->meta_type == 'x') {
    pax_parse(ts, ts->meta, ts->meta_len);
  } else if (ts->meta_type == 'L') {
    free(ts->long_name);
    ts->long_name = strndup(ts->meta ? ts->meta : "", ts->meta_len);
    if (!ts->long_name) ts->uncertain = true;
  }
  free(ts->meta);
  ts->meta = NULL;
  ts->meta_len = 0;
}

/* True if the entry's name makes it something other than a file's
 * content for the importer: a whiteout (no data kept) or a name ending in
 * '/' (a directory to old tars). */
static bool name_excluded(cn_tarsplit *ts, const cn_tar_header *h) {
  cairn_autofree char *own = NULL;
  const char *name = ts->long_name ? ts->long_name : ts->pax_path;
  if (!name && !(name = own = cn_tar_name(h))) return true; /* (out of memory: kept raw) */
  size_t n = strlen(name);
  if (n > 0 && name[n - 1] == '/') return true;
  const char *base = strrchr(name, '/');
  base = base ? base + 1 : name;
  return strncmp(base, ".wh.", 4) == 0;
}

static void ts_header(cn_tarsplit *ts) {
  const cn_tar_header *h = (const cn_tar_header *)ts->hdr;
  if (cn_tar_block_zero(h)) return; /* an end block: raw, stay */
  uint64_t size;
  if (!cn_tar_checksum_ok(h) || CN_TAR_NUMBER(h, size, &size) < 0) {
    ts->mode = TS_TRAIL; /* not a tar header: everything from here is raw */
    return;
  }
  char type = h->typeflag;
  if (cn_tar_is_meta(type)) {
    ts->meta_type = type;
    ts->meta_len = 0;
    ts->meta_whole = size <= TS_META_MAX;
    ts->meta = NULL;
    if (ts->meta_whole && size > 0 && !(ts->meta = malloc(size))) ts->meta_whole = false;
    ts->left = size;
    ts->pad = cn_tar_padding(size);
    ts->mode = TS_META;
    if (size == 0) {
      ts_meta_done(ts);
      ts->mode = TS_HDR;
    }
    return;
  }
  uint64_t eff = ts->pax_size >= 0 ? (uint64_t)ts->pax_size : size;
  bool content = cn_tar_is_regular(type) && eff > 0 && !ts->pax_sparse && !ts->uncertain &&
                 !name_excluded(ts, h);
  ts_overrides_clear(ts);
  uint64_t pad = cn_tar_padding(eff);
  if (content) {
    ts->mode = TS_DATA;
    ts->left = eff;
    ts->pad = pad;
    ts->data_size = eff;
    XXH3_128bits_reset(ts->xxh);
  } else {
    ts->left = eff + pad;
    ts->mode = ts->left ? TS_SKIP : TS_HDR;
    /* an old GNU sparse header whose map goes on in extension blocks:
     * they come first (raw), then the data */
    if (type == 'S' && h->gnu.isextended) ts->mode = TS_EXT;
  }
}

/* Takes up to len bytes of p (*taken) into the 512-byte block being read
 * (a header, or a sparse extension block) and the raw record: true once
 * the block is whole, in ts->hdr. */
static bool ts_block(cn_tarsplit *ts, const unsigned char *p, size_t len, size_t *taken) {
  size_t k = 512 - ts->hdr_len;
  if (k > len) k = len;
  memcpy(ts->hdr + ts->hdr_len, p, k);
  ts_raw(ts, p, k);
  ts->hdr_len += k;
  *taken = k;
  if (ts->hdr_len < 512) return false;
  ts->hdr_len = 0;
  return true;
}

void cn_tarsplit_feed(cn_tarsplit *ts, const void *buf, size_t len) {
  const unsigned char *p = buf;
  while (len > 0 && !ts->err) {
    size_t k;
    switch (ts->mode) {
    case TS_HDR:
      if (ts_block(ts, p, len, &k)) ts_header(ts);
      break;
    case TS_META:
      k = ts->left < len ? (size_t)ts->left : len;
      ts_raw(ts, p, k);
      if (ts->meta) memcpy(ts->meta + ts->meta_len, p, k);
      ts->meta_len += k;
      ts->left -= k;
      if (ts->left == 0) {
        ts_meta_done(ts);
        ts->left = ts->pad;
        ts->mode = ts->left ? TS_SKIP : TS_HDR;
      }
      break;
    case TS_DATA:
      k = ts->left < len ? (size_t)ts->left : len;
      XXH3_128bits_update(ts->xxh, p, k);
      ts->left -= k;
      if (ts->left == 0) {
        XXH128_canonical_t c;
        XXH128_canonicalFromHash(&c, XXH3_128bits_digest(ts->xxh));
        ts_file_op(ts, c.digest, ts->data_size);
        struct ts_file *v = cn_array_grow(ts->files, ts->n_files, &ts->cap_files, sizeof(*v));
        if (!v) {
          ts->err = -ENOMEM;
          return;
        }
        ts->files = v;
        memcpy(v[ts->n_files].digest, c.digest, 16);
        v[ts->n_files++].size = ts->data_size;
        ts->left = ts->pad;
        ts->mode = ts->left ? TS_SKIP : TS_HDR;
      }
      break;
    case TS_EXT: /* a sparse extension block: byte 504 says if one follows */
      if (ts_block(ts, p, len, &k) && !ts->hdr[504]) ts->mode = ts->left ? TS_SKIP : TS_HDR;
      break;
    case TS_SKIP:
      k = ts->left < len ? (size_t)ts->left : len;
      ts_raw(ts, p, k);
      ts->left -= k;
      if (ts->left == 0) ts->mode = TS_HDR;
      break;
    default: k = len; ts_raw(ts, p, k);
    }
    p += k;
    len -= k;
  }
}

int cn_tarsplit_new(cairn_store *st, cn_tarsplit **out) {
  cn_tarsplit *ts = calloc(1, sizeof(*ts));
  if (!ts) return cairn_fail(st, -ENOMEM, "out of memory recording the tar");
  ts->st = st;
  ts->pax_size = -1;
  ts->xxh = XXH3_createState();
  if (!ts->xxh || deflateInit(&ts->z, 6) != Z_OK) {
    XXH3_freeState(ts->xxh);
    free(ts);
    return cairn_fail(st, -ENOMEM, "out of memory recording the tar");
  }
  ts->z_ok = true;
  ts_deflate(ts, TS_MAGIC, TS_MAGIC_LEN, Z_NO_FLUSH);
  *out = ts;
  return 0;
}

void cn_tarsplit_free(cn_tarsplit *ts) {
  if (!ts) return;
  if (ts->z_ok) deflateEnd(&ts->z);
  XXH3_freeState(ts->xxh);
  ts_overrides_clear(ts);
  free(ts->meta);
  free(ts->out);
  free(ts->files);
  free(ts);
}

/* ---- reading a record --------------------------------------------------- */

struct ts_reader {
  z_stream z;
  unsigned char buf[64 * 1024];
  size_t pos, avail;
  bool end;
};

static int reader_init(struct ts_reader *rd, const void *data, size_t len) {
  memset(&rd->z, 0, sizeof(rd->z));
  rd->pos = rd->avail = 0;
  rd->end = false;
  if (inflateInit(&rd->z) != Z_OK) return -ENOMEM;
  rd->z.next_in = (unsigned char *)data;
  rd->z.avail_in = (uInt)len;
  return 0;
}

/* Up to n bytes at *p; 0 at the end; -EBADMSG if the stream is corrupt. */
static ssize_t reader_peek(struct ts_reader *rd, const unsigned char **p, size_t n) {
  if (rd->pos == rd->avail) {
    if (rd->end) return 0;
    rd->z.next_out = rd->buf;
    rd->z.avail_out = sizeof(rd->buf);
    int r = inflate(&rd->z, Z_NO_FLUSH);
    if (r == Z_STREAM_END)
      rd->end = true;
    else if (r != Z_OK)
      return -EBADMSG;
    rd->pos = 0;
    rd->avail = sizeof(rd->buf) - rd->z.avail_out;
    if (rd->avail == 0) return rd->end ? 0 : -EBADMSG;
  }
  size_t k = rd->avail - rd->pos;
  if (k > n) k = n;
  *p = rd->buf + rd->pos;
  rd->pos += k;
  return (ssize_t)k;
}

static int reader_exact(struct ts_reader *rd, void *dst, size_t n) {
  unsigned char *d = dst;
  while (n > 0) {
    const unsigned char *p;
    ssize_t k = reader_peek(rd, &p, n);
    if (k <= 0) return -EBADMSG;
    memcpy(d, p, (size_t)k);
    d += k;
    n -= (size_t)k;
  }
  return 0;
}

static int reader_varint(struct ts_reader *rd, uint64_t *v) {
  *v = 0;
  for (unsigned shift = 0; shift < 64; shift += 7) {
    unsigned char b;
    if (reader_exact(rd, &b, 1) < 0) return -EBADMSG;
    *v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) return 0;
  }
  return -EBADMSG;
}

/* One op of the record: its type ('R', 'F', 'E'), and for 'R' its length
 * (the bytes follow), for 'F' the size and digest. */
static int reader_op(struct ts_reader *rd, char *op, uint64_t *n, unsigned char digest[16]) {
  unsigned char c;
  if (reader_exact(rd, &c, 1) < 0) return -EBADMSG;
  *op = (char)c;
  if (c == 'E') return 0;
  if (c != 'R' && c != 'F') return -EBADMSG;
  if (reader_varint(rd, n) < 0) return -EBADMSG;
  return c == 'F' ? reader_exact(rd, digest, 16) : 0;
}

/* ---- finishing: references a staged entry names, or inline ------------- */

static int blob_name_cmp(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Appends the content of blob name (size bytes) as raw bytes; 1 if the
 * blob is not there with that size. */
static int ts_inline_blob(cn_tarsplit *ts, const char *name, uint64_t size) {
  int fd = cairn_blob_open(ts->st, name);
  if (fd < 0) return 1;
  struct stat sb;
  if (fstat(fd, &sb) < 0 || (uint64_t)sb.st_size != size) {
    close(fd);
    return 1;
  }
  unsigned char buf[64 * 1024];
  uint64_t got = 0;
  ssize_t k;
  while ((k = read(fd, buf, sizeof(buf))) > 0) {
    ts_raw(ts, buf, (size_t)k);
    got += (uint64_t)k;
  }
  close(fd);
  return k < 0 || got != size ? 1 : 0;
}

/* Re-encodes the record in ts->out, inlining the references not in names. */
static int ts_rewrite(cn_tarsplit *ts, char **names, size_t n_names) {
  unsigned char *old = ts->out;
  size_t old_len = ts->out_len;
  ts->out = NULL;
  ts->out_len = ts->out_cap = 0;
  deflateEnd(&ts->z);
  memset(&ts->z, 0, sizeof(ts->z));
  ts->z_ok = deflateInit(&ts->z, 6) == Z_OK;
  if (!ts->z_ok) {
    free(old);
    return -ENOMEM;
  }
  struct ts_reader *rd = malloc(sizeof(*rd));
  int r = rd ? reader_init(rd, old, old_len) : -ENOMEM;
  unsigned char magic[TS_MAGIC_LEN];
  if (r == 0 &&
      (reader_exact(rd, magic, sizeof(magic)) < 0 || memcmp(magic, TS_MAGIC, TS_MAGIC_LEN)))
    r = -EBADMSG;
  if (r == 0) ts_deflate(ts, TS_MAGIC, TS_MAGIC_LEN, Z_NO_FLUSH);
  while (r == 0) {
    char op;
    uint64_t n;
    unsigned char digest[16];
    if ((r = reader_op(rd, &op, &n, digest)) < 0) break;
    if (op == 'E') break;
    if (op == 'R') {
      while (n > 0 && r == 0) {
        const unsigned char *p;
        ssize_t k = reader_peek(rd, &p, n > SIZE_MAX ? SIZE_MAX : (size_t)n);
        if (k <= 0)
          r = -EBADMSG;
        else
          ts_raw(ts, p, (size_t)k), n -= (uint64_t)k;
      }
      continue;
    }
    char hex[33], *key = hex;
    cn_hex_encode(digest, 16, hex);
    if (n_names && bsearch(&key, names, n_names, sizeof(*names), blob_name_cmp))
      ts_file_op(ts, digest, n);
    else
      r = ts_inline_blob(ts, hex, n);
  }
  if (rd) inflateEnd(&rd->z);
  free(rd);
  free(old);
  return r;
}

int cn_tarsplit_finish(cn_tarsplit *ts, void **data, size_t *len) {
  cairn_store *st = ts->st;
  *data = NULL;
  *len = 0;
  cn_autostrv struct strv names = {0};
  {
    cn_autostmt sqlite3_stmt *q = NULL;
    int r = cn_db_prepare(st, &q, "SELECT DISTINCT blob FROM temp.stage WHERE blob IS NOT NULL");
    if (r < 0) return r;
    while ((r = sqlite3_step(q)) == SQLITE_ROW)
      if (cn_strv_push(&names, (const char *)sqlite3_column_text(q, 0)) < 0)
        return cairn_fail(st, -ENOMEM, "out of memory recording the tar");
    if (r != SQLITE_DONE) return cn_store_fail_db(st, "staging");
  }
  /* The stream ended inside a content span (a header after the end
   * blocks, say, naming more bytes than follow: libarchive never reads
   * it): those bytes were hashed, not kept, and no blob has them. */
  if (ts->mode == TS_DATA) return 1;
  if (names.n) qsort(names.v, names.n, sizeof(*names.v), blob_name_cmp);
  ts_raw_flush(ts);
  bool all = true;
  for (size_t i = 0; i < ts->n_files && all; i++) {
    char hex[33], *key = hex;
    cn_hex_encode(ts->files[i].digest, 16, hex);
    all = names.n && bsearch(&key, names.v, names.n, sizeof(*names.v), blob_name_cmp);
  }
  unsigned char e = 'E';
  ts_deflate(ts, &e, 1, Z_NO_FLUSH);
  ts_deflate(ts, NULL, 0, Z_FINISH);
  if (!all && !ts->err) {
    int r = ts_rewrite(ts, names.v, names.n);
    if (r == 1) return 1;
    if (r < 0) ts->err = r;
    ts_raw_flush(ts);
    ts_deflate(ts, &e, 1, Z_NO_FLUSH);
    ts_deflate(ts, NULL, 0, Z_FINISH);
  }
  if (ts->err)
    return cairn_fail(st, ts->err, "recording the tar: %s",
                      ts->err == -ENOMEM ? "out of memory" : "cannot compress");
  *data = ts->out;
  *len = ts->out_len;
  ts->out = NULL;
  ts->out_len = ts->out_cap = 0;
  return 0;
}

/* ---- writing the tar again ---------------------------------------------- */

int cn_tarsplit_write(cairn_store *st, const void *data, size_t len, cairn_write_fn fn, void *arg,
                      uint64_t *size_out, cairn_id sha256_out) {
  struct ts_reader *rd = malloc(sizeof(*rd));
  EVP_MD_CTX *sha = EVP_MD_CTX_new();
  unsigned char *buf = malloc(128 * 1024);
  int r = rd && sha && buf ? reader_init(rd, data, len) : -ENOMEM;
  bool z = r == 0;
  uint64_t total = 0;
  if (r == 0) EVP_DigestInit_ex(sha, EVP_sha256(), NULL);
  unsigned char magic[TS_MAGIC_LEN];
  if (r == 0 &&
      (reader_exact(rd, magic, sizeof(magic)) < 0 || memcmp(magic, TS_MAGIC, TS_MAGIC_LEN)))
    r = cairn_fail(st, -EBADMSG, "tar record: not a record");
  while (r == 0) {
    char op;
    uint64_t n;
    unsigned char digest[16];
    if (reader_op(rd, &op, &n, digest) < 0) {
      r = cairn_fail(st, -EBADMSG, "tar record: corrupt");
      break;
    }
    if (op == 'E') break;
    if (op == 'R') {
      while (n > 0 && r == 0) {
        const unsigned char *p;
        ssize_t k = reader_peek(rd, &p, n > SIZE_MAX ? SIZE_MAX : (size_t)n);
        if (k <= 0) {
          r = cairn_fail(st, -EBADMSG, "tar record: corrupt");
          break;
        }
        EVP_DigestUpdate(sha, p, (size_t)k);
        if (fn) r = fn(p, (size_t)k, arg);
        n -= (uint64_t)k;
        total += (uint64_t)k;
      }
      continue;
    }
    char hex[33];
    cn_hex_encode(digest, 16, hex);
    cairn_autoclose int fd = cairn_blob_open(st, hex);
    if (fd < 0) {
      r = cairn_fail(st, -EBADMSG, "tar record: blob %s: %s", hex, strerror(-fd));
      break;
    }
    uint64_t left = n;
    while (left > 0 && r == 0) {
      ssize_t k = read(fd, buf, left < 128 * 1024 ? (size_t)left : 128 * 1024);
      if (k <= 0) {
        r = cairn_fail(st, k < 0 ? -EIO : -EBADMSG, "tar record: blob %s: %s", hex,
                       k < 0 ? strerror(errno) : "shorter than recorded");
        break;
      }
      EVP_DigestUpdate(sha, buf, (size_t)k);
      if (fn) r = fn(buf, (size_t)k, arg);
      left -= (uint64_t)k;
      total += (uint64_t)k;
    }
    if (r == 0 && read(fd, buf, 1) != 0)
      r = cairn_fail(st, -EBADMSG, "tar record: blob %s: longer than recorded", hex);
  }
  if (r == 0) {
    cn_sha256_final_hex(sha, sha256_out);
    *size_out = total;
  } else if (r == -ENOMEM && !st->err[0]) {
    cairn_fail(st, r, "out of memory reading a tar record");
  }
  if (z) inflateEnd(&rd->z);
  free(rd);
  free(buf);
  EVP_MD_CTX_free(sha);
  return r;
}
