/* SPDX-License-Identifier: Apache-2.0 */
/*
 * oci.c — reading OCI image-spec documents: image manifests (OCI and
 * Docker v2 schema 2), indexes (OCI index, Docker manifest list) with the
 * platform choice, and the config's rootfs.diff_ids.
 *
 * Media types are told apart by the document's own mediaType, or for OCI
 * documents that omit it, by the presence of "manifests" (an index) or
 * "layers" (a manifest). Schema 1 manifests are refused.
 */
#include <errno.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/utsname.h>

#include "libcairn_remote.h"

/* uname(2)'s machine names as OCI's (GOARCH's) architecture and variant,
 * as containerd's platforms package normalizes them. */
static const struct {
  const char *machine, *arch, *variant;
} MACHINES[] = {
    {"x86_64", "amd64", ""},    {"amd64", "amd64", ""},
    {"i386", "386", ""},        {"i486", "386", ""},
    {"i586", "386", ""},        {"i686", "386", ""},
    {"aarch64", "arm64", "v8"}, {"arm64", "arm64", "v8"},
    {"armv8l", "arm", "v8"},    {"armv7l", "arm", "v7"},
    {"armv7", "arm", "v7"},     {"armv6l", "arm", "v6"},
    {"armv6", "arm", "v6"},     {"armv5tel", "arm", "v5"},
    {"armv5tejl", "arm", "v5"}, {"ppc64le", "ppc64le", ""},
    {"ppc64", "ppc64", ""},     {"s390x", "s390x", ""},
    {"riscv64", "riscv64", ""}, {"loongarch64", "loong64", ""},
    {"mips64", "mips64", ""},   {"mips", "mips", ""},
    {"mipsel", "mipsle", ""},
};

void cn_pull_platform_of_machine(const char *machine, pull_platform *p) {
  memset(p, 0, sizeof *p);
  strcpy(p->os, "linux");
  for (size_t i = 0; i < sizeof MACHINES / sizeof *MACHINES; i++)
    if (strcmp(machine, MACHINES[i].machine) == 0) {
      strcpy(p->arch, MACHINES[i].arch);
      strcpy(p->variant, MACHINES[i].variant);
      return;
    }
  snprintf(p->arch, sizeof p->arch, "%s", machine); /* as the kernel names it */
}

int cn_pull_platform_parse(const char *s, pull_platform *p) {
  memset(p, 0, sizeof *p);
  if (!s) {
    struct utsname u;
    cn_pull_platform_of_machine(uname(&u) == 0 ? u.machine : "x86_64", p);
    return 0;
  }
  const char *a = strchr(s, '/');
  if (!a || a == s || (size_t)(a - s) >= sizeof p->os) return -EINVAL;
  const char *v = strchr(a + 1, '/');
  size_t alen = v ? (size_t)(v - a - 1) : strlen(a + 1);
  if (alen == 0 || alen >= sizeof p->arch || (v && (!v[1] || strlen(v + 1) >= sizeof p->variant)))
    return -EINVAL;
  memcpy(p->os, s, (size_t)(a - s));
  memcpy(p->arch, a + 1, alen);
  if (v) strcpy(p->variant, v + 1);
  return 0;
}

static json_t *parse_json(const char *body, size_t len, const char *what, cairn_store *st) {
  json_error_t je;
  json_t *j = json_loadb(body, len, 0, &je);
  if (!j || !json_is_object(j)) {
    json_decref(j);
    cairn_fail(st, -EBADMSG, "%s is not a JSON object: %s", what, je.text);
    return NULL;
  }
  return j;
}

static bool is_index(json_t *j) {
  const char *mt = json_string_value(json_object_get(j, "mediaType"));
  if (mt)
    return strcmp(mt, "application/vnd.oci.image.index.v1+json") == 0 ||
           strcmp(mt, "application/vnd.docker.distribution.manifest.list.v2+json") == 0;
  return json_is_array(json_object_get(j, "manifests"));
}

/* amd64 and arm64 have implied variants (v1 / v8), as in containerd. */
static bool variant_matches(const pull_platform *want, const char *have) {
  if (!want->variant[0]) return true;
  if (!have || !*have)
    return (strcmp(want->arch, "arm64") == 0 && strcmp(want->variant, "v8") == 0) ||
           (strcmp(want->arch, "amd64") == 0 && strcmp(want->variant, "v1") == 0);
  return strcmp(want->variant, have) == 0;
}

