/* SPDX-License-Identifier: Apache-2.0 */
/*
 * image.c — images: resolving what a person typed (a name, normalized by
 * name.c, or an id) to an image id, committing an image from stored layers, reading an
 * image's layers and a layer's entries back.
 *
 * An image id is the sha256 of its config bytes, so the same config always
 * names the same image; the config must list exactly the image's layers as
 * rootfs.diff_ids. A new image's merged tree is written as its index file
 * (index.c) right after the commit, so that its first mount maps it; the
 * index is derived data, so failing to write it fails nothing (the first
 * mount writes it then).
 */
#include "libcairn_image.h"
#include "libcairn_layer.h"
#include "libcairn_pin.h"
#include "libcairn_sweep.h"
#include "libcairn_tree.h"

#include <ctype.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <string.h>
#include <sys/stat.h>

/* The image name (exactly) names: 1 and id, 0 if none, or -errno. */
static int name_row(cairn_store *st, const char *name, cairn_id id) {
  cn_autostmt sqlite3_stmt *q = NULL;
  int r = cn_db_prepare(st, &q, "SELECT image_id FROM names WHERE name = ?");
  if (r < 0) return r;
  sqlite3_bind_text(q, 1, name, -1, SQLITE_STATIC);
  if (sqlite3_step(q) != SQLITE_ROW) return 0;
  snprintf(id, sizeof(cairn_id), "%s", (const char *)sqlite3_column_text(q, 0));
  return 1;
}

/* A short name (no host) as podman looks it up: the image of the stored
 * names that end with "/SHORT" (quay.io/team/app:2 for app:2), if they
 * name one image (the first such name into name); 0 if none, -EINVAL
 * (recorded) if several images. */
static int short_name_row(cairn_store *st, const char *shrt, char *name, size_t len, cairn_id id) {
  cn_autostmt sqlite3_stmt *q = NULL;
  int r = cn_db_prepare(st, &q,
                        "SELECT name, image_id FROM names WHERE substr(name, ?1) = ?2"
                        " ORDER BY name");
  if (r < 0) return r;
  char tail[520];
  snprintf(tail, sizeof(tail), "/%s", shrt);
  sqlite3_bind_int(q, 1, -(int)strlen(tail));
  sqlite3_bind_text(q, 2, tail, -1, SQLITE_TRANSIENT);
  int found = 0;
  while (sqlite3_step(q) == SQLITE_ROW) {
    const char *n = (const char *)sqlite3_column_text(q, 0),
               *i = (const char *)sqlite3_column_text(q, 1);
    if (found && strcmp(i, id) != 0)
      return cairn_fail(st, -EINVAL,
                        "%s is short for more than one image (%s, %s): give the whole name", shrt,
                        name, n);
    if (!found++) {
      snprintf(id, sizeof(cairn_id), "%s", i);
      snprintf(name, len, "%s", n);
    }
  }
  return found ? 1 : 0;
}

int cn_image_name_lookup(cairn_store *st, const char *ref, char *name, size_t len, cairn_id id) {
  if (cairn_name_normalize(ref, name, len) < 0) /* REPO@DIGEST: a pull's by digest */
    return cn_name_digested(ref, name, len) < 0 ? 0 : name_row(st, name, id);
  int r = name_row(st, name, id);
  if (r != 0 || strncmp(name, "localhost/", 10) != 0) return r;
  /* A store from before names were normalised with localhost/ holds app:1
   * for localhost/app:1: found as it was stored. */
  if ((r = name_row(st, name + 10, id)) != 0) {
    if (r == 1) memmove(name, name + 10, strlen(name + 10) + 1);
    return r;
  }
  if (strncmp(ref, "localhost/", 10) == 0) return 0;
  char shrt[512];
  snprintf(shrt, sizeof(shrt), "%s", name + 10);
  return short_name_row(st, shrt, name, len, id);
}

int cn_name_old_drop(cairn_store *st, const char *norm) {
  if (strncmp(norm, "localhost/", 10) != 0) return 0;
  cn_autostmt sqlite3_stmt *d = NULL;
  int r = cn_db_prepare(st, &d, "DELETE FROM names WHERE name = ?");
  if (r < 0) return r;
  sqlite3_bind_text(d, 1, norm + 10, -1, SQLITE_STATIC);
  return sqlite3_step(d) == SQLITE_DONE ? 0 : cn_store_fail_db(st, "image name");
}

