/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libcairn_core.h — what libcairn's core gives store/remote/ and the unit
 * tests, and no front end: recording and finishing layers, the lazy
 * tables, the fetch lock, the errors' context. Private: fs/ and tools/
 * never include it (scripts/check-layers.sh). Its functions keep cairn.h's
 * conventions and are named cn_.
 */
#ifndef LIBCAIRN_CORE_H
#define LIBCAIRN_CORE_H

#include "cairn.h"

#include <openssl/types.h>

/* ---- ids ---- */
/* The id form of a raw sha256 digest: its 32 bytes as lowercase hex. */
void cn_sha256_hex(const unsigned char digest[32], cairn_id out);

/* Finishes md, a sha256, into its id form (cn_sha256_hex); frees nothing. */
void cn_sha256_final_hex(EVP_MD_CTX *md, cairn_id out);
/* The same as a digest: "sha256:HEX". */
void cn_sha256_final_digest(EVP_MD_CTX *md, char out[CAIRN_DIGEST_LEN + 1]);

/* ---- tar headers (tar_header.c), for the exact layers and the chunked writer ---- */
#define CN_TAR_BLOCK 512
/* A header block by its fields: POSIX ustar's, and where GNU's old format
 * puts its sparse map in the prefix. */
typedef struct {
  char name[100], mode[8], uid[8], gid[8], size[12], mtime[12], chksum[8];
  char typeflag, linkname[100], magic[6], version[2], uname[32], gname[32];
  char devmajor[8], devminor[8];
  union {
    char prefix[155];
    struct {
      char atime[12], ctime[12], offset[12], longnames[4], unused, sparse[4][24];
      char isextended, realsize[12];
    } gnu;
  };
  char pad[12];
} cn_tar_header;
/* A numeric field of len bytes: 0 and *v, or -1 if malformed. */
int cn_tar_number(const char *field, size_t len, uint64_t *v);
#define CN_TAR_NUMBER(h, f, v) cn_tar_number((h)->f, sizeof((h)->f), (v))
/* True if the block (512 bytes) is all zeros: an end block. */
bool cn_tar_block_zero(const void *block);
/* The sums of the block's bytes, the checksum field taken as spaces: of
 * unsigned bytes (what writers write) and of signed ones (old writers'). */
typedef struct {
  uint64_t sum;
  int64_t signed_sum;
} cn_tar_sums;
cn_tar_sums cn_tar_checksum(const cn_tar_header *h);
/* True if the checksum is right, summed unsigned or signed. */
bool cn_tar_checksum_ok(const cn_tar_header *h);
/* A pax ('x', 'g') or GNU long name ('L', 'K') record: about the next entry. */
bool cn_tar_is_meta(char typeflag);
/* A regular file's type ('0', NUL, '7'). */
bool cn_tar_is_regular(char typeflag);
/* True if the magic is POSIX ustar's ("ustar\0"), which has a prefix. */
bool cn_tar_posix_ustar(const cn_tar_header *h);
/* The name, joined to a POSIX ustar prefix: malloc'd, NULL if out of memory. */
char *cn_tar_name(const cn_tar_header *h);
/* The bytes that pad size bytes of an entry's data to a whole block. */
uint64_t cn_tar_padding(uint64_t size);

