/* SPDX-License-Identifier: Apache-2.0 */
/*
 * auth_json.c — the auth.json files podman (containers/image) keeps
 * credentials in: which files, in which order (cn_auth_files; login.c says
 * where each comes from and writes the first), and the credentials for a
 * host read from them (cn_registry_find_creds, for a pull's or a push's
 * client). It reads files only: it makes no request.
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

size_t cn_auth_files(char paths[CN_AUTH_FILES_MAX][PATH_MAX]) {
  const char *env = getenv("REGISTRY_AUTH_FILE"), *xdg_run = getenv("XDG_RUNTIME_DIR");
  const char *xdg_cfg = getenv("XDG_CONFIG_HOME"), *docker = getenv("DOCKER_CONFIG");
  const char *home = getenv("HOME");
  size_t n = 0;
  if (env && *env)
    snprintf(paths[n++], PATH_MAX, "%s", env);
  else if (xdg_run && *xdg_run)
    snprintf(paths[n++], PATH_MAX, "%s/containers/auth.json", xdg_run);
  else
    snprintf(paths[n++], PATH_MAX, "/run/containers/%u/auth.json", (unsigned)getuid());
  if (xdg_cfg && *xdg_cfg)
    snprintf(paths[n++], PATH_MAX, "%s/containers/auth.json", xdg_cfg);
  else if (home && *home)
    snprintf(paths[n++], PATH_MAX, "%s/.config/containers/auth.json", home);
  if (docker && *docker)
    snprintf(paths[n++], PATH_MAX, "%s/config.json", docker);
  else if (home && *home)
    snprintf(paths[n++], PATH_MAX, "%s/.docker/config.json", home);
  return n;
}

json_t *cn_auth_load_file(const char *path, json_error_t *err) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return NULL;
  struct stat sb;
  int bad = fstat(fd, &sb) < 0 ? errno : !S_ISREG(sb.st_mode) ? EINVAL : 0;
  if (bad) {
    close(fd);
    if (err) snprintf(err->text, sizeof(err->text), "not a regular file");
    errno = bad;
    return NULL;
  }
  json_t *j = json_loadfd(fd, 0, err);
  int e = errno;
  close(fd);
  errno = e;
  return j;
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
  json_t *j = cn_auth_load_file(path, NULL);
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
