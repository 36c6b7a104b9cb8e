/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_pull_parse.c — the pull's pure parts: platforms, index selection,
 * manifest parsing, the WWW-Authenticate challenge, auth.json credentials,
 * the verifying blob sink (size limit, digest check), and the process's
 * bearer tokens (their keys, lifetime, claims).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "remote/libcairn_remote.h"
#include "remote/libcairn_registry.h"
#include "testutil.h"

#define D1 "sha256:1111111111111111111111111111111111111111111111111111111111111111"
#define D2 "sha256:2222222222222222222222222222222222222222222222222222222222222222"
#define D3 "sha256:3333333333333333333333333333333333333333333333333333333333333333"

Test(pull_parse, platform) {
  pull_platform p;
  cr_assert_eq(cn_pull_platform_parse("linux/amd64", &p), 0);
  cr_assert_str_eq(p.os, "linux");
  cr_assert_str_eq(p.arch, "amd64");
  cr_assert_str_eq(p.variant, "");
  cr_assert_eq(cn_pull_platform_parse("linux/arm/v7", &p), 0);
  cr_assert_str_eq(p.arch, "arm");
  cr_assert_str_eq(p.variant, "v7");
  const char *bad[] = {"linux", "/amd64", "linux/", "linux/arm/", ""};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
    cr_assert_eq(cn_pull_platform_parse(bad[i], &p), -EINVAL, "%s", bad[i]);
}

/* No --platform: this machine's, as uname(2) names it, in OCI's words. */
Test(pull_parse, platform_of_the_machine) {
  static const char *const m[][3] = {
      {"x86_64", "amd64", ""}, {"i686", "386", ""},        {"aarch64", "arm64", "v8"},
      {"armv7l", "arm", "v7"}, {"armv6l", "arm", "v6"},    {"ppc64le", "ppc64le", ""},
      {"s390x", "s390x", ""},  {"riscv64", "riscv64", ""}, {"loongarch64", "loong64", ""},
  };
  pull_platform p;
  for (size_t i = 0; i < sizeof m / sizeof *m; i++) {
    cn_pull_platform_of_machine(m[i][0], &p);
    cr_assert_str_eq(p.os, "linux");
    cr_assert_str_eq(p.arch, m[i][1], "%s", m[i][0]);
    cr_assert_str_eq(p.variant, m[i][2], "%s", m[i][0]);
  }
  struct utsname u;
  cr_assert_eq(uname(&u), 0);
  pull_platform host;
  cn_pull_platform_of_machine(u.machine, &host);
  cr_assert_eq(cn_pull_platform_parse(NULL, &p), 0);
  cr_assert_str_eq(p.arch, host.arch);
  cr_assert_str_eq(p.variant, host.variant);
}

static const char index_json[] =
    "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.index.v1+json\","
    "\"manifests\":["
    "{\"digest\":\"" D1
    "\",\"size\":10,\"platform\":{\"os\":\"linux\",\"architecture\":\"arm\",\"variant\":\"v7\"}},"
    "{\"digest\":\"" D2
    "\",\"size\":20,\"platform\":{\"os\":\"linux\",\"architecture\":\"amd64\"}},"
    "{\"digest\":\"" D3 "\",\"size\":30,\"platform\":{\"os\":\"linux\",\"architecture\":\"arm64\","
    "\"variant\":\"v8\"}}]}";

static int select_for(const char *plat, pull_desc *d) {
  pull_platform p;
  cr_assert_eq(cn_pull_platform_parse(plat, &p), 0);
  return cn_oci_index_select(index_json, strlen(index_json), &p, d, NULL);
}

Test(pull_parse, index_picks_the_platform) {
  pull_desc d;
  cr_assert_eq(select_for("linux/amd64", &d), 1);
  cr_assert_str_eq(d.digest, D2);
  cr_assert_eq(d.size, 20);
  cn_pull_desc_clear(&d);
  cr_assert_eq(select_for("linux/arm/v7", &d), 1);
  cr_assert_str_eq(d.digest, D1);
  cn_pull_desc_clear(&d);
  cr_assert_eq(select_for("linux/arm64", &d), 1);
  cr_assert_str_eq(d.digest, D3);
  cn_pull_desc_clear(&d);
  cr_assert_eq(select_for("linux/amd64/v1", &d), 1, "amd64's implied variant is v1");
  cn_pull_desc_clear(&d);
  cr_assert_eq(select_for("linux/arm/v6", &d), -ENOENT);
  cr_assert_eq(select_for("windows/amd64", &d), -ENOENT);
}

