/*
 * cli.c — shared front-end helpers: see cli.h.
 */
#include "cli.h"
#include "version.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <libgen.h>
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
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) {
    self[n] = '\0';
    snprintf(out, len, "%s/cairnfs", dirname(self));
    if (access(out, X_OK) == 0) return;
  }
  snprintf(out, len, "cairnfs");
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

int cli_store(struct cli *c, cairn_store **st) {
  if (!c->st) {
    const cairn_config *cfg = NULL;
    char dir[PATH_MAX];
    int code = cli_config(c, &cfg);
    if (code != CAIRN_EXIT_OK) return code;
    if (!c->store_dir && cairn_store_dir_pick(cfg, dir, sizeof(dir), NULL) < 0)
      return report_fail(-ENOENT, "store: cannot pick a store directory: set --store or "
                                  "CAIRN_STORE");
    cairn_store *opened;
    int r = cairn_store_open(c->store_dir ? c->store_dir : dir, &opened);
    if (r < 0) {
      int code = report_fail(r, "store: %s", report_why(opened, r));
      cairn_store_close(opened);
      return code;
    }
    c->st = opened;
  }
  *st = c->st;
  return CAIRN_EXIT_OK;
}

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

/* A time of a JSON row (RFC 3339, UTC) as a table says it: "3 minutes
 * ago"; anything else as it is. */
static void time_cell(const char *s, char *buf, size_t len) {
  static char last[32], last_cell[64]; /* a column repeats its times */
  if (strcmp(s, last) != 0) {
    struct tm tm = {0};
    const char *end = strptime(s, "%Y-%m-%dT%H:%M:%SZ", &tm);
    if (!end || *end)
      snprintf(last_cell, sizeof(last_cell), "%s", s);
    else
      cli_time_ago((int64_t)timegm(&tm), (int64_t)time(NULL), last_cell, sizeof(last_cell));
    snprintf(last, sizeof(last), "%s", s);
  }
  snprintf(buf, len, "%s", last_cell);
}

static void cell_format(const char *key, json_t *v, bool no_trunc, char *buf, size_t len) {
  buf[0] = '\0';
  if (json_is_string(v) && (strcmp(key, "created") == 0 || strcmp(key, "since") == 0)) {
    time_cell(json_string_value(v), buf, len);
  } else if (json_is_string(v)) {
    const char *s = json_string_value(v);
    size_t n = strlen(s);
    if (!no_trunc && n == 64 &&
        (strcmp(key, "id") == 0 || strcmp(key, "target") == 0 || strcmp(key, "image") == 0))
      n = 12; /* an id: its short form */
    if (n >= len) n = len - 1;
    memcpy(buf, s, n); /* not snprintf: tables format every cell of thousands of rows */
    buf[n] = '\0';
  } else if (json_is_integer(v) && strcmp(key, "size") == 0) {
    cairn_human_size((uint64_t)json_integer_value(v), buf, len);
  } else if (json_is_integer(v)) {
    snprintf(buf, len, "%lld", (long long)json_integer_value(v));
  } else if (json_is_boolean(v)) {
    snprintf(buf, len, "%s", json_is_true(v) ? "yes" : "no");
  } else if (json_is_array(v)) {
    size_t i, o = 0;
    json_t *x;
    json_array_foreach(v, i, x) o += (size_t)snprintf(buf + o, o < len ? len - o : 0, "%s%s",
                                                      i ? "," : "", json_string_value(x));
    if (json_array_size(v) == 0) snprintf(buf, len, "<none>");
  }
}

/* The key of column "KEY:HEADER" into key. */
static void column_key(const char *column, char *key, size_t len) {
  snprintf(key, len, "%.*s", (int)(strchr(column, ':') - column), column);
}

/* Prints a cell padded to width (the last of a row: no padding, a newline). */
static void cell_print(const char *cell, size_t width, bool last) {
  static const char spaces[] = "                                                                ";
  fputs(cell, stdout);
  if (last) {
    putchar('\n');
    return;
  }
  for (size_t pad = width + 2 - strlen(cell); pad > 0;) {
    size_t k = pad < sizeof(spaces) - 1 ? pad : sizeof(spaces) - 1;
    fwrite(spaces, 1, k, stdout);
    pad -= k;
  }
}

