/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cairn/bundle.h — libcairn's public face: runtime bundles.
 * Included by cairn.h, whose comment gives the conventions every function
 * here keeps (errors, ids, handles).
 */
#ifndef CAIRN_BUNDLE_H
#define CAIRN_BUNDLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cairn/store.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- runtime bundles (store/spec.c) ------------------------------------ */

/* What the caller changes of the image config before it is converted: each
 * NULL (or 0) keeps the image's. */
typedef struct cairn_spec_opts {
  const char *entrypoint;  /* replaces Entrypoint (and drops Cmd unless args) */
  const char *const *args; /* replace Cmd (when not NULL; n_args may be 0) */
  size_t n_args;
  const char *const *env; /* KEY=VALUE, each replacing the image's KEY */
  size_t n_env;
  const char *user;   /* replaces User: user, uid, user:group, uid:gid... */
  const char *rootfs; /* root.path; NULL is "rootfs" */
  bool terminal;      /* process.terminal (and TERM=xterm unless Env has it) */
  bool rw;            /* root.readonly false */
} cairn_spec_opts;

/* The OCI runtime config (a bundle's config.json) of an image, converted
 * from its config by the image-spec's conversion rules (store/spec.c says
 * how), in *json (caller frees).
 * Returns 0; -ENOENT: no such image, or a User its /etc/passwd or /etc/group does not know;
 * -EINVAL: no Entrypoint or Cmd and no args given; -EBADMSG: its config is not JSON. */
int cairn_runtime_spec(cairn_store *st, const char *image_id, const cairn_spec_opts *opts,
                       char **json);

#ifdef __cplusplus
}
#endif

#endif
