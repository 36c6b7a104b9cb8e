/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_docker_archive.c — a `docker save` archive as the docker-archive:
 * source reads it (cn_docker_archive_open: the tar, possibly compressed, its
 * manifest.json and the config's diff_ids), then what a pull asks of it:
 * the image manifest it synthesizes, which must parse, and every blob it
 * names, read through a verifying sink. The input is the archive file.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "libcairn_remote.h"

static char path[] = "/tmp/cairn-fuzz-archive-XXXXXX";

static void remove_file(void) { unlink(path); }

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  int fd = mkstemp(path);
  if (fd < 0) abort();
  close(fd);
  atexit(remove_file);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  FILE *f = fopen(path, "w");
  if (!f) abort();
  fwrite(data, 1, size, f);
  fclose(f);

  pull_source *src = NULL;
  if (cn_docker_archive_open(path, &src, NULL) < 0) return 0;
  char *body = NULL;
  size_t len = 0;
  pull_image img = {0};
  if (src->ops->manifest(src, NULL, &body, &len, NULL) < 0 ||
      cn_oci_manifest_parse(body, len, &img, NULL) < 0)
    abort(); /* the source's own manifest always parses */
  for (size_t i = 0; i <= img.n_layers; i++) {
    const pull_desc *d = i < img.n_layers ? &img.layers[i] : &img.config;
    blob_sink s;
    if (cn_blob_sink_init(&s, -1, d->size, NULL) == 0) src->ops->blob(src, d, &s, NULL);
    cn_blob_sink_free(&s);
  }
  cn_pull_image_free(&img);
  free(body);
  src->ops->free(src);
  return 0;
}