int cn_oci_index_select(const char *body, size_t len, const pull_platform *want, pull_desc *child,
                        cairn_store *st) {
  json_t *j = parse_json(body, len, "manifest", st);
  if (!j) return -EBADMSG;
  if (!is_index(j)) {
    json_decref(j);
    return 0;
  }
  json_t *list = json_object_get(j, "manifests"), *m;
  size_t i;
  int r = cairn_fail(st, -ENOENT, "no manifest for platform %s/%s%s%s in the index", want->os,
                     want->arch, want->variant[0] ? "/" : "", want->variant);
  json_array_foreach(list, i, m) {
    json_t *pl = json_object_get(m, "platform");
    const char *os = json_string_value(json_object_get(pl, "os"));
    const char *arch = json_string_value(json_object_get(pl, "architecture"));
    const char *var = json_string_value(json_object_get(pl, "variant"));
    if (!os || !arch || strcmp(os, want->os) != 0 || strcmp(arch, want->arch) != 0 ||
        !variant_matches(want, var))
      continue;
    r = cn_pull_desc_parse(m, child, st);
    if (r == 0) r = 1;
    break;
  }
  json_decref(j);
  return r;
}

int cn_oci_manifest_parse(const char *body, size_t len, pull_image *img, cairn_store *st) {
  json_t *j = parse_json(body, len, "manifest", st);
  if (!j) return -EBADMSG;
  int r;
  json_t *layers = json_object_get(j, "layers");
  json_t *sv = json_object_get(j, "schemaVersion");
  if (json_integer_value(sv) != 2 || !json_is_array(layers)) {
    r = cairn_fail(st, -EBADMSG, "not an OCI or Docker v2 image manifest");
    goto out;
  }
  r = cn_pull_desc_parse(json_object_get(j, "config"), &img->config, st);
  if (r < 0) goto out;
  img->n_layers = json_array_size(layers);
  img->layers = calloc(img->n_layers ? img->n_layers : 1, sizeof *img->layers);
  if (!img->layers) {
    r = cairn_fail(st, -ENOMEM, "out of memory");
    goto out;
  }
  for (size_t i = 0; i < img->n_layers && r == 0; i++)
    r = cn_pull_desc_parse(json_array_get(layers, i), &img->layers[i], st);
out:
  json_decref(j);
  return r;
}

int cn_oci_config_diff_ids(pull_image *img, cairn_store *st) {
  json_t *j = parse_json(img->config_json, img->config_len, "image config", st);
  if (!j) return -EBADMSG;
  int r = 0;
  json_t *ids = json_object_get(json_object_get(j, "rootfs"), "diff_ids");
  if (!json_is_array(ids) || json_array_size(ids) != img->n_layers) {
    r = cairn_fail(st, -EBADMSG, "config lists %zu diff_ids for %zu layers", json_array_size(ids),
                   img->n_layers);
    goto out;
  }
  img->diff_ids = calloc(img->n_layers ? img->n_layers : 1, sizeof *img->diff_ids);
  if (!img->diff_ids) {
    r = cairn_fail(st, -ENOMEM, "out of memory");
    goto out;
  }
  for (size_t i = 0; i < img->n_layers; i++) {
    const char *d = json_string_value(json_array_get(ids, i));
    if (!cn_pull_digest_valid(d)) {
      r = cairn_fail(st, -EBADMSG, "config has an invalid diff_id (%s)", d ? d : "none");
      goto out;
    }
    if (!(img->diff_ids[i] = strdup(d + 7))) {
      r = cairn_fail(st, -ENOMEM, "out of memory");
      goto out;
    }
  }
out:
  json_decref(j);
  return r;
}

void cn_pull_image_free(pull_image *img) {
  cn_pull_desc_clear(&img->config);
  for (size_t i = 0; i < img->n_layers; i++) {
    cn_pull_desc_clear(&img->layers[i]);
    if (img->diff_ids) free(img->diff_ids[i]);
  }
  free(img->layers);
  free(img->diff_ids);
  free(img->config_json);
  memset(img, 0, sizeof *img);
}
