/* SPDX-License-Identifier: Apache-2.0 */
/*
 * registry_tls.c — which certificate authorities a docker:// pull trusts.
 *
 * The system's bundle always; and, like podman and docker, the *.crt files
 * of a per-registry directory: --cert-dir DIR when given, else
 * /etc/containers/certs.d/HOST[:PORT] or /etc/docker/certs.d/HOST[:PORT]
 * when one exists. The result is one PEM blob handed to libcurl; with no
 * extra certificate libcurl keeps its own default.
 */
#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "libcairn_registry.h"

#define CA_FILE_MAX (4 << 20)

/* Appends a file's bytes (and a newline) to the memstream. */
static int append_file(FILE *out, const char *path) {
  cairn_autofclose FILE *f = fopen(path, "re");
  if (!f) return -errno;
  char buf[8192];
  size_t n, total = 0;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0 && total <= CA_FILE_MAX) {
    fwrite(buf, 1, n, out);
    total += n;
  }
  int err = ferror(f) ? -EIO : total > CA_FILE_MAX ? -EFBIG : 0;
  fputc('\n', out);
  return err;
}

static int is_crt(const struct dirent *d) {
  size_t n = strlen(d->d_name);
  return n > 4 && strcmp(d->d_name + n - 4, ".crt") == 0;
}

int cn_registry_load_cas(registry *rg, const char *cert_dir, cairn_store *st) {
  char dflt[2][1024];
  const char *dir = cert_dir;
  struct stat sb;
  if (!dir) {
    snprintf(dflt[0], sizeof dflt[0], "/etc/containers/certs.d/%s", rg->endpoint);
    snprintf(dflt[1], sizeof dflt[1], "/etc/docker/certs.d/%s", rg->endpoint);
    for (int i = 0; i < 2 && !dir; i++)
      if (stat(dflt[i], &sb) == 0 && S_ISDIR(sb.st_mode)) dir = dflt[i];
    if (!dir) return 0;
  }
  struct dirent **names = NULL;
  int n = scandir(dir, &names, is_crt, alphasort);
  if (n < 0) {
    int err = errno;
    return cairn_fail(st, -err, "certificates %s: %s", dir, strerror(err));
  }
  int r = 0;
  if (n > 0) {
    FILE *out = open_memstream(&rg->ca_pem, &rg->ca_len);
    if (!out) r = cairn_fail(st, -ENOMEM, "out of memory");
    const char *system = curl_version_info(CURLVERSION_NOW)->cainfo;
    if (out && system && stat(system, &sb) == 0) append_file(out, system);
    for (int i = 0; out && i < n && r == 0; i++) {
      char *path;
      if (asprintf(&path, "%s/%s", dir, names[i]->d_name) < 0) {
        r = cairn_fail(st, -ENOMEM, "out of memory");
        break;
      }
      if ((r = append_file(out, path)) < 0) r = cairn_fail(st, r, "%s: %s", path, strerror(-r));
      free(path);
    }
    if (out) fclose(out);
  }
  for (int i = 0; i < n; i++) free(names[i]);
  free(names);
  return r;
}