static const char manifest_json[] =
    "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.docker.distribution.manifest.v2+json\","
    "\"config\":{\"mediaType\":\"application/vnd.docker.container.image.v1+json\",\"digest\":\"" D1
    "\",\"size\":5},"
    "\"layers\":[{\"mediaType\":\"application/"
    "vnd.docker.image.rootfs.diff.tar.gzip\",\"digest\":\"" D2 "\",\"size\":7},"
    "{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar+zstd\",\"digest\":\"" D3
    "\",\"size\":9}]}";

Test(pull_parse, manifest) {
  pull_image img = {0};
  pull_desc d;
  tu_store t;
  tu_store_setup(&t);
  cairn_store *st = t.st;
  pull_platform p;
  cn_pull_platform_parse(NULL, &p);
  cr_assert_eq(cn_oci_index_select(manifest_json, strlen(manifest_json), &p, &d, st), 0,
               "an image manifest is not an index");
  cr_assert_eq(cn_oci_manifest_parse(manifest_json, strlen(manifest_json), &img, st), 0, "%s",
               cairn_errmsg(st));
  cr_assert_str_eq(img.config.digest, D1);
  cr_assert_eq(img.n_layers, 2);
  cr_assert_str_eq(img.layers[1].digest, D3);
  cr_assert_eq(img.layers[1].size, 9);

  img.config_json = strdup("{\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[\"" D1 "\"]}}");
  img.config_len = strlen(img.config_json);
  cr_assert_eq(cn_oci_config_diff_ids(&img, st), -EBADMSG, "one diff_id for two layers");
  cn_pull_image_free(&img);

  const char *bad[] = {
      "{\"schemaVersion\":1,\"fsLayers\":[]}",
      "{\"schemaVersion\":2,\"config\":{\"digest\":\"sha256:12\",\"size\":1},\"layers\":[]}",
      "{\"schemaVersion\":2,\"config\":{\"digest\":\"" D1 "\",\"size\":-1},\"layers\":[]}",
      "not json",
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    pull_image b = {0};
    cr_assert_eq(cn_oci_manifest_parse(bad[i], strlen(bad[i]), &b, st), -EBADMSG, "%s", bad[i]);
    cn_pull_image_free(&b);
  }
  tu_store_teardown(&t);
}

Test(pull_parse, challenge) {
  const char *ch = "realm=\"https://auth.example/token\",service=\"reg.example\","
                   "scope=\"repository:a/b:pull,push\",error=invalid_token";
  char v[256];
  cr_assert(cn_registry_challenge_param(ch, "realm", v, sizeof v));
  cr_assert_str_eq(v, "https://auth.example/token");
  cr_assert(cn_registry_challenge_param(ch, "scope", v, sizeof v));
  cr_assert_str_eq(v, "repository:a/b:pull,push");
  cr_assert(cn_registry_challenge_param(ch, "error", v, sizeof v));
  cr_assert_str_eq(v, "invalid_token");
  cr_assert_not(cn_registry_challenge_param(ch, "service2", v, sizeof v));
  cr_assert_not(cn_registry_challenge_param(ch, "realm2", v, sizeof v));
  char small[5];
  cr_assert(cn_registry_challenge_param(ch, "service", small, sizeof small));
  cr_assert_str_eq(small, "reg.", "truncated, still terminated");
}

