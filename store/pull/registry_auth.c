/*
 * registry_auth.c — registry authentication: the WWW-Authenticate
 * challenge (Bearer: fetch a token from the realm, with basic credentials
 * when there are some; Basic: send the credentials), and where credentials
 * come from: --creds, else the first auth.json that has the host, in the
 * order of cn_auth_files (login.c), podman's.
 */
#include <curl/curl.h>
#include <errno.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "registry.h"

bool cn_registry_challenge_param(const char *params, const char *key, char *out, size_t len) {
  size_t klen = strlen(key);
  for (const char *p = params; *p;) {
    while (*p == ' ' || *p == ',') p++;
    const char *eq = strchr(p, '=');
    if (!eq) return false;
    bool match = (size_t)(eq - p) == klen && strncasecmp(p, key, klen) == 0;
    const char *q = eq + 1;
    bool quoted = *q == '"';
    size_t n = 0;
    for (q += quoted; *q && (quoted ? *q != '"' : *q != ','); q++) {
      if (quoted && *q == '\\' && q[1]) q++;
      if (match && n + 1 < len) out[n++] = *q;
    }
    if (match) {
      out[n] = '\0';
      return true;
    }
    p = quoted && *q == '"' ? q + 1 : q;
  }
  return false;
}

static char *base64(const char *s) {
  size_t n = strlen(s);
  char *out = malloc(4 * ((n + 2) / 3) + 1);
  if (out) EVP_EncodeBlock((unsigned char *)out, (const unsigned char *)s, (int)n);
  return out;
}

static int set_auth(registry *rg, const char *scheme, const char *value, cairn_store *st) {
  char *h = NULL;
  if (asprintf(&h, "Authorization: %s %s", scheme, value) < 0)
    return cairn_fail(st, -ENOMEM, "out of memory");
  pthread_mutex_lock(&rg->lock);
  free(rg->auth);
  rg->auth = h;
  pthread_mutex_unlock(&rg->lock);
  return 0;
}

static int fetch_token(registry *rg, const char *params, cairn_store *st) {
  char realm[1024], service[256] = "", scope[512];
  if (!cn_registry_challenge_param(params, "realm", realm, sizeof realm))
    return cairn_fail(st, -EACCES, "%s: bearer challenge without a realm", rg->endpoint);
  cn_registry_challenge_param(params, "service", service, sizeof service);
  if (!cn_registry_challenge_param(params, "scope", scope, sizeof scope))
    snprintf(scope, sizeof scope, "%s%s%s", rg->repo ? "repository:" : "", rg->repo ? rg->repo : "",
             !rg->repo ? "" /* none: a login's */ : rg->push ? ":pull,push" : ":pull");

  /* Several scopes (a push's mount: this repository's pull,push and the
   * source's pull) come space-separated; each is its own scope=. */
  CURL *h = curl_easy_init();
  char *svc = h ? curl_easy_escape(h, service, 0) : NULL;
  char scopes[2048] = "";
  size_t used = 0;
  bool ok = svc != NULL;
  for (char *save = NULL, *one = strtok_r(scope, " ", &save); one && ok;
       one = strtok_r(NULL, " ", &save)) {
    char *e = curl_easy_escape(h, one, 0);
    int n = e ? snprintf(scopes + used, sizeof scopes - used, "&scope=%s", e) : -1;
    curl_free(e);
    ok = n >= 0 && (size_t)n < sizeof scopes - used;
    if (ok) used += (size_t)n;
  }
  _cleanup_free_ char *url = NULL;
  int r = 0;
  if (!ok || asprintf(&url, "%s%cservice=%s%s", realm, strchr(realm, '?') ? '&' : '?', svc,
                      scopes) < 0) {
    url = NULL;
    r = cairn_fail(st, -ENOMEM, "out of memory");
  }
  curl_free(svc);
  curl_easy_cleanup(h);
  if (r < 0) return r;

  blob_sink s;
  http_reply reply;
  r = cn_blob_sink_init(&s, -1, 1 << 20, NULL);
  if (r == 0) r = cn_registry_get(rg, url, "application/json", &s, true, &reply, st);
  if (r == -EACCES || r == -ENOENT)
    r = cairn_fail(st, -EACCES, "%s: token service refused %s%s", rg->endpoint, scope,
                   rg->creds ? " (check the credentials)" : " (no credentials; try --creds)");
  if (r == 0) {
    json_t *j = json_loadb(s.mem ? s.mem : "", s.written, 0, NULL);
    const char *tok = json_string_value(json_object_get(j, "token"));
    if (!tok) tok = json_string_value(json_object_get(j, "access_token"));
    r = tok ? set_auth(rg, "Bearer", tok, st)
            : cairn_fail(st, -EACCES, "%s: token service answered without a token", rg->endpoint);
    json_decref(j);
  }
  cn_blob_sink_free(&s);
  return r;
}

int cn_registry_auth_challenge(registry *rg, const char *challenge, cairn_store *st) {
  if (strncasecmp(challenge, "Bearer ", 7) == 0) return fetch_token(rg, challenge + 7, st);
  if (strncasecmp(challenge, "Basic", 5) == 0 && rg->creds) {
    _cleanup_free_ char *b = base64(rg->creds);
    return b ? set_auth(rg, "Basic", b, st) : cairn_fail(st, -ENOMEM, "out of memory");
  }
  return cairn_fail(st, -EACCES, "%s: authentication required%s", rg->endpoint,
                    rg->creds ? "" : " (no credentials; use --creds or an auth.json)");
}

/* "https://host/v1/" and "host" both name host. */
static bool auth_key_matches(const char *key, const char *host) {
  const char *k = strstr(key, "://");
  k = k ? k + 3 : key;
  size_t n = strcspn(k, "/");
  if (strlen(host) == n && strncmp(k, host, n) == 0) return true;
  /* Docker Hub's credentials are filed under index.docker.io. */
  return strcmp(host, "docker.io") == 0 && n == 15 && strncmp(k, "index.docker.io", 15) == 0;
}

static char *creds_from_file(const char *path, const char *host) {
  json_t *j = json_load_file(path, 0, NULL);
  json_t *auths = json_object_get(j, "auths"), *v;
  const char *key;
  char *creds = NULL;
  json_object_foreach(auths, key, v) {
    const char *b64 = json_string_value(json_object_get(v, "auth"));
    if (!b64 || !auth_key_matches(key, host)) continue;
    size_t n = strlen(b64);
    unsigned char *out = malloc(n + 1);
    int len = out ? EVP_DecodeBlock(out, (const unsigned char *)b64, (int)n) : -1;
    if (len > 0) {
      int pad = 0; /* DecodeBlock counts the padding (at most 2) as bytes */
      for (size_t i = n; i > 0 && pad < 2 && b64[i - 1] == '='; i--) pad++;
      len = len > pad ? len - pad : 0;
      out[len] = '\0';
      if (strchr((char *)out, ':')) {
        creds = (char *)out;
        break;
      }
    }
    free(out);
  }
  json_decref(j);
  return creds;
}

char *cn_registry_find_creds(const char *host, const char *creds_opt) {
  if (creds_opt) return strdup(creds_opt);
  char paths[CN_AUTH_FILES_MAX][PATH_MAX];
  size_t n = cn_auth_files(paths);
  for (size_t i = 0; i < n; i++) {
    char *c = creds_from_file(paths[i], host);
    if (c) return c;
  }
  return NULL;
}
