/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cairn/login.h — libcairn's public face: registry logins.
 * Included by cairn.h, whose comment gives the conventions every function
 * here keeps (errors, ids, handles).
 */
#ifndef CAIRN_LOGIN_H
#define CAIRN_LOGIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cairn/store.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- registry logins (store/remote/login.c) ------------------------------ */

typedef struct cairn_login_opts {
  const char *authfile;       /* the file to write; NULL: cn_auth_file's */
  bool insecure;              /* no TLS checks; plain HTTP if it speaks no TLS */
  const char *cert_dir;       /* CAs to trust besides the system's (as a pull's) */
  const cairn_config *config; /* cairn.conf: insecure registries; or NULL */
} cairn_login_opts;

/* Checks user/password against the registry's /v2/ (answering its Bearer
 * or Basic challenge, as a pull does), then records them for host
 * (HOST[:PORT]; a URL's scheme and path are dropped) in the auth file;
 * nothing is written if the registry refuses them.
 * Returns 0; -EACCES: the registry refuses them; -EINVAL: a bad host or an empty user (or one
 * with a ':'); -EBADMSG: the auth file is not a JSON object; else the registry's failure. */
int cairn_login(cairn_store *st, const char *host, const char *user, const char *password,
                const cairn_login_opts *opts);
/* Removes host's credentials from the auth file (authfile, or NULL for
 * cn_auth_file's); host NULL removes every one.
 * Returns 0; -ENOENT: it has none for host; -EINVAL: a bad host; -EBADMSG: the auth file is
 * not a JSON object. */
int cairn_logout(cairn_store *st, const char *host, const char *authfile);

#ifdef __cplusplus
}
#endif

#endif