Test(pull_parse, auth_json) {
  char path[] = "/tmp/cairn-auth-XXXXXX";
  int fd = mkstemp(path);
  cr_assert_geq(fd, 0);
  /* "alice:s3cr:et" in base64; the password keeps its ':' */
  /* "====" decodes to 3 bytes of which 4 were padding: never out[-1] */
  const char *j = "{\"auths\":{\"https://other.example/v1/\":{\"auth\":\"eDp5\"},"
                  "\"pad.example\":{\"auth\":\"====\"},"
                  "\"reg.example:5000\":{\"auth\":\"YWxpY2U6czNjcjpldA==\"}}}";
  cr_assert_eq(write(fd, j, strlen(j)), (ssize_t)strlen(j));
  close(fd);
  setenv("REGISTRY_AUTH_FILE", path, 1);
  setenv("HOME", "/nonexistent", 1);
  unsetenv("XDG_RUNTIME_DIR");
  char *c = cn_registry_find_creds("reg.example:5000", NULL);
  cr_assert_str_eq(c, "alice:s3cr:et");
  free(c);
  c = cn_registry_find_creds("other.example", NULL);
  cr_assert_str_eq(c, "x:y");
  free(c);
  cr_assert_null(cn_registry_find_creds("reg.example", NULL));
  cr_assert_null(cn_registry_find_creds("pad.example", NULL), "only padding: no credentials");
  c = cn_registry_find_creds("reg.example", "bob:pw");
  cr_assert_str_eq(c, "bob:pw");
  free(c);
  unlink(path);
}

Test(pull_parse, blob_sink_checks_size_and_digest) {
  pull_desc d = {0};
  tu_store t;
  tu_store_setup(&t);
  cairn_store *st = t.st;
  cn_pull_sha256("hello", 5, d.digest);
  d.size = 5;
  cr_assert_str_eq(d.digest,
                   "sha256:2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824");

  blob_sink s;
  cr_assert_eq(cn_blob_sink_init(&s, -1, d.size, NULL), 0);
  cr_assert_eq(cn_blob_sink_write(&s, "hel", 3), 0);
  cr_assert_eq(cn_blob_sink_write(&s, "lo!", 3), -EFBIG, "one byte over the descriptor");
  cr_assert_eq(cn_blob_sink_write(&s, "lo", 2), 0);
  cr_assert_eq(cn_blob_sink_finish(&s, &d, st), 0, "%s", cairn_errmsg(st));
  cr_assert_str_eq(s.mem, "hello");
  cn_blob_sink_free(&s);

  cr_assert_eq(cn_blob_sink_init(&s, -1, d.size, NULL), 0);
  cr_assert_eq(cn_blob_sink_write(&s, "jello", 5), 0);
  cr_assert_eq(cn_blob_sink_finish(&s, &d, st), -EBADMSG);
  cr_assert(strstr(cairn_errmsg(st), d.digest), "names the blob: %s", cairn_errmsg(st));
  cr_assert_eq(cn_blob_sink_reset(&s), 0);
  cr_assert_eq(cn_blob_sink_write(&s, "hell", 4), 0);
  cr_assert_eq(cn_blob_sink_finish(&s, &d, st), -EBADMSG, "short");
  cn_blob_sink_free(&s);
  tu_store_teardown(&t);
}

/* The name a docker:// source gives an image when none is asked for. */
static char *docker_default_name(const char *spec) {
  static const cairn_pull_opts opts = {0};
  pull_source *src = NULL;
  cr_assert_eq(cn_registry_source_open(spec, &opts, &src, NULL), 0, "%s", spec);
  char *name = src->default_name ? strdup(src->default_name) : NULL;
  src->ops->free(src);
  return name;
}

/* Short names expand as podman's do: a first component with no "." or ":"
 * that is not localhost is part of the repository on docker.io (library/
 * for a one-component name), or on the first unqualified-search-registries
 * entry of registries.conf. */
