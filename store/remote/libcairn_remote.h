/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pull.h — internals shared by the pull sources (store/remote/: pull*.c,
 * oci*.c, registry*.c, docker_archive.c). Not part of the public API. The
 * files of store/remote/ are built on libcairn's public header alone: they
 * include cairn.h and their own headers, never libcairn_store.h
 * (scripts/check-layers.sh checks it).
 *
 * A source turns a reference into an image manifest and a config, and
 * writes verified layer blobs into a file descriptor. The pull itself
 * (pull.c) pins, checks the store, fans out the fetches and commits.
 */
#ifndef LIBCAIRN_REMOTE_H
#define LIBCAIRN_REMOTE_H

#include <jansson.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cairn.h"
#include "cleanup.h"
#include "libcairn_core.h"

#define PULL_MANIFEST_MAX (4u << 20) /* manifests, indexes, configs */

/* Errors: every function that can fail returns 0 or a negative errno and
 * records its reason on the store handle it is given (cairn_fail, read
 * with cairn_errmsg). The main thread passes the pull's handle, a download
 * worker its own one (a handle is not thread-safe). The parsers accept a
 * NULL handle (the fuzz targets), which records nothing. */

/* A content descriptor (OCI image-spec); only sha256 digests are used. */
typedef struct pull_desc {
  char *media_type;
  char digest[CAIRN_DIGEST_LEN + 1];
  uint64_t size;
  json_t *annotations; /* the descriptor's "annotations" object (a
                          reference), NULL when it has none */
} pull_desc;

/* Checks "sha256:<64 lowercase hex>"; the hex part is digest + 7. */
bool cn_pull_digest_valid(const char *digest);

/* Fills a descriptor from a JSON object; -EBADMSG if malformed. */
int cn_pull_desc_parse(json_t *obj, pull_desc *d, cairn_store *st);
void cn_pull_desc_clear(pull_desc *d);

/* sha256 of a buffer as "sha256:hex". */
void cn_pull_sha256(const void *buf, size_t len, char out[CAIRN_DIGEST_LEN + 1]);

/* A writer that hashes what it writes, refuses to go past the descriptor's
 * size, and at the end checks size and digest. Bytes written so far are
 * published in *progress (may be NULL) for the progress display. */
typedef struct blob_sink {
  int fd;    /* < 0: collect in mem instead (manifests, configs) */
  char *mem; /* NUL-terminated; the caller may take it (set to NULL) */
  EVP_MD_CTX *md;
  uint64_t limit, written;
  _Atomic uint64_t *progress;
  const atomic_bool *cancel; /* when set, writes fail with -ECANCELED */
} blob_sink;

int cn_blob_sink_init(blob_sink *s, int fd, uint64_t limit, _Atomic uint64_t *progress);
/* Starts over (a retried download): truncates the file and the hash. */
int cn_blob_sink_reset(blob_sink *s);
/* -EFBIG when the data would exceed the limit, -ECANCELED when the pull
 * is being abandoned; -errno on write errors. */
int cn_blob_sink_write(blob_sink *s, const void *buf, size_t len);
/* -EBADMSG (with a reason naming the blob) on a size or digest mismatch. */
int cn_blob_sink_finish(blob_sink *s, const pull_desc *d, cairn_store *st);
void cn_blob_sink_free(blob_sink *s);

/* Copies a file (an OCI layout blob) through a sink. */
int cn_blob_copy_fd(int in, blob_sink *s, cairn_store *st);

/* Platform "os/arch[/variant]"; variant may be empty. */
typedef struct pull_platform {
  char os[32], arch[32], variant[32];
} pull_platform;
/* s NULL: this machine's, as uname(2) names it (cn_pull_platform_of_machine). */
int cn_pull_platform_parse(const char *s, pull_platform *p);
/* linux and the machine's OCI architecture and variant ("i686": 386;
 * "aarch64": arm64/v8; "armv7l": arm/v7; ...; another: as named). */
void cn_pull_platform_of_machine(const char *machine, pull_platform *p);

