/*
 * cmd-rm.c — `cairn rm [--wait[=SECONDS]] IMAGE...`: removes names or
 * images. A pinned image is exit 4 naming every holder, unless --wait,
 * which waits for the pins to go (for ever, or SECONDS) and tries again.
 */
#include "commands.h"

#include <getopt.h>
#include <stdio.h>
#include <time.h>

#define USAGE "cairn rm [--wait[=SECONDS]] IMAGE..."

static double monotonic_seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int rm_one(struct cli *c, const char *ref, bool wait, double wait_seconds) {
  cairn_store *st = c->st;
  double deadline = monotonic_seconds() + wait_seconds;
  for (;;) {
    int r = cairn_rm(st, ref);
    if (r != -EBUSY || !wait) return r < 0 ? cli_fail(c, r, ref) : 0;
    cairn_id id;
    if (cairn_image_resolve(st, ref, id) < 0) continue;
    double left = wait_seconds < 0 ? -1 : deadline - monotonic_seconds();
    if (wait_seconds >= 0 && left <= 0) return cli_fail(c, -EBUSY, ref);
    r = cairn_pin_wait_free(st, id, left < 0 ? -1 : (int)(left * 1000));
    if (r == -ETIMEDOUT) {
      r = cairn_rm(st, ref); /* report the holders as they are now */
      return r < 0 ? cli_fail(c, r, ref) : 0;
    }
    if (r < 0) return cli_fail(c, r, ref);
  }
}

int cmd_rm(struct cli *c, int argc, char **argv) {
  static const struct option opts[] = {{"wait", optional_argument, NULL, 'w'}, {0}};
  bool wait = false;
  double seconds = -1;
  int o;
  optind = 1;
  while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    if (o != 'w') return cli_bad_option(USAGE, argv);
    wait = true;
    if (optarg && (seconds = cli_parse_seconds(optarg)) < 0)
      return cli_usage(USAGE, "rm: --wait=%s: not a number of seconds", optarg);
  }
  if (optind == argc) return cli_usage(USAGE, "rm: needs at least one image");
  if (!cli_store(c)) return 1;
  int worst = 0;
  for (int i = optind; i < argc; i++) {
    int code = rm_one(c, argv[i], wait, seconds);
    if (code > worst) worst = code;
  }
  return worst;
}