/* Whether name is of the repository repo[0..rlen) ("localhost/app"), or,
 * for a short name (shrt), its last component is. */
static bool same_repo(const char *name, const char *repo, size_t rlen, bool shrt) {
  const char *colon = strrchr(name, ':');
  const char *slash = strrchr(name, '/');
  size_t n = colon && (!slash || colon > slash) ? (size_t)(colon - name) : strlen(name);
  if (n == rlen && strncmp(name, repo, n) == 0) return true;
  if (!shrt || strncmp(repo, "localhost/", 10) != 0) return false;
  const char *last = slash ? slash + 1 : name;
  return (size_t)(name + n - last) == rlen - 10 && strncmp(last, repo + 10, rlen - 10) == 0;
}

/* The stored names nearest to ref, into out ("" if none): with no tag
 * typed, the names of its repository (app's app:1, app:2; three at most);
 * else the nearest by cairn_near. */
static void name_nearest(cairn_store *st, const char *ref, char *out, size_t len) {
  char norm[512];
  out[0] = '\0';
  if (cairn_name_normalize(ref, norm, sizeof(norm)) < 0) return;
  const char *rslash = strrchr(ref, '/');
  bool tagged = strchr(rslash ? rslash : ref, ':') || strchr(ref, '@');
  if (!tagged) {
    const char *c = strrchr(norm, ':');
    size_t rlen = c ? (size_t)(c - norm) : strlen(norm);
    bool shrt = strncmp(norm, "localhost/", 10) == 0 && strncmp(ref, "localhost/", 10) != 0;
    cn_autostmt sqlite3_stmt *q = NULL;
    if (cn_db_prepare(st, &q, "SELECT name FROM names ORDER BY name") < 0) return;
    int found = 0;
    size_t o = 0;
    while (sqlite3_step(q) == SQLITE_ROW && found <= 3) {
      const char *n = (const char *)sqlite3_column_text(q, 0);
      if (!same_repo(n, norm, rlen, shrt)) continue;
      if (++found <= 3 && o < len)
        o += (size_t)snprintf(out + o, len - o, "%s%s", found > 1 ? " or " : "", n);
      else if (o < len)
        o += (size_t)snprintf(out + o, len - o, " or another");
    }
    if (found) return;
  }
  cn_autostmt sqlite3_stmt *q = NULL;
  if (cn_db_prepare(st, &q, "SELECT name FROM names ORDER BY name") < 0) return;
  size_t best = SIZE_MAX;
  while (sqlite3_step(q) == SQLITE_ROW) {
    const char *n = (const char *)sqlite3_column_text(q, 0);
    /* what was typed against the whole name, and a short name (app:9)
     * against the name's last component (quay.io/team/app:1's app:1) */
    const char *shrt = strncmp(norm, "localhost/", 10) == 0 && strncmp(ref, "localhost/", 10) != 0
                           ? norm + 10
                           : NULL;
    const char *last = strrchr(n, '/');
    const char *a = norm, *b = n;
    if (shrt && (!last || strchr(shrt, '/') == NULL)) {
      a = shrt;
      b = last ? last + 1 : n;
    }
    size_t d = cairn_edit_distance(a, b);
    if (d < best && cairn_near(a, b)) {
      best = d;
      snprintf(out, len, "%s", n);
    }
  }
}

int cairn_image_resolve(cairn_store *st, const char *ref, cairn_id id) {
  store_errclear(st);
  char name[512];
  int r = cn_image_name_lookup(st, ref, name, sizeof(name), id);
  if (r != 0) return r < 0 ? r : 0;
  r = cn_id_lookup(st, "images", ref, id);
  if (r != 0) return r == 1 ? 0 : r;
  name_nearest(st, ref, name, sizeof(name));
  if (name[0]) return cairn_fail(st, -ENOENT, "no such image (did you mean %s?)", name);
  return cairn_fail(st, -ENOENT, "no such image");
}

/* The host's architecture as OCI (GOARCH) names it, and its variant or
 * NULL: an image made here runs here. */