Test(pull_parse, docker_short_names) {
  setenv("CONTAINERS_REGISTRIES_CONF", "/nonexistent", 1);
  static const char *const cases[][2] = {
      {"alpine:3.19", "docker.io/library/alpine:3.19"},
      {"alpine", "docker.io/library/alpine:latest"},
      {"myorg/app:2", "docker.io/myorg/app:2"},
      {"docker.io/alpine:3.19", "docker.io/library/alpine:3.19"},
      {"localhost/team/app:1", "localhost/team/app:1"},
      {"127.0.0.1:5000/team/app:1", "127.0.0.1:5000/team/app:1"},
      {"quay.io/org/app", "quay.io/org/app:latest"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char *name = docker_default_name(cases[i][0]);
    cr_assert_str_eq(name, cases[i][1], "docker://%s", cases[i][0]);
    free(name);
  }
  char conf[] = "/tmp/cairn-registries.XXXXXX";
  int fd = mkstemp(conf);
  cr_assert_geq(fd, 0);
  static const char text[] = "# a comment\n[registries.search]\n"
                             "unqualified-search-registries = [\n"
                             "  \"127.0.0.1:5000\", \"docker.io\"\n]\n";
  cr_assert_eq(write(fd, text, sizeof text - 1), (ssize_t)(sizeof text - 1));
  close(fd);
  setenv("CONTAINERS_REGISTRIES_CONF", conf, 1);
  char *name = docker_default_name("team/app:1");
  cr_assert_str_eq(name, "127.0.0.1:5000/team/app:1");
  free(name);
  unlink(conf);
  unsetenv("CONTAINERS_REGISTRIES_CONF");
}

/* The cache's token for k must be want (why: the case). */
static void expect_token(const cn_token_key *k, const char *want, const char *why) {
  char *t = cn_token_cache_get(k);
  cr_assert_str_eq(t, want, "%s", why);
  free(t);
}

/* The process's bearer tokens: handed out only for the server, realm,
 * service, scope and credentials they were got with, while their lifetime
 * lasts (less a margin; issued_at may shorten it), never once dropped. */
Test(pull_parse, token_cache_keys) {
  cn_token_cache_clear();
  const char *s = "https://reg.example", *r = "https://auth.example/token";
  cn_token_key alice = {s, r, "reg", "repository:a/b:pull", "alice:secret"};
  int64_t now = cn_token_now_ms();
  cn_token_cache_put(&alice, "T1", 300, 0, now);
  expect_token(&alice, "T1", "its own key");
  cn_token_key any = alice;
  any.realm = any.service = NULL; /* before a challenge: the server's */
  expect_token(&any, "T1", "any realm and service: before a challenge");
  /* a key that differs from alice's in one part: no token */
  const char *ab = "repository:a/b:pull";
  const struct {
    cn_token_key k;
    const char *why;
  } other[] = {
      {{s, r, "reg", ab, "bob:hunter2"}, "another user's credentials"},
      {{s, r, "reg", ab, NULL}, "no credentials"},
      {{s, r, "reg", ab, "alice:secreT"}, "another password"},
      {{s, r, "reg", "repository:a/c:pull", "alice:secret"}, "another scope"},
      {{"https://other.example", r, "reg", ab, "alice:secret"}, "another server"},
      {{s, "https://evil.example/token", "reg", ab, "alice:secret"}, "another realm"},
      {{s, r, "other", ab, "alice:secret"}, "another service"},
  };
  for (size_t i = 0; i < sizeof other / sizeof *other; i++)
    cr_assert_null(cn_token_cache_get(&other[i].k), "%s", other[i].why);

  /* bob's own token, beside alice's; none is another key again */
  cn_token_key k = alice;
  k.creds = "bob:hunter2";
  cn_token_cache_put(&k, "T2", 300, 0, now);
  expect_token(&k, "T2", "bob's own");
  expect_token(&alice, "T1", "alice's beside it");

  cn_token_cache_drop("T1"); /* a 401 to it */
  cr_assert_null(cn_token_cache_get(&alice), "a refused token is not handed out again");
  expect_token(&k, "T2", "bob's kept when alice's is dropped");
  cn_token_cache_clear();
}

Test(pull_parse, token_cache_lifetime) {
  cn_token_cache_clear();
  cn_token_key k = {"https://reg.example", "https://auth.example/token", "reg",
                    "repository:a/b:pull", NULL};
  int64_t now = cn_token_now_ms();
  cn_token_cache_put(&k, "T", 0, 0, now - 50000); /* no expires_in: 60 s, less 6 */
  expect_token(&k, "T", "50 s of 60");
  cn_token_cache_put(&k, "T", 0, 0, now - 55000);
  cr_assert_null(cn_token_cache_get(&k), "55 s of 60: within the margin");
  cn_token_cache_put(&k, "T", 2, 0, now - 1500);
  cr_assert_null(cn_token_cache_get(&k), "1.5 s of 2");
  cn_token_cache_put(&k, "T", 600, time(NULL) - 500, now);
  expect_token(&k, "T", "issued 500 s ago, for 600");
  cn_token_cache_put(&k, "T", 600, time(NULL) - 595, now);
  cr_assert_null(cn_token_cache_get(&k), "issued 595 s ago, for 600");
  cn_token_cache_put(&k, "T", 600, time(NULL) + 3600, now);
  expect_token(&k, "T", "a registry's clock ahead does not lengthen it");
  cn_token_cache_clear();
}

/* A claim: the first claimer fetches, a second waits for its token. */
static void *claim_later(void *arg) { return cn_token_cache_claim(arg); }

Test(pull_parse, token_cache_claim) {
  cn_token_cache_clear();
  cn_token_key k = {"https://reg.example", "https://auth.example/token", "reg",
                    "repository:a/b:pull", "alice:secret"};
  cr_assert_null(cn_token_cache_claim(&k), "none yet: this caller fetches");
  pthread_t th;
  cr_assert_eq(pthread_create(&th, NULL, claim_later, &k), 0);
  usleep(100000);
  cn_token_cache_put(&k, "T", 300, 0, cn_token_now_ms());
  void *got;
  pthread_join(th, &got);
  cr_assert_str_eq(got, "T", "the waiter got the fetched token");
  free(got);
  cn_token_cache_drop("T");
  cr_assert_null(cn_token_cache_claim(&k), "dropped: fetch again");
  cn_token_cache_put(&k, NULL, 0, 0, 0); /* that fetch failed */
  cr_assert_null(cn_token_cache_get(&k));
  cn_token_cache_clear();
}

/* The token service's answer: the token, and what it says of its life. */
Test(pull_parse, token_take) {
  static const cairn_pull_opts opts = {0};
  pull_source *src = NULL;
  cr_assert_eq(cn_registry_source_open("reg.example/a/b:1", &opts, &src, NULL), 0);
  registry *rg = (registry *)src;
  long in;
  time_t at;
  const char *b =
      "{\"token\":\"TK\",\"expires_in\":300,\"issued_at\":\"2024-01-02T03:04:05.123Z\"}";
  cr_assert_eq(cn_registry_token_take(rg, b, strlen(b), &in, &at, NULL), 0);
  cr_assert_str_eq(rg->auth, "Authorization: Bearer TK");
  cr_assert_eq(in, 300);
  cr_assert_eq(at, 1704164645);
  b = "{\"access_token\":\"TK2\",\"issued_at\":\"2024-01-02T05:04:05+02:00\"}";
  cr_assert_eq(cn_registry_token_take(rg, b, strlen(b), &in, &at, NULL), 0);
  cr_assert_str_eq(rg->auth, "Authorization: Bearer TK2");
  cr_assert_eq(in, 0, "none said");
  cr_assert_eq(at, 1704164645);
  b = "{\"token\":\"TK3\",\"expires_in\":-5,\"issued_at\":\"yesterday\"}";
  cr_assert_eq(cn_registry_token_take(rg, b, strlen(b), &in, &at, NULL), 0);
  cr_assert_eq(in, 0);
  cr_assert_eq(at, 0);
  /* a challenge of several scopes keeps them all (the token's key) */
  char *url = NULL, scope[512];
  const char *ch = "realm=\"https://auth.example/token\",service=\"reg\","
                   "scope=\"repository:a/b:pull,push repository:c/d:pull\"";
  cr_assert_eq(cn_registry_token_url(rg, ch, &url, scope, NULL), 0);
  cr_assert_str_eq(scope, "repository:a/b:pull,push repository:c/d:pull");
  cr_assert(strstr(url, "&scope=repository%3Aa%2Fb%3Apull%2Cpush&scope=repository%3Ac%2Fd%3Apull"),
            "%s", url);
  free(url);
  src->ops->free(src);
}
