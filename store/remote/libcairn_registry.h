/* SPDX-License-Identifier: Apache-2.0 */
/*
 * registry.h — internals of the docker:// pull source (registry*.c): one
 * registry client per pull, shared by the worker threads. Each request
 * uses its own curl easy handle; the Authorization header is shared under
 * a lock (a token fetched by one thread serves all), and so are the
 * client's connections (a curl share of its connection cache, DNS and TLS
 * sessions): a request after another reuses an idle connection to the
 * same server instead of making one, so a client kept across requests
 * (a pull's workers, a fill's, the lazy fetcher's threads) makes about as
 * many connections as it has requests in flight at once.
 */
#ifndef LIBCAIRN_REGISTRY_H
#define LIBCAIRN_REGISTRY_H

#include <curl/curl.h>
#include <limits.h>
#include <pthread.h>
#include <time.h>

#include "libcairn_remote.h"

typedef struct registry {
  pull_source base;
  char *host; /* HOST[:PORT] as in the reference */
  /* Where the pull may go, in order: the mirrors cairn.conf gives host,
   * then host itself (pointers into opts->config, and host). */
  const char **endpoints;
  size_t n_endpoints;
  const char *endpoint; /* the one requests go to now (auth.json, certs.d key) */
  bool insecure;        /* no TLS checks, and plain HTTP if it speaks no TLS (--insecure,
                         * --tls-verify=false, or cairn.conf), as podman */
  bool plain;           /* insecure, and found to speak plain HTTP: requests to server go
                         * as http:// (under lock) */
  bool tls_seen;        /* a request to server went through over TLS: a later failure
                         * is the network's, no reason to leave TLS (under lock) */
  char *server;         /* its URL: "https://HOST[:PORT]" */
  char *repo;           /* "team/app" */
  char *ref;            /* tag or "sha256:..." */
  char *creds;          /* "user:pass" or NULL */
  pthread_mutex_t lock;
  char *auth;   /* "Authorization: ..." header, under lock */
  char *ca_pem; /* trusted CAs (PEM) when a cert dir adds some, else NULL */
  size_t ca_len;
  bool push;     /* a push's client: no mirrors, tokens asked with pull,push scope */
  CURLSH *share; /* the connections, DNS and TLS sessions of its requests */
  pthread_mutex_t share_mu[CURL_LOCK_DATA_LAST]; /* the share's locks, one a kind of data */
} registry;

/* The body and headers of one finished HTTP exchange. */
typedef struct http_reply {
  long status;
  char content_type[256];
  char content_digest[CAIRN_DIGEST_LEN + 1];
  char www_auth[1024];
  long retry_after; /* seconds, -1 if absent */
  char error[256];  /* the body of a non-2xx reply (start of it) */
  size_t error_len;
  char location[2048]; /* Location (an upload's URL) */
  char content_range[128];
} http_reply;

/* A request other than a plain GET: its method ("GET", "HEAD", "POST",
 * "PUT") and the body it sends, from a file (rewound to offset 0 for each
 * attempt, *progress tracking what was sent) or from memory. */
typedef struct registry_req {
  const char *method;
  const char *url;
  const char *accept;
  const char *content_type;
  int body_fd; /* < 0: body_mem (may be NULL: no body) */
  uint64_t body_len;
  const void *body_mem;
  _Atomic uint64_t *progress;
  const char *range; /* "A-B,C-D": a Range request (NULL: none) */
} registry_req;

/* One GET with the retry policy: transient failures (connect refused or
 * reset, 5xx, 429, 408) are retried with backoff up to opts->attempts; a
 * 401 runs the auth challenge once. A 2xx body goes to sink. token_request
 * marks the token GET itself (basic creds, no challenge handling). */
int cn_registry_get(registry *rg, const char *url, const char *accept, blob_sink *sink,
                    bool token_request, http_reply *reply, cairn_store *st);
/* cn_registry_get for any request, with the same retry and auth policy
 * (a 404 is -ENOENT without a WHY recorded when req->method is HEAD). */
int cn_registry_request(registry *rg, const registry_req *req, blob_sink *sink, bool token_request,
                        http_reply *reply, cairn_store *st);

