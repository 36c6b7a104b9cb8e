/* SPDX-License-Identifier: Apache-2.0 */
/*
 * token_cache.c — the process's bearer tokens, shared by its registry
 * clients (registry.c): a token got once serves every client of the
 * process that would ask the same for it, so that a source opened per
 * layer (a fill's, the snapshotter's lazy Prepares, the lazy fetcher's
 * threads) pays no 401 and no token request of its own.
 *
 * Invariants:
 * - A token is kept under what made it valid: the registry's server it
 *   was got for, the realm and service of the challenge, the scope asked
 *   for and the credentials it was asked with (their SHA-256; none is its
 *   own key), and handed out only for exactly that: never a token of one
 *   user's credentials to a client with another's or with none.
 * - It is handed out only while its lifetime lasts (expires_in, 60 s when
 *   the token service says none, counted from when it was asked, or from
 *   issued_at when that is sooner), less a margin (a tenth of it, 1 to
 *   10 s) for the requests in flight; a token a registry refused is
 *   dropped.
 * - In memory only, never written anywhere; freed tokens are zeroed.
 *   At most TOKENS_MAX entries (expired ones go first, then the oldest).
 * - One fetch at a time per key: a client that finds another fetching the
 *   token it needs, at a challenge or before its first request, waits for
 *   it (at most CLAIM_WAIT_S, then goes on without), so that clients
 *   opened together ask once and meet one 401 between them.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "libcairn_registry.h"

#define TOKENS_MAX 64
#define CLAIM_WAIT_S 30
#define LIFE_MAX_S 86400 /* a longer expires_in is kept a day */

typedef struct token_entry {
  struct token_entry *next;
  char *server, *realm, *service, *scope;
  char creds[CAIRN_DIGEST_LEN + 1]; /* sha256 of "user:pass", "" for none */
  char *token;                      /* NULL while fetching */
  bool fetching;
  int64_t valid_until; /* CLOCK_MONOTONIC ms */
} token_entry;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static token_entry *tokens; /* the most recent first */

int64_t cn_token_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void creds_key(const char *creds, char out[CAIRN_DIGEST_LEN + 1]) {
  if (creds)
    cn_pull_sha256(creds, strlen(creds), out);
  else
    out[0] = '\0';
}

static bool same(const char *a, const char *b) { return strcmp(a ? a : "", b ? b : "") == 0; }

/* Whether e is k's; realm and service NULL in k: any. */
static bool matches(const token_entry *e, const cn_token_key *k, const char *creds) {
  return same(e->server, k->server) && same(e->scope, k->scope) && strcmp(e->creds, creds) == 0 &&
         (!k->realm || same(e->realm, k->realm)) && (!k->service || same(e->service, k->service));
}

static void entry_free(token_entry *e) {
  if (e->token) explicit_bzero(e->token, strlen(e->token));
  free(e->token);
  free(e->server);
  free(e->realm);
  free(e->service);
  free(e->scope);
  free(e);
}

static bool valid(const token_entry *e, int64_t now) { return e->token && now < e->valid_until; }

/* The entry of k (realm and service given), under mu; NULL if none. */
static token_entry **find(const cn_token_key *k, const char *creds) {
  for (token_entry **p = &tokens; *p; p = &(*p)->next)
    if (matches(*p, k, creds)) return p;
  return NULL;
}

/* Room for one more, under mu: the expired go, then the oldest not being
 * fetched. */
static void make_room(int64_t now) {
  size_t n = 0;
  token_entry **last = NULL;
  for (token_entry **p = &tokens; *p;) {
    token_entry *e = *p;
    if (!e->fetching && !valid(e, now)) {
      *p = e->next;
      entry_free(e);
      continue;
    }
    n++;
    if (!e->fetching) last = p;
    p = &e->next;
  }
  if (n >= TOKENS_MAX && last) {
    token_entry *e = *last;
    *last = e->next;
    entry_free(e);
  }
}

static token_entry *entry_new(const cn_token_key *k, const char *creds) {
  token_entry *e = calloc(1, sizeof *e);
  if (!e) return NULL;
  e->server = strdup(k->server ? k->server : "");
  e->realm = strdup(k->realm ? k->realm : "");
  e->service = strdup(k->service ? k->service : "");
  e->scope = strdup(k->scope ? k->scope : "");
  snprintf(e->creds, sizeof e->creds, "%s", creds);
  if (!e->server || !e->realm || !e->service || !e->scope) {
    entry_free(e);
    return NULL;
  }
  return e;
}

