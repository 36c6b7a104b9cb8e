/* SPDX-License-Identifier: Apache-2.0 */
/*
 * registry.c — the "docker://HOST[:PORT]/REPO[:TAG|@sha256:HEX]" pull
 * source: the OCI distribution API over libcurl, with the retry policy.
 *
 * Retry policy: connection refused/reset/timeouts, 5xx, 408 and 429 are
 * transient and retried, waiting cairn_backoff_ms (or a 429/503's
 * Retry-After, capped) between attempts; everything else is permanent: 404
 * is -ENOENT, a 401 that survives one auth round is -EACCES, a body over
 * its descriptor's size or with the wrong digest is -EBADMSG. At most
 * opts->attempts tries, one log line per retry, then one error line.
 */
#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "libcairn_registry.h"

#define ACCEPT_MANIFESTS                                                                           \
  "application/vnd.oci.image.manifest.v1+json, "                                                   \
  "application/vnd.oci.image.index.v1+json, "                                                      \
  "application/vnd.docker.distribution.manifest.v2+json, "                                         \
  "application/vnd.docker.distribution.manifest.list.v2+json"

typedef struct exchange {
  http_reply *reply;
  blob_sink *sink;
  int sink_err; /* first sink error; stops the transfer */
  const registry_req *req;
  uint64_t sent; /* of the body */
  char *auth;    /* the Authorization header sent, or NULL */
} exchange;

/* Sends the body of a PUT from its file (or memory). */
static size_t on_read(char *buf, size_t size, size_t n, void *arg) {
  exchange *x = arg;
  const registry_req *q = x->req;
  size_t want = size * n;
  if (x->sent >= q->body_len) return 0;
  if (want > q->body_len - x->sent) want = (size_t)(q->body_len - x->sent);
  ssize_t got;
  if (q->body_fd >= 0) {
    got = pread(q->body_fd, buf, want, (off_t)x->sent);
    if (got <= 0) return CURL_READFUNC_ABORT;
  } else {
    memcpy(buf, (const char *)q->body_mem + x->sent, want);
    got = (ssize_t)want;
  }
  x->sent += (uint64_t)got;
  if (q->progress) atomic_store(q->progress, x->sent);
  return (size_t)got;
}

static void copy_header_value(char *dst, size_t len, const char *v, size_t n) {
  while (n > 0 && (*v == ' ' || *v == '\t')) v++, n--;
  while (n > 0 && (v[n - 1] == '\r' || v[n - 1] == '\n' || v[n - 1] == ' ')) n--;
  if (n >= len) n = len - 1;
  memcpy(dst, v, n);
  dst[n] = '\0';
}

static size_t on_header(char *buf, size_t size, size_t n, void *arg) {
  exchange *x = arg;
  http_reply *r = x->reply;
  size_t len = size * n;
  if (len > 5 && strncmp(buf, "HTTP/", 5) == 0) { /* a new response (redirects) */
    const char *sp = memchr(buf, ' ', len);
    r->status = sp ? strtol(sp + 1, NULL, 10) : 0;
    r->content_type[0] = r->content_digest[0] = r->www_auth[0] = r->location[0] = '\0';
    r->content_range[0] = '\0';
    r->retry_after = -1;
    r->error_len = 0;
    r->error[0] = '\0';
    return len;
  }
  const char *colon = memchr(buf, ':', len);
  if (!colon) return len;
  size_t klen = (size_t)(colon - buf);
  const char *v = colon + 1;
  size_t vlen = len - klen - 1;
  char tmp[32];
  if (klen == 12 && strncasecmp(buf, "Content-Type", klen) == 0)
    copy_header_value(r->content_type, sizeof r->content_type, v, vlen);
  else if (klen == 21 && strncasecmp(buf, "Docker-Content-Digest", klen) == 0)
    copy_header_value(r->content_digest, sizeof r->content_digest, v, vlen);
  else if (klen == 16 && strncasecmp(buf, "WWW-Authenticate", klen) == 0)
    copy_header_value(r->www_auth, sizeof r->www_auth, v, vlen);
  else if (klen == 13 && strncasecmp(buf, "Content-Range", klen) == 0)
    copy_header_value(r->content_range, sizeof r->content_range, v, vlen);
  else if (klen == 8 && strncasecmp(buf, "Location", klen) == 0)
    copy_header_value(r->location, sizeof r->location, v, vlen);
  else if (klen == 11 && strncasecmp(buf, "Retry-After", klen) == 0) {
    copy_header_value(tmp, sizeof tmp, v, vlen);
    char *end;
    long s = strtol(tmp, &end, 10);
    r->retry_after = (end != tmp && s >= 0) ? s : -1;
  }
  return len;
}

