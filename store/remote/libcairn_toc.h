/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libcairn_toc.h — the tables of contents of lazily-pullable layers (eStargz,
 * zstd:chunked) read into cairn's own per-file records: what a lazy or
 * partial pull needs to serve a layer before its bytes have arrived, and
 * to fetch one file (or one chunk of it) by an HTTP range request
 * (doc/lazy-pulls.md). Not part of the public API; like the rest of
 * store/remote/ it is built on cairn.h alone.
 *
 * Both formats are a compressed tar whose files start on compression
 * boundaries (a gzip member, a zstd frame), with a JSON table of contents
 * at the end that gives, per file, its tar metadata, the sha256 of its
 * content and where its compressed bytes are; a large file may be cut in
 * chunks, each with its own offset and digest.
 *
 * Every input is hostile: every offset and size is checked against the
 * blob's size and each other, no sum overflows, paths are normalised (no
 * "..", no absolute escape), counts and sizes are bounded (CN_TOC_*_MAX),
 * duplicates resolved as tar extraction would (the later entry wins). A
 * failure returns a negative errno and records a one-line reason on st
 * (which may be NULL: the fuzz targets): -EBADMSG for a malformed or
 * inconsistent TOC (exit 5, integrity), -EFBIG for one over the bounds,
 * -ENOMEM.
 */
#ifndef CAIRN_PULL_TOC_H
#define CAIRN_PULL_TOC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cairn.h"

#define CN_TOC_JSON_MAX (64u << 20)         /* an uncompressed TOC */
#define CN_TOC_ENTRIES_MAX (1u << 20)       /* entries of one TOC */
#define CN_TOC_CHUNKS_MAX (1u << 20)        /* chunks of one file */
#define CN_TOC_XATTRS_MAX 128               /* extended attributes of one file */
#define CN_TOC_XATTR_VALUE_MAX (64u << 10)  /* one attribute's value (Linux's limit) */
#define CN_TOC_PATH_MAX 4096                /* a path, normalised */
#define CN_TOC_NAME_MAX 255                 /* one component of it */
#define CN_TOC_FILE_MAX (UINT64_C(1) << 60) /* a file's size */

/* The eStargz footer: an empty gzip member whose extra field holds the
 * TOC's offset; 47 bytes in the legacy stargz layout. */
#define CN_TOC_ESTARGZ_FOOTER 51
#define CN_TOC_ESTARGZ_FOOTER_LEGACY 47
/* The zstd:chunked footer: a skippable frame, its 8-byte header and 40
 * bytes (podman 4.3: the TOC's offset, length, uncompressed length, type,
 * then the magic "GnUlInUx") or 64 (later: the tar-split part's offset,
 * length and uncompressed length before the magic). */
#define CN_TOC_ZSTD_FOOTER 48
#define CN_TOC_ZSTD_FOOTER_TARSPLIT 72

typedef enum cn_toc_format {
  CN_TOC_ESTARGZ = 1,
  CN_TOC_ZSTD_CHUNKED = 2,
} cn_toc_format;

typedef enum cn_toc_type {
  CN_TOC_REG,
  CN_TOC_DIR,
  CN_TOC_SYMLINK,
  CN_TOC_HARDLINK,
  CN_TOC_CHAR,
  CN_TOC_BLOCK,
  CN_TOC_FIFO,
} cn_toc_type;

/* One compressed piece of a regular file: the bytes [off, off + csize) of
 * the blob decompress (as one gzip member or zstd frame, or a run of them)
 * to a stream whose bytes [inner, inner + usize) are the file's bytes
 * [uoff, uoff + usize). inner is eStargz's innerOffset (several small
 * files in one member), else 0. digest is "sha256:hex" of those usize
 * bytes, or "" when the TOC gives none (a file of one chunk: the entry's
 * digest covers it). */
typedef struct cn_toc_chunk {
  uint64_t off, csize;
  uint64_t inner;
  uint64_t uoff, usize;
  char digest[CAIRN_DIGEST_LEN + 1];
} cn_toc_chunk;

typedef struct cn_toc_xattr {
  char *name;
  unsigned char *value; /* not NUL-terminated */
  size_t len;
} cn_toc_xattr;

#define CN_TOC_F_LANDMARK 1u /* .prefetch.landmark or .no.prefetch.landmark */