/* Opens the client for "HOST[:PORT]/REPO[:TAG]" (no mirrors when push:
 * a push goes to the registry named). */
int cn_registry_open(const char *spec, const cairn_pull_opts *opts, bool push, registry **out,
                     cairn_store *st);

/* The pieces of answering a 401's challenge (registry_auth.c; registry.c
 * makes the requests). For Bearer (params: what follows "Bearer "): the
 * URL of the token request (*url, caller frees) and its scope (what the
 * token is asked for, several space-separated); the token from the token
 * service's answer (body, len bytes), set as the Authorization of rg's
 * requests, -EACCES if it has none, and what it says of its lifetime
 * (*expires_in: seconds, 0 if it says none; *issued_at: 0 if none); a
 * token (a cached one) set as it. For Basic: rg->creds set as it. */
int cn_registry_token_url(registry *rg, const char *params, char **url, char scope[512],
                          cairn_store *st);
int cn_registry_token_take(registry *rg, const char *body, size_t len, long *expires_in,
                           time_t *issued_at, cairn_store *st);
int cn_registry_set_bearer(registry *rg, const char *token, cairn_store *st);
/* The scope a token of rg is asked for when the challenge names none:
 * "repository:REPO:pull" (a push's: pull,push; a login's: ""). */
void cn_registry_default_scope(const registry *rg, char *scope, size_t len);
int cn_registry_auth_basic(registry *rg, cairn_store *st);

/* The process's bearer tokens, shared by its clients (token_cache.c; in
 * memory only). A token is kept under its key: the registry's server it
 * was got for, the challenge's realm and service, the scope asked for and
 * the credentials asked with ("user:pass", NULL for none: compared by
 * their SHA-256), until its lifetime is over (less a margin).
 * cn_token_cache_get: a valid token of k (strdup'd), realm and service
 * NULL meaning any (a client's first request, before any challenge), or
 * NULL; both wait while another thread fetches one of k (bounded).
 * cn_token_cache_claim (k whole): the same, but NULL means the caller is
 * to fetch it and then call cn_token_cache_put, with the token or with
 * NULL when it got none.
 * put keeps token for expires_in seconds (0: 60) from asked_ms
 * (cn_token_now_ms when it was asked; issued_at, if not 0, may shorten
 * it). cn_token_cache_drop forgets token (a registry refused it);
 * cn_token_cache_clear forgets every token. */
typedef struct cn_token_key {
  const char *server, *realm, *service, *scope, *creds;
} cn_token_key;
char *cn_token_cache_get(const cn_token_key *k);
char *cn_token_cache_claim(const cn_token_key *k);
void cn_token_cache_put(const cn_token_key *k, const char *token, long expires_in, time_t issued_at,
                        int64_t asked_ms);
void cn_token_cache_drop(const char *token);
void cn_token_cache_clear(void);
int64_t cn_token_now_ms(void);

/* Reads param="value" (or param=value) from a challenge's parameter list
 * (after the scheme); false if absent. */
bool cn_registry_challenge_param(const char *params, const char *key, char *out, size_t len);

/* Loads the CAs to trust: the system's plus the *.crt files of cert_dir,
 * or of the registry's certs.d directory (registry_tls.c). */
int cn_registry_load_cas(registry *rg, const char *cert_dir, cairn_store *st);

/* Credentials for host from --creds or the auth.json files; NULL if none
 * (auth_json.c). */
char *cn_registry_find_creds(const char *host, const char *creds_opt);

/* The auth.json files, in the order credentials are read from them
 * (auth_json.c; login.c says which); the first is the one login writes. Returns how
 * many it wrote into paths. */
#define CN_AUTH_FILES_MAX 3
size_t cn_auth_files(char paths[CN_AUTH_FILES_MAX][PATH_MAX]);
/* The JSON of the auth file at path, opened O_NONBLOCK (a FIFO put there
 * does not block the command) and read only if it is a regular file;
 * NULL with errno set (EINVAL: not a regular file) or err filled. */
json_t *cn_auth_load_file(const char *path, json_error_t *err);

#endif