/* The deadline of a wait for another thread's fetch. */
static struct timespec claim_deadline(void) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += CLAIM_WAIT_S;
  return until;
}

char *cn_token_cache_get(const cn_token_key *k) {
  char creds[CAIRN_DIGEST_LEN + 1];
  creds_key(k->creds, creds);
  struct timespec until = claim_deadline();
  char *tok = NULL;
  pthread_mutex_lock(&mu);
  for (;;) {
    bool fetching = false;
    int64_t now = cn_token_now_ms();
    for (token_entry *e = tokens; e && !tok; e = e->next)
      if (matches(e, k, creds)) {
        if (valid(e, now))
          tok = strdup(e->token);
        else
          fetching |= e->fetching;
      }
    if (tok || !fetching || pthread_cond_timedwait(&changed, &mu, &until) == ETIMEDOUT) break;
  }
  pthread_mutex_unlock(&mu);
  return tok;
}

char *cn_token_cache_claim(const cn_token_key *k) {
  char creds[CAIRN_DIGEST_LEN + 1];
  creds_key(k->creds, creds);
  char *tok = NULL;
  struct timespec until = claim_deadline();
  pthread_mutex_lock(&mu);
  for (;;) {
    token_entry **p = find(k, creds);
    token_entry *e = p ? *p : NULL;
    if (e && valid(e, cn_token_now_ms())) {
      tok = strdup(e->token);
      break;
    }
    if (e && e->fetching) {
      if (pthread_cond_timedwait(&changed, &mu, &until) == ETIMEDOUT) break; /* fetch our own */
      continue;
    }
    if (!e) {
      make_room(cn_token_now_ms());
      if (!(e = entry_new(k, creds))) break;
      e->next = tokens;
      tokens = e;
    }
    e->fetching = true;
    break;
  }
  pthread_mutex_unlock(&mu);
  return tok;
}

void cn_token_cache_put(const cn_token_key *k, const char *token, long expires_in, time_t issued_at,
                        int64_t asked_ms) {
  char creds[CAIRN_DIGEST_LEN + 1];
  creds_key(k->creds, creds);
  int64_t life = expires_in > 0 ? (expires_in < LIFE_MAX_S ? expires_in : LIFE_MAX_S) : 60;
  int64_t margin = life / 10 < 1 ? 1 : life / 10 > 10 ? 10 : life / 10;
  if (issued_at > 0) { /* a token service's clock behind ours shortens it;
                        * one ahead does not lengthen it */
    int64_t left = (int64_t)issued_at + life - (int64_t)time(NULL);
    if (left < life) life = left;
  }
  int64_t until = asked_ms + (life - margin) * 1000;
  pthread_mutex_lock(&mu);
  token_entry **p = find(k, creds);
  token_entry *e = p ? *p : NULL;
  if (e) {
    e->fetching = false;
    if (e->token) explicit_bzero(e->token, strlen(e->token));
    free(e->token);
    e->token = NULL;
  }
  bool keep = token && until > cn_token_now_ms();
  if (keep && !e) {
    make_room(cn_token_now_ms());
    if ((e = entry_new(k, creds))) {
      e->next = tokens;
      tokens = e;
      p = &tokens;
    }
  }
  if (e && keep && (e->token = strdup(token))) {
    e->valid_until = until;
  } else if (e) { /* not kept: no entry */
    *p = e->next;
    entry_free(e);
  }
  pthread_cond_broadcast(&changed);
  pthread_mutex_unlock(&mu);
}

void cn_token_cache_drop(const char *token) {
  pthread_mutex_lock(&mu);
  for (token_entry **p = &tokens; *p;) {
    token_entry *e = *p;
    if (e->token && strcmp(e->token, token) == 0) {
      *p = e->next;
      entry_free(e);
    } else {
      p = &e->next;
    }
  }
  pthread_mutex_unlock(&mu);
}

void cn_token_cache_clear(void) {
  pthread_mutex_lock(&mu);
  while (tokens) {
    token_entry *e = tokens;
    tokens = e->next;
    entry_free(e);
  }
  pthread_cond_broadcast(&changed);
  pthread_mutex_unlock(&mu);
}