typedef struct cn_toc_entry {
  char *path; /* normalised: relative, no "." or ".." component, no
                 slash at either end; "" is the root directory */
  char *link; /* a symlink's target as stored, a hardlink's target path
                 (normalised, naming an earlier non-directory entry);
                 NULL for other types */
  cn_toc_type type;
  uint32_t mode; /* the permission bits with setuid, setgid, sticky (07777) */
  uint32_t uid, gid;
  uint32_t dev_major, dev_minor;
  int64_t mtime_sec; /* 0 when the TOC gives none */
  uint32_t mtime_nsec;
  uint64_t size;                      /* regular files: the content's length */
  char digest[CAIRN_DIGEST_LEN + 1]; /* regular files of size > 0: the
                                          content's sha256 (always present) */
  cn_toc_xattr *xattrs;
  size_t n_xattrs;
  cn_toc_chunk *chunks; /* a regular file of size > 0: in order, covering
                           [0, size) exactly; else none */
  size_t n_chunks;
  unsigned flags; /* CN_TOC_F_* */
  /* Regular files: the rank (1: read first) of the file in the access list
   * cairn push wrote into the TOC (CN_TOC_PREFETCH); 0: none. */
  uint32_t prefetch_rank;
} cn_toc_entry;

/* The TOC field (an entry's, a regular file's) in which cairn push
 * --format puts the rank of a file a recorded run read first (store/access.c):
 * the files a lazy pull fetches first, in that order. Readers that do not
 * know it ignore it (podman's, the eStargz reference's). */
#define CN_TOC_PREFETCH "cairn.prefetch"

typedef struct cn_toc {
  cn_toc_format format;
  uint64_t blob_size;
  uint64_t toc_off, toc_len; /* the compressed TOC's bytes in the blob */
  /* eStargz: sha256 of the TOC JSON; zstd:chunked: of the compressed TOC
   * (what the manifest's annotation names) */
  char toc_digest[CAIRN_DIGEST_LEN + 1];
  /* The end of the file data: every chunk lies in [0, data_end). */
  uint64_t data_end;
  cn_toc_entry *entries; /* in the TOC's order, duplicates removed */
  size_t n_entries;
  /* Prefetch (eStargz landmarks): entries [0, prefetch) are what a
   * container reads first; 0 with no landmark. no_prefetch: the producer
   * said to prefetch nothing. */
  size_t prefetch;
  bool no_prefetch;
  /* entries with a prefetch_rank (a recorded access list's files) */
  size_t n_ranked;
  /* zstd:chunked: the tar-split part (the tar's headers and padding,
   * for a byte-exact tar), when the layer has one: tarsplit_len > 0. */
  uint64_t tarsplit_off, tarsplit_len, tarsplit_ulen;
  char tarsplit_digest[CAIRN_DIGEST_LEN + 1];
  size_t *sorted; /* entry indexes by path (cn_toc_find) */
} cn_toc;

void cn_toc_free(cn_toc *toc);

/* Normalises a TOC path into out (CN_TOC_PATH_MAX + 1 bytes): leading
 * "./" and "/", repeated and trailing slashes and "." components go;
 * -EBADMSG for a ".." component, a NUL or a too-long path or component. */
int cn_toc_path_normalize(const char *in, char *out, cairn_store *st);

/* Finds an entry by normalised path (the last one; entries are unique),
 * or NULL. O(log n): the TOC keeps a sorted index. */
const cn_toc_entry *cn_toc_find(const cn_toc *toc, const char *path);

/* ---- eStargz -------------------------------------------------------------
 * A lazy pull reads the blob's last CN_TOC_ESTARGZ_FOOTER bytes, learns the
 * TOC's offset, then fetches [toc_off, blob_size) and parses it. */

/* Reads the footer from the blob's last len bytes (len >= 47): the TOC's
 * offset into *toc_off (checked to lie before the footer). */
int cn_toc_estargz_footer(const void *tail, size_t len, uint64_t blob_size, uint64_t *toc_off,
                          cairn_store *st);

/* Parses the blob's last len bytes, which must reach back to the TOC's
 * offset (-ERANGE otherwise, *toc_off telling where to start), into toc.
 * digest (may be NULL): the manifest's
 * "containerd.io/snapshot/stargz/toc.digest", checked against the TOC JSON. */
int cn_toc_estargz_parse(const void *tail, size_t len, uint64_t blob_size, const char *digest,
                         cn_toc *toc, cairn_store *st);

/* The TOC member's own tar entry, stargz.index.json: the tar holds it (a
 * full pull records it as a file), the TOC JSON does not list it; its
 * content is the TOC JSON itself. */