static void print_table(json_t *rows, const char *const *columns, size_t n, bool no_trunc) {
  size_t width[16] = {0}, cols = n < 16 ? n : 16, n_rows = json_array_size(rows);
  char cell[1024], key[16][64];
  for (size_t c = 0; c < cols; c++) {
    width[c] = strlen(strchr(columns[c], ':') + 1);
    column_key(columns[c], key[c], sizeof(key[c]));
  }
  /* Each cell is formatted once (a time is parsed) and kept, in one buffer,
   * for the second pass; without memory for that, formatted again. */
  size_t *at = n_rows ? malloc(n_rows * cols * sizeof(*at)) : NULL;
  char *text = NULL;
  size_t used = 0, cap = 0;
  size_t i;
  json_t *row;
  json_array_foreach(rows, i, row) {
    for (size_t c = 0; c < cols; c++) {
      cell_format(key[c], json_object_get(row, key[c]), no_trunc, cell, sizeof(cell));
      size_t len = strlen(cell);
      if (len > width[c]) width[c] = len;
      if (at && used + len + 1 > cap) {
        char *t = realloc(text, cap = (used + len + 1) * 2);
        if (!t) {
          free(at);
          at = NULL;
        }
        text = t ? t : text;
      }
      if (!at) continue;
      memcpy(text + used, cell, len + 1);
      at[i * cols + c] = used;
      used += len + 1;
    }
  }
  for (size_t c = 0; c < cols; c++)
    cell_print(strchr(columns[c], ':') + 1, width[c], c + 1 == cols);
  json_array_foreach(rows, i, row) {
    for (size_t c = 0; c < cols; c++) {
      if (!at) cell_format(key[c], json_object_get(row, key[c]), no_trunc, cell, sizeof(cell));
      cell_print(at ? text + at[i * cols + c] : cell, width[c], c + 1 == cols);
    }
  }
  free(at);
  free(text);
}

/* The column of columns whose key is field[0..len), case aside ("ID" is
 * id), or NULL. */
static const char *template_column(const char *field, size_t len, const char *const *columns,
                                   size_t n) {
  for (size_t c = 0; c < n; c++)
    if ((size_t)(strchr(columns[c], ':') - columns[c]) == len &&
        strncasecmp(columns[c], field, len) == 0)
      return columns[c];
  return NULL;
}

/* Prints row by the template (row NULL: only checks it). Returns 0, or -1
 * for a bad {{...}} of which it prints the usage error. */
