/* SPDX-License-Identifier: Apache-2.0 */
/*
 * spec.c — an image's OCI runtime config (the config.json of a runtime
 * bundle, `cairn bundle`), converted from its image config by the rules of
 * the image-spec's conversion.md:
 *   - process.args is Entrypoint followed by Cmd; process.env is Env,
 *     process.cwd WorkingDir (default "/");
 *   - annotations: os, architecture, variant, os.version, os.features,
 *     author, created, StopSignal and ExposedPorts as the
 *     org.opencontainers.image.* keys, then Labels, which win a conflict;
 *   - process.user from User (user, uid, user:group, uid:gid, ...): a
 *     number is copied as it is; a name is looked up in the image's own
 *     /etc/passwd or /etc/group, read from its merged tree (symlinks
 *     followed inside the image, never out of it); additionalGids are the
 *     groups of /etc/group that list a named user, only when User names a
 *     user and no group. A name the image does not know is an error;
 *   - Volumes become tmpfs mounts (not seeded from the image), so that
 *     nothing is written to the root even with --rw.
 * The rest is implementation-defined and is `crun spec`'s default: pid,
 * network, ipc, uts and mount namespaces, its mounts, masked and read-only
 * paths, an RLIMIT_NOFILE of 1024, no new privileges and its three
 * capabilities (kept in the bounding set only for a user other than root,
 * as podman does). What the caller overrides (args, env, user, terminal,
 * a writable root) is applied as a change of the image config: an env
 * entry replaces the image's of the same name.
 * Invariants: the output is one JSON object, or nothing and an error; no
 * PATH, HOME or TERM the image sets is replaced by a default of ours.
 */
#include "libcairn_store.h"

#include <limits.h>
#include <string.h>
#include <sys/stat.h>

#define SYMLINK_MAX_HOPS 40            /* as the kernel's ELOOP */
#define ETC_FILE_MAX (4 * 1024 * 1024) /* a larger /etc/passwd is refused */
#define DEFAULT_PATH "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

/* ---- files of the image ------------------------------------------------ */

/* The inode of path (absolute in the image), every symlink followed within
 * the image ("/.." is "/"); 0 if there is none. */
static uint32_t tree_resolve(const cairn_tree *t, const char *path) {
  char buf[2][PATH_MAX];
  int cur_buf = 0, hops = 0;
  if (snprintf(buf[0], PATH_MAX, "%s", path) >= PATH_MAX) return 0;
  const char *p = buf[0];
  uint32_t cur = 1;
  for (;;) {
    while (*p == '/') p++;
    if (!*p) return cur;
    const char *end = strchrnul(p, '/');
    size_t len = (size_t)(end - p);
    char name[NAME_MAX + 1];
    if (len > NAME_MAX) return 0;
    memcpy(name, p, len);
    name[len] = '\0';
    p = end;
    const cairn_node *dir = cairn_tree_node(t, cur);
    if (!dir || !S_ISDIR(dir->mode)) return 0;
    if (strcmp(name, ".") == 0) continue;
    if (strcmp(name, "..") == 0) {
      cur = dir->parent;
      continue;
    }
    const cairn_dirent *de = cairn_tree_lookup(t, dir, name);
    const cairn_node *n = de ? cairn_tree_node(t, de->ino) : NULL;
    if (!n) return 0;
    if (!S_ISLNK(n->mode)) {
      cur = de->ino;
      continue;
    }
    const char *target = cairn_tree_str(t, n->target);
    if (++hops > SYMLINK_MAX_HOPS || !target) return 0;
    int next = 1 - cur_buf; /* the target, then what was left of the path */
    if (snprintf(buf[next], PATH_MAX, "%s/%s", target, p) >= PATH_MAX) return 0;
    cur_buf = next;
    p = buf[next];
    if (*target == '/') cur = 1;
  }
}

/* The contents of the regular file path of the image, NUL-terminated, in
 * *out (caller frees); -ENOENT if it has none. */
