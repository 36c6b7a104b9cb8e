/* SPDX-License-Identifier: Apache-2.0 */
/*
 * registry_auth.c — the pieces of answering a registry's WWW-Authenticate
 * challenge, which registry.c puts together (it makes the requests; this
 * file makes none): a challenge's parameters; for Bearer, the URL of the
 * token request to the realm (sent with basic credentials when there are
 * some) and the token from its answer (with what it says of its lifetime,
 * for token_cache.c); for Basic, the credentials. Each sets the
 * Authorization header the client's requests then send. Where credentials
 * come from is auth_json.c's.
 */
#include <curl/curl.h>
#include <errno.h>
#include <limits.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "libcairn_registry.h"

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

void cn_registry_default_scope(const registry *rg, char *scope, size_t len) {
  snprintf(scope, len, "%s%s%s", rg->repo ? "repository:" : "", rg->repo ? rg->repo : "",
           !rg->repo  ? "" /* none: a login's */
           : rg->push ? ":pull,push"
                      : ":pull");
}

int cn_registry_token_url(registry *rg, const char *params, char **url, char scope[512],
                          cairn_store *st) {
  char realm[1024], service[256] = "";
  *url = NULL;
  if (!cn_registry_challenge_param(params, "realm", realm, sizeof realm))
    return cairn_fail(st, -EACCES, "%s: bearer challenge without a realm", rg->endpoint);
  cn_registry_challenge_param(params, "service", service, sizeof service);
  if (!cn_registry_challenge_param(params, "scope", scope, 512))
    cn_registry_default_scope(rg, scope, 512);

  /* Several scopes (a push's mount: this repository's pull,push and the
   * source's pull) come space-separated; each is its own scope=. */
  CURL *h = curl_easy_init();
  char *svc = h ? curl_easy_escape(h, service, 0) : NULL;
  char scopes[2048] = "", each[512];
  size_t used = 0;
  bool ok = svc != NULL;
  snprintf(each, sizeof each, "%s", scope); /* scope stays whole: the token's key */
  for (char *save = NULL, *one = strtok_r(each, " ", &save); one && ok;
       one = strtok_r(NULL, " ", &save)) {
    char *e = curl_easy_escape(h, one, 0);
    int n = e ? snprintf(scopes + used, sizeof scopes - used, "&scope=%s", e) : -1;
    curl_free(e);
    ok = n >= 0 && (size_t)n < sizeof scopes - used;
    if (ok) used += (size_t)n;
  }
  int r = 0;
  if (!ok ||
      asprintf(url, "%s%cservice=%s%s", realm, strchr(realm, '?') ? '&' : '?', svc, scopes) < 0) {
    *url = NULL;
    r = cairn_fail(st, -ENOMEM, "out of memory");
  }
  curl_free(svc);
  curl_easy_cleanup(h);
  return r;
}

/* An RFC 3339 time ("2006-01-02T15:04:05.999Z", or an offset for Z) in
 * seconds since the epoch; 0 if s is none. */
static time_t rfc3339(const char *s) {
  struct tm tm = {0};
  int n = 0;
  if (!s || sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                   &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &n) != 6)
    return 0;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  time_t t = timegm(&tm);
  const char *p = s + n;
  if (*p == '.')
    for (p++; *p >= '0' && *p <= '9'; p++)
      ;
  int oh, om;
  if ((*p == '+' || *p == '-') && sscanf(p + 1, "%2d:%2d", &oh, &om) == 2)
    t -= (*p == '+' ? 1 : -1) * (oh * 3600 + om * 60);
  else if (*p != 'Z' && *p != 'z')
    return 0;
  return t > 0 ? t : 0;
}

int cn_registry_token_take(registry *rg, const char *body, size_t len, long *expires_in,
                           time_t *issued_at, cairn_store *st) {
  json_t *j = json_loadb(body ? body : "", len, 0, NULL);
  const char *tok = json_string_value(json_object_get(j, "token"));
  if (!tok) tok = json_string_value(json_object_get(j, "access_token"));
  json_int_t in = json_integer_value(json_object_get(j, "expires_in"));
  *expires_in = in > 0 && in < LONG_MAX ? (long)in : 0;
  *issued_at = rfc3339(json_string_value(json_object_get(j, "issued_at")));
  int r = tok ? set_auth(rg, "Bearer", tok, st)
              : cairn_fail(st, -EACCES, "%s: token service answered without a token", rg->endpoint);
  json_decref(j);
  return r;
}

int cn_registry_set_bearer(registry *rg, const char *token, cairn_store *st) {
  return set_auth(rg, "Bearer", token, st);
}

int cn_registry_auth_basic(registry *rg, cairn_store *st) {
  cairn_autofree char *b = base64(rg->creds);
  return b ? set_auth(rg, "Basic", b, st) : cairn_fail(st, -ENOMEM, "out of memory");
}