/* The parts of an image the pull needs. */
typedef struct pull_image {
  pull_desc config;
  pull_desc *layers;
  size_t n_layers;
  char *config_json; /* the config bytes as fetched (their sha256 is the id) */
  size_t config_len;
  char **diff_ids; /* hex, from config rootfs.diff_ids, one per layer */
} pull_image;
void cn_pull_image_free(pull_image *img);

/* Parses an image manifest (OCI or Docker v2 schema 2) into img's config
 * and layer descriptors. */
int cn_oci_manifest_parse(const char *body, size_t len, pull_image *img, cairn_store *st);

/* If body is an index (OCI index or Docker manifest list), picks the
 * manifest for the platform into *child and returns 1; 0 when body is an
 * image manifest; -ENOENT when no entry matches. */
int cn_oci_index_select(const char *body, size_t len, const pull_platform *want, pull_desc *child,
                        cairn_store *st);

/* Reads the config's rootfs.diff_ids into img (checking the count against
 * the layers); -EBADMSG when inconsistent. */
int cn_oci_config_diff_ids(pull_image *img, cairn_store *st);

/* ---- sources ------------------------------------------------------------ */

typedef struct pull_source pull_source;

#define PULL_RANGE_SPEC_MAX 8192
typedef struct pull_range_reply {
  long status;
  char content_type[256];
  char content_range[128];
} pull_range_reply;

typedef struct pull_source_ops {
  /* Fetches the top manifest (digest == NULL) or one by digest, verified
   * against the digest when one is given. */
  int (*manifest)(pull_source *src, const pull_desc *d, char **body, size_t *len, cairn_store *st);
  /* Fetches a blob into a sink (verified by the sink's finish). Called from
   * worker threads, several at once. */
  int (*blob)(pull_source *src, const pull_desc *d, blob_sink *s, cairn_store *st);
  void (*free)(pull_source *src);
  /* Optional (a registry): GETs the byte ranges spec ("A-B,C-D", at most
   * PULL_RANGE_SPEC_MAX bytes) of blob d into the memory sink s, which
   * checks no digest; rr gets the reply's status and the headers a
   * multipart/byteranges answer is read with (libcairn_byteranges.h). Called from
   * worker threads, several at once (partial.c: CN_PARTIAL_INFLIGHT). */
  int (*ranges)(pull_source *src, const pull_desc *d, const char *spec, blob_sink *s,
                pull_range_reply *rr, cairn_store *st);
} pull_source_ops;

struct pull_source {
  const pull_source_ops *ops;
  char *default_name; /* NULL when the source suggests none */
  const cairn_pull_opts *opts;
};

int cn_oci_layout_open(const char *spec, pull_source **out, cairn_store *st);
int cn_docker_archive_open(const char *path, pull_source **out, cairn_store *st);
/* "FILE[:REF]": the layout unpacked into a new directory of tmp_parent,
 * removed with the source. */
int cn_oci_archive_open(const char *spec, const char *tmp_parent, pull_source **out,
                        cairn_store *st);
/* Removes an unpacked layout: its files and directories, nothing else. */
void cn_oci_layout_remove_unpacked(const char *dir);
/* The layout of an oci-archive unpacked in dir (removed when the source is
 * freed; the image named after the entry's annotations, not dir; messages
 * name label, the archive). */
int cn_oci_layout_open_unpacked(const char *dir, const char *ref, const char *label,
                                pull_source **out, cairn_store *st);
int cn_registry_source_open(const char *spec, const cairn_pull_opts *opts, pull_source **out,
                            cairn_store *st);

/* Fetches blob d again from repository where ("HOST[:PORT]/REPO", a layer
 * origin cn_layer_origin_add recorded; insecure as recorded) into fd
 * (truncated first), checked against d's size and digest (-EBADMSG);
 * credentials, certificates, retries and log from net (NULL: a pull's
 * defaults, auth.json's credentials), no mirrors. For fsck --repair. */
int cn_pull_blob_again(cairn_store *st, const char *where, bool insecure, const pull_desc *d,
                       const cairn_pull_opts *net, int fd);

/* Sleeps ms milliseconds, a signal's interruption resumed (registry.c):
 * a retry's backoff, a fill's wait for a mount's first reads. */
void cn_sleep_ms(uint64_t ms);

/* Logs one line through opts->log, serialized. */
void cn_pull_log(pull_source *src, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