static int tree_read_file(cairn_store *st, const cairn_tree *t, const char *path, char **out) {
  const cairn_node *n = cairn_tree_node(t, tree_resolve(t, path));
  if (!n || !S_ISREG(n->mode)) return -ENOENT;
  if (n->size > ETC_FILE_MAX)
    return cairn_fail(st, -EFBIG, "the image's %s is over %d bytes", path, ETC_FILE_MAX);
  cairn_autofree char *buf = malloc(n->size + 1);
  if (!buf) return cairn_fail(st, -ENOMEM, "out of memory reading the image's %s", path);
  size_t got = 0;
  if (n->size > 0) {
    const char *blob = cairn_tree_str(t, n->blob);
    cairn_autoclose int fd = blob ? cairn_blob_open(st, blob) : -EBADMSG;
    if (fd < 0) return cairn_fail(st, fd, "the image's %s: %s", path, strerror(-fd));
    while (got < n->size) {
      ssize_t r = read(fd, buf + got, n->size - got);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return cairn_fail(st, -errno, "the image's %s: %s", path, strerror(errno));
      if (r == 0) return cairn_fail(st, -EBADMSG, "the image's %s: its blob is truncated", path);
      got += (size_t)r;
    }
  }
  buf[got] = '\0';
  *out = buf;
  buf = NULL;
  return 0;
}

/* ---- users and groups -------------------------------------------------- */

/* s as a uid or gid if it is all digits (and fits), else false. */
static bool parse_id(const char *s, uint32_t *id) {
  if (!*s || strspn(s, "0123456789") != strlen(s) || strlen(s) > 10) return false;
  unsigned long long v = strtoull(s, NULL, 10);
  if (v > UINT32_MAX) return false;
  *id = (uint32_t)v;
  return true;
}

/* Splits a line of /etc/passwd or /etc/group into its ':' fields (at most
 * max), in place; returns how many. */
static size_t split_fields(char *line, char **f, size_t max) {
  size_t n = 0;
  f[n++] = line;
  for (char *c = line; *c && n < max; c++)
    if (*c == ':') {
      *c = '\0';
      f[n++] = c + 1;
    }
  return n;
}

/* Calls fn on each line of text (a copy of each, split into fields). */
static bool etc_find(const char *text, size_t want_fields,
                     bool (*fn)(char **f, size_t n, void *arg), void *arg) {
  for (const char *l = text; l && *l;) {
    const char *nl = strchr(l, '\n');
    size_t len = nl ? (size_t)(nl - l) : strlen(l);
    char line[4096];
    if (len < sizeof(line) && *l != '#') {
      memcpy(line, l, len);
      line[len] = '\0';
      char *f[8];
      size_t n = split_fields(line, f, want_fields);
      if (n == want_fields && fn(f, n, arg)) return true;
    }
    l = nl ? nl + 1 : NULL;
  }
  return false;
}

struct passwd_query {
  const char *name; /* by name, else by uid */
  uint32_t uid;
  /* found: */
  uint32_t found_uid, gid;
  char user[256], home[PATH_MAX];
};

static bool passwd_match(char **f, size_t n, void *arg) {
  (void)n;
  struct passwd_query *q = arg;
  uint32_t uid, gid;
  if (!parse_id(f[2], &uid) || !parse_id(f[3], &gid)) return false;
  if (q->name ? strcmp(f[0], q->name) != 0 : uid != q->uid) return false;
  q->found_uid = uid;
  q->gid = gid;
  snprintf(q->user, sizeof(q->user), "%s", f[0]);
  snprintf(q->home, sizeof(q->home), "%s", f[5]);
  return true;
}

struct group_query {
  const char *name; /* the group to find by name, or NULL */
  uint32_t gid;
  const char *member; /* or: every group listing this user */
  uint32_t primary;   /* left out of the member's groups */
  json_t *gids;
};

static bool group_match(char **f, size_t n, void *arg) {
  (void)n;
  struct group_query *q = arg;
  uint32_t gid;
  if (!parse_id(f[2], &gid)) return false;
  if (q->name) {
    if (strcmp(f[0], q->name) != 0) return false;
    q->gid = gid;
    return true;
  }
  for (char *m = f[3], *save = NULL, *tok; (tok = strtok_r(m, ",", &save)); m = NULL)
    if (strcmp(tok, q->member) == 0 && gid != q->primary) {
      json_array_append_new(q->gids, json_integer(gid));
      break;
    }
  return false; /* every line */
}

/* The image's /etc/FILE ("" when it has none) in *text. */
static int etc_read(cairn_store *st, const cairn_tree *t, const char *path, char **text) {
  int r = tree_read_file(st, t, path, text);
  if (r != -ENOENT) return r;
  *text = strdup("");
  return *text ? 0 : cairn_fail(st, -ENOMEM, "out of memory");
}

/* Fills process.user (and *home) from spec "user[:group]", resolved in the
 * image's tree as the file's top says. */
