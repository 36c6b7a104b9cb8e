/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_spec.c — cairn_runtime_spec converts an image config as the
 * image-spec's conversion.md says: Entrypoint + Cmd and their overrides,
 * Env with the caller's entries replacing the image's and our defaults only
 * where the image has none, WorkingDir, annotations with Labels winning,
 * Volumes as mounts, and User resolved through the image's own merged
 * /etc/passwd and /etc/group (a symlinked /etc/passwd followed inside the
 * image, a whiteout in a later layer respected, numbers copied as they
 * are, an unknown name refused).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "testutil.h"

static tu_store T;
static void setup(void) { tu_store_setup(&T); }
static void teardown(void) { tu_store_teardown(&T); }
TestSuite(spec, .init = setup, .fini = teardown);

static const tu_entry base[] = {
    {.path = "etc", .type = 'd'},
    {.path = "usr", .type = 'd'},
    {.path = "usr/lib", .type = 'd'},
    {.path = "usr/lib/passwd",
     .content = "root:x:0:0:root:/root:/bin/sh\n"
                "# a comment\n"
                "app:x:1000:1001:App:/home/app:/bin/sh\n"
                "gone:x:2000:2000::/:/bin/false\n"},
    {.path = "etc/passwd", .type = 'l', .target = "../usr/lib/passwd"},
    {.path = "etc/group",
     .content = "root:x:0:\napp:x:1001:\nwheel:x:10:root,app\n"
                "audio:x:29:app\nother:x:30:root\n"},
};

/* An image of base (and a second layer when top is given) whose config's
 * "config" object is config_json; its id in id. */
static void image_with(const char *config_json, const tu_entry *top, size_t n_top, cairn_id id) {
  cairn_id layers[2];
  size_t n = 0;
  cr_assert_eq(tu_ingest(T.st, base, TU_N(base), TU_PLAIN, NULL, layers[n++]), 0);
  if (top) cr_assert_eq(tu_ingest(T.st, top, n_top, TU_PLAIN, NULL, layers[n++]), 0);
  json_t *diff_ids = json_array();
  for (size_t i = 0; i < n; i++)
    json_array_append_new(diff_ids, json_sprintf("sha256:%s", layers[i]));
  json_t *cfg =
      json_pack("{s:s s:s s:o s:{s:s s:o}}", "architecture", "amd64", "os", "linux", "config",
                json_loads(config_json, 0, NULL), "rootfs", "type", "layers", "diff_ids", diff_ids);
  cr_assert_not_null(cfg);
  char *text = json_dumps(cfg, JSON_COMPACT);
  const char *ids[2] = {layers[0], layers[1]};
  cr_assert_eq(cn_image_commit(T.st, text, strlen(text), ids, n, NULL, id), 0, "%s",
               cairn_errmsg(T.st));
  free(text);
  json_decref(cfg);
}

/* The runtime config of id under opts, parsed. */
static json_t *spec_of(const char *id, const cairn_spec_opts *opts) {
  char *text;
  int r = cairn_runtime_spec(T.st, id, opts, &text);
  cr_assert_eq(r, 0, "cairn_runtime_spec: %d %s", r, cairn_errmsg(T.st));
  json_t *j = json_loads(text, 0, NULL);
  free(text);
  cr_assert_not_null(j);
  return j;
}

static int spec_error(const char *id, const cairn_spec_opts *opts) {
  char *text = NULL;
  int r = cairn_runtime_spec(T.st, id, opts, &text);
  cr_assert_null(text);
  return r;
}

/* The JSON text of spec's value at a path of keys. */
static char *at(json_t *spec, const char *a, const char *b, const char *c) {
  json_t *v = json_object_get(spec, a);
  if (b) v = json_object_get(v, b);
  if (c) v = json_object_get(v, c);
  return v ? json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY) : strdup("missing");
}

#define expect_at(spec, want, a, b, c)                                                             \
  do {                                                                                             \
    char *got_ = at(spec, a, b, c);                                                                \
    cr_expect_str_eq(got_, want, "%s.%s.%s", a, b ? b : "", c ? c : "");                           \
    free(got_);                                                                                    \
  } while (0)