#define CN_TOC_ESTARGZ_NAME "stargz.index.json"
typedef struct cn_toc_estargz_self {
  uint32_t mode, uid, gid; /* mode: 07777 */
  int64_t mtime_sec;
  uint32_t mtime_nsec;
  unsigned char *json; /* the TOC JSON (its sha256 is toc->toc_digest) */
  size_t json_len;
} cn_toc_estargz_self;

/* cn_toc_estargz_parse, and when self is not NULL, the TOC's own tar
 * entry and JSON into *self (cn_toc_estargz_self_free; zeroed on failure). */
int cn_toc_estargz_parse_self(const void *tail, size_t len, uint64_t blob_size, const char *digest,
                              cn_toc *toc, cn_toc_estargz_self *self, cairn_store *st);
void cn_toc_estargz_self_free(cn_toc_estargz_self *self);

/* ---- zstd:chunked ----------------------------------------------------------
 * The manifest's layer annotations give the TOC's position and checksum
 * (cn_toc_zstd_position); without them, the footer does (cn_toc_zstd_footer,
 * no checksum). Then [toc_off, toc_off + toc_len) is fetched and parsed. */

typedef struct cn_toc_zstd_pos {
  uint64_t off, len, ulen;
  char digest[CAIRN_DIGEST_LEN + 1]; /* of the len bytes; "" if unknown */
  uint64_t ts_off, ts_len, ts_ulen;   /* the tar-split part; ts_len 0: none */
  char ts_digest[CAIRN_DIGEST_LEN + 1];
} cn_toc_zstd_pos;

/* From the annotation values (either name prefix: "io.github.containers."
 * or the older "io.containers."): position "OFF:LEN:ULEN:TYPE" (TYPE 1, the
 * only one defined), checksum "sha256:hex"; tarsplit_* may be NULL.
 * Returns 0, or -ENOENT when position is NULL (not a chunked layer). */
int cn_toc_zstd_position(const char *position, const char *checksum, const char *ts_position,
                         const char *ts_checksum, uint64_t blob_size, cn_toc_zstd_pos *pos,
                         cairn_store *st);

/* The same from a manifest's layer "annotations" object (may be NULL):
 * the keys with either prefix, the newer one first. -ENOENT when it names
 * no TOC position (not a zstd:chunked layer). */
struct json_t;
int cn_toc_zstd_annotations(struct json_t *annotations, uint64_t blob_size, cn_toc_zstd_pos *pos,
                            cairn_store *st);

/* From the blob's last len bytes (len >= CN_TOC_ZSTD_FOOTER): the footer
 * frame's offsets (no digests: the caller must have the manifest's). */
int cn_toc_zstd_footer(const void *tail, size_t len, uint64_t blob_size, cn_toc_zstd_pos *pos,
                       cairn_store *st);

/* Parses the compressed TOC (the bytes [pos->off, pos->off + pos->len) of
 * the blob, checked against pos->digest when it is set) into toc. */
int cn_toc_zstd_chunked_parse(const void *buf, size_t len, const cn_toc_zstd_pos *pos,
                              uint64_t blob_size, cn_toc *toc, cairn_store *st);

/* Decompresses the tar-split part (the bytes [ts_off, ts_off + ts_len),
 * checked against ts_digest) into *out (malloc'd, *out_len = ts_ulen). */
int cn_toc_zstd_tarsplit(const void *buf, size_t len, const cn_toc_zstd_pos *pos,
                         unsigned char **out, size_t *out_len, cairn_store *st);

/* ---- shared by the two parsers (toc.c) ---------------------------------- */

/* Decompresses buf (gzip or zstd, detected) into a malloc'd buffer of at
 * most max bytes (-EFBIG beyond); a NUL follows the data. what names the
 * input in messages. */
int cn_toc_decompress(const void *buf, size_t len, size_t max, unsigned char **out, size_t *out_len,
                      const char *what, cairn_store *st);
/* sha256 of buf as "sha256:hex". */
void cn_toc_sha256(const void *buf, size_t len, char out[CAIRN_DIGEST_LEN + 1]);
/* Checks "sha256:<64 lowercase hex>". */
bool cn_toc_digest_valid(const char *s);

/* The JSON entries (an array, as both formats write it) into toc's
 * records; data_end bounds every chunk. Chunk compressed sizes: from
 * "endOffset" (zstd:chunked) or, when absent, up to the next larger
 * offset of any entry (eStargz), the last one up to data_end. */
int cn_toc_entries_parse(struct json_t *entries, cn_toc *toc, cairn_store *st);

#endif