static int user_resolve(cairn_store *st, const cairn_tree *t, const char *spec, json_t *user,
                        char *home, size_t home_len) {
  char u[512];
  if (snprintf(u, sizeof(u), "%s", spec) >= (int)sizeof(u) || !*u)
    return cairn_fail(st, -EINVAL, "user \"%s\": not a user[:group]", spec);
  char *group = strchr(u, ':');
  if (group) *group++ = '\0';
  if (!*u || (group && !*group))
    return cairn_fail(st, -EINVAL, "user \"%s\": not a user[:group]", spec);
  cairn_autofree char *passwd = NULL, *groups = NULL;
  int r = etc_read(st, t, "/etc/passwd", &passwd);
  if (r < 0) return r;
  struct passwd_query pq = {0};
  uint32_t uid, gid = 0;
  bool numeric = parse_id(u, &uid), known;
  if (numeric) {
    pq.uid = uid;
    known = etc_find(passwd, 7, passwd_match, &pq);
  } else {
    pq.name = u;
    if (!(known = etc_find(passwd, 7, passwd_match, &pq)))
      return cairn_fail(st, -ENOENT, "user \"%s\": no such user in the image's /etc/passwd", u);
    uid = pq.found_uid;
  }
  if (known) gid = pq.gid;
  snprintf(home, home_len, "%s", known && *pq.home ? pq.home : "/");
  if (group || !numeric)
    if ((r = etc_read(st, t, "/etc/group", &groups)) < 0) return r;
  json_t *extra = NULL;
  if (group && !parse_id(group, &gid)) {
    struct group_query gq = {.name = group};
    if (!etc_find(groups, 4, group_match, &gq))
      return cairn_fail(st, -ENOENT, "group \"%s\": no such group in the image's /etc/group",
                        group);
    gid = gq.gid;
  } else if (!group && !numeric) {
    struct group_query gq = {.member = pq.user, .primary = gid, .gids = json_array()};
    if (!gq.gids) return cairn_fail(st, -ENOMEM, "out of memory");
    etc_find(groups, 4, group_match, &gq);
    extra = gq.gids;
  }
  json_object_set_new(user, "uid", json_integer(uid));
  json_object_set_new(user, "gid", json_integer(gid));
  if (extra && json_array_size(extra) > 0)
    json_object_set_new(user, "additionalGids", extra);
  else
    json_decref(extra);
  return 0;
}

/* ---- the runtime config ------------------------------------------------- */

/* A JSON array of strings from v (n of them). */
static json_t *strings_json(const char *const *v, size_t n) {
  json_t *a = json_array();
  for (size_t i = 0; a && i < n; i++) json_array_append_new(a, json_string(v[i]));
  return a;
}

/* Appends the strings of array from (ignoring anything else) to to. */
static void strings_append(json_t *to, const json_t *from) {
  size_t i;
  json_t *s;
  json_array_foreach(from, i, s) if (json_is_string(s)) json_array_append(to, s);
}

/* The index in env (KEY=VALUE strings) of the entry for kv's KEY, or -1. */
static ssize_t env_find(const json_t *env, const char *kv) {
  size_t klen = strcspn(kv, "=");
  size_t i;
  json_t *s;
  json_array_foreach(env, i, s) {
    const char *e = json_string_value(s);
    if (e && strncmp(e, kv, klen) == 0 && (e[klen] == '=' || e[klen] == '\0')) return (ssize_t)i;
  }
  return -1;
}

/* Sets kv in env: replaces the entry of its KEY, or appends it; with
 * keep, an entry already there stays. */
static void env_set(json_t *env, const char *kv, bool keep) {
  ssize_t i = env_find(env, kv);
  if (i >= 0 && keep) return;
  if (i >= 0)
    json_array_set_new(env, (size_t)i, json_string(kv));
  else
    json_array_append_new(env, json_string(kv));
}

static json_t *caps_json(bool root) {
  static const char *const caps[] = {"CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"};
  size_t n = sizeof(caps) / sizeof(caps[0]);
  return json_pack("{s:o s:o s:o s:o s:o}", "bounding", strings_json(caps, n), "effective",
                   strings_json(caps, root ? n : 0), "inheritable", json_array(), "permitted",
                   strings_json(caps, root ? n : 0), "ambient", strings_json(caps, root ? n : 0));
}

static json_t *mount_json(const char *dest, const char *type, const char *source,
                          const char *opts) {
  json_t *m = json_pack("{s:s s:s s:s}", "destination", dest, "type", type, "source", source);
  if (m && opts) {
    json_t *o = json_array();
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", opts);
    for (char *s = buf, *save = NULL, *tok; (tok = strtok_r(s, ",", &save)); s = NULL)
      json_array_append_new(o, json_string(tok));
    json_object_set_new(m, "options", o);
  }
  return m;
}

