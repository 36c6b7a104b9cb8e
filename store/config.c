/* SPDX-License-Identifier: Apache-2.0 */
/*
 * config.c — cairn.conf (its files, format and precedence: cairn.h) and
 * the one rule that picks the store directory when none is given, for all
 * three programs: flag (the caller's) > CAIRN_STORE > the user's cairn.conf
 * > the system's > the default.
 *
 * The parser is a small strict one: key = value lines and [registry "HOST"]
 * sections, nothing else. Every line it does not understand is an error
 * naming the file and line, so that a typo is never silently ignored.
 */
#include "libcairn_store.h"

#include <ctype.h>
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>

static void config_why(cairn_config *cfg, const char *path, unsigned line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void config_why(cairn_config *cfg, const char *path, unsigned line, const char *fmt, ...) {
  int n = line ? snprintf(cfg->why, sizeof(cfg->why), "%s:%u: ", path, line)
               : snprintf(cfg->why, sizeof(cfg->why), "%s: ", path);
  va_list ap;
  va_start(ap, fmt);
  if (n >= 0 && (size_t)n < sizeof(cfg->why))
    vsnprintf(cfg->why + n, sizeof(cfg->why) - (size_t)n, fmt, ap);
  va_end(ap);
}

/* s without its leading and trailing blanks (in place). */
static char *trim(char *s) {
  while (isspace((unsigned char)*s)) s++;
  size_t n = strlen(s);
  while (n > 0 && isspace((unsigned char)s[n - 1])) s[--n] = '\0';
  return s;
}

/* A registry host as a section or a mirror names it: HOST[:PORT], with no
 * scheme, path, blank or quote. */
static bool host_valid(const char *h) {
  if (!*h || *h == ':') return false;
  for (const char *p = h; *p; p++)
    if (!(isalnum((unsigned char)*p) || strchr(".-_:[]", *p))) return false;
  return true;
}

const struct cn_config_registry *cn_config_registry(const cairn_config *cfg,
                                                          const char *host) {
  for (size_t i = 0; cfg && i < cfg->n_registries; i++)
    if (strcmp(cfg->registries[i].host, host) == 0) return &cfg->registries[i];
  return NULL;
}

/* The section of host, added if new; NULL if out of memory. */
static struct cn_config_registry *registry_get(cairn_config *cfg, const char *host) {
  struct cn_config_registry *r =
      (struct cn_config_registry *)cn_config_registry(cfg, host);
  if (r) return r;
  struct cn_config_registry *more =
      realloc(cfg->registries, (cfg->n_registries + 1) * sizeof(*more));
  if (!more) return NULL;
  cfg->registries = more;
  r = &more[cfg->n_registries];
  *r = (struct cn_config_registry){.host = strdup(host), .mirrors_from = -1};
  if (!r->host) return NULL;
  cfg->n_registries++;
  return r;
}

static void mirrors_clear(struct cn_config_registry *r) {
  for (size_t i = 0; i < r->n_mirrors; i++) free(r->mirrors[i]);
  free(r->mirrors);
  r->mirrors = NULL;
  r->n_mirrors = 0;
}

/* One "key = value" of file f (its section: reg, or NULL at the top). */
static int config_set(cairn_config *cfg, int f, struct cn_config_registry *reg, const char *key,
                      const char *value, unsigned line) {
  const char *path = cfg->paths[f];
  if (!reg && strcmp(key, "store") == 0) {
    if (value[0] != '/') {
      config_why(cfg, path, line, "store: needs an absolute path, not '%s'", value);
      return -EINVAL;
    }
    free(cfg->store);
    if (!(cfg->store = strdup(value))) return -ENOMEM;
    cfg->store_from = f;
  } else if (!reg && strcmp(key, "pull-jobs") == 0) {
    char *end;
    unsigned long n = strtoul(value, &end, 10);
    if (!isdigit((unsigned char)value[0]) || *end || n < 1 || n > 64) {
      config_why(cfg, path, line, "pull-jobs: needs a number from 1 to 64, not '%s'", value);
      return -EINVAL;
    }
    cfg->pull_jobs = (unsigned)n;
    cfg->pull_jobs_from = f;
  } else if (reg && strcmp(key, "mirror") == 0) {
    if (!host_valid(value)) {
      config_why(cfg, path, line, "mirror: needs HOST[:PORT], not '%s'", value);
      return -EINVAL;
    }
    if (reg->mirrors_from != f) mirrors_clear(reg); /* this file's list replaces another's */
    reg->mirrors_from = f;
    char **more = realloc(reg->mirrors, (reg->n_mirrors + 1) * sizeof(*more));
    if (!more) return -ENOMEM;
    reg->mirrors = more;
    if (!(more[reg->n_mirrors] = strdup(value))) return -ENOMEM;
    reg->n_mirrors++;
  } else if (reg && strcmp(key, "insecure") == 0) {
    if (strcmp(value, "true") != 0 && strcmp(value, "false") != 0) {
      config_why(cfg, path, line, "insecure: needs true or false, not '%s'", value);
      return -EINVAL;
    }
    reg->insecure = strcmp(value, "true") == 0;
  } else {
    config_why(cfg, path, line, "unknown key '%s' (%s)", key,
               reg ? "in a [registry \"HOST\"] section: mirror, insecure"
                   : "before any section: store, pull-jobs");
    return -EINVAL;
  }
  return 0;
}

/* Reads file f of cfg->paths, if it is there. */
static int config_read(cairn_config *cfg, int f) {
  const char *path = cfg->paths[f];
  /* The user's file (f 1) is read only if it is the caller's own, not a
   * symlink: root keeping another user's HOME (sudo -E) reads none of
   * theirs, which could name a store they own. */
  int fd = open(path, O_RDONLY | O_CLOEXEC | (f == 1 ? O_NOFOLLOW | O_NONBLOCK : 0));
  struct stat sb;
  if (fd >= 0 && f == 1 && (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode) || sb.st_uid != geteuid())) {
    close(fd);
    cfg->not_own = true;
    return 0;
  }
  if (fd < 0 && f == 1 && errno == ELOOP) return cfg->not_own = true, 0;
  cairn_autofclose FILE *in = fd >= 0 ? fdopen(fd, "re") : NULL;
  if (!in) {
    int e = errno;
    if (fd >= 0) close(fd);
    if (e == ENOENT || e == ENOTDIR) return 0;
    config_why(cfg, path, 0, "%s", strerror(e));
    return -e;
  }
  cfg->read[f] = true;
  struct cn_config_registry *reg = NULL;
  char buf[4096];
  for (unsigned line = 1; fgets(buf, sizeof(buf), in); line++) {
    if (!strchr(buf, '\n') && !feof(in)) {
      config_why(cfg, path, line, "line too long");
      return -EINVAL;
    }
    char *s = trim(buf);
    if (!*s || *s == '#') continue;
    if (*s == '[') {
      char host[512];
      int end = 0;
      if (sscanf(s, "[registry \"%511[^\"]\"]%n", host, &end) != 1 || s[end] != '\0' ||
          !host_valid(host)) {
        config_why(cfg, path, line, "bad section '%s' (expected [registry \"HOST[:PORT]\"])", s);
        return -EINVAL;
      }
      if (!(reg = registry_get(cfg, host))) return -ENOMEM;
      continue;
    }
    char *eq = strchr(s, '=');
    if (!eq) {
      config_why(cfg, path, line, "expected KEY = VALUE, not '%s'", s);
      return -EINVAL;
    }
    *eq = '\0';
    char *key = trim(s), *value = trim(eq + 1);
    size_t n = strlen(value);
    if (n >= 2 && value[0] == '"' && value[n - 1] == '"') {
      value[n - 1] = '\0';
      value++;
    }
    if (!*key || !*value) {
      config_why(cfg, path, line, "expected KEY = VALUE, with neither empty");
      return -EINVAL;
    }
    int r = config_set(cfg, f, reg, key, value, line);
    if (r < 0) return r;
  }
  if (ferror(in)) {
    config_why(cfg, path, 0, "%s", strerror(EIO));
    return -EIO;
  }
  return 0;
}

