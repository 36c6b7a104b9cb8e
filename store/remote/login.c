/* SPDX-License-Identifier: Apache-2.0 */
/*
 * login.c — `cairn login` / `logout`: credentials in the auth.json files
 * podman (containers/image) uses, and the order they are read in, one
 * list for both directions (cn_auth_files: pulls read it, login writes its
 * first file):
 *   1. $REGISTRY_AUTH_FILE, else $XDG_RUNTIME_DIR/containers/auth.json,
 *      else /run/containers/UID/auth.json (podman's for root) — the file
 *      login writes and logout edits;
 *   2. ${XDG_CONFIG_HOME:-~/.config}/containers/auth.json;
 *   3. ${DOCKER_CONFIG:-~/.docker}/config.json (docker login's).
 * Entries are {"auths": {"HOST[:PORT]": {"auth": base64("USER:PASS")}}};
 * every other key of the file is kept as it was.
 *
 * Invariants: login writes nothing until the registry accepted the
 * credentials (GET /v2/, answering its challenge as a pull does: Bearer
 * tokens from the realm, or Basic); a file is replaced whole (a new file,
 * mode 0600, under a random name nobody can have made first, fsynced,
 * renamed: cairn_file_put_at), never left half written, never written
 * through a name another user planted; its directory is made 0700 when
 * missing.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "libcairn_registry.h"

int cn_auth_file(char *buf, size_t len) {
  char paths[CN_AUTH_FILES_MAX][PATH_MAX];
  cn_auth_files(paths);
  return snprintf(buf, len, "%s", paths[0]) < (int)len ? 0 : -ENAMETOOLONG;
}

/* The auths key of host as the user typed it: "https://HOST/..." and
 * "HOST" are both HOST. */