/* crun spec's mounts, then a tmpfs for each of the image's Volumes. */
static json_t *mounts_json(const json_t *volumes) {
  json_t *m = json_array();
  if (!m) return NULL;
  json_array_append_new(m, mount_json("/proc", "proc", "proc", NULL));
  json_array_append_new(
      m, mount_json("/dev", "tmpfs", "tmpfs", "nosuid,strictatime,mode=755,size=65536k"));
  json_array_append_new(m, mount_json("/dev/pts", "devpts", "devpts",
                                      "nosuid,noexec,newinstance,ptmxmode=0666,mode=0620,gid=5"));
  json_array_append_new(
      m, mount_json("/dev/shm", "tmpfs", "shm", "nosuid,noexec,nodev,mode=1777,size=65536k"));
  json_array_append_new(m, mount_json("/dev/mqueue", "mqueue", "mqueue", "nosuid,noexec,nodev"));
  json_array_append_new(m, mount_json("/sys", "sysfs", "sysfs", "nosuid,noexec,nodev,ro"));
  json_array_append_new(
      m, mount_json("/sys/fs/cgroup", "cgroup", "cgroup", "nosuid,noexec,nodev,relatime,ro"));
  const char *dest;
  json_t *v;
  json_object_foreach((json_t *)volumes, dest, v) {
    if (*dest == '/')
      json_array_append_new(m, mount_json(dest, "tmpfs", "tmpfs", "nosuid,nodev,mode=755"));
  }
  return m;
}

static json_t *linux_json(void) {
  static const char *const ns[] = {"pid", "network", "ipc", "uts", "mount"};
  static const char *const masked[] = {
      "/proc/acpi",          "/proc/asound",     "/proc/kcore",       "/proc/keys",
      "/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug",
      "/sys/firmware",       "/proc/scsi"};
  static const char *const ro[] = {"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys",
                                   "/proc/sysrq-trigger"};
  json_t *namespaces = json_array();
  for (size_t i = 0; namespaces && i < sizeof(ns) / sizeof(ns[0]); i++)
    json_array_append_new(namespaces, json_pack("{s:s}", "type", ns[i]));
  return json_pack("{s:{s:[{s:b s:s}]} s:o s:o s:o}", "resources", "devices", "allow", 0, "access",
                   "rwm", "namespaces", namespaces, "maskedPaths",
                   strings_json(masked, sizeof(masked) / sizeof(masked[0])), "readonlyPaths",
                   strings_json(ro, sizeof(ro) / sizeof(ro[0])));
}

/* Sets annotation key to the string (or, for an array, the comma-joined
 * strings; for an object, its comma-joined keys) of v, if v has one. */
static void annotate(json_t *ann, const char *key, const json_t *v) {
  if (json_is_string(v)) {
    json_object_set(ann, key, (json_t *)v);
    return;
  }
  if (!json_is_array(v) && !json_is_object(v)) return;
  char buf[4096] = "";
  size_t len = 0, i;
  const char *k;
  json_t *e;
  if (json_is_array(v)) {
    json_array_foreach(v, i, e) if (json_is_string(e)) len +=
        (size_t)snprintf(buf + len, len < sizeof(buf) ? sizeof(buf) - len : 0, "%s%s",
                         len ? "," : "", json_string_value(e));
  } else {
    json_object_foreach((json_t *)v, k, e) len += (size_t)snprintf(
        buf + len, len < sizeof(buf) ? sizeof(buf) - len : 0, "%s%s", len ? "," : "", k);
  }
  if (len > 0 && len < sizeof(buf)) json_object_set_new(ann, key, json_string(buf));
}

static json_t *annotations_json(const json_t *cfg, const json_t *config) {
  static const char *const from_top[][2] = {
      {"os", "org.opencontainers.image.os"},
      {"architecture", "org.opencontainers.image.architecture"},
      {"variant", "org.opencontainers.image.variant"},
      {"os.version", "org.opencontainers.image.os.version"},
      {"os.features", "org.opencontainers.image.os.features"},
      {"author", "org.opencontainers.image.author"},
      {"created", "org.opencontainers.image.created"},
  };
  json_t *ann = json_object();
  if (!ann) return NULL;
  for (size_t i = 0; i < sizeof(from_top) / sizeof(from_top[0]); i++)
    annotate(ann, from_top[i][1], json_object_get(cfg, from_top[i][0]));
  annotate(ann, "org.opencontainers.image.stopSignal", json_object_get(config, "StopSignal"));
  annotate(ann, "org.opencontainers.image.exposedPorts", json_object_get(config, "ExposedPorts"));
  const char *k;
  json_t *v;
  json_object_foreach(json_object_get(config, "Labels"), k, v) {
    if (json_is_string(v)) json_object_set(ann, k, v); /* labels win */
  }
  return ann;
}