static void host_platform(const char **arch, const char **variant) {
  *variant = NULL;
#if defined(__x86_64__)
  *arch = "amd64";
#elif defined(__aarch64__)
  *arch = "arm64";
  *variant = "v8";
#elif defined(__arm__)
  *arch = "arm";
  *variant = "v7";
#elif defined(__i386__)
  *arch = "386";
#elif defined(__powerpc64__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  *arch = "ppc64le";
#elif defined(__s390x__)
  *arch = "s390x";
#elif defined(__riscv) && __riscv_xlen == 64
  *arch = "riscv64";
#elif defined(__loongarch64)
  *arch = "loong64";
#else
  *arch = "unknown";
#endif
}

/* The config import makes: the host's platform, the config object
 * (changes applied), the layers. */
static json_t *config_base(const char *const *diff_ids, size_t n, json_t *conf) {
  const char *arch, *variant;
  host_platform(&arch, &variant);
  json_t *ids = json_array();
  for (size_t i = 0; i < n; i++) json_array_append_new(ids, json_sprintf("sha256:%s", diff_ids[i]));
  json_t *cfg = json_pack("{s:s, s:s, s:o, s:{s:s, s:o}}", "architecture", arch, "os", "linux",
                          "config", conf ? json_incref(conf) : json_object(), "rootfs", "type",
                          "layers", "diff_ids", ids);
  if (cfg && variant) json_object_set_new(cfg, "variant", json_string(variant));
  return cfg;
}

/* An import's config: config_base and a history entry per layer, as
 * podman import writes, without its time: the same tars and changes give
 * the same image id. */
static json_t *config_imported(const char *const *diff_ids, size_t n, json_t *conf) {
  json_t *cfg = config_base(diff_ids, n, conf);
  json_t *hist = cfg ? json_array() : NULL;
  for (size_t i = 0; hist && i < n; i++)
    json_array_append_new(hist, json_pack("{s:s, s:s}", "created_by", "cairn import", "comment",
                                          "imported from tarball"));
  if (hist) json_object_set_new(cfg, "history", hist);
  return cfg;
}