static size_t on_body(char *buf, size_t size, size_t n, void *arg) {
  exchange *x = arg;
  size_t len = size * n;
  if (x->reply->status >= 200 && x->reply->status < 300) {
    int r = x->sink ? cn_blob_sink_write(x->sink, buf, len) : 0;
    if (r < 0) {
      x->sink_err = r;
      return 0; /* aborts the transfer: CURLE_WRITE_ERROR */
    }
    return len;
  }
  http_reply *r = x->reply;
  size_t room = sizeof r->error - 1 - r->error_len;
  size_t k = len < room ? len : room;
  memcpy(r->error + r->error_len, buf, k);
  r->error_len += k;
  r->error[r->error_len] = '\0';
  return len;
}

static bool curl_transient(CURLcode c) {
  switch (c) {
  case CURLE_COULDNT_CONNECT:
  case CURLE_OPERATION_TIMEDOUT:
  case CURLE_SEND_ERROR:
  case CURLE_RECV_ERROR:
  case CURLE_GOT_NOTHING:
  case CURLE_PARTIAL_FILE:
  case CURLE_HTTP2:
  case CURLE_HTTP2_STREAM: return true;
  default: return false;
  }
}

/* The registry's own words for a failed request: errors[0].message. */
static const char *reply_reason(const http_reply *r, char *buf, size_t len) {
  json_t *j = json_loads(r->error, 0, NULL);
  const char *code =
      json_string_value(json_object_get(json_array_get(json_object_get(j, "errors"), 0), "code"));
  const char *msg = json_string_value(
      json_object_get(json_array_get(json_object_get(j, "errors"), 0), "message"));
  if (msg)
    snprintf(buf, len, "HTTP %ld %s%s%s", r->status, code ? code : "", code ? ": " : "", msg);
  else
    snprintf(buf, len, "HTTP %ld", r->status);
  json_decref(j);
  return buf;
}

static CURLcode perform(registry *rg, CURL *h, const registry_req *q, bool token_request,
                        exchange *x) {
  struct curl_slist *hdrs = NULL;
  char line[4200];
  const char *url = q->url;
  if (q->accept) {
    snprintf(line, sizeof line, "Accept: %s", q->accept);
    hdrs = curl_slist_append(hdrs, line);
  }
  if (q->content_type) {
    snprintf(line, sizeof line, "Content-Type: %s", q->content_type);
    hdrs = curl_slist_append(hdrs, line);
  }
  x->req = q;
  x->sent = 0;
  if (strcmp(q->method, "HEAD") == 0) {
    curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
  } else if (strcmp(q->method, "PUT") == 0) {
    curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(h, CURLOPT_READFUNCTION, on_read);
    curl_easy_setopt(h, CURLOPT_READDATA, x);
    curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)q->body_len);
    hdrs = curl_slist_append(hdrs, "Expect:");
  } else if (strcmp(q->method, "POST") == 0) {
    curl_easy_setopt(h, CURLOPT_POST, 1L);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, q->body_mem ? (const char *)q->body_mem : "");
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)(q->body_mem ? q->body_len : 0));
  }
  if (!token_request) {
    pthread_mutex_lock(&rg->lock);
    if (rg->auth) {
      hdrs = curl_slist_append(hdrs, rg->auth);
      x->auth = strdup(rg->auth);
    }
    pthread_mutex_unlock(&rg->lock);
  } else if (rg->creds) {
    curl_easy_setopt(h, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
    curl_easy_setopt(h, CURLOPT_USERPWD, rg->creds);
  }
  const char *protos = rg->insecure ? "http,https" : "https";
  if (rg->share) curl_easy_setopt(h, CURLOPT_SHARE, rg->share);
  curl_easy_setopt(h, CURLOPT_URL, url);
  if (q->range) curl_easy_setopt(h, CURLOPT_RANGE, q->range);
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, protos);
  curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, protos);
  curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(h, CURLOPT_MAXREDIRS, 5L);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 10L);
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, 30L);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_USERAGENT, "cairn/0.1");
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, x);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, x);
  struct curl_blob cas = {rg->ca_pem, rg->ca_len, CURL_BLOB_NOCOPY};
  if (rg->ca_pem) curl_easy_setopt(h, CURLOPT_CAINFO_BLOB, &cas);
  if (rg->insecure) {
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
  }
  CURLcode c = curl_easy_perform(h);
  curl_slist_free_all(hdrs);
  return c;
}

