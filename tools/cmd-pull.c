/*
 * cmd-pull.c — `cairn pull SOURCE [NAME[:TAG]]`: parses options, calls
 * cairn_pull, and shows progress: on a terminal one redrawn line per layer
 * (bytes, rate, reused or downloaded), otherwise one line per layer as it
 * finishes; --quiet shows none. The image id goes to stdout.
 */
#include "commands.h"

#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PULL_USAGE                                                                                 \
  "cairn pull [--platform OS/ARCH[/VARIANT]] [--creds USER:PASS] [--insecure] [--jobs N]\n"        \
  "                  [--cert-dir DIR] [--retries N] [--quiet] SOURCE [NAME[:TAG]]"

struct pull_view {
  bool tty, quiet;
  pthread_mutex_t lock;
  size_t drawn;    /* lines of the live display on screen */
  double *started; /* per layer: when bytes began to arrive */
  bool *announced; /* per layer: its final line was printed */
  size_t n;
  double last_draw;
};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void layer_line(struct pull_view *v, const cairn_pull_layer *l, size_t i, char *buf,
                       size_t len) {
  char have[32], total[32], rate[32] = "";
  cairn_human_size(l->fetched, have, sizeof(have));
  cairn_human_size(l->size, total, sizeof(total));
  double t = v->started[i] > 0 ? now_s() - v->started[i] : 0;
  if (t > 0.05) {
    cairn_human_size((uint64_t)((double)l->fetched / t + 0.5), rate, sizeof(rate));
    strcat(rate, "/s");
  }
  const char *id = l->diff_id;
  switch (l->state) {
  case CAIRN_PULL_REUSED: snprintf(buf, len, "%.12s  reused (already stored)", id); break;
  case CAIRN_PULL_WAITING: snprintf(buf, len, "%.12s  waiting  %s", id, total); break;
  case CAIRN_PULL_FETCHING:
    snprintf(buf, len, "%.12s  fetching %s / %s  %s", id, have, total, rate);
    break;
  case CAIRN_PULL_STORING: snprintf(buf, len, "%.12s  storing  %s", id, total); break;
  case CAIRN_PULL_DONE: snprintf(buf, len, "%.12s  downloaded %s in %.1fs", id, total, t); break;
  }
}

static int view_init(struct pull_view *v, size_t n) {
  if (v->started) return 0;
  v->started = calloc(n ? n : 1, sizeof(*v->started));
  v->announced = calloc(n ? n : 1, sizeof(*v->announced));
  v->n = n;
  return v->started && v->announced ? 0 : -1;
}

static void on_progress(const cairn_pull_layer *layers, size_t n, void *arg) {
  struct pull_view *v = arg;
  char line[256];
  if (v->quiet) return;
  pthread_mutex_lock(&v->lock);
  if (view_init(v, n) < 0) goto out;
  for (size_t i = 0; i < n; i++)
    if (v->started[i] == 0 && layers[i].state >= CAIRN_PULL_FETCHING) v->started[i] = now_s();
  if (v->tty) {
    bool settled = true; /* the last frame is always drawn */
    for (size_t i = 0; i < n; i++) settled = settled && layers[i].state >= CAIRN_PULL_REUSED;
    if (!settled && v->drawn && now_s() - v->last_draw < 0.1) goto out;
    v->last_draw = now_s();
    if (v->drawn) fprintf(stderr, "\033[%zuA", v->drawn);
    for (size_t i = 0; i < n; i++) {
      layer_line(v, &layers[i], i, line, sizeof(line));
      fprintf(stderr, "\r\033[K%s\n", line);
    }
    v->drawn = n;
  } else {
    for (size_t i = 0; i < n; i++) {
      if (v->announced[i] || layers[i].state < CAIRN_PULL_REUSED) continue;
      layer_line(v, &layers[i], i, line, sizeof(line));
      fprintf(stderr, "%s\n", line);
      v->announced[i] = true;
    }
  }
  fflush(stderr);
out:
  pthread_mutex_unlock(&v->lock);
}

