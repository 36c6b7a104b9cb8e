/* SPDX-License-Identifier: Apache-2.0 */
/*
 * name.c — image names: what a name may be and its normal form,
 * "HOST[:PORT]/PATH:TAG" with the tag "latest" when none is given and
 * "localhost/" when the name names no host, as podman stores names
 * (cairn_name_normalize, cairn.h). It uses nothing of the store: image.c,
 * refs.c, tag.c and the pull sources call it.
 */
#include "libcairn_core.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

static bool name_component_ok(const char *p, size_t n, bool domain) {
  if (n == 0) return false;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)p[i];
    bool ok = islower(c) || isdigit(c) || c == '.' || c == '_' || c == '-' ||
              (domain && (isupper(c) || c == ':'));
    if (!ok) return false;
  }
  return isalnum((unsigned char)p[0]) && isalnum((unsigned char)p[n - 1]);
}

int cairn_name_normalize(const char *name, char *out, size_t len) {
  if (!name || !*name || strchr(name, '@')) return -EINVAL;
  const char *last_slash = strrchr(name, '/');
  const char *colon = strrchr(last_slash ? last_slash : name, ':');
  size_t repo_len = colon ? (size_t)(colon - name) : strlen(name);
  if (repo_len == 0) return -EINVAL;
  const char *tag = colon ? colon + 1 : "latest";
  size_t tag_len = strlen(tag);
  if (tag_len == 0 || tag_len > 128 || !(isalnum((unsigned char)tag[0]) || tag[0] == '_'))
    return -EINVAL;
  for (size_t i = 0; i < tag_len; i++)
    if (!(isalnum((unsigned char)tag[i]) || tag[i] == '_' || tag[i] == '.' || tag[i] == '-'))
      return -EINVAL;
  /* components: the first may be a registry host[:port] when more follow */
  const char *p = name, *end = name + repo_len;
  bool first = true;
  while (p < end) {
    const char *slash = memchr(p, '/', (size_t)(end - p));
    const char *cend = slash ? slash : end;
    if (!name_component_ok(p, (size_t)(cend - p), first && slash != NULL)) return -EINVAL;
    first = false;
    p = slash ? slash + 1 : end;
    if (slash && p == end) return -EINVAL;
  }
  /* As podman (containers/image's ParseNormalizedNamed, libimage's
   * localhost/): a first component with no '.' or ':' that is not
   * "localhost" is no host, and the name is short: it gets "localhost/".
   * docker.io's one-component names are under library/. */
  const char *slash = memchr(name, '/', repo_len);
  size_t first_len = slash ? (size_t)(slash - name) : 0;
  bool host = slash && (memchr(name, '.', first_len) || memchr(name, ':', first_len) ||
                        (first_len == 9 && strncmp(name, "localhost", 9) == 0));
  /* a first component that is no host is a path component: no capitals */
  if (slash && !host && !name_component_ok(name, first_len, false)) return -EINVAL;
  bool library = host && first_len == 9 && strncmp(name, "docker.io", 9) == 0 &&
                 !memchr(slash + 1, '/', repo_len - first_len - 1);
  int n = snprintf(out, len, "%s%.*s%s%.*s:%s", host ? "" : "localhost/", (int)first_len, name,
                   library ? "/library" : "", (int)(repo_len - first_len), name + first_len, tag);
  return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

int cn_name_digested(const char *name, char *out, size_t len) {
  const char *at = name ? strchr(name, '@') : NULL;
  if (!at || strncmp(at + 1, "sha256:", 7) != 0 || strlen(at + 8) != 64) return -EINVAL;
  for (const char *h = at + 8; *h; h++)
    if (!isdigit((unsigned char)*h) && !(*h >= 'a' && *h <= 'f')) return -EINVAL;
  char repo[512], norm[600];
  const char *slash = memrchr(name, '/', (size_t)(at - name));
  if ((size_t)(at - name) >= sizeof(repo) ||
      memchr(slash ? slash : name, ':', (size_t)(at - (slash ? slash : name))))
    return -EINVAL; /* a tag too: not taken */
  snprintf(repo, sizeof(repo), "%.*s", (int)(at - name), name);
  int r = cairn_name_normalize(repo, norm, sizeof(norm));
  if (r < 0) return r;
  norm[strlen(norm) - strlen(":latest")] = '\0';
  int n = snprintf(out, len, "%s%s", norm, at);
  return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}