/* Whether url goes to the registry's own server (not a token service's or
 * a redirect's). */
static bool is_own(const registry *rg, const char *url) {
  size_t n = rg->server ? strlen(rg->server) : 0;
  return n && strncmp(url, rg->server, n) == 0 && (url[n] == '/' || url[n] == '\0');
}

/* What curl says when a server answers TLS with something else: a plain
 * HTTP server reading a ClientHello. */
static bool tls_refused(CURLcode c) {
  return c == CURLE_SSL_CONNECT_ERROR || c == CURLE_GOT_NOTHING || c == CURLE_RECV_ERROR;
}

/* *out: url as http:// when the registry was found to speak plain HTTP and
 * url goes to it, else NULL. */
static int to_plain(registry *rg, const char *url, char **out) {
  pthread_mutex_lock(&rg->lock);
  bool plain = rg->plain;
  pthread_mutex_unlock(&rg->lock);
  *out = NULL;
  if (!plain || strncmp(url, "https://", 8) != 0 || !is_own(rg, url)) return 0;
  return asprintf(out, "http://%s", url + 8) < 0 ? (*out = NULL, -ENOMEM) : 0;
}

void cn_sleep_ms(uint64_t ms) {
  struct timespec ts = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000};
  while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
    ;
}

int cn_registry_get(registry *rg, const char *url, const char *accept, blob_sink *sink,
                    bool token_request, http_reply *reply, cairn_store *st) {
  registry_req q = {.method = "GET", .url = url, .accept = accept, .body_fd = -1};
  return cn_registry_request(rg, &q, sink, token_request, reply, st);
}

#define BEARER "Authorization: Bearer "

/* A bearer challenge's answer (params: what follows "Bearer "): the
 * process's token for it when it has one (token_cache.c), else one
 * fetched from the realm (registry_auth.c says where, and takes it) and
 * kept for the other clients. A login's is neither looked up nor kept:
 * it is there to try its credentials. */
static int fetch_token(registry *rg, const char *params, cairn_store *st) {
  char scope[512], realm[1024] = "", service[256] = "";
  cairn_autofree char *url = NULL;
  int r = cn_registry_token_url(rg, params, &url, scope, st);
  if (r < 0) return r;
  cn_registry_challenge_param(params, "realm", realm, sizeof realm);
  cn_registry_challenge_param(params, "service", service, sizeof service);
  cn_token_key key = {rg->server, realm, service, scope, rg->creds};
  bool kept = rg->repo != NULL;
  if (kept) {
    cairn_autofree char *tok = cn_token_cache_claim(&key);
    if (tok) {
      r = cn_registry_set_bearer(rg, tok, st);
      explicit_bzero(tok, strlen(tok));
      return r;
    }
  }
  int64_t asked = cn_token_now_ms();
  long expires_in = 0;
  time_t issued_at = 0;
  blob_sink s;
  http_reply reply;
  r = cn_blob_sink_init(&s, -1, 1 << 20, NULL);
  if (r == 0) r = cn_registry_get(rg, url, "application/json", &s, true, &reply, st);
  if (r == -EACCES || r == -ENOENT)
    r = rg->creds ? cairn_fail(st, -EACCES, "%s: token service refused %s (check the credentials)",
                               rg->endpoint, scope)
                  : cairn_fail(st, -EACCES,
                               "%s: token service refused %s (no credentials: cairn login %s, "
                               "or --creds USER)",
                               rg->endpoint, scope, rg->endpoint);
  if (r == 0) r = cn_registry_token_take(rg, s.mem, s.written, &expires_in, &issued_at, st);
  cn_blob_sink_free(&s);
  if (kept) { /* the claim answered: the token kept, or none */
    cairn_autofree char *tok = NULL;
    pthread_mutex_lock(&rg->lock);
    if (r == 0 && rg->auth && strncmp(rg->auth, BEARER, strlen(BEARER)) == 0)
      tok = strdup(rg->auth + strlen(BEARER));
    pthread_mutex_unlock(&rg->lock);
    cn_token_cache_put(&key, tok, expires_in, issued_at, asked);
    if (tok) explicit_bzero(tok, strlen(tok));
  }
  return r;
}

