/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_oci_archive.c — an oci-archive as the oci-archive: source reads it
 * (cn_oci_archive_open: the tar, possibly compressed, unpacked into a new
 * private directory), then what a pull asks of it: the manifest its
 * index.json names and every blob that manifest names, read through a
 * verifying sink; freeing the source removes the directory. The input is
 * the archive file.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "libcairn_remote.h"

static char path[] = "/tmp/cairn-fuzz-oci-archive-XXXXXX";
static char tmp[] = "/tmp/cairn-fuzz-oci-archive-dir-XXXXXX";

static void remove_files(void) {
  unlink(path);
  rmdir(tmp);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  int fd = mkstemp(path);
  if (fd < 0 || !mkdtemp(tmp)) abort();
  close(fd);
  atexit(remove_files);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  FILE *f = fopen(path, "w");
  if (!f) abort();
  fwrite(data, 1, size, f);
  fclose(f);

  pull_source *src = NULL;
  if (cn_oci_archive_open(path, tmp, &src, NULL) < 0) {
    if (rmdir(tmp) < 0 || mkdir(tmp, 0700) < 0) abort(); /* a failed open leaves nothing */
    return 0;
  }
  char *body = NULL;
  size_t len = 0;
  pull_image img = {0};
  if (src->ops->manifest(src, NULL, &body, &len, NULL) == 0 &&
      cn_oci_manifest_parse(body, len, &img, NULL) == 0) {
    for (size_t i = 0; i <= img.n_layers; i++) {
      const pull_desc *d = i < img.n_layers ? &img.layers[i] : &img.config;
      blob_sink s;
      if (cn_blob_sink_init(&s, -1, d->size, NULL) == 0) src->ops->blob(src, d, &s, NULL);
      cn_blob_sink_free(&s);
    }
  }
  cn_pull_image_free(&img);
  free(body);
  src->ops->free(src);
  if (rmdir(tmp) < 0 || mkdir(tmp, 0700) < 0) abort(); /* freeing removed the copy */
  return 0;
}
