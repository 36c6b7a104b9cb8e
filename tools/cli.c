/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cli.c — shared front-end helpers: see cli.h.
 */
#include "cli.h"
#include "self.h"
#include "version.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

int cli_version_run(struct cli *c, int argc, char **argv) {
  (void)c;
  if (argc > 1) {
    char usage[64];
    snprintf(usage, sizeof(usage), "%s version", report_prog);
    return report_usage(usage, "%s: takes no arguments", argv[0]);
  }
  version_print();
  return CAIRN_EXIT_OK;
}

void cli_cairnfs_path(char *out, size_t len) {
  /* next to cairn, or, from the full cairn (LIBEXECDIR/cairn/cairn, a
   * build tree's libexec/cairn/cairn), two levels up or in their bin */
  static const char *const near[] = {"cairnfs", "../../cairnfs", "../../bin/cairnfs"};
  for (size_t i = 0; i < sizeof(near) / sizeof(near[0]); i++)
    if (self_sibling(near[i], "cairnfs", out, len)) return;
}

int cli_take_store_option(struct cli *c, int *argc, char **argv) {
  int out = 1;
  for (int i = 1; i < *argc; i++) {
    if (strcmp(argv[i], "--") == 0) {
      while (i < *argc) argv[out++] = argv[i++];
      break;
    }
    if (strcmp(argv[i], "--store") == 0) {
      if (i + 1 >= *argc) return -EINVAL;
      c->store_dir = argv[++i];
    } else if (strncmp(argv[i], "--store=", 8) == 0) {
      c->store_dir = argv[i] + 8;
    } else if (strcmp(argv[i], "--trust-store") == 0) {
      c->trust_store = true;
    } else {
      argv[out++] = argv[i];
    }
  }
  argv[out] = NULL;
  *argc = out;
  return 0;
}

int cli_config(struct cli *c, const cairn_config **cfg) {
  if (!c->config_read) {
    int r = cairn_config_load(&c->config);
    if (r < 0) {
      int code = report_fail(r, "%s", c->config.why);
      cairn_config_free(&c->config);
      return code;
    }
    c->config_read = true;
  }
  *cfg = &c->config;
  return CAIRN_EXIT_OK;
}

int cli_store_open(struct cli *c, unsigned flags, cairn_store **st) {
  if (!c->st) {
    const cairn_config *cfg = NULL;
    char dir[PATH_MAX];
    int code = cli_config(c, &cfg);
    if (code != CAIRN_EXIT_OK) return code;
    if (!c->store_dir && cairn_store_dir_pick(cfg, dir, sizeof(dir), NULL) < 0)
      return report_fail(-ENOENT, "store: cannot pick a store directory: set --store or "
                                  "CAIRN_STORE");
    cairn_store *opened;
    unsigned how =
        (flags & (CAIRN_STORE_CREATE | CAIRN_STORE_LAZY)) | (c->trust_store ? 0 : CAIRN_STORE_OWN);
    int r = cairn_store_open_flags(c->store_dir ? c->store_dir : dir, how, &opened);
    if (r == -ENOENT && (flags & CLI_STORE_MISSING_OK)) { /* read as an empty store */
      if (c->store_dir) { /* one typed (--store /typo): say so, not only an empty table */
        char line[PATH_MAX + 64];
        snprintf(line, sizeof line, "store %s: does not exist (nothing to list)", c->store_dir);
        report_notice(line);
      }
      cairn_store_close(opened);
      *st = NULL;
      return CAIRN_EXIT_OK;
    }
    if (r < 0) {
      int code = report_fail(r, "store: %s", report_why(opened, r));
      cairn_store_close(opened);
      return code;
    }
    c->st = opened;
    if (cairn_store_created(opened) && !(flags & CLI_STORE_QUIET)) {
      char line[PATH_MAX + 64];
      snprintf(line, sizeof(line), "created store at %s", cairn_store_dir(opened));
      report_notice(line);
    }
    if (cairn_store_notice(opened)) report_notice(cairn_store_notice(opened));
  }
  *st = c->st;
  return CAIRN_EXIT_OK;
}