/* Before a request to the registry's own server that would go without
 * one: the process's token for what rg asks when it has one, so that a
 * client opened after another pays no 401 and no token request (out of
 * memory: none, said nowhere; the challenge is answered as before). */
static void use_kept_token(registry *rg, const char *url) {
  if (!rg->repo || !is_own(rg, url)) return;
  pthread_mutex_lock(&rg->lock);
  bool has = rg->auth != NULL;
  pthread_mutex_unlock(&rg->lock);
  if (has) return;
  char scope[512];
  cn_registry_default_scope(rg, scope, sizeof scope);
  cn_token_key key = {rg->server, NULL, NULL, scope, rg->creds};
  cairn_autofree char *tok = cn_token_cache_get(&key);
  if (!tok) return;
  cn_registry_set_bearer(rg, tok, NULL);
  explicit_bzero(tok, strlen(tok));
}

/* Answers a 401's challenge: fetches a bearer token, or sets basic creds.
 * -EACCES when it cannot. */
static int auth_challenge(registry *rg, const char *challenge, cairn_store *st) {
  if (strncasecmp(challenge, "Bearer ", 7) == 0) return fetch_token(rg, challenge + 7, st);
  if (strncasecmp(challenge, "Basic", 5) == 0 && rg->creds) return cn_registry_auth_basic(rg, st);
  if (rg->creds) return cairn_fail(st, -EACCES, "%s: authentication required", rg->endpoint);
  return cairn_fail(st, -EACCES,
                    "%s: authentication required (no credentials: cairn login %s, or --creds USER)",
                    rg->endpoint, rg->endpoint);
}