int cairn_config_load(cairn_config *cfg) {
  *cfg = (cairn_config){.store_from = -1, .pull_jobs_from = -1};
  const char *sys = secure_getenv("CAIRN_CONFIG_SYSTEM"), *xdg = secure_getenv("XDG_CONFIG_HOME"),
             *home = secure_getenv("HOME");
  cfg->paths[0] = strdup(sys && *sys ? sys : "/etc/cairn/cairn.conf");
  if (xdg && *xdg)
    cfg->paths[1] = cn_xasprintf("%s/cairn/cairn.conf", xdg);
  else if (home && *home)
    cfg->paths[1] = cn_xasprintf("%s/.config/cairn/cairn.conf", home);
  int r = cfg->paths[0] ? 0 : -ENOMEM;
  for (int f = 0; f < 2 && r == 0; f++)
    if (cfg->paths[f]) r = config_read(cfg, f);
  if (r == -ENOMEM) snprintf(cfg->why, sizeof(cfg->why), "out of memory reading cairn.conf");
  return r;
}

void cairn_config_free(cairn_config *cfg) {
  for (size_t i = 0; i < cfg->n_registries; i++) {
    free(cfg->registries[i].host);
    mirrors_clear(&cfg->registries[i]);
  }
  free(cfg->registries);
  free(cfg->store);
  free(cfg->paths[0]);
  free(cfg->paths[1]);
  *cfg = (cairn_config){.store_from = -1, .pull_jobs_from = -1};
}

int cairn_store_dir_pick(const cairn_config *cfg, char *buf, size_t len, const char **origin) {
  const char *env = secure_getenv("CAIRN_STORE"), *from;
  int n;
  if (env && *env)
    n = snprintf(buf, len, "%s", env), from = "CAIRN_STORE";
  else if (cfg && cfg->store)
    n = snprintf(buf, len, "%s", cfg->store), from = cfg->paths[cfg->store_from];
  else if (geteuid() == 0)
    n = snprintf(buf, len, "/var/lib/cairn"), from = "the default for root";
  else {
    const char *xdg = secure_getenv("XDG_DATA_HOME"), *home = secure_getenv("HOME");
    if (xdg && *xdg)
      n = snprintf(buf, len, "%s/cairn", xdg), from = "XDG_DATA_HOME";
    else if (home && *home)
      n = snprintf(buf, len, "%s/.local/share/cairn", home), from = "HOME (~/.local/share)";
    else
      return -ENOENT;
  }
  if (origin) *origin = from;
  return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

int cn_store_default_dir(cairn_store *st, char *buf, size_t len) {
  cairn_config cfg;
  int r = cairn_config_load(&cfg);
  if (r < 0)
    cairn_fail(st, r, "%s", cfg.why);
  else if ((r = cairn_store_dir_pick(&cfg, buf, len, NULL)) < 0)
    cairn_fail(st, r, "cannot pick a store directory: set --store or CAIRN_STORE");
  cairn_config_free(&cfg);
  return r;
}

int cairn_store_default_dir(char *buf, size_t len) { return cn_store_default_dir(NULL, buf, len); }