/* The image config JSON of image_id, as stored. */
static int config_copy(const struct cairn_image_info *info, void *arg) {
  json_error_t err;
  *(json_t **)arg = json_loads(info->config, 0, &err);
  return *(json_t **)arg ? 0 : -EBADMSG;
}

int cairn_runtime_spec(cairn_store *st, const char *image_id, const cairn_spec_opts *opts,
                       char **json_out) {
  static const cairn_spec_opts defaults = {0};
  if (!opts) opts = &defaults;
  *json_out = NULL;
  cn_autojson json_t *cfg = NULL;
  int r = cairn_inspect(st, image_id, config_copy, &cfg);
  if (r == -EBADMSG) return cairn_fail(st, r, "image %.12s: its config is not JSON", image_id);
  if (r < 0) return r;
  const json_t *config = json_object_get(cfg, "config");
  if (!json_is_object(config)) config = json_object_get(cfg, "Config");

  /* args: Entrypoint + Cmd, the caller's replacing either */
  cn_autojson json_t *args = json_array();
  if (!args) return cairn_fail(st, -ENOMEM, "out of memory");
  if (opts->entrypoint)
    json_array_append_new(args, json_string(opts->entrypoint));
  else
    strings_append(args, json_object_get(config, "Entrypoint"));
  if (opts->args) {
    for (size_t i = 0; i < opts->n_args; i++)
      json_array_append_new(args, json_string(opts->args[i]));
  } else if (!opts->entrypoint) {
    strings_append(args, json_object_get(config, "Cmd"));
  }
  if (json_array_size(args) == 0)
    return cairn_fail(st, -EINVAL,
                      "image %.12s has no Entrypoint or Cmd: give the command to run after "
                      "-- (cairn bundle IMAGE DIR -- COMMAND)",
                      image_id);

  /* user */
  const char *user_spec =
      opts->user ? opts->user : json_string_value(json_object_get(config, "User"));
  json_t *user = json_pack("{s:i s:i}", "uid", 0, "gid", 0);
  json_t *process = json_pack("{s:b s:o}", "terminal", opts->terminal, "user", user);
  if (!process) return cairn_fail(st, -ENOMEM, "out of memory");
  char home[PATH_MAX] = "/root";
  if (user_spec && *user_spec) {
    cairn_tree *t;
    if ((r = cairn_tree_build(st, image_id, &t)) < 0) {
      json_decref(process);
      return r;
    }
    r = user_resolve(st, t, user_spec, user, home, sizeof(home));
    cairn_tree_free(t);
    if (r < 0) {
      json_decref(process);
      return r;
    }
  }
  bool root = json_integer_value(json_object_get(user, "uid")) == 0;

  /* env: the image's, the caller's over it, then our defaults if missing */
  json_t *env = json_array();
  strings_append(env, json_object_get(config, "Env"));
  for (size_t i = 0; i < opts->n_env; i++) env_set(env, opts->env[i], false);
  env_set(env, DEFAULT_PATH, true);
  char home_kv[PATH_MAX + 8];
  snprintf(home_kv, sizeof(home_kv), "HOME=%s", home);
  env_set(env, home_kv, true);
  if (opts->terminal) env_set(env, "TERM=xterm", true);

  const char *cwd = json_string_value(json_object_get(config, "WorkingDir"));
  json_object_set(process, "args", args);
  json_object_set_new(process, "env", env);
  json_object_set_new(process, "cwd", json_string(cwd && *cwd ? cwd : "/"));
  json_object_set_new(process, "capabilities", caps_json(root));
  json_object_set_new(
      process, "rlimits",
      json_pack("[{s:s s:i s:i}]", "type", "RLIMIT_NOFILE", "hard", 1024, "soft", 1024));
  json_object_set_new(process, "noNewPrivileges", json_true());

  cn_autojson json_t *spec =
      json_pack("{s:s s:o s:{s:s s:b} s:s s:o s:o s:o}", "ociVersion", "1.0.0", "process", process,
                "root", "path", opts->rootfs ? opts->rootfs : "rootfs", "readonly", !opts->rw,
                "hostname", "cairn", "mounts", mounts_json(json_object_get(config, "Volumes")),
                "annotations", annotations_json(cfg, config), "linux", linux_json());
  if (!spec) return cairn_fail(st, -ENOMEM, "out of memory building the runtime config");
  *json_out = json_dumps(spec, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  return *json_out ? 0 : cairn_fail(st, -ENOMEM, "out of memory writing the runtime config");
}