int cn_registry_request(registry *rg, const registry_req *q, blob_sink *sink, bool token_request,
                        http_reply *reply, cairn_store *st) {
  const char *method = q->method;
  registry_req plainq = *q;
  cairn_autofree char *plain_url = NULL;
  q = &plainq;
  const char *url = q->url, *own_url = q->url;
  bool head = strcmp(method, "HEAD") == 0;
  const cairn_pull_opts *o = rg->base.opts;
  unsigned attempts = o->attempts ? o->attempts : 6;
  uint64_t base = o->backoff_base_ms ? o->backoff_base_ms : 200;
  uint64_t cap = o->backoff_cap_ms ? o->backoff_cap_ms : 10000;
  bool auth_done = false;
  char why[512];
  CURL *h = curl_easy_init();
  if (!h) return cairn_fail(st, -ENOMEM, "out of memory");
  int r = 0;
  for (unsigned attempt = 0;; attempt++) {
    exchange x = {.reply = reply, .sink = sink};
    memset(reply, 0, sizeof *reply);
    reply->retry_after = -1;
    if (sink && (r = cn_blob_sink_reset(sink)) < 0) {
      cairn_fail(st, r, "temporary file: %s", strerror(-r));
      break;
    }
    curl_easy_reset(h);
    if (!plain_url && to_plain(rg, url, &plain_url) < 0) {
      r = cairn_fail(st, -ENOMEM, "out of memory");
      break;
    }
    if (plain_url) plainq.url = url = plain_url;
    if (!token_request) use_kept_token(rg, own_url);
    CURLcode c = perform(rg, h, q, token_request, &x);
    cairn_autofree char *sent_auth = x.auth;
    if (rg->insecure && !plain_url && is_own(rg, url)) {
      pthread_mutex_lock(&rg->lock);
      bool fall_back = tls_refused(c) && !rg->tls_seen;
      if (c == CURLE_OK) rg->tls_seen = true;
      if (fall_back) rg->plain = true;
      pthread_mutex_unlock(&rg->lock);
      if (fall_back) { /* an insecure registry that speaks no TLS: plain HTTP
                        * from now on, said nowhere, as podman */
        attempt--;     /* not a failed attempt: the first of the other scheme */
        continue;
      }
    }
    bool transient = false;
    if (x.sink_err == -EFBIG) {
      r = cairn_fail(st, -EBADMSG,
                     "%s %s: the server sent more than the %llu bytes the descriptor says; cut off",
                     method, url, (unsigned long long)sink->limit);
      break;
    } else if (x.sink_err == -ECANCELED) {
      r = cairn_fail(st, -ECANCELED, "%s %s: cancelled", method, url);
      break;
    } else if (x.sink_err) {
      r = cairn_fail(st, x.sink_err, "%s %s: writing: %s", method, url, strerror(-x.sink_err));
      break;
    } else if (c != CURLE_OK) {
      snprintf(why, sizeof why, "%s", curl_easy_strerror(c));
      transient = curl_transient(c);
      r = -EIO;
      if (c == CURLE_SSL_CONNECT_ERROR || c == CURLE_UNSUPPORTED_PROTOCOL)
        strncat(why,
                " (plain HTTP registry? use --insecure, or insecure = true in its cairn.conf "
                "section)",
                sizeof why - strlen(why) - 1);
      else if (c == CURLE_PEER_FAILED_VERIFICATION)
        strncat(why, " (a private CA? give its certificate with --cert-dir DIR)",
                sizeof why - strlen(why) - 1);
    } else if (reply->status >= 200 && reply->status < 300) {
      r = 0;
      break;
    } else if (reply->status == 401 && !token_request && !auth_done && reply->www_auth[0]) {
      auth_done = true;
      if (sent_auth && strncmp(sent_auth, BEARER, strlen(BEARER)) == 0)
        cn_token_cache_drop(sent_auth + strlen(BEARER)); /* expired or revoked: not again */
      if ((r = auth_challenge(rg, reply->www_auth, st)) < 0) break;
      attempt--; /* answering the challenge is not a failed attempt */
      continue;
    } else {
      reply_reason(reply, why, sizeof why);
      long s = reply->status;
      transient = s >= 500 || s == 429 || s == 408;
      r = s == 404 ? -ENOENT : (s == 401 || s == 403) ? -EACCES : -EIO;
      if (s == 401)
        strncat(why,
                token_request ? " (token refused; check --creds)" : " (authentication refused)",
                sizeof why - strlen(why) - 1);
    }
    if (!transient || attempt + 1 >= attempts) {
      if (head && r == -ENOENT)
        break;
      else if (transient)
        r = cairn_fail(st, r, "%s %s: %s (gave up after %u attempt%s)", method, url, why,
                       attempt + 1, attempt ? "s" : "");
      else
        r = cairn_fail(st, r, "%s %s: %s", method, url, why);
      break;
    }
    uint64_t wait = cairn_backoff_ms(attempt, base, cap, arc4random());
    if (reply->retry_after >= 0) {
      uint64_t ra = (uint64_t)reply->retry_after * 1000;
      wait = ra > cap ? cap : (ra > wait ? ra : wait);
    }
    cn_pull_log(&rg->base, "%s %s: %s; retry %u/%u in %.1fs", method, url, why, attempt + 1,
                attempts - 1, (double)wait / 1000);
    cn_sleep_ms(wait);
  }
  curl_easy_cleanup(h);
  return r;
}

/* ---- the source ----------------------------------------------------------- */

/* The manifest d (NULL: the reference's) from the endpoint in use. */
static int endpoint_manifest(registry *rg, const pull_desc *d, char **body, size_t *len,
                             cairn_store *st) {
  char url[4096];
  const char *ref = d ? d->digest : rg->ref;
  snprintf(url, sizeof url, "%s/v2/%s/manifests/%s", rg->server, rg->repo, ref);
  if (d && d->size > PULL_MANIFEST_MAX)
    return cairn_fail(st, -EBADMSG, "manifest %s is too large (%llu bytes)", d->digest,
                      (unsigned long long)d->size);
  blob_sink s;
  http_reply reply;
  int r = cn_blob_sink_init(&s, -1, d ? d->size : PULL_MANIFEST_MAX, NULL);
  if (r == 0) r = cn_registry_get(rg, url, ACCEPT_MANIFESTS, &s, false, &reply, st);
  if (r == -ENOENT) cairn_fail(st, r, "%s/%s: manifest %s not found", rg->endpoint, rg->repo, ref);
  if (r == 0 && d) r = cn_blob_sink_finish(&s, d, st);
  if (r == 0 && !d) {
    /* A tag is checked against the digest the registry states; a digest
     * reference against itself. */
    char got[CAIRN_DIGEST_LEN + 1];
    cn_pull_sha256(s.mem ? s.mem : "", s.written, got);
    const char *want = cn_pull_digest_valid(rg->ref)                ? rg->ref
                       : cn_pull_digest_valid(reply.content_digest) ? reply.content_digest
                                                                    : NULL;
    if (want && strcmp(want, got) != 0)
      r = cairn_fail(st, -EBADMSG, "manifest %s: digest mismatch (content is %s)", want, got);
  }
  if (r == 0) {
    *body = s.mem ? s.mem : strdup("");
    *len = s.written;
    s.mem = NULL;
  }
  cn_blob_sink_free(&s);
  return r;
}