static void on_log(const char *msg, void *arg) {
  struct pull_view *v = arg;
  pthread_mutex_lock(&v->lock);
  if (v->tty && v->drawn) {
    fprintf(stderr, "\033[%zuA\r\033[K", v->drawn); /* the display is redrawn below it */
    v->drawn = 0;
  }
  report_notice(msg);
  pthread_mutex_unlock(&v->lock);
}

static int parse_count(const char *s, unsigned max, unsigned *out) {
  char *end;
  unsigned long v = strtoul(s, &end, 10);
  if (!*s || *end || v == 0 || v > max) return -1;
  *out = (unsigned)v;
  return 0;
}

static int pull_run(struct cli *c, int argc, char **argv) {
  static const struct option opts[] = {
      {"platform", required_argument, NULL, 'p'}, {"creds", required_argument, NULL, 'c'},
      {"insecure", no_argument, NULL, 'k'},       {"jobs", required_argument, NULL, 'j'},
      {"retries", required_argument, NULL, 'r'},  {"quiet", no_argument, NULL, 'q'},
      {"cert-dir", required_argument, NULL, 'C'}, {NULL, 0, NULL, 0},
  };
  struct pull_view view = {.tty = isatty(STDERR_FILENO)};
  cairn_pull_opts po = {.progress = on_progress, .log = on_log, .arg = &view};
  int o;
  optind = 1;
  while ((o = getopt_long(argc, argv, ":qj:", opts, NULL)) != -1) {
    switch (o) {
    case 'p': po.platform = optarg; break;
    case 'c':
      if (!strchr(optarg, ':')) return report_usage(PULL_USAGE, "pull: --creds: needs USER:PASS");
      po.creds = optarg;
      break;
    case 'k': po.insecure = true; break;
    case 'C': po.cert_dir = optarg; break;
    case 'j':
      if (parse_count(optarg, 64, &po.jobs) < 0)
        return report_usage(PULL_USAGE, "pull: --jobs: needs a number from 1 to 64");
      break;
    case 'r':
      if (parse_count(optarg, 100, &po.attempts) < 0)
        return report_usage(PULL_USAGE, "pull: --retries: needs a number from 1 to 100 (attempts)");
      break;
    case 'q': view.quiet = true; break;
    default: return cli_bad_option(PULL_USAGE, argv, o, opts);
    }
  }
  if (argc - optind < 1 || argc - optind > 2)
    return report_usage(PULL_USAGE, "pull: needs a SOURCE and at most a NAME");
  const char *source = argv[optind], *name = argc - optind == 2 ? argv[optind + 1] : NULL;

  cairn_store *st;
  int code = cli_store(c, &st);
  if (code != CAIRN_EXIT_OK) return code;
  pthread_mutex_init(&view.lock, NULL);
  cairn_id id;
  int r = cairn_pull(st, source, name, &po, id);
  free(view.started);
  free(view.announced);
  pthread_mutex_destroy(&view.lock);
  if (r < 0) return report_fail(r, "pull %s: %s", source, report_why(st, r));
  printf("%s\n", id);
  return CAIRN_EXIT_OK;
}

const struct cli_command cmd_pull = {
    .name = "pull",
    .run = pull_run,
    .usage = PULL_USAGE,
    .summary =
        "Store an image from a layout, an archive or a registry, and print its id.\n"
        "SOURCE: oci:DIR[:REF] | docker-archive:FILE | docker://[HOST[:PORT]/]REPO[:TAG|@DIGEST]\n"
        "  (no HOST: docker.io, library/ for one component, or registries.conf's first\n"
        "  unqualified-search-registries, as podman)\n"
        "NAME[:TAG]: the image's name in the store (default: from SOURCE)",
    .options = "--platform OS/ARCH[/VARIANT]\tthe platform to pick from an index (default: this "
               "machine's)\n"
               "--creds USER:PASS\tregistry credentials (default: auth.json, as podman)\n"
               "--insecure\tallow plain HTTP and skip TLS checks\n"
               "--cert-dir DIR\tCA certificates (*.crt) and client cert/key for the registry\n"
               "-j, --jobs N\tdownload up to N layers at once (1 to 64)\n"
               "--retries N\tattempts per request on transient errors (1 to 100)\n"
               "-q, --quiet\tno progress on stderr\n",
};