int cli_store(struct cli *c, cairn_store **st) { return cli_store_open(c, 0, st); }

void cli_close(struct cli *c) {
  cairn_store_close(c->st);
  c->st = NULL;
  if (c->config_read) cairn_config_free(&c->config);
  c->config_read = false;
}

void cli_print_json(json_t *rows) {
  json_dumpf(rows, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  fputc('\n', stdout);
}

void cli_rfc3339(int64_t t, char *buf, size_t len) {
  static int64_t last = INT64_MIN; /* listings give the same second again and again */
  static char last_text[32];
  if (t != last) {
    time_t tt = (time_t)t;
    struct tm tm;
    if (!gmtime_r(&tt, &tm) ||
        strftime(last_text, sizeof(last_text), "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
      snprintf(last_text, sizeof(last_text), "%lld", (long long)t);
    last = t;
  }
  snprintf(buf, len, "%s", last_text);
}

void cli_time_ago(int64_t t, int64_t now, char *buf, size_t len) {
  static const struct {
    int64_t below, unit;
    const char *name;
  } steps[] = {
      {60, 1, "second"},
      {3600, 60, "minute"},
      {86400, 3600, "hour"},
      {14 * 86400, 86400, "day"},
      {60 * 86400, 7 * 86400, "week"},
      {730 * 86400, 30 * 86400, "month"},
      {INT64_MAX, 365 * 86400, "year"},
  };
  int64_t d = now > t ? now - t : 0;
  size_t i = 0;
  while (d >= steps[i].below) i++;
  int64_t n = d / steps[i].unit;
  if (i == 0 && n < 1)
    snprintf(buf, len, "Less than a second ago");
  else
    snprintf(buf, len, "%lld %s%s ago", (long long)n, steps[i].name, n == 1 ? "" : "s");
}

static json_t *names_json(const char *const *v, size_t n) {
  json_t *names = json_array();
  for (size_t i = 0; names && i < n; i++) json_array_append_new(names, json_string(v[i]));
  return names;
}

json_t *cli_inspect_json(const struct cairn_image_info *info, json_t *pins) {
  const struct cairn_image_rec *im = &info->image;
  json_t *layers = json_array();
  for (size_t i = 0; layers && i < info->n_layers; i++)
    json_array_append_new(layers, json_pack("{s:s, s:I, s:I}", "id", info->layers[i].id, "size",
                                            (json_int_t)info->layers[i].size, "entries",
                                            (json_int_t)info->layers[i].entries));
  char created[32], stored[32];
  cli_rfc3339(im->created, created, sizeof(created));
  cli_rfc3339(im->stored, stored, sizeof(stored));
  /* created: the image's (its config's, as podman's Created); stored: when
   * this store got it */
  return json_pack("{s:s, s:o, s:o*, s:o, s:I, s:s, s:s, s:o*, s:b}", "id", im->id, "names",
                   names_json(im->names, im->n_names), "config", json_loads(info->config, 0, NULL),
                   "layers", layers, "size", (json_int_t)im->size, "created", created, "stored",
                   stored, "pins", pins, "pinned", im->pinned);
}

/* config's member key, a new reference, or dflt (taken) if it has none. */
static json_t *config_get(json_t *config, const char *key, json_t *dflt) {
  json_t *v = json_is_object(config) ? json_object_get(config, key) : NULL;
  if (!v) return dflt;
  json_decref(dflt);
  return json_incref(v);
}

json_t *cli_inspect_podman_json(const struct cairn_image_info *info) {
  const struct cairn_image_rec *im = &info->image;
  json_t *config = json_loads(info->config, 0, NULL);
  json_t *cc = json_is_object(config) ? json_object_get(config, "config") : NULL;
  json_t *rootfs = json_is_object(config) ? json_object_get(config, "rootfs") : NULL;
  /* podman's Config has every field, empty if the image has none */
  json_t *pc = json_is_object(cc) ? json_deep_copy(cc) : json_object();
  static const char *const lists[] = {"Cmd", "Entrypoint", "Env"};
  for (size_t i = 0; pc && i < sizeof lists / sizeof *lists; i++)
    if (!json_object_get(pc, lists[i])) json_object_set_new(pc, lists[i], json_array());
  static const char *const strs[] = {"User", "WorkingDir", "StopSignal"};
  for (size_t i = 0; pc && i < sizeof strs / sizeof *strs; i++)
    if (!json_object_get(pc, strs[i])) json_object_set_new(pc, strs[i], json_string(""));
  static const char *const maps[] = {"Labels", "ExposedPorts", "Volumes"};
  for (size_t i = 0; pc && i < sizeof maps / sizeof *maps; i++)
    if (!json_object_get(pc, maps[i])) json_object_set_new(pc, maps[i], json_object());
  char created[32], digest[80];
  cli_rfc3339(im->created, created, sizeof created);
  snprintf(digest, sizeof digest, "sha256:%s", im->id);
  json_t *o = json_pack(
      "{s:s, s:s, s:o, s:[], s:s, s:o, s:s, s:o, s:o, s:o, s:o, s:o, s:I, s:I, s:{s:o, s:o}, s:o,"
      " s:{}, s:o, s:o}",
      "Id", im->id, "Digest", digest, "RepoTags", names_json(im->names, im->n_names), "RepoDigests",
      "Parent", "", "Comment", config_get(config, "comment", json_string("")), "Created", created,
      "Config", pc ? pc : json_object(), "Version",
      config_get(config, "docker_version", json_string("")), "Author",
      config_get(config, "author", json_string("")), "Architecture",
      config_get(config, "architecture", json_string("")), "Os",
      config_get(config, "os", json_string("")), "Size", (json_int_t)im->size, "VirtualSize",
      (json_int_t)im->size, "RootFS", "Type", config_get(rootfs, "type", json_string("layers")),
      "Layers", config_get(rootfs, "diff_ids", json_array()), "Labels",
      config_get(cc, "Labels", json_object()), "Annotations", "History",
      config_get(config, "history", json_array()), "User", config_get(cc, "User", json_string("")));
  if (o && json_is_object(config) && json_object_get(config, "variant"))
    json_object_set(o, "Variant", json_object_get(config, "variant"));
  json_decref(config);
  return o;
}

/* The member of obj whose key is name[0..len), case aside, or NULL. */
static json_t *json_member(json_t *obj, const char *name, size_t len) {
  const char *key;
  json_t *v;
  json_object_foreach(obj, key, v) {
    if (strlen(key) == len && strncasecmp(key, name, len) == 0) return v;
  }
  return NULL;
}

/* The value of the path at f (".A.B", or "." the dot itself) in obj, or
 * NULL; *after: where the path ends. */
static json_t *json_path(json_t *obj, const char *f, const char **after) {
  json_t *v = obj;
  const char *q = f;
  if (q[0] == '.' && !isalnum((unsigned char)q[1]) && q[1] != '_') { /* {{.}} */
    *after = q + 1;
    return obj;
  }
  while (v && *q == '.') { /* .Config.Env: each step a member */
    size_t len = strspn(q + 1, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_0123456789");
    v = len && json_is_object(v) ? json_member(v, q + 1, len) : NULL;
    q += 1 + len;
  }
  *after = q;
  return q == f ? NULL : v;
}

/* The template's keys for an error: "{{.A}} {{.B}}" of obj's members. */
static void json_keys(json_t *obj, json_t *shown, char *keys, size_t size, size_t *o) {
  const char *key;
  json_t *m;
  json_object_foreach(obj, key, m) {
    if (shown && json_member(shown, key, strlen(key))) continue; /* named already */
    if (*o < size) *o += (size_t)snprintf(keys + *o, size - *o, "%s{{.%s}}", *o ? " " : "", key);
  }
}

struct tmpl_ctx {
  const char *cmd, *usage;
  json_t *top, *fallback; /* the keys an error names */
};

/* Prints the template's part [p, stop) with dot (then fallback) as the
 * object its paths start from. Returns the exit code. */
static int tmpl_render(const struct tmpl_ctx *c, const char *p, const char *stop, json_t *dot,
                       json_t *fallback) {
  while (p < stop) {
    if (p[0] == '\\' && p + 1 < stop && (p[1] == 't' || p[1] == 'n')) {
      putchar(p[1] == 't' ? '\t' : '\n');
      p += 2;
      continue;
    }
    if (stop - p < 2 || strncmp(p, "{{", 2) != 0) {
      putchar(*p++);
      continue;
    }
    const char *f = p + 2 + strspn(p + 2, " ");
    bool as_json = strncmp(f, "json ", 5) == 0, range = strncmp(f, "range ", 6) == 0;
    if (as_json) f += 5 + strspn(f + 5, " ");
    if (range) f += 6 + strspn(f + 6, " ");
    const char *q;
    json_t *v = json_path(dot, f, &q);
    if (!v && fallback) v = json_path(fallback, f, &q);
    const char *end = q + strspn(q, " ");
    const char *body = end + 2, *body_end = NULL;
    if (range && v && strncmp(end, "}}", 2) == 0) { /* {{range .A}}...{{end}}, nested too */
      int depth = 1;
      for (const char *b = body; b < stop && (b = strstr(b, "{{")) && b < stop; b += 2) {
        const char *w = b + 2 + strspn(b + 2, " ");
        if (strncmp(w, "range ", 6) == 0) depth++;
        if (strncmp(w, "end", 3) == 0 && strncmp(w + 3 + strspn(w + 3, " "), "}}", 2) == 0 &&
            --depth == 0) {
          body_end = b;
          break;
        }
      }
    }
    if (!v || strncmp(end, "}}", 2) != 0 || (range && (!body_end || !json_is_array(v)))) {
      const char *close = strstr(p, "}}");
      size_t shown = close ? (size_t)(close - p) + 2 : strlen(p);
      char keys[1024] = "";
      size_t o = 0;
      json_keys(c->top, NULL, keys, sizeof keys, &o);
      if (c->fallback) json_keys(c->fallback, c->top, keys, sizeof keys, &o);
      fflush(stdout);
      if (range && v && strncmp(end, "}}", 2) == 0)
        return report_usage(c->usage, "%s: --format: %.*s: %s", c->cmd, (int)shown, p,
                            body_end ? "not a list" : "no {{end}}");
      return report_usage(c->usage, "%s: --format: %.*s: not a field (fields: %s)", c->cmd,
                          (int)shown, p, keys);
    }
    if (range) {
      size_t i;
      json_t *e;
      json_array_foreach(v, i, e) {
        int code = tmpl_render(c, body, body_end, e, NULL);
        if (code != CAIRN_EXIT_OK) return code;
      }
      p = strstr(body_end, "}}") + 2;
      continue;
    }
    if (json_is_string(v) && !as_json)
      fputs(json_string_value(v), stdout);
    else
      json_dumpf(v, stdout, JSON_COMPACT | JSON_ENCODE_ANY | JSON_PRESERVE_ORDER);
    p = end + 2;
  }
  return CAIRN_EXIT_OK;
}

int cli_json_template_print(const char *cmd, const char *usage, const char *tmpl, json_t *obj,
                            json_t *fallback) {
  struct tmpl_ctx c = {cmd, usage, obj, fallback};
  int code = tmpl_render(&c, tmpl, tmpl + strlen(tmpl), obj, fallback);
  if (code == CAIRN_EXIT_OK) putchar('\n');
  return code;
}

int cli_tls_verify(const char *arg, bool *insecure) {
  if (!arg || strcmp(arg, "true") == 0)
    *insecure = false;
  else if (strcmp(arg, "false") == 0)
    *insecure = true;
  else
    return -1;
  return 0;
}

int cli_parse_seconds(const char *s, int64_t *ms) {
  char *end;
  double v = strtod(s, &end); /* ERANGE: HUGE_VAL or about 0, both taken */
  if (end == s || *end || !(v >= 0)) return -1;
  *ms = v * 1000 < 0x1p63 ? (int64_t)(v * 1000) : INT64_MAX;
  return 0;
}

/* True if a long option of longopts starts with name[0..len) (getopt_long
 * takes abbreviations) and has val. */
static bool long_option_has_val(const struct option *longopts, const char *name, size_t len,
                                int val) {
  for (const struct option *lo = longopts; lo && lo->name; lo++)
    if (strncmp(lo->name, name, len) == 0 && lo->val == val) return true;
  return false;
}

int cli_bad_option(const char *usage, char **argv, int o, const struct option *longopts) {
  /* A long option is the last argument getopt_long took; a short one is
   * only known by optopt (it may sit in a cluster such as -qx). getopt_long
   * sets optopt to 0 for an unknown long option, to its val otherwise. */
  const char *arg = argv[optind - 1];
  size_t len = strcspn(arg, "=");
  bool is_long = strncmp(arg, "--", 2) == 0 && len > 2 &&
                 (optopt == 0 || long_option_has_val(longopts, arg + 2, len - 2, optopt));
  const char *why = o == ':'                               ? "needs a value"
                    : is_long && optopt && arg[len] == '=' ? "takes no value"
                                                           : "unknown option";
  if (is_long && o != ':' && !optopt) { /* unknown: the nearest option, --fromat's --format */
    char typed[64];
    snprintf(typed, sizeof typed, "%.*s", (int)(len - 2), arg + 2);
    const char *near = NULL;
    size_t best = SIZE_MAX;
    for (const struct option *l = longopts; l && l->name; l++) {
      size_t d = cairn_edit_distance(typed, l->name);
      if (d < best && cairn_near(typed, l->name)) {
        best = d;
        near = l->name;
      }
    }
    if (near)
      return report_usage(usage, "%s: %.*s: unknown option (did you mean --%s?)", argv[0], (int)len,
                          arg, near);
  }
  if (is_long) return report_usage(usage, "%s: %.*s: %s", argv[0], (int)len, arg, why);
  return report_usage(usage, "%s: -%c: %s", argv[0], optopt, why);
}

int cli_no_options(int argc, char **argv, const char *usage, bool operands_end) {
  static const struct option none[] = {{0}};
  int o;
  optind = 1;
  if ((o = getopt_long(argc, argv, operands_end ? "+:" : ":", none, NULL)) != -1)
    return cli_bad_option(usage, argv, o, none);
  return CAIRN_EXIT_OK;
}

int cli_listing_flags(int argc, char **argv, const char *usage, int max_operands, bool rows,
                      struct cli_listing *l) {
  static const struct option all[] = {{"json", no_argument, NULL, 'j'},
                                      {"quiet", no_argument, NULL, 'q'},
                                      {"no-trunc", no_argument, NULL, 'n'},
                                      {"format", required_argument, NULL, 'f'},
                                      {0}};
  static const struct option json_only[] = {{"json", no_argument, NULL, 'j'}, {0}};
  const struct option *opts = rows ? all : json_only;
  int o;
  *l = (struct cli_listing){.cmd = argv[0]};
  optind = 1;
  while ((o = getopt_long(argc, argv, rows ? ":q" : ":", opts, NULL)) != -1) {
    switch (o) {
    case 'j': l->json = true; break;
    case 'q': l->quiet = true; break;
    case 'n': l->no_trunc = true; break;
    case 'f': l->format = optarg; break;
    default: return cli_bad_option(usage, argv, o, opts);
    }
  }
  if (l->format && strcmp(l->format, "json") == 0) { /* podman's --format json */
    l->json = true;
    l->format = NULL;
  }
  if (argc - optind > max_operands) return report_usage(usage, "%s: too many arguments", argv[0]);
  return CAIRN_EXIT_OK;
}

const struct cli_command *cli_command_find(const struct cli_command *const *cmds, size_t n,
                                           const char *name) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(cmds[i]->name, name) == 0) return cmds[i];
  return NULL;
}

/* Whether a is b with two neighbouring letters swapped (hodl, hold). */
static bool swapped(const char *a, const char *b) {
  size_t n = strlen(a), i = 0;
  if (n != strlen(b)) return false;
  while (i < n && a[i] == b[i]) i++;
  return i + 1 < n && a[i] == b[i + 1] && a[i + 1] == b[i] && strcmp(a + i + 2, b + i + 2) == 0;
}

const char *cli_command_nearest(const struct cli_command *const *cmds, size_t n, const char *name) {
  const char *best = NULL;
  size_t best_d = SIZE_MAX;
  for (size_t i = 0; i < n; i++) {
    bool sw = swapped(name, cmds[i]->name);
    size_t d = sw ? 1 : cairn_edit_distance(name, cmds[i]->name);
    if (d < best_d && (sw || cairn_near(name, cmds[i]->name))) {
      best = cmds[i]->name;
      best_d = d;
    }
  }
  return best;
}

bool cli_wants_help(int argc, char **argv) {
  for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++)
    if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) return true;
  return false;
}