char *cn_config_for_layers(const char *const *diff_ids, size_t n) {
  json_t *cfg = config_imported(diff_ids, n, NULL);
  char *s = cfg ? json_dumps(cfg, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
  json_decref(cfg);
  return s;
}

/* v without the double quotes around it, if it has them, into buf. */
static const char *unquote(const char *v, char *buf, size_t len) {
  size_t n = strlen(v);
  if (n >= 2 && v[0] == '"' && v[n - 1] == '"' && len > 0) {
    size_t m = n - 2 < len - 1 ? n - 2 : len - 1; /* cut as snprintf would */
    memmove(buf, v + 1, m);
    buf[m] = '\0';
    return buf;
  }
  return v;
}

/* A command as CMD and ENTRYPOINT take it: a JSON array of strings (exec
 * form), else the shell form, run by /bin/sh -c. NULL if [ starts
 * something that is not such an array. */
static json_t *command_json(const char *v) {
  if (v[strspn(v, " ")] != '[') return json_pack("[s, s, s]", "/bin/sh", "-c", v);
  json_t *a = json_loads(v, JSON_DECODE_ANY, NULL);
  size_t i;
  json_t *e;
  json_array_foreach(a, i, e) if (!json_is_string(e)) {
    json_decref(a);
    return NULL;
  }
  if (a && !json_is_array(a)) {
    json_decref(a);
    a = NULL;
  }
  return a;
}

/* Applies one change ("CMD=...", or "CMD ..." as a Dockerfile line) to
 * conf, the config object. */
static int change_apply(cairn_store *st, json_t *conf, const char *change) {
  size_t k = strcspn(change, "= ");
  char key[16], buf[4096];
  if (k == 0 || k >= sizeof(key) || !change[k]) goto bad;
  for (size_t i = 0; i < k; i++) key[i] = (char)toupper((unsigned char)change[i]);
  key[k] = '\0';
  const char *v = change + k + 1;
  if (strcmp(key, "CMD") == 0 || strcmp(key, "ENTRYPOINT") == 0) {
    json_t *a = command_json(v);
    if (!a)
      return cairn_fail(st, -EINVAL, "--change %s: not a JSON array of strings (nor a command)",
                        change);
    return json_object_set_new(conf, strcmp(key, "CMD") == 0 ? "Cmd" : "Entrypoint", a);
  }
  if (strcmp(key, "WORKDIR") == 0 || strcmp(key, "USER") == 0 || strcmp(key, "STOPSIGNAL") == 0) {
    if (!*v) goto bad;
    const char *field = key[0] == 'W' ? "WorkingDir" : key[0] == 'U' ? "User" : "StopSignal";
    return json_object_set_new(conf, field, json_string(unquote(v, buf, sizeof(buf))));
  }
  if (strcmp(key, "ENV") == 0 || strcmp(key, "LABEL") == 0) {
    size_t n = strcspn(v, "= ");
    if (n == 0 || !v[n]) goto bad;
    const char *val = unquote(v + n + 1, buf, sizeof(buf));
    if (key[0] == 'L') {
      json_t *labels = json_object_get(conf, "Labels");
      if (!labels) json_object_set_new(conf, "Labels", labels = json_object());
      char name[512];
      snprintf(name, sizeof(name), "%.*s", (int)n, v);
      return json_object_set_new(labels, unquote(name, name, sizeof(name)), json_string(val));
    }
    json_t *env = json_object_get(conf, "Env");
    if (!env) json_object_set_new(conf, "Env", env = json_array());
    size_t i;
    json_t *e;
    json_array_foreach(env, i, e) { /* the same variable again: replaced */
      const char *s = json_string_value(e);
      if (s && strncmp(s, v, n) == 0 && s[n] == '=') {
        json_array_remove(env, i);
        break;
      }
    }
    return json_array_append_new(env, json_sprintf("%.*s=%s", (int)n, v, val));
  }
  if (strcmp(key, "EXPOSE") == 0) {
    json_t *ports = json_object_get(conf, "ExposedPorts");
    if (!ports) json_object_set_new(conf, "ExposedPorts", ports = json_object());
    for (const char *p = v + strspn(v, " "); *p; p += strspn(p, " ")) {
      size_t n = strcspn(p, " ");
      char port[64];
      snprintf(port, sizeof(port), "%.*s%s", (int)(n < 50 ? n : 50), p,
               memchr(p, '/', n) ? "" : "/tcp");
      if (port[strspn(port, "0123456789")] != '/') goto bad;
      json_object_set_new(ports, port, json_object());
      p += n;
    }
    return 0;
  }
bad:
  return cairn_fail(st, -EINVAL,
                    "--change %s: not an instruction import takes (CMD=, ENTRYPOINT=, ENV=K=V, "
                    "WORKDIR=, USER=, LABEL=K=V, EXPOSE=PORT[/PROTO], STOPSIGNAL=)",
                    change);
}

/* The config must be JSON whose rootfs.diff_ids are exactly the layers. */
static int config_check(cairn_store *st, const char *config, size_t len,
                        const char *const *diff_ids, size_t n) {
  json_error_t err;
  cn_autojson json_t *cfg = json_loadb(config, len, 0, &err);
  if (!cfg) return cairn_fail(st, -EBADMSG, "image config is not JSON: %s", err.text);
  json_t *ids = json_object_get(json_object_get(cfg, "rootfs"), "diff_ids");
  if (!json_is_array(ids) || json_array_size(ids) != n)
    return cairn_fail(st, -EBADMSG, "image config lists %zu layers, %zu given",
                      json_array_size(ids), n);
  for (size_t i = 0; i < n; i++) {
    const char *s = json_string_value(json_array_get(ids, i));
    if (!s || strncmp(s, "sha256:", 7) != 0 || strcmp(s + 7, diff_ids[i]) != 0)
      return cairn_fail(st, -EBADMSG, "image config layer %zu is %s, not sha256:%s", i, s ? s : "?",
                        diff_ids[i]);
  }
  return 0;
}

struct stored_layer {
  cairn_store *st;
  const char *diff_id;
};

static int stored_layer_foreach(void *src, cairn_entry_fn fn, void *arg) {
  struct stored_layer *l = src;
  return cn_layer_foreach(l->st, l->diff_id, fn, arg);
}

/* 0 when no layer of image_id is refuted (lazy.c, cn_layer_refute);
 * else -EBADMSG, saying which and why: mounts and index builds refuse. */
static int image_refuted_check(cairn_store *st, const char *image_id) {
  cn_autostmt sqlite3_stmt *q = NULL;
  int r = cn_db_prepare(st, &q,
                        "SELECT f.layer_id, f.reason FROM image_layers l JOIN layer_refuted f"
                        " ON f.layer_id = l.layer_id WHERE l.image_id = ?"
                        " ORDER BY l.position LIMIT 1");
  if (r < 0) return r;
  sqlite3_bind_text(q, 1, image_id, -1, SQLITE_STATIC);
  r = sqlite3_step(q);
  if (r == SQLITE_DONE) return 0;
  if (r != SQLITE_ROW) return cn_store_fail_db(st, "refuted layers");
  return cairn_fail(st, -EBADMSG,
                    "layer sha256:%.12s is out of service (%s): cairn rm the image, then pull it"
                    " from a registry that serves it",
                    (const char *)sqlite3_column_text(q, 0),
                    (const char *)sqlite3_column_text(q, 1));
}

int cn_image_tree_build(cairn_store *st, const char *image_id, cairn_tree **out) {
  *out = NULL;
  char **layers = NULL;
  size_t n_layers = 0;
  int r = image_refuted_check(st, image_id);
  if (r == 0) r = cn_image_layers(st, image_id, &layers, &n_layers);
  if (r < 0) return r;
  merge_builder *b;
  if ((r = cn_merge_builder_new(st, &b)) < 0) goto out;
  for (size_t i = 0; r == 0 && i < n_layers; i++)
    r = cn_merge_builder_add_layer(b, stored_layer_foreach, &(struct stored_layer){st, layers[i]});
  if (r == 0)
    r = cn_merge_builder_finish(b, out);
  else
    cn_merge_builder_free(b);
out:
  cn_strv_free(layers, n_layers);
  return r;
}

/* The committed image's index, best effort: a failure leaves no message. */
static void index_write(cairn_store *st, const char *image_id) {
  cairn_tree *t;
  if (cn_image_tree_build(st, image_id, &t) == 0) {
    cn_index_write(st, image_id, t);
    cairn_tree_free(t);
  }
  store_errclear(st);
}

int cn_image_commit(cairn_store *st, const char *config, size_t config_len,
                       const char *const *diff_ids, size_t n, const char *name,
                       cairn_id image_id_out) {
  store_errclear(st);
  char norm[512];
  int r;
  if (name && cairn_name_normalize(name, norm, sizeof(norm)) < 0 &&
      cn_name_digested(name, norm, sizeof(norm)) < 0) /* a pull's by digest */
    return cairn_fail(st, -EINVAL, "%s: not a valid image name", name);
  if ((r = config_check(st, config, config_len, diff_ids, n)) < 0) return r;
  unsigned char d[32];
  EVP_Digest(config, config_len, d, NULL, EVP_sha256(), NULL);
  cn_sha256_hex(d, image_id_out);
  int lock = cn_refs_begin(st);
  if (lock < 0) return lock;
  if ((r = cn_db_begin(st)) < 0) {
    cn_refs_end(st, lock);
    return r;
  }
  int64_t size = 0;
  bool created = false;
  for (size_t i = 0; i < n; i++) {
    cn_autostmt sqlite3_stmt *q = NULL;
    if ((r = cn_db_prepare(st, &q, "SELECT size FROM layers WHERE id = ?")) < 0) goto fail;
    sqlite3_bind_text(q, 1, diff_ids[i], -1, SQLITE_STATIC);
    if (sqlite3_step(q) != SQLITE_ROW) {
      r = cairn_fail(st, -ENOENT, "layer sha256:%s is not stored", diff_ids[i]);
      goto fail;
    }
    size += sqlite3_column_int64(q, 0);
  }
  {
    cn_autostmt sqlite3_stmt *s = NULL;
    if ((r = cn_db_prepare(st, &s,
                           "INSERT OR IGNORE INTO images(id, config, size, created)"
                           " VALUES(?, ?, ?, ?)")) < 0)
      goto fail;
    sqlite3_bind_text(s, 1, image_id_out, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 2, config, (int)config_len, SQLITE_STATIC);
    sqlite3_bind_int64(s, 3, size);
    sqlite3_bind_int64(s, 4, cn_now_seconds());
    if (sqlite3_step(s) != SQLITE_DONE) {
      r = cn_store_fail_db(st, "image");
      goto fail;
    }
    created = sqlite3_changes(st->db) > 0;
    if (created) {
      cn_autostmt sqlite3_stmt *l = NULL;
      if ((r = cn_db_prepare(st, &l,
                             "INSERT INTO image_layers(image_id, position, layer_id)"
                             " VALUES(?, ?, ?)")) < 0)
        goto fail;
      for (size_t i = 0; i < n; i++) {
        sqlite3_bind_text(l, 1, image_id_out, -1, SQLITE_STATIC);
        sqlite3_bind_int(l, 2, (int)i);
        sqlite3_bind_text(l, 3, diff_ids[i], -1, SQLITE_STATIC);
        if (sqlite3_step(l) != SQLITE_DONE) {
          r = cn_store_fail_db(st, "image layers");
          goto fail;
        }
        sqlite3_reset(l);
      }
    }
  }
  if (name) {
    cn_autostmt sqlite3_stmt *s = NULL;
    if ((r = cn_db_prepare(st, &s, "INSERT OR REPLACE INTO names(name, image_id) VALUES(?, ?)")) <
        0)
      goto fail;
    sqlite3_bind_text(s, 1, norm, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 2, image_id_out, -1, SQLITE_STATIC);
    if (sqlite3_step(s) != SQLITE_DONE) {
      r = cn_store_fail_db(st, "image name");
      goto fail;
    }
    if ((r = cn_name_old_drop(st, norm)) < 0) goto fail;
  }
  r = cn_db_commit_durable(st);
  cn_refs_end(st, lock);
  if (r == -ENOSPC) return cn_store_fail_nospace(st);
  if (r == 0 && created) index_write(st, image_id_out);
  return r;
fail:
  cn_db_rollback(st);
  cn_refs_end(st, lock);
  return r == -ENOSPC ? cn_store_fail_nospace(st) : r;
}

int cn_import_files(cairn_store *st, const char *name, const char *const *paths, size_t n,
                       cairn_id image_id_out) {
  return cairn_import_files_changes(st, name, paths, n, NULL, 0, image_id_out);
}

int cairn_import_files_changes(cairn_store *st, const char *name, const char *const *paths,
                               size_t n, const char *const *changes, size_t n_changes,
                               cairn_id image_id_out) {
  store_errclear(st);
  char norm[512];
  if (cairn_name_normalize(name, norm, sizeof(norm)) < 0)
    return cairn_fail(st, -EINVAL, "%s: not a valid image name", name);
  cn_autojson json_t *conf = json_object(); /* the changes, checked before any layer is read */
  if (!conf) return cairn_fail(st, -ENOMEM, "out of memory importing %s", norm);
  for (size_t i = 0; i < n_changes; i++) {
    int r = change_apply(st, conf, changes[i]);
    if (r < 0) return r == -1 ? cairn_fail(st, -ENOMEM, "out of memory importing %s", norm) : r;
  }
  cairn_autofree char *purpose = cn_xasprintf("import %s", norm);
  cairn_pinset *ps = cairn_pinset_new(purpose, true);
  char **ids = calloc(n ? n : 1, sizeof(*ids));
  if (!ps || !ids) {
    cairn_pinset_release(st, ps);
    free(ids);
    return cairn_fail(st, -ENOMEM, "out of memory importing %s", norm);
  }
  int r = 0;
  for (size_t i = 0; i < n && r == 0; i++) {
    /* "-" is the standard input, as for tar */
    int fd = strcmp(paths[i], "-") == 0 ? fcntl(STDIN_FILENO, F_DUPFD_CLOEXEC, 0)
                                        : open(paths[i], O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      r = cairn_fail(st, errno == ENOENT ? -ENOENT : -errno, "%s: %s", paths[i], strerror(errno));
      break;
    }
    struct stat sb;
    ids[i] = malloc(sizeof(cairn_id));
    if (!ids[i])
      r = cairn_fail(st, -ENOMEM, "out of memory importing %s", norm);
    else if (fstat(fd, &sb) == 0 && S_ISDIR(sb.st_mode))
      r = cairn_fail(st, -EINVAL, "%s: is a directory, not a layer tar", paths[i]);
    else if ((r = cn_layer_ingest(st, fd, NULL, ps, ids[i])) < 0)
      cn_fail_context(st, r, "%s", paths[i]);
    close(fd);
  }
  if (r == 0) {
    json_t *cfg = config_imported((const char *const *)ids, n, conf);
    cairn_autofree char *config = cfg ? json_dumps(cfg, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(cfg);
    r = config ? cn_image_commit(st, config, strlen(config), (const char *const *)ids, n, norm,
                                    image_id_out)
               : cairn_fail(st, -ENOMEM, "out of memory importing %s", norm);
  }
  cairn_pinset_release(st, ps);
  cn_strv_free(ids, n);
  if (r < 0) {
    /* Nothing of a failed import stays: layers it stored go unless another
     * image or a pin holds them. */
    char saved[sizeof(st->err)];
    memcpy(saved, st->err, sizeof(saved));
    cairn_report ignored = {0};
    cn_store_sweep(st, false, STORE_LOCK_EXCLUSIVE_NB, &ignored);
    cairn_report_free(&ignored);
    memcpy(st->err, saved, sizeof(saved));
  }
  return r;
}

int cairn_pin_image(cairn_store *st, cairn_pinset *ps, const char *image_id) {
  store_errclear(st);
  /* The locks first, each as it is taken (or taken already, by
   * cairn_pin_image_early); then what they are for, all in one
   * transaction. */
  int r = cn_pin_lock(st, ps, CAIRN_PIN_IMAGE, image_id);
  if (r < 0) return r;
  char **layers = NULL;
  size_t n = 0;
  if ((r = cn_image_layers(st, image_id, &layers, &n)) < 0) return r;
  for (size_t i = 0; i < n && r >= 0; i++) r = cn_pin_lock(st, ps, CAIRN_PIN_LAYER, layers[i]);
  cn_strv_free(layers, n);
  return r < 0 ? r : cn_pin_annotate(st, ps);
}

int cn_image_delete_rows(cairn_store *st, const char *id) {
  cn_autostmt sqlite3_stmt *d = NULL;
  int r = cn_db_prepare(st, &d, "DELETE FROM images WHERE id = ?");
  if (r < 0) return r;
  sqlite3_bind_text(d, 1, id, -1, SQLITE_STATIC);
  return sqlite3_step(d) == SQLITE_DONE ? 0 : cn_store_fail_db(st, "image delete");
}

int cn_image_delete(cairn_store *st, const char *id) {
  int lock = cn_refs_begin(st);
  if (lock < 0) return lock;
  int r = cn_db_begin(st);
  if (r == 0) {
    if ((r = cn_image_delete_rows(st, id)) == 0)
      r = cn_db_commit(st);
    else
      cn_db_rollback(st);
  }
  cn_refs_end(st, lock);
  return r;
}

int cn_image_layers(cairn_store *st, const char *image_id, char ***ids, size_t *n) {
  store_errclear(st);
  *ids = NULL;
  *n = 0;
  cn_autostmt sqlite3_stmt *q = NULL;
  int r = cn_db_prepare(st, &q,
                        "SELECT (SELECT count(*) FROM images WHERE id = ?1), layer_id"
                        " FROM (SELECT 1) LEFT JOIN image_layers ON image_id = ?1"
                        " ORDER BY position");
  if (r < 0) return r;
  sqlite3_bind_text(q, 1, image_id, -1, SQLITE_STATIC);
  size_t cap = 0;
  while (sqlite3_step(q) == SQLITE_ROW) {
    if (sqlite3_column_int(q, 0) == 0) return cairn_fail(st, -ENOENT, "no such image");
    if (sqlite3_column_type(q, 1) == SQLITE_NULL) continue;
    char **v = cn_array_grow(*ids, *n, &cap, sizeof(*v));
    char *id = v ? strdup((const char *)sqlite3_column_text(q, 1)) : NULL;
    if (v) *ids = v;
    if (!id) {
      cn_strv_free(*ids, *n);
      *ids = NULL;
      *n = 0;
      return cairn_fail(st, -ENOMEM, "out of memory reading the layers of image %.12s", image_id);
    }
    (*ids)[(*n)++] = id;
  }
  return 0;
}