/* Sends the requests from now on to endpoint k: its URL, its scheme
 * (HTTPS; without TLS checks, and plain HTTP if it speaks no TLS, when
 * --insecure or cairn.conf says it is insecure), its
 * credentials (--creds is the registry's own, not a mirror's) and its CAs
 * (--cert-dir likewise, else its certs.d). */
static int use_endpoint(registry *rg, size_t k, cairn_store *st) {
  const cairn_pull_opts *o = rg->base.opts;
  const struct cn_config_registry *conf = cn_config_registry(o->config, rg->endpoints[k]);
  bool own = k + 1 == rg->n_endpoints;
  rg->endpoint = rg->endpoints[k];
  rg->insecure = o->insecure || (conf && conf->insecure);
  free(rg->server);
  free(rg->creds);
  free(rg->auth);
  free(rg->ca_pem);
  rg->auth = rg->ca_pem = NULL;
  rg->ca_len = 0;
  bool hub = strcmp(rg->endpoint, "docker.io") == 0; /* Docker Hub's API is elsewhere */
  rg->plain = rg->tls_seen = false;
  if (asprintf(&rg->server, "https://%s", hub ? "registry-1.docker.io" : rg->endpoint) < 0)
    rg->server = NULL;
  rg->creds = cn_registry_find_creds(rg->endpoint, own ? o->creds : NULL);
  if (!rg->server) return cairn_fail(st, -ENOMEM, "out of memory");
  return cn_registry_load_cas(rg, own ? o->cert_dir : NULL, st);
}

/* The reference's manifest from the first endpoint that gives it (a mirror
 * that fails is said, and the next tried), which then serves the rest of
 * the pull; a manifest by digest from that one. */
static int registry_manifest(pull_source *src, const pull_desc *d, char **body, size_t *len,
                             cairn_store *st) {
  registry *rg = (registry *)src;
  if (d) return endpoint_manifest(rg, d, body, len, st);
  for (size_t k = 0;; k++) {
    int r = k == 0 ? 0 : use_endpoint(rg, k, st);
    if (r == 0) r = endpoint_manifest(rg, NULL, body, len, st);
    if (r == 0 || k + 1 == rg->n_endpoints) return r;
    cn_pull_log(&rg->base, "mirror %s: %s; trying %s", rg->endpoint, cairn_errmsg(st),
                rg->endpoints[k + 1]);
  }
}

static int registry_blob(pull_source *src, const pull_desc *d, blob_sink *s, cairn_store *st) {
  registry *rg = (registry *)src;
  char url[4096];
  http_reply reply;
  snprintf(url, sizeof url, "%s/v2/%s/blobs/%s", rg->server, rg->repo, d->digest);
  int r = cn_registry_get(rg, url, NULL, s, false, &reply, st);
  if (r == -ENOENT)
    return cairn_fail(st, r, "%s/%s: blob %s not found", rg->endpoint, rg->repo, d->digest);
  return r < 0 ? r : cn_blob_sink_finish(s, d, st);
}

static int registry_ranges(pull_source *src, const pull_desc *d, const char *spec, blob_sink *s,
                           pull_range_reply *rr, cairn_store *st) {
  registry *rg = (registry *)src;
  char url[4096];
  http_reply reply;
  snprintf(url, sizeof url, "%s/v2/%s/blobs/%s", rg->server, rg->repo, d->digest);
  registry_req q = {.method = "GET", .url = url, .body_fd = -1, .range = spec};
  int r = cn_registry_request(rg, &q, s, false, &reply, st);
  if (r == -ENOENT)
    return cairn_fail(st, r, "%s/%s: blob %s not found", rg->endpoint, rg->repo, d->digest);
  if (reply.status == 200) /* the whole blob: cut off at the sink's limit */
    return cairn_fail(st, -EPROTO, "%s answers no range requests (HTTP 200 to one)", rg->endpoint);
  rr->status = reply.status;
  snprintf(rr->content_type, sizeof rr->content_type, "%s", reply.content_type);
  snprintf(rr->content_range, sizeof rr->content_range, "%s", reply.content_range);
  return r;
}

