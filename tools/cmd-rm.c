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

static int64_t monotonic_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* wait_ms < 0 waits for ever. */
static int rm_one(struct cli *c, const char *ref, bool wait, int64_t wait_ms) {
  cairn_store *st = c->st;
  int64_t start = monotonic_ms();
  for (;;) {
    int r = cairn_rm(st, ref);
    if (r != -EBUSY || !wait) return r < 0 ? cli_fail(c, r, ref) : 0;
    cairn_id id;
    if (cairn_image_resolve(st, ref, id) < 0) continue;
    int64_t left = wait_ms < 0 ? -1 : wait_ms - (monotonic_ms() - start);
    if (wait_ms >= 0 && left <= 0) return cli_fail(c, -EBUSY, ref);
    r = cairn_pin_wait_free(st, id, left);
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
  int64_t wait_ms = -1;
  int o;
  optind = 1;
  while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    if (o != 'w') return cli_bad_option(USAGE, argv);
    wait = true;
    if (optarg && cli_parse_seconds(optarg, &wait_ms) < 0)
      return report_usage(USAGE, "rm: --wait=%s: not a number of seconds", optarg);
  }
  if (optind == argc) return report_usage(USAGE, "rm: needs at least one image");
  if (!cli_store(c)) return 1;
  int worst = 0;
  for (int i = optind; i < argc; i++) {
    int code = rm_one(c, argv[i], wait, wait_ms);
    if (code > worst) worst = code;
  }
  return worst;
}
