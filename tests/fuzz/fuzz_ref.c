/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_ref.c — references as a person types them: image names and tags
 * (cairn_name_normalize) and the pull sources' own parsers, "oci:DIR[:REF]"
 * (cn_oci_layout_open) and "docker://HOST[:PORT]/REPO[:TAG|@DIGEST]"
 * (cn_registry_source_open, with credentials given and an empty certificate
 * directory, so that it reads no file). The input is the text after the
 * "oci:" or "docker://" prefix. Checked: a normalized name normalizes to
 * itself, and a source's default name is a valid name (REPO@DIGEST for a
 * pull by digest).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "libcairn_remote.h"

static char cert_dir[] = "/tmp/cairn-fuzz-certs-XXXXXX";

static void remove_cert_dir(void) { rmdir(cert_dir); }

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  if (!mkdtemp(cert_dir)) abort();
  atexit(remove_cert_dir);
  return 0;
}

static void check_name(const char *name) {
  char norm[512], again[512];
  if (cairn_name_normalize(name, norm, sizeof norm) < 0) return;
  if (cairn_name_normalize(norm, again, sizeof again) < 0 || strcmp(norm, again) != 0) abort();
  char small[16]; /* a short buffer: -ENAMETOOLONG, never an overflow */
  cairn_name_normalize(name, small, sizeof small);
}

static void check_source(int r, pull_source *src) {
  if (r < 0) return;
  if (src->default_name) { /* NAME:TAG, or REPO@DIGEST for a pull by digest */
    char norm[1024];
    int k = strchr(src->default_name, '@')
                ? cn_name_digested(src->default_name, norm, sizeof norm)
                : cairn_name_normalize(src->default_name, norm, sizeof norm);
    if (k < 0) abort();
  }
  src->ops->free(src);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *s = malloc(size + 1);
  if (!s) return 0;
  memcpy(s, data, size);
  s[size] = '\0';
  check_name(s);

  pull_source *src = NULL;
  check_source(cn_oci_layout_open(s, &src, NULL), src);
  cairn_pull_opts opts = {.creds = "user:pass", .cert_dir = cert_dir};
  src = NULL;
  check_source(cn_registry_source_open(s, &opts, &src, NULL), src);
  free(s);
  return 0;
}
