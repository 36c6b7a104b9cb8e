/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_manifest.c — the documents a pull parses from a source: the index
 * (OCI index, Docker manifest list) with the platform choice, the image
 * manifest (OCI, Docker v2 schema 2) and the config's rootfs.diff_ids.
 * The input serves as all three, as pull.c uses them: select a child of an
 * index for three platforms, parse a manifest, then read the diff_ids of
 * the same bytes as a config for that manifest's layers.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "libcairn_remote.h"

static const char *const platforms[] = {"linux/amd64", "linux/arm64/v8", "linux/arm/v7"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *body = (const char *)data;
  for (size_t i = 0; i < sizeof platforms / sizeof *platforms; i++) {
    pull_platform p;
    if (cn_pull_platform_parse(platforms[i], &p) < 0) abort();
    pull_desc child = {0};
    int r = cn_oci_index_select(body, size, &p, &child, NULL);
    if (r == 1 && !cn_pull_digest_valid(child.digest)) abort();
    cn_pull_desc_clear(&child);
  }

  pull_image img = {0};
  if (cn_oci_manifest_parse(body, size, &img, NULL) == 0) {
    if (!cn_pull_digest_valid(img.config.digest)) abort();
    for (size_t i = 0; i < img.n_layers; i++)
      if (!cn_pull_digest_valid(img.layers[i].digest)) abort();
    img.config_json = malloc(size + 1);
    if (img.config_json) {
      memcpy(img.config_json, data, size);
      img.config_json[size] = '\0';
      img.config_len = size;
      if (cn_oci_config_diff_ids(&img, NULL) == 0)
        for (size_t i = 0; i < img.n_layers; i++)
          if (strlen(img.diff_ids[i]) != CAIRN_ID_LEN) abort();
    }
  }
  cn_pull_image_free(&img);
  return 0;
}