static void registry_free(pull_source *src) {
  registry *rg = (registry *)src;
  free(rg->host);
  free(rg->server);
  free(rg->repo);
  free(rg->ref);
  free(rg->creds);
  free(rg->auth);
  free(rg->ca_pem);
  free(rg->base.default_name);
  free(rg->endpoints);
  if (rg->share) curl_share_cleanup(rg->share); /* its requests all done: closes the connections */
  for (int k = 0; k < CURL_LOCK_DATA_LAST; k++) pthread_mutex_destroy(&rg->share_mu[k]);
  pthread_mutex_destroy(&rg->lock);
  free(rg);
}

static const pull_source_ops registry_ops = {
    .manifest = registry_manifest,
    .blob = registry_blob,
    .free = registry_free,
    .ranges = registry_ranges,
};

static void share_lock(CURL *h, curl_lock_data data, curl_lock_access access, void *arg) {
  (void)h;
  (void)access;
  if ((unsigned)data < CURL_LOCK_DATA_LAST) pthread_mutex_lock(&((registry *)arg)->share_mu[data]);
}

static void share_unlock(CURL *h, curl_lock_data data, void *arg) {
  (void)h;
  if ((unsigned)data < CURL_LOCK_DATA_LAST)
    pthread_mutex_unlock(&((registry *)arg)->share_mu[data]);
}

/* The client's curl share: its requests' connections kept and reused (and
 * the DNS answers and TLS sessions), for the client's life. NULL when curl
 * cannot make one: then each request connects anew, as before. */
