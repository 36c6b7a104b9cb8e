/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_auth.c — what a registry or a credentials file hands the
 * authentication: a WWW-Authenticate challenge's parameters
 * (cn_registry_challenge_param, for the keys cn_registry_token_url reads, into a large
 * and a small buffer), and, when the input starts with '{', an auth.json
 * ($REGISTRY_AUTH_FILE) whose base64 "auth" values cn_registry_find_creds
 * decodes. Checked: every value found fits its buffer, NUL-terminated, and
 * credentials found hold a ':'.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "libcairn_registry.h"

static char auth_file[] = "/tmp/cairn-fuzz-auth-XXXXXX";

static void remove_auth_file(void) { unlink(auth_file); }

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  int fd = mkstemp(auth_file);
  if (fd < 0) abort();
  close(fd);
  atexit(remove_auth_file);
  setenv("REGISTRY_AUTH_FILE", auth_file, 1);
  unsetenv("XDG_RUNTIME_DIR");
  setenv("HOME", "/nonexistent", 1);
  return 0;
}

static void challenge(const char *params) {
  static const char *const keys[] = {"realm", "service", "scope", "error"};
  for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
    char big[1024], small[8];
    memset(small, 'x', sizeof small);
    if (cn_registry_challenge_param(params, keys[i], big, sizeof big) && strlen(big) >= sizeof big)
      abort();
    if (cn_registry_challenge_param(params, keys[i], small, sizeof small) &&
        !memchr(small, '\0', sizeof small))
      abort();
  }
}

static void auth_json(const uint8_t *data, size_t size) {
  FILE *f = fopen(auth_file, "w");
  if (!f) abort();
  fwrite(data, 1, size, f);
  fclose(f);
  static const char *const hosts[] = {"reg.example:5000", "docker.io"};
  for (size_t i = 0; i < sizeof hosts / sizeof *hosts; i++) {
    char *c = cn_registry_find_creds(hosts[i], NULL);
    if (c && !strchr(c, ':')) abort();
    free(c);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 0 && data[0] == '{') {
    auth_json(data, size);
    return 0;
  }
  char *s = malloc(size + 1);
  if (!s) return 0;
  memcpy(s, data, size);
  s[size] = '\0';
  /* as registry.c's auth_challenge splits the scheme from its parameters */
  challenge(strncasecmp(s, "Bearer ", 7) == 0 ? s + 7 : s);
  free(s);
  return 0;
}