Test(spec, args_env_cwd_and_annotations) {
  cairn_id id;
  image_with("{\"Entrypoint\": [\"/bin/app\", \"-v\"], \"Cmd\": [\"serve\"],"
             " \"Env\": [\"PATH=/opt/bin\", \"A=1\"], \"WorkingDir\": \"/srv\","
             " \"StopSignal\": \"SIGINT\", \"ExposedPorts\": {\"80/tcp\": {}, \"443/tcp\": {}},"
             " \"Labels\": {\"org.opencontainers.image.os\": \"mine\", \"team\": \"x\"},"
             " \"Volumes\": {\"/data\": {}}}",
             NULL, 0, id);
  json_t *s = spec_of(id, NULL);
  expect_at(s, "[\"/bin/app\",\"-v\",\"serve\"]", "process", "args", NULL);
  expect_at(s, "[\"PATH=/opt/bin\",\"A=1\",\"HOME=/root\"]", "process", "env", NULL);
  expect_at(s, "\"/srv\"", "process", "cwd", NULL);
  expect_at(s, "{\"uid\":0,\"gid\":0}", "process", "user", NULL);
  expect_at(s, "true", "root", "readonly", NULL);
  expect_at(s, "false", "process", "terminal", NULL);
  expect_at(s, "\"SIGINT\"", "annotations", "org.opencontainers.image.stopSignal", NULL);
  expect_at(s, "\"80/tcp,443/tcp\"", "annotations", "org.opencontainers.image.exposedPorts", NULL);
  expect_at(s, "\"mine\"", "annotations", "org.opencontainers.image.os", NULL); /* labels win */
  expect_at(s, "\"amd64\"", "annotations", "org.opencontainers.image.architecture", NULL);
  expect_at(s, "\"x\"", "annotations", "team", NULL);
  json_t *mounts = json_object_get(s, "mounts");
  json_t *last = json_array_get(mounts, json_array_size(mounts) - 1);
  cr_expect_str_eq(json_string_value(json_object_get(last, "destination")), "/data");
  cr_expect_str_eq(json_string_value(json_object_get(last, "type")), "tmpfs");
  json_decref(s);

  /* Overrides: -- COMMAND replaces Cmd, --env replaces and adds, --rw. */
  const char *args[] = {"check"}, *env[] = {"A=2", "B=3", "TERM=dumb"};
  cairn_spec_opts o = {
      .args = args, .n_args = 1, .env = env, .n_env = 3, .rw = true, .terminal = true};
  s = spec_of(id, &o);
  expect_at(s, "[\"/bin/app\",\"-v\",\"check\"]", "process", "args", NULL);
  expect_at(s, "[\"PATH=/opt/bin\",\"A=2\",\"B=3\",\"TERM=dumb\",\"HOME=/root\"]", "process", "env",
            NULL);
  expect_at(s, "false", "root", "readonly", NULL);
  expect_at(s, "true", "process", "terminal", NULL);
  json_decref(s);

  /* --entrypoint drops Cmd unless a command is given. */
  o = (cairn_spec_opts){.entrypoint = "/bin/sh"};
  s = spec_of(id, &o);
  expect_at(s, "[\"/bin/sh\"]", "process", "args", NULL);
  json_decref(s);
}

Test(spec, no_command_is_refused) {
  cairn_id id;
  image_with("{\"Env\": [\"A=1\"]}", NULL, 0, id);
  cr_expect_eq(spec_error(id, NULL), -EINVAL);
  const char *args[] = {"/bin/true"};
  cairn_spec_opts o = {.args = args, .n_args = 1};
  json_t *s = spec_of(id, &o);
  expect_at(s, "[\"/bin/true\"]", "process", "args", NULL);
  expect_at(s, "\"/\"", "process", "cwd", NULL);
  /* Our PATH only because the image has none. */
  expect_at(s,
            "[\"A=1\",\"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\","
            "\"HOME=/root\"]",
            "process", "env", NULL);
  json_decref(s);
}

Test(spec, user_by_name_through_a_symlinked_passwd) {
  cairn_id id;
  image_with("{\"Cmd\": [\"x\"], \"User\": \"app\"}", NULL, 0, id);
  json_t *s = spec_of(id, NULL);
  expect_at(s, "{\"uid\":1000,\"gid\":1001,\"additionalGids\":[10,29]}", "process", "user", NULL);
  expect_at(s,
            "[\"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\","
            "\"HOME=/home/app\"]",
            "process", "env", NULL);
  /* Only root keeps capabilities beyond the bounding set. */
  expect_at(s, "[]", "process", "capabilities", "effective");
  json_decref(s);
}

Test(spec, user_forms) {
  static const struct {
    const char *user, *want;
  } cases[] = {
      {"1000", "{\"uid\":1000,\"gid\":1001}"},     /* a uid: its passwd gid, no groups */
      {"4242", "{\"uid\":4242,\"gid\":0}"},        /* not in passwd: as it is */
      {"4242:77", "{\"uid\":4242,\"gid\":77}"},    /* numbers verbatim */
      {"app:wheel", "{\"uid\":1000,\"gid\":10}"},  /* a group: no additional groups */
      {"1000:audio", "{\"uid\":1000,\"gid\":29}"}, /* uid and group name */
      {"root", "{\"uid\":0,\"gid\":0,\"additionalGids\":[10,30]}"},
  };
  cairn_id id;
  image_with("{\"Cmd\": [\"x\"]}", NULL, 0, id);
  for (size_t i = 0; i < TU_N(cases); i++) {
    cairn_spec_opts o = {.user = cases[i].user};
    json_t *s = spec_of(id, &o);
    char *got = at(s, "process", "user", NULL);
    cr_expect_str_eq(got, cases[i].want, "user %s", cases[i].user);
    free(got);
    json_decref(s);
  }
  static const struct {
    const char *user;
    int err;
  } refused[] = {{"nobody", -ENOENT}, {"app:nogroup", -ENOENT}, {":1", -EINVAL}, {"app:", -EINVAL}};
  for (size_t i = 0; i < TU_N(refused); i++) {
    cairn_spec_opts o = {.user = refused[i].user};
    cr_expect_eq(spec_error(id, &o), refused[i].err, "user \"%s\"", refused[i].user);
  }
}

Test(spec, a_later_layer_wins) {
  /* The top layer deletes /etc/passwd's target and brings its own group. */
  static const tu_entry top[] = {
      {.path = "usr", .type = 'd'},
      {.path = "usr/lib", .type = 'd'},
      {.path = "usr/lib/.wh.passwd"},
  };
  cairn_id id;
  image_with("{\"Cmd\": [\"x\"], \"User\": \"app\"}", top, TU_N(top), id);
  cr_expect_eq(spec_error(id, NULL), -ENOENT);
  cr_expect(strstr(cairn_errmsg(T.st), "no such user") != NULL, "%s", cairn_errmsg(T.st));
  cairn_spec_opts o = {.user = "7:8"};
  json_t *s = spec_of(id, &o);
  expect_at(s, "{\"uid\":7,\"gid\":8}", "process", "user", NULL);
  json_decref(s);
}