static int auth_key(cairn_store *st, const char *host, char *key, size_t len) {
  const char *h = strstr(host, "://");
  h = h ? h + 3 : host;
  size_t n = strcspn(h, "/");
  if (n == 0 || n >= len ||
      strspn(h, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-:[]") < n)
    return cairn_fail(st, -EINVAL, "%s: not a registry HOST[:PORT]", host);
  memcpy(key, h, n);
  key[n] = '\0';
  return 0;
}

/* The auth file at path as JSON (an empty object when there is none). */
static int auth_load(cairn_store *st, const char *path, json_t **out) {
  json_error_t err;
  *out = cn_auth_load_file(path, &err);
  if (*out && json_is_object(*out)) return 0;
  json_decref(*out);
  *out = NULL;
  if (errno == EINVAL) return cairn_fail(st, -EPERM, "%s: not a regular file", path);
  if (access(path, F_OK) < 0 && errno == ENOENT) {
    *out = json_object();
    return *out ? 0 : cairn_fail(st, -ENOMEM, "out of memory");
  }
  return cairn_fail(st, -EBADMSG, "%s: not a JSON object (%s)", path, err.text);
}

/* Makes the directories of path (0700 for those it makes). */
static int make_parents(char *path) {
  for (char *s = strchr(path + 1, '/'); s; s = strchr(s + 1, '/')) {
    *s = '\0';
    int r = mkdir(path, 0700) < 0 && errno != EEXIST ? -errno : 0;
    *s = '/';
    if (r < 0) return r;
  }
  return 0;
}

/* Replaces path with j (mode 0600), as the file's top says. */
static int auth_save(cairn_store *st, const char *path, json_t *j) {
  char dir[PATH_MAX];
  if (snprintf(dir, sizeof dir, "%s", path) >= (int)sizeof dir)
    return cairn_fail(st, -ENAMETOOLONG, "%s: %s", path, strerror(ENAMETOOLONG));
  int r = make_parents(dir);
  if (r < 0) return cairn_fail(st, r, "%s: %s", path, strerror(-r));
  const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
  char *slash = strrchr(dir, '/');
  if (slash) slash[slash == dir] = '\0'; /* "/NAME": the directory is "/" */
  cairn_autoclose int dfd = open(slash ? dir : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return cairn_fail(st, -errno, "%s: %s", path, strerror(errno));
  cairn_autofree char *text = json_dumps(j, JSON_INDENT(1));
  cairn_autofree char *line = NULL;
  if (!text || asprintf(&line, "%s\n", text) < 0) {
    line = NULL;
    return cairn_fail(st, -ENOMEM, "out of memory");
  }
  r = cairn_file_put_at(dfd, base, -1, line, strlen(line), 0600, 0);
  return r < 0 ? cairn_fail(st, r, "%s: %s", path, strerror(-r)) : 0;
}

/* Asks the registry's /v2/ with creds, answering its challenge. */
static int verify(cairn_store *st, const char *key, const char *creds, const cairn_login_opts *o) {
  const struct cn_config_registry *conf = cn_config_registry(o->config, key);
  cairn_pull_opts popts = {.attempts = 3, .config = o->config};
  registry rg = {.base.opts = &popts, .host = (char *)key, .endpoint = key, .creds = (char *)creds};
  rg.insecure = o->insecure || (conf && conf->insecure);
  pthread_mutex_init(&rg.lock, NULL);
  bool hub = strcmp(key, "docker.io") == 0;
  char url[PATH_MAX], server[300];
  snprintf(server, sizeof server, "https://%s", hub ? "registry-1.docker.io" : key);
  snprintf(url, sizeof url, "%s/v2/", server);
  rg.server = server; /* insecure: plain HTTP if it speaks no TLS */
  http_reply reply;
  int r = cn_registry_load_cas(&rg, o->cert_dir, st);
  if (r == 0) r = cn_registry_get(&rg, url, "application/json", NULL, false, &reply, st);
  if (r == -EACCES) cn_fail_context(st, r, "%s: login refused", key);
  free(rg.auth);
  free(rg.ca_pem);
  pthread_mutex_destroy(&rg.lock);
  return r;
}

static char *base64(const char *s) {
  size_t n = strlen(s);
  char *out = malloc(4 * ((n + 2) / 3) + 1);
  if (out) EVP_EncodeBlock((unsigned char *)out, (const unsigned char *)s, (int)n);
  return out;
}

int cairn_login(cairn_store *st, const char *host, const char *user, const char *password,
                const cairn_login_opts *opts) {
  static const cairn_login_opts defaults = {0};
  const cairn_login_opts *o = opts ? opts : &defaults;
  cairn_fail(st, 0, "%s", ""); /* no reason of an earlier call survives */
  char key[256], path[PATH_MAX];
  int r = auth_key(st, host, key, sizeof key);
  if (r < 0) return r;
  if (!*user || strchr(user, ':'))
    return cairn_fail(st, -EINVAL, "%s: a user name is needed (without a ':')", key);
  cairn_autofree char *creds = NULL, *b64 = NULL;
  if (asprintf(&creds, "%s:%s", user, password) < 0 || !(b64 = base64(creds)))
    return cairn_fail(st, -ENOMEM, "out of memory");
  if ((r = verify(st, key, creds, o)) < 0) return r;
  if (o->authfile)
    snprintf(path, sizeof path, "%s", o->authfile);
  else if ((r = cn_auth_file(path, sizeof path)) < 0)
    return cairn_fail(st, r, "the auth file's path is too long");
  json_t *j;
  if ((r = auth_load(st, path, &j)) < 0) return r;
  json_t *auths = json_object_get(j, "auths");
  if (!json_is_object(auths)) json_object_set_new(j, "auths", auths = json_object());
  r = json_object_set_new(auths, key, json_pack("{s:s}", "auth", b64)) < 0
          ? cairn_fail(st, -ENOMEM, "out of memory")
          : auth_save(st, path, j);
  json_decref(j);
  return r;
}

int cairn_logout(cairn_store *st, const char *host, const char *authfile) {
  cairn_fail(st, 0, "%s", "");
  char key[256] = "", path[PATH_MAX];
  int r = host ? auth_key(st, host, key, sizeof key) : 0;
  if (r < 0) return r;
  if (authfile)
    snprintf(path, sizeof path, "%s", authfile);
  else if ((r = cn_auth_file(path, sizeof path)) < 0)
    return cairn_fail(st, r, "the auth file's path is too long");
  json_t *j;
  if ((r = auth_load(st, path, &j)) < 0) return r;
  json_t *auths = json_object_get(j, "auths");
  if (!host)
    r = json_object_size(auths) > 0 ? json_object_clear(auths) : 1;
  else
    r = json_object_del(auths, key) < 0 ? 1 : 0;
  if (r == 1)
    r = host
            ? cairn_fail(st, -ENOENT, "%s: not logged in (%s has no credentials for it)", key, path)
            : 0;
  else
    r = auth_save(st, path, j);
  json_decref(j);
  return r;
}
