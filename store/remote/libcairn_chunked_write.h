/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libcairn_chunked_write.h — writes a layer's tar as a lazily-pullable blob:
 * zstd:chunked (as containers/storage writes it, read by podman 4.3) or
 * eStargz (as containerd's estargz package writes it). See chunked_write.c.
 */
#ifndef CAIRN_PULL_CHUNKED_WRITE_H
#define CAIRN_PULL_CHUNKED_WRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum cn_chunked_format { CN_CHUNKED_ZSTD, CN_CHUNKED_ESTARGZ };

/* Where the compressed bytes go (the blob file); negative errno stops. */
typedef int (*cn_chunked_out_fn)(const void *buf, size_t len, void *arg);

/* A file's data is cut into pieces of at most this many bytes, each its
 * own frame (gzip member). */
#define CN_CHUNKED_CHUNK (4u << 20)

typedef struct cn_chunked_writer cn_chunked_writer;

/* What the finished blob needs in its manifest. */
typedef struct cn_chunked_result {
  /* zstd:chunked: "OFF:LEN:ULEN:1" and "sha256:..." of the TOC's frame */
  char position[96];
  char checksum[72];
  /* eStargz: "sha256:..." of the TOC JSON (its toc.digest annotation) and
   * of the tar the blob decompresses to (its diff_id: the TOC is an entry
   * of it); zstd:chunked: diff_id is the sha256 of the tar given. */
  char toc_digest[72];
  char diff_id[72];
} cn_chunked_result;

/* A writer of format fmt, its output to out(arg). */
int cn_chunked_new(enum cn_chunked_format fmt, cn_chunked_out_fn out, void *arg,
                   cn_chunked_writer **w);
/* The tar's next bytes. -ENOTSUP for an entry the format cannot carry
 * (a sparse file, a tape volume), -EBADMSG for a tar that is not one;
 * cn_chunked_error says what. */
int cn_chunked_write(cn_chunked_writer *w, const void *buf, size_t len);
/* The image's access list (cn_access_list_read: paths in the order of
 * their first reads): each regular file of the layer it names gets its
 * rank (1: read first) in its TOC entry, CN_TOC_PREFETCH (libcairn_toc.h), which
 * cairn's lazy pull fetches first and other readers ignore. Before finish. */
int cn_chunked_prefetch(cn_chunked_writer *w, const char *const *paths, size_t n);
/* How many entries finish gave a rank. */
size_t cn_chunked_prefetched(const cn_chunked_writer *w);
/* eStargz's way of putting the access list's files first: the layer's tar
 * is read twice. The first pass (moved true) passes on to fwd(arg) only
 * the regular files the writer's prefetch map names (cn_chunked_prefetch;
 * their meta headers with them), and not the end-of-archive; then
 * cn_chunked_landmark writes the entry .prefetch.landmark (the files
 * before it are what eStargz readers prefetch); the second pass (moved
 * false) passes on every other entry and the end-of-archive. The
 * writer checks what it is given; a malformed tar is its to refuse. */
typedef struct cn_tar_pick cn_tar_pick;
int cn_tar_pick_new(const cn_chunked_writer *w, bool moved, cn_chunked_out_fn fwd, void *arg,
                    cn_tar_pick **p);
int cn_tar_pick_write(cn_tar_pick *p, const void *buf, size_t len);
size_t cn_tar_pick_count(const cn_tar_pick *p); /* entries passed on */
void cn_tar_pick_free(cn_tar_pick *p);
int cn_chunked_landmark(cn_chunked_writer *w);
/* Ends the blob: the files' last frame, the TOC, the footer. */
int cn_chunked_finish(cn_chunked_writer *w, cn_chunked_result *res);
/* The layer's annotations in the manifest (a new object; NULL: out of
 * memory): where a lazy pull finds the TOC and its digest. */
struct json_t *cn_chunked_annotations(const cn_chunked_result *res);
const char *cn_chunked_error(const cn_chunked_writer *w);
void cn_chunked_free(cn_chunked_writer *w);

#endif
