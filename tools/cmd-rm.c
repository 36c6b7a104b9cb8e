/*
 * cmd-rm.c — `cairn rm [--wait[=SECONDS]] IMAGE...`: removes names or
 * images. A pinned image is exit 4 naming every holder, unless --wait,
 * which waits for the pins to go (for ever, or SECONDS) and tries again.
 * Like every option with a value, --wait takes it as --wait=SECONDS or
 * --wait SECONDS: an argument after a bare --wait that reads as a number of
 * seconds is its value (`--wait -- 10` waits for ever for an image 10).
 */
#include "commands.h"

#include <getopt.h>
#include <stdio.h>
#include <time.h>

#define USAGE "cairn rm [--wait [SECONDS]] IMAGE..."

static int64_t monotonic_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* The exit code of rm's answer r for ref, reported if it failed. */
static int rm_result(cairn_store *st, int r, const char *ref) {
  return r < 0 ? report_fail(r, "%s: %s", ref, report_why(st, r)) : CAIRN_EXIT_OK;
}

/* wait_ms < 0 waits for ever. */
static int rm_one(cairn_store *st, const char *ref, bool wait, int64_t wait_ms) {
  int64_t start = monotonic_ms();
  for (;;) {
    int r = cairn_rm(st, ref);
    if (r != -EBUSY || !wait) return rm_result(st, r, ref);
    cairn_id id;
    if (cairn_image_resolve(st, ref, id) < 0) continue;
    int64_t left = wait_ms < 0 ? -1 : wait_ms - (monotonic_ms() - start);
    r = wait_ms >= 0 && left <= 0 ? -ETIMEDOUT : cairn_pin_wait_free(st, id, left);
    if (r == -ETIMEDOUT) /* the holders as they are now */
      return rm_result(st, cairn_rm(st, ref), ref);
    if (r < 0) return rm_result(st, r, ref);
  }
}

static int rm_run(struct cli *c, int argc, char **argv) {
  static const struct option opts[] = {{"wait", optional_argument, NULL, 'w'}, {0}};
  bool wait = false;
  int64_t wait_ms = -1;
  int o;
  optind = 1;
  while ((o = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
    if (o != 'w') return cli_bad_option(USAGE, argv, o, opts);
    wait = true;
    if (optarg && cli_parse_seconds(optarg, &wait_ms) < 0)
      return report_usage(USAGE, "rm: --wait=%s: not a number of seconds", optarg);
    if (!optarg && optind < argc && cli_parse_seconds(argv[optind], &wait_ms) == 0) optind++;
  }
  if (optind == argc) return report_usage(USAGE, "rm: needs at least one image");
  cairn_store *st;
  int worst = cli_store(c, &st);
  if (worst != CAIRN_EXIT_OK) return worst;
  for (int i = optind; i < argc; i++) {
    int code = rm_one(st, argv[i], wait, wait_ms);
    if (code > worst) worst = code;
  }
  return worst;
}

const struct cli_command cmd_rm = {
    .name = "rm",
    .run = rm_run,
    .usage = USAGE,
    .summary = "Remove names or images, with the layers no other image uses.\n"
               "A name of an image that has other names only loses that name; the image goes\n"
               "with its last name or its id. A pinned image is refused (exit 4) naming its\n"
               "holders.",
    .options = "--wait [SECONDS]\twait for the pins to go (for ever, or SECONDS), then remove;\n"
               "\talso --wait=SECONDS (--wait -- 10: for ever, for an image named 10)\n",
};