/* The line after l's (its end if l is the last). */
static const char *line_next(const char *l) {
  const char *nl = strchr(l, '\n');
  return nl ? nl + 1 : l + strlen(l);
}

/* Prints the "FLAG\tMEANING\n" lines of each of lists (NULLs skipped) as
 * one aligned table. */
static void options_print(const char *const *lists, size_t n) {
  int width = 0;
  for (size_t i = 0; i < n; i++)
    for (const char *l = lists[i]; l && *l; l = line_next(l)) {
      int w = (int)strcspn(l, "\t");
      if (w > width) width = w;
    }
  printf("\noptions:\n");
  for (size_t i = 0; i < n; i++)
    for (const char *l = lists[i]; l && *l; l = line_next(l)) {
      int w = (int)strcspn(l, "\t");
      printf("  %-*.*s  %.*s\n", width, w, l, (int)strcspn(l + w + 1, "\n"), l + w + 1);
    }
}

void cli_command_help(const struct cli_command *cmd) {
  const char *const lists[] = {cmd->options, "-h, --help\tshow this help and exit\n"};
  printf("usage: %s\n\n%s\n", cmd->usage, cmd->summary);
  options_print(lists, 2);
}

void cli_program_help(const char *usage, const struct cli_command *const *cmds, size_t n,
                      const char *options) {
  int width = 0;
  for (size_t i = 0; i < n; i++)
    if ((int)strlen(cmds[i]->name) > width) width = (int)strlen(cmds[i]->name);
  printf("usage: %s\n\ncommands:\n", usage);
  for (size_t i = 0; i < n; i++) { /* the summary's first sentence, on one line */
    const char *s = cmds[i]->summary;
    size_t len = 0;
    while (s[len] && !(s[len] == '.' && (s[len + 1] == ' ' || s[len + 1] == '\n' || !s[len + 1])))
      len++;
    printf("  %-*s  ", width, cmds[i]->name);
    for (size_t k = 0; k <= len && s[k]; k++) putchar(s[k] == '\n' ? ' ' : s[k]);
    putchar('\n');
  }
  options_print(&options, 1);
  char dir[4096];
  printf("\nThe store is --store DIR, else $CAIRN_STORE, else the store of cairn.conf\n"
         "(~/.config/cairn/cairn.conf, else /etc/cairn/cairn.conf), else /var/lib/cairn\n"
         "for root, else ${XDG_DATA_HOME:-~/.local/share}/cairn for other users.\n");
  if (cairn_store_default_dir(dir, sizeof(dir)) == 0) printf("Default here: %s\n", dir);
}

int cli_help_run(const struct cli_command *self, const struct cli_command *const *cmds, size_t n,
                 void (*program_help)(void), const char *what, int argc, char **argv) {
  if (argc == 1) {
    program_help();
    return CAIRN_EXIT_OK;
  }
  const struct cli_command *cmd = argc == 2 ? cli_command_find(cmds, n, argv[1]) : NULL;
  if (!cmd)
    return argc == 2 ? report_usage(self->usage, "help: %s: unknown %s", argv[1], what)
                     : report_usage(self->usage, "help: takes at most one %s", what);
  cli_command_help(cmd);
  return CAIRN_EXIT_OK;
}