static CURLSH *share_new(registry *rg) {
  CURLSH *sh = curl_share_init();
  if (!sh) return NULL;
  if (curl_share_setopt(sh, CURLSHOPT_LOCKFUNC, share_lock) != CURLSHE_OK ||
      curl_share_setopt(sh, CURLSHOPT_UNLOCKFUNC, share_unlock) != CURLSHE_OK ||
      curl_share_setopt(sh, CURLSHOPT_USERDATA, rg) != CURLSHE_OK ||
      curl_share_setopt(sh, CURLSHOPT_SHARE, CURL_LOCK_DATA_CONNECT) != CURLSHE_OK) {
    curl_share_cleanup(sh);
    return NULL;
  }
  curl_share_setopt(sh, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
  curl_share_setopt(sh, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
  return sh;
}

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init_once(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }

/* The registry a short name (no HOST) is pulled from, as podman picks it:
 * the first of unqualified-search-registries in registries.conf
 * ($CONTAINERS_REGISTRIES_CONF, else /etc/containers/registries.conf),
 * else docker.io. Only that key is read, as a one-line or multi-line TOML
 * array of strings; the first entry is used (podman would try each). */
static char *search_registry(void) {
  const char *path = getenv("CONTAINERS_REGISTRIES_CONF");
  cairn_autofclose FILE *f = fopen(path && *path ? path : "/etc/containers/registries.conf", "re");
  char line[1024];
  bool in_key = false;
  while (f && fgets(line, sizeof line, f)) {
    char *p = line + strspn(line, " \t");
    if (*p == '#') continue;
    if (!in_key) {
      static const char key[] = "unqualified-search-registries";
      if (strncmp(p, key, sizeof key - 1) != 0) continue;
      p += sizeof key - 1;
      p += strspn(p, " \t");
      if (*p++ != '=') continue;
      in_key = true;
    }
    char *q = strchr(p, '"');
    char *end = q ? strchr(q + 1, '"') : NULL;
    if (end && end > q + 1) return strndup(q + 1, (size_t)(end - q - 1));
    if (strchr(p, ']')) break; /* an empty list */
  }
  return strdup("docker.io");
}

/* Splits [HOST[:PORT]/]REPO[:TAG|@DIGEST]. The first component is a host
 * when it has a "." or a ":" or is "localhost" (the rule of docker and
 * podman); otherwise the name is short and its host is search_registry's.
 * docker.io gets Docker Hub's server and its implied "library/"
 * namespace. */
static int parse_spec(registry *rg, const char *spec, cairn_store *st) {
  const char *slash = strchr(spec, '/');
  size_t first = slash ? (size_t)(slash - spec) : 0;
  bool has_host = slash && (memchr(spec, '.', first) || memchr(spec, ':', first) ||
                            (first == 9 && strncmp(spec, "localhost", 9) == 0));
  if (!*spec || slash == spec || (slash && !slash[1]))
    return cairn_fail(st, -EINVAL,
                      "docker://%s: expected docker://[HOST[:PORT]/]REPO[:TAG|@DIGEST]", spec);
  rg->host = has_host ? strndup(spec, first) : search_registry();
  const char *repo = has_host ? slash + 1 : spec;
  const char *at = strchr(repo, '@');
  const char *last_slash = strrchr(repo, '/');
  const char *colon = strrchr(last_slash ? last_slash : repo, ':');
  size_t rlen;
  if (at) {
    rlen = (size_t)(at - repo);
    rg->ref = strdup(at + 1);
    if (!cn_pull_digest_valid(rg->ref))
      return cairn_fail(st, -EINVAL, "docker://%s: digest must be sha256:<64 hex>", spec);
  } else if (colon) {
    rlen = (size_t)(colon - repo);
    rg->ref = strdup(colon + 1);
  } else {
    rlen = strlen(repo);
    rg->ref = strdup("latest");
  }
  bool library = rg->host && strcmp(rg->host, "docker.io") == 0 && !memchr(repo, '/', rlen);
  if (asprintf(&rg->repo, "%s%.*s", library ? "library/" : "", (int)rlen, repo) < 0)
    rg->repo = NULL;
  if (!rg->host || !rg->ref || !rg->repo) return cairn_fail(st, -ENOMEM, "out of memory");
  if (rlen == 0 || !*rg->ref)
    return cairn_fail(st, -EINVAL, "docker://%s: empty repository or tag", spec);
  /* HOST/REPO:TAG, or HOST/REPO@DIGEST as podman keeps a pull by digest;
   * no default name if it is none */
  char norm[1024];
  if (asprintf(&rg->base.default_name, "%s/%s%c%s", rg->host, rg->repo, at ? '@' : ':',
               rg->ref) < 0)
    rg->base.default_name = NULL;
  else if ((at ? cn_name_digested : cairn_name_normalize)(rg->base.default_name, norm,
                                                           sizeof norm) < 0) {
    free(rg->base.default_name);
    rg->base.default_name = NULL;
  }
  return 0;
}

int cn_registry_source_open(const char *spec, const cairn_pull_opts *opts, pull_source **out,
                            cairn_store *st) {
  registry *rg;
  int r = cn_registry_open(spec, opts, false, &rg, st);
  if (r == 0) *out = &rg->base;
  return r;
}

int cn_registry_open(const char *spec, const cairn_pull_opts *opts, bool push, registry **out,
                     cairn_store *st) {
  pthread_once(&curl_once, curl_init_once);
  registry *rg = calloc(1, sizeof *rg);
  if (!rg) return cairn_fail(st, -ENOMEM, "out of memory");
  rg->base.ops = &registry_ops;
  rg->base.opts = opts;
  rg->push = push;
  pthread_mutex_init(&rg->lock, NULL);
  for (int k = 0; k < CURL_LOCK_DATA_LAST; k++) pthread_mutex_init(&rg->share_mu[k], NULL);
  rg->share = share_new(rg);
  int r = parse_spec(rg, spec, st);
  if (r < 0) {
    registry_free(&rg->base);
    return r;
  }
  const struct cn_config_registry *conf = cn_config_registry(opts->config, rg->host);
  size_t n_mirrors = conf && !push ? conf->n_mirrors : 0;
  if (!(rg->endpoints = calloc(n_mirrors + 1, sizeof *rg->endpoints))) {
    registry_free(&rg->base);
    return cairn_fail(st, -ENOMEM, "out of memory");
  }
  for (size_t i = 0; i < n_mirrors; i++) rg->endpoints[i] = conf->mirrors[i];
  rg->endpoints[n_mirrors] = rg->host;
  rg->n_endpoints = n_mirrors + 1;
  if ((r = use_endpoint(rg, 0, st)) < 0) {
    registry_free(&rg->base);
    return r;
  }
  *out = rg;
  return 0;
}