/* ---- reports ---- */
/* fsck's problem: a line "problem: WHAT" of r, counted in r->problems. */
void cn_report_problem(cairn_report *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- lazily pulled layers: what a mount fetches (cairn/lazy.h's subsystem) ---- */
int cn_access_list_read(cairn_store *st, const char *image_id, char ***paths, size_t *n);

/* ---- registry logins (cairn/login.h's subsystem) ---- */
/* The auth.json that login writes and pulls read first, as podman's:
 * $REGISTRY_AUTH_FILE, else $XDG_RUNTIME_DIR/containers/auth.json, else
 * /run/containers/UID/auth.json. Pulls then read
 * ${XDG_CONFIG_HOME:-~/.config}/containers/auth.json and
 * ${DOCKER_CONFIG:-~/.docker}/config.json. */
int cn_auth_file(char *buf, size_t len);

/* ---- layers, their entries and blobs; exact layers (cairn/layer.h's subsystem) ---- */
/* Finds the blob holding the content whose sha256 is sha256 (64 hex
 * digits, optionally "sha256:"; of the whole content, as a layer's TOC
 * names a file's): 1 with its name in blob (len bytes; 48 always fit)
 * and *size (may be NULL) set, 0 if the store holds no such content,
 * -EINVAL for a malformed digest. A hint, not a reference: the blob may
 * be gone after a gc, so what records a layer looks it up again. */
int cn_blob_find_sha256(cairn_store *st, const char *sha256, char *blob, size_t len,
                         uint64_t *size);

/* ---- the store handle, errors, cairn.conf, progress (cairn/store.h's subsystem) ---- */
/* The [registry "host"] section of cfg, or NULL. */
const struct cn_config_registry *cn_config_registry(const cairn_config *cfg,
                                                          const char *host);

/* Puts context before the WHY st holds: "CONTEXT: WHY" (strerror(-err) when
 * st holds none); returns err. The context is formatted before the WHY is
 * read, so its arguments may not point into cairn_errmsg(st). */
int cn_fail_context(cairn_store *st, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Opens rel (a path below the store's directory) as openat(2) does, but
 * through the store's directory descriptor and following no symlink, on
 * the way or at its end (openat2's RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS):
 * a store's owner cannot redirect what root opens in it. The fd, or -1
 * and errno (ELOOP for a symlink) (util.c). */
int cn_store_openat(cairn_store *st, const char *rel, int flags, mode_t mode);
/* An unnamed file (O_TMPFILE, O_RDWR) in STORE/tmp, through the
 * descriptor of it the opening took: the fd, or the failure recorded. */
int cn_store_tmpfile(cairn_store *st, mode_t mode);
/* A new file of STORE/tmp, through the descriptor of it the opening took,
 * as mkostemp makes one: named prefix and 6 random characters (in name,
 * len bytes), O_RDWR|O_CREAT|O_EXCL|O_NOFOLLOW|O_CLOEXEC and flags, 0600.
 * The fd, or the failure recorded. */
int cn_store_tmp_create(cairn_store *st, const char *prefix, char *name, size_t len, int flags);
/* STORE/tmp as a path that leads to the directory the store's opening
 * checked, whatever has been put at its name since ("/proc/self/fd/N",
 * for this process only), for what makes names in it (mkdtemp). */
void cn_store_tmp_path(cairn_store *st, char *buf, size_t len);

/* ---- names (store/name.c) ---- */
/* Normalizes a name by digest, REPO@sha256:HEX (no tag), as podman keeps a
 * pull by digest: REPO as cairn_name_normalize makes it, without a tag.
 * -EINVAL if it is none. */
int cn_name_digested(const char *name, char *out, size_t len);

/* ---- import (cairn/import.h's subsystem) ---- */
/* Commits an image: config JSON (whose rootfs.diff_ids must list exactly
 * these layers, or -EBADMSG), every layer already stored (callers keep them
 * pinned), and optionally a name that is (re)pointed at it. */
int cn_image_commit(cairn_store *st, const char *config, size_t config_len,
                       const char *const *diff_ids, size_t n, const char *name,
                       cairn_id image_id_out);

/* ---- podman's Additional Layer Store (cairn/als.h's subsystem) ---- */
/* Records that layer diff_id (stored) was pulled as the blob digest (of
 * media_type, size bytes) and keeps its bytes, the file fd (which the caller
 * checked against digest and size): linked into the store if fd is an
 * anonymous file of the store's file system, else copied. */
int cn_layer_blob_keep(cairn_store *st, const char *diff_id, const char *digest,
                          const char *media_type, uint64_t size, int fd);

/* Records that layer diff_id (stored) was pulled from registry
 * ("HOST[:PORT]", the endpoint that answered; insecure: talked to as
 * --insecure) and repository as the blob digest (of media_type, size
 * bytes): where fsck --repair fetches it again. A layer pulled from
 * several registries, repositories or blobs has a row each; the same one
 * again is kept once. */
int cn_layer_origin_add(cairn_store *st, const char *diff_id, const char *registry,
                        const char *repository, bool insecure, const char *digest,
                        const char *media_type, uint64_t size);

/* The records of layer diff_id (the blobs it was pulled as), the latest
 * kept first; a non-zero return of fn stops and is returned. None (0, fn
 * not called) for a layer imported or committed, never pulled. */
int cn_layer_blobs_of(cairn_store *st, const char *diff_id, cairn_layer_blob_fn fn, void *arg);

/* ---- layers, their entries and blobs; exact layers (cairn/layer.h's subsystem) ---- */
/* 1 if stored, 0 if not, negative on error. */
int cn_layer_exists(cairn_store *st, const char *diff_id);
/* The zero bytes the last cn_layer_ingest on st added after its stream
 * to prove the expected diff_id (a tar whose record padding its blob
 * dropped, as podman 4.3's zstd:chunked writer does; they are kept in the
 * layer's exact tar), or 0. */
uint64_t cn_layer_ingest_padding(const cairn_store *st);

/* ---- import (cairn/import.h's subsystem) ---- */
/* Reads one layer tar (plain, gzip or zstd, detected) from fd and stores
 * it once: blobs first, then the layer's metadata in one transaction.
 * The layer is pinned in ps (before it is looked up) and stays pinned;
 * ps may be NULL only with expected_diff_id, when the caller pinned that
 * layer already (a pull's download threads). If expected_diff_id is given,
 * a stream whose sha256 differs is -EBADMSG and nothing is committed.
 * diff_id_out receives the diff_id. */
int cn_layer_ingest(cairn_store *st, int fd, const char *expected_diff_id, cairn_pinset *ps,
                       cairn_id diff_id_out);

/* What a rebuilt tar is known to hold (store/remote/partial.c): the
 * regular file whose data starts at tar offset off, of size bytes, is the
 * whole content of the stored blob (its bytes were copied from it). */
typedef struct cn_layer_hint {
  uint64_t off, size;
  char blob[48];
} cn_layer_hint;
/* cn_layer_ingest of a tar with hints (sorted by off): a regular file a
 * hint names (its data at off, its size, not sparse) whose blob the store
 * still holds (its row of that size and its file) takes that blob, its
 * bytes hashed only into the diff_id, not written, not hashed again; the
 * layer is stored only if the diff_id holds. *taken counts them. */
int cn_layer_ingest_hinted(cairn_store *st, int fd, const char *expected_diff_id,
                           cairn_pinset *ps, const cn_layer_hint *hints, size_t n_hints,
                           size_t *taken, cairn_id diff_id_out);

/* ---- lazily pulled layers: what a mount fetches (cairn/lazy.h's subsystem) ---- */
/* Records layer diff_id (pinned by the caller) from its TOC: entries in any
 * order; a regular file of size > 0 gives its content's "sha256:HEX" as
 * blob. A file whose content the store holds is linked to that blob; every
 * other becomes a pending file (*pending counts them), and the layer is
 * partial until the last arrives. The TOC's bytes (toc, toc_len; checked
 * against src->toc_digest by the caller) are kept as STORE/toc/HEX of
 * src->digest. 0 also when the layer is stored already and reusable
 * (cn_layer_reusable); 2 when it is stored unproven from another blob
 * (or refuted): nothing recorded, the caller pulls it in full. */
int cn_layer_record_partial(cairn_store *st, const char *diff_id, const cairn_entry *entries,
                               size_t n, const cairn_lazy_source *src, const void *toc,
                               size_t toc_len, size_t *pending);

/* Whether a pull may reuse stored layer diff_id for a layer of blob
 * digest whose annotations are annotations (compact JSON, keys sorted, as
 * lazy pulls keep them; NULLs for a pull that is not lazy): 0 not stored;
 * 1 stored and reusable (its diff_id proven, or a lazy pull's of that very
 * blob and TOC); 2 stored but not to be reused: a lazy pull's of another
 * blob whose diff_id is not proven yet, or refuted (a pull stores it in
 * full, which proves it and replaces the unproven rows). */
int cn_layer_reusable(cairn_store *st, const char *diff_id, const char *digest,
                      const char *annotations);
/* Takes lazily pulled layer diff_id out of service: its rebuilt tar did not
 * hash to its diff_id (reason says how). Mounts and index builds of its
 * images refuse from now on; *images (malloc'd) names them, for the
 * caller to say. */
int cn_layer_refute(cairn_store *st, const char *diff_id, const char *reason, char **images);

/* ---- layers, their entries and blobs; exact layers (cairn/layer.h's subsystem) ---- */
/* Writes the layer's uncompressed tar exactly as it was imported or pulled
 * (its sha256 is diff_id) through fn, from the headers recorded at import
 * and the layer's blobs; *size gets its length (may be NULL). -ENODATA if
 * the layer was stored without that record (before cairn kept one, or a
 * tar it cannot describe); -EBADMSG if what it wrote does not hash to
 * diff_id (fn has seen the bytes then: discard them). */
int cn_layer_tar(cairn_store *st, const char *diff_id, cairn_write_fn fn, void *arg,
                    uint64_t *size);

/* 1 if the layer has its tar record, 0 if not, negative on error. */
int cn_layer_tar_recorded(cairn_store *st, const char *diff_id);

/* ---- lazily pulled layers: what a mount fetches (cairn/lazy.h's subsystem) ---- */
void cn_lazy_file_clear(cairn_lazy_file *f);

/* 1 and f (cleared by cn_lazy_file_clear) if a file of content sha256
 * ("sha256:HEX" or HEX) is pending, 0 if none is. */
int cn_lazy_file_find(cairn_store *st, const char *sha256, cairn_lazy_file *f);

/* Stores a fetched file: fd's content (size bytes, from offset 0; -1 if
 * the store should hold it already) as a blob, hashed again and refused
 * (-EBADMSG) unless it is sha256; then, in one transaction, every entry
 * pending on sha256 names it, and each layer left with no pending file is
 * complete (an image whose layers all are gets its index again, without
 * pending nodes). A content the store holds is not written again. blob
 * gets the blob's name. */
int cn_lazy_file_store(cairn_store *st, const char *sha256, int fd, uint64_t size,
                          char blob[48]);

/* cn_lazy_file_store, calling ready(blob, arg) once the blob is written
 * under its name and hashed to sha256, before it is made durable and
 * recorded: what a reader may be served (doc/crash-safety.md). */
int cn_lazy_file_store_ready(cairn_store *st, const char *sha256, int fd, uint64_t size,
                             char blob[48], void (*ready)(const char *blob, void *arg),
                             void *arg);

/* Files fetched together stored in one commit: begin takes the store
 * lock (shared) and a staging journal; each put is cn_lazy_file_store's
 * blob (written, hashed again, blob named; not durable); commit makes the
 * written blobs durable, then records them all in one transaction and
 * ends the group (always called once begin succeeded). A put that fails
 * fails the group: commit then returns its error and stores none. */
#define CN_LAZY_GROUP_MAX 128
typedef struct cn_lazy_put {
  char hex[65], blob[48], sha[65]; /* sha: set when this put wrote the blob */
  uint64_t size;
} cn_lazy_put;
typedef struct cn_lazy_group {
  int lock, failed;
  bool served; /* a reader was served from its blobs: a failure keeps them */
  size_t n;
  cn_lazy_put v[CN_LAZY_GROUP_MAX];
} cn_lazy_group;
int cn_lazy_group_begin(cairn_store *st, cn_lazy_group *g);
int cn_lazy_group_put(cairn_store *st, cn_lazy_group *g, const char *sha256, int fd,
                      uint64_t size, char blob[48]);
int cn_lazy_group_commit(cairn_store *st, cn_lazy_group *g);

/* cn_lazy_finish_layer for each unfinished layer of image_id. */
struct cn_blob_copy;
int cn_lazy_finish_image(cairn_store *st, const char *image_id, bool whole,
                         struct cn_blob_copy *copies, size_t n_copies,
                         void (*log)(const char *line, void *arg), void *arg);

/* Finishes layer diff_id, complete and not finished yet (store/remote/partial.c),
 * as a full pull records it (its exact tar, the diff_id checked by the
 * ingest), then cn_lazy_layer_finished. zstd:chunked: the tar rebuilt from
 * the registry's bytes between the stored files' frames (the tar headers)
 * and the stored files. eStargz, when copies[0, n_copies) holds a fill's
 * copy of its blob (struct cn_blob_copy, store/remote/libcairn_partial.h,
 * found by digest): the copy completed from the registry (the bytes it
 * lacks), checked against the blob's digest, then ingested and kept as a
 * full pull keeps a blob (cn_layer_blob_keep: cairnfs --als serves it).
 * When the rebuild or the copy fails, with whole (zstd:chunked), or
 * without a copy (eStargz), the blob is fetched whole and kept so. log
 * (may be NULL) hears what it did. 0 also when there is nothing to finish. */
int cn_lazy_finish_layer(cairn_store *st, const char *diff_id, bool whole,
                         struct cn_blob_copy *copies, size_t n_copies,
                         void (*log)(const char *line, void *arg), void *arg);

/* Drops the source row (and the TOC) of layer diff_id, which must be
 * complete (-EINVAL if it is not), and sets its size to its tar record's,
 * once the ingest of its tar recorded it (or found it cannot, as for a
 * full pull): the lazy pull leaves no trace. 0 also when it has no
 * source row (finished already). */
int cn_lazy_layer_finished(cairn_store *st, const char *diff_id);

/* The lock of the fetch of content sha256 ("sha256:HEX" or HEX) across
 * processes (store/lazy_lock.c: a lock file in STORE/tmp, flock'd): the
 * fetch and store of a pending file run under it, so a mount's first read,
 * a background fill and a second fill fetch it once; whoever takes it next
 * finds the file stored. wait: blocks until it is free; otherwise
 * -EWOULDBLOCK (no WHY recorded) while another holds it. Returns the lock
 * (an fd) for cn_lazy_unlock. cairn_lazy_fetch takes it. */
int cn_lazy_lock(cairn_store *st, const char *sha256, bool wait);

int cn_lazy_pending_foreach(cairn_store *st, cairn_lazy_pending_fn fn, void *arg);

/* The distinct contents ("sha256:HEX") of image_id's pending files, in
 * layer order (cn_strv_free). */
int cn_lazy_pending_list(cairn_store *st, const char *image_id, char ***sha256s, size_t *n);

/* f (path "", size 0; cn_lazy_file_clear) and 1 if layer diff_id has a
 * source row and is partial, 2 if complete (not finished); 0 if no row. */
int cn_lazy_source_get(cairn_store *st, const char *diff_id, cairn_lazy_file *f);

/* Unlinks the kept TOCs no partial layer names any more: those of layers a
 * fill completed, left by a crash between its commit and their unlink
 * (gc sweeps them too). Only when the store lock is free (else 0, left
 * to gc). */
int cn_lazy_tidy(cairn_store *st);

/* The kept TOC of the layer blob digest ("sha256:HEX"): malloc'd. */
int cn_lazy_toc_read(cairn_store *st, const char *digest, void **buf, size_t *len);

/* A lazily pulled layer whose files are all stored is complete but keeps
 * its source and TOC until it is finished: its exact tar recorded, as a
 * full pull records it (cn_lazy_finish_layer). The complete layers of
 * image_id not finished yet, in layer order (cn_strv_free). */
int cn_lazy_unfinished(cairn_store *st, const char *image_id, char ***diff_ids, size_t *n);

void cn_lazy_unlock(cairn_store *st, const char *sha256, int lock);

/* ---- pins (cairn/pin.h's subsystem) ---- */
/* Takes a shared pin on one target (blocking while a deleter holds the
 * exclusive lock, which is brief). Idempotent within a set. The target
 * need not exist yet (a pull pins a layer before it checks for it). */
int cn_pin_take(cairn_store *st, cairn_pinset *ps, enum cairn_pin_kind kind, const char *id);

/* ---- layers, their entries and blobs; exact layers (cairn/layer.h's subsystem) ---- */
void cn_strv_free(char **v, size_t n);

/* Reads the ordered layer ids (bottom first) of an image. */
int cn_image_layers(cairn_store *st, const char *image_id, char ***ids, size_t *n);

/* Calls fn for every entry of the layer in path order; a non-zero return
 * of fn stops the walk and is returned. */
int cn_layer_foreach(cairn_store *st, const char *diff_id, cairn_entry_fn fn, void *arg);

/* Fills path with the blob's file name in the store. */
int cn_blob_path(cairn_store *st, const char *blob, char *path, size_t len);

/* ---- import (cairn/import.h's subsystem) ---- */
/* Builds the deterministic OCI config cairn import uses for these layers
 * (linux and the host's architecture, rootfs.diff_ids). Caller frees. */
char *cn_config_for_layers(const char *const *diff_ids, size_t n);

/* import NAME LAYER...: ingest each file (bottom first) then commit. A
 * path "-" is the standard input. */
int cn_import_files(cairn_store *st, const char *name, const char *const *paths, size_t n,
                       cairn_id image_id_out);

/* ---- pins (cairn/pin.h's subsystem) ---- */
/* True if any process holds a pin on the target. */
bool cn_pin_is_held(cairn_store *st, enum cairn_pin_kind kind, const char *id);

#endif
