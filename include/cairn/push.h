/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cairn/push.h — libcairn's public face: push.
 * Included by cairn.h, whose comment gives the conventions every function
 * here keeps (errors, ids, handles).
 */
#ifndef CAIRN_PUSH_H
#define CAIRN_PUSH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cairn/pull.h"
#include "cairn/store.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- push (store/remote/push.c) ------------------------------------------ */

enum cairn_compress { CAIRN_COMPRESS_GZIP = 0, CAIRN_COMPRESS_ZSTD, CAIRN_COMPRESS_NONE };

/* A layer a pull kept (cn_layer_blobs_of: the compressed bytes as the
 * source's manifest named them) is sent as it is, with its digest, size and
 * media type (a Docker media type as its OCI equivalent): nothing is
 * compressed again, and a registry that has it in another repository
 * mounts it. A layer with no such blob (imported, committed) is compressed
 * anew, with compress. */
enum cairn_push_kept {
  CAIRN_PUSH_KEPT_ANY = 0, /* any kept blob, whatever its compression */
  CAIRN_PUSH_KEPT_SAME,    /* only a kept blob compressed with compress */
  CAIRN_PUSH_KEPT_NONE,    /* none: every layer compressed anew */
};

/* The layout of the layers written anew (push --format): PLAIN, one
 * compressed tar; ZSTD_CHUNKED and ESTARGZ, lazily pullable (every file's
 * data in frames of its own, a TOC; store/remote/chunked_write.c). A format
 * sets the compression (zstd, gzip) and writes every layer anew. eStargz's
 * TOC is an entry of the tar: its layers' diff_ids, and so the image id,
 * are not the image's (the config is sent with the new diff_ids). */
enum cairn_push_format {
  CAIRN_PUSH_FORMAT_PLAIN = 0,
  CAIRN_PUSH_FORMAT_ZSTD_CHUNKED,
  CAIRN_PUSH_FORMAT_ESTARGZ,
};

typedef struct cairn_push_opts {
  /* The network options as a pull takes them (creds, insecure, config,
   * cert_dir, attempts, backoff, log, arg), and its progress callback,
   * whose layers read: WAITING; STORING: the exact tar being rebuilt and
   * compressed (stored of size, the tar's size); FETCHING: being sent
   * (fetched of size, now the compressed size; digest set); REUSED: the
   * destination had it (or mounted it from another repository); DONE:
   * sent. platform and jobs are unused (layers go one at a time). */
  cairn_pull_opts net;
  enum cairn_compress compress;  /* the layers' compression; gzip by default */
  enum cairn_push_kept kept;     /* which blobs a pull kept are sent as they are */
  enum cairn_push_format format; /* PLAIN by default */
} cairn_push_opts;

/* Pushes the image ref (a name or id) to dest, "docker://HOST[:PORT]/REPO[:TAG]"
 * (the OCI distribution API: blobs the registry has are skipped, blobs of
 * another repository of the same registry the image was pulled from are
 * mounted, the rest uploaded; then an OCI manifest) or "oci:DIR[:TAG]" (an
 * OCI image layout, index.json's entry annotated with the tag; TAG is
 * "latest" if not given), "oci-archive:FILE[:TAG]" (that layout as a tar;
 * FILE replaced) or "docker-archive:FILE[:NAME[:TAG]]" (docker save's tar,
 * uncompressed layers; an existing FILE is refused; digest_out is then
 * "sha256:" and the image id). A layer a pull kept is sent as it was pulled
 * (opts->kept); any other is its exact tar (cn_layer_tar), compressed;
 * so the pushed image has the same diff_ids and, its config sent as
 * stored, the same id. The image and its layers are pinned for the whole
 * push. digest_out gets the manifest's digest. As podman: a dest with no
 * transport ("HOST[:PORT]/REPO[:TAG]") is docker://, and a NULL dest the
 * registry of ref's own name ("docker://" ref).
 * Returns 0; -ENOENT: no such image; -ENODATA: a layer has no tar record; -EEXIST: a
 * docker-archive FILE is there; -EINVAL: a bad dest, or (NULL dest) ref's first component is
 * no host; -EACCES: auth is refused; else the registry's failure. */
int cairn_push(cairn_store *st, const char *ref, const char *dest, const cairn_push_opts *opts,
               char digest_out[CAIRN_DIGEST_BUF]);

#ifdef __cplusplus
}
#endif

#endif