static int template_print(const struct cli_listing *l, json_t *row, const char *const *columns,
                          size_t n, const char *usage) {
  const char *tpl = l->format;
  char cell[1024], key[64];
  for (const char *p = tpl; *p;) {
    if (p[0] == '\\' && (p[1] == 't' || p[1] == 'n')) { /* as podman takes them */
      if (row) putchar(p[1] == 't' ? '\t' : '\n');
      p += 2;
      continue;
    }
    if (strncmp(p, "{{", 2) != 0) {
      if (row) putchar(*p);
      p++;
      continue;
    }
    const char *f = p + 2 + strspn(p + 2, " ");
    size_t len =
        *f == '.' ? strspn(f + 1, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_") : 0;
    const char *end = f + 1 + len + strspn(f + 1 + len, " ");
    const char *col = len ? template_column(f + 1, len, columns, n) : NULL;
    if (!col || strncmp(end, "}}", 2) != 0) {
      size_t shown = strstr(p, "}}") ? (size_t)(strstr(p, "}}") - p) + 2 : strlen(p);
      char fields[256] = "";
      for (size_t c = 0, o = 0; c < n && o < sizeof(fields); c++) {
        column_key(columns[c], key, sizeof(key));
        for (size_t k = 0; key[k] && (k == 0 || strlen(key) <= 2); k++) /* ID, Names */
          key[k] = (char)toupper((unsigned char)key[k]);
        o += (size_t)snprintf(fields + o, sizeof(fields) - o, "%s{{.%s}}", c ? " " : "", key);
      }
      report_usage(usage, "%s: --format: %.*s: not a field (fields: %s)", l->cmd, (int)shown, p,
                   fields);
      return -1;
    }
    if (row) {
      column_key(col, key, sizeof(key));
      cell_format(key, json_object_get(row, key), l->no_trunc, cell, sizeof(cell));
      fputs(cell, stdout);
    }
    p = end + 2;
  }
  if (row) putchar('\n');
  return 0;
}

int cli_listing_print(const struct cli_listing *l, const char *usage, json_t *rows,
                      const char *const *columns, size_t n) {
  size_t i;
  json_t *row;
  if (l->json) {
    cli_print_json(rows);
  } else if (l->format) {
    if (template_print(l, NULL, columns, n, usage) < 0) return CAIRN_EXIT_USAGE;
    json_array_foreach(rows, i, row) template_print(l, row, columns, n, usage);
  } else if (l->quiet) {
    char cell[1024], key[64];
    column_key(columns[0], key, sizeof(key));
    for (size_t c = 0; c < n; c++) /* the ids if there are, else the first column */
      if (strncmp(columns[c], "id:", 3) == 0 || strncmp(columns[c], "target:", 7) == 0)
        column_key(columns[c], key, sizeof(key));
    json_array_foreach(rows, i, row) {
      cell_format(key, json_object_get(row, key), l->no_trunc, cell, sizeof(cell));
      printf("%s\n", cell);
    }
  } else {
    print_table(rows, columns, n, l->no_trunc);
  }
  return CAIRN_EXIT_OK;
}

/* Adds name to the sorted array of id in index, once. */
static int index_add(json_t *index, const char *id, const char *name) {
  json_t *names = json_object_get(index, id);
  if (!names && (json_object_set_new(index, id, names = json_array()) < 0 || !names))
    return -ENOMEM;
  size_t i;
  json_t *x;
  json_array_foreach(names, i, x) {
    int cmp = strcmp(json_string_value(x), name);
    if (cmp == 0) return 0;
    if (cmp > 0) break;
  }
  return json_array_insert_new(names, i, json_string(name)) == 0 ? 0 : -ENOMEM;
}

static int index_name(const char *target, const char *name, void *index) {
  return index_add(index, target, name);
}

int cli_rows_add_names(cairn_store *st, json_t *rows, const char *key) {
  json_t *index = json_object();
  int r = index ? cairn_names_foreach(st, index_name, index) : -ENOMEM;
  size_t i;
  json_t *row;
  json_array_foreach(rows, i, row) {
    if (r < 0) break;
    json_t *names = json_object_get(index, json_string_value(json_object_get(row, key)));
    if (json_object_set_new(row, "names", names ? json_incref(names) : json_array()) < 0)
      r = -ENOMEM;
  }
  json_decref(index);
  return r;
}

static int row_append(json_t *rows, json_t *row) {
  return row && json_array_append_new(rows, row) == 0 ? 0 : -ENOMEM;
}

static json_t *names_json(const char *const *v, size_t n) {
  json_t *names = json_array();
  for (size_t i = 0; names && i < n; i++) json_array_append_new(names, json_string(v[i]));
  return names;
}

/* Sets key (ASCII) to v in row, taking v; false on ENOMEM (v NULL too). */
static bool row_set(json_t *row, const char *key, json_t *v) {
  return v && json_object_set_new_nocheck(row, key, v) == 0;
}

int cli_pin_row(const struct cairn_pin_rec *p, void *rows) {
  char since[32] = "";
  if (p->since > 0) cli_rfc3339(p->since, since, sizeof(since));
  /* Set one by one, ASCII unchecked: a listing of 10,000 pins builds
   * 10,000 rows (json_pack parses its format and checks every string). */
  json_t *row = json_object();
  if (row &&
      !(row_set(row, "target", json_string_nocheck(p->target)) &&
        row_set(row, "kind", json_string_nocheck(p->kind == CAIRN_PIN_IMAGE ? "image" : "layer")) &&
        row_set(row, "pid", json_integer(p->pid)) &&
        row_set(row, "command", json_string(p->command)) &&
        row_set(row, "purpose", json_string(p->purpose)) &&
        row_set(row, "since", p->since > 0 ? json_string_nocheck(since) : json_null()) &&
        row_set(row, "stale", json_boolean(p->stale)))) {
    json_decref(row);
    row = NULL;
  }
  if (row && p->locker_gone) {
    json_t *held_by = json_array();
    for (size_t i = 0; held_by && i < p->n_held_by; i++)
      json_array_append_new(held_by, json_integer(p->held_by[i]));
    json_object_set_new(row, "held_by", held_by);
  }
  return row_append(rows, row);
}

int cli_mount_row(const struct cairn_mount_rec *m, void *rows) {
  static const char *const states[] = {[CAIRN_MOUNT_LIVE] = "live",
                                       [CAIRN_MOUNT_DETACHED] = "detached",
                                       [CAIRN_MOUNT_STALE] = "stale",
                                       [CAIRN_MOUNT_RESTARTING] = "restarting"};
  return row_append(rows, json_pack("{s:s, s:s, s:i, s:s, s:b, s:s}", "dir", m->dir, "image",
                                    m->image, "pid", (int)m->pid, "state", states[m->state], "rw",
                                    m->rw, "dev", m->dev));
}

int cli_image_row(const struct cairn_image_rec *im, void *rows) {
  char created[32];
  cli_rfc3339(im->created, created, sizeof(created));
  return row_append(rows,
                    json_pack("{s:s, s:o, s:i, s:I, s:s, s:b}", "id", im->id, "names",
                              names_json(im->names, im->n_names), "layers", (int)im->layers, "size",
                              (json_int_t)im->size, "created", created, "pinned", im->pinned));
}

int cli_layer_row(const struct cairn_layer_rec *l, void *rows) {
  return row_append(rows, json_pack("{s:s, s:I, s:I, s:i, s:b}", "id", l->id, "size",
                                    (json_int_t)l->size, "entries", (json_int_t)l->entries,
                                    "images", (int)l->images, "pinned", l->pinned));
}

json_t *cli_inspect_json(const struct cairn_image_info *info, json_t *pins) {
  const struct cairn_image_rec *im = &info->image;
  json_t *layers = json_array();
  for (size_t i = 0; layers && i < info->n_layers; i++)
    json_array_append_new(layers, json_pack("{s:s, s:I, s:I}", "id", info->layers[i].id, "size",
                                            (json_int_t)info->layers[i].size, "entries",
                                            (json_int_t)info->layers[i].entries));
  char created[32];
  cli_rfc3339(im->created, created, sizeof(created));
  return json_pack("{s:s, s:o, s:o*, s:o, s:I, s:s, s:o*, s:b}", "id", im->id, "names",
                   names_json(im->names, im->n_names), "config", json_loads(info->config, 0, NULL),
                   "layers", layers, "size", (json_int_t)im->size, "created", created, "pins", pins,
                   "pinned", im->pinned);
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

int cli_quiet_flag(int argc, char **argv, const char *usage, bool *quiet) {
  static const struct option opts[] = {{"quiet", no_argument, NULL, 'q'}, {0}};
  int o;
  *quiet = false;
  optind = 1;
  while ((o = getopt_long(argc, argv, ":q", opts, NULL)) != -1) {
    if (o != 'q') return cli_bad_option(usage, argv, o, opts);
    *quiet = true;
  }
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
  for (size_t i = 0; i < n; i++) /* the summary's first line */
    printf("  %-*s  %.*s\n", width, cmds[i]->name, (int)strcspn(cmds[i]->summary, "\n"),
           cmds[i]->summary);
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
