/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_oci_layout.c — an OCI image layout's index.json as the oci: source
 * reads it: the entry oci:DIR:REF names (or the only one, oci:DIR), then
 * the manifest blob it points to, checked against the entry's size and
 * digest. The input is index.json; the layout holds one manifest blob (the
 * seeds' entries point to it).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "libcairn_remote.h"

static const char manifest[] =
    "{\"schemaVersion\":2,\"config\":{\"digest\":\"sha256:"
    "1111111111111111111111111111111111111111111111111111111111111111\",\"size\":2},\"layers\":[]}";
static char dir[] = "/tmp/cairn-fuzz-layout-XXXXXX";
static char index_path[sizeof dir + 16], blob_path[sizeof dir + 96];

static void remove_layout(void) {
  unlink(index_path);
  unlink(blob_path);
  char p[sizeof dir + 32];
  snprintf(p, sizeof p, "%s/blobs/sha256", dir);
  rmdir(p);
  snprintf(p, sizeof p, "%s/blobs", dir);
  rmdir(p);
  rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  if (!mkdtemp(dir)) abort();
  atexit(remove_layout);
  char d[CAIRN_DIGEST_LEN + 1], p[sizeof dir + 32];
  cn_pull_sha256(manifest, strlen(manifest), d);
  snprintf(p, sizeof p, "%s/blobs", dir);
  mkdir(p, 0755);
  snprintf(p, sizeof p, "%s/blobs/sha256", dir);
  mkdir(p, 0755);
  snprintf(index_path, sizeof index_path, "%s/index.json", dir);
  snprintf(blob_path, sizeof blob_path, "%s/%s", p, d + 7);
  FILE *f = fopen(blob_path, "w");
  if (!f) abort();
  fputs(manifest, f);
  fclose(f);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  FILE *f = fopen(index_path, "w");
  if (!f) abort();
  fwrite(data, 1, size, f);
  fclose(f);
  static const char *const refs[] = {"", ":app", ":registry.example/team/app:1"};
  for (size_t i = 0; i < sizeof refs / sizeof *refs; i++) {
    char spec[sizeof dir + 64];
    snprintf(spec, sizeof spec, "%s%s", dir, refs[i]);
    pull_source *src = NULL;
    if (cn_oci_layout_open(spec, &src, NULL) < 0) abort(); /* a valid spec */
    char *body = NULL;
    size_t len = 0;
    if (src->ops->manifest(src, NULL, &body, &len, NULL) == 0 &&
        (len != strlen(manifest) || memcmp(body, manifest, len) != 0))
      abort(); /* only the verified blob is served */
    char norm[1024];
    if (src->default_name && (cairn_name_normalize(src->default_name, norm, sizeof norm) < 0 ||
                              strcmp(norm, src->default_name) != 0))
      abort(); /* the name from the entry's annotations is a normalized name */
    free(body);
    src->ops->free(src);
  }
  return 0;
}
