/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cmd-fill.c — `cairn fill [-q] IMAGE`: fetches every file a lazy pull
 * (cairn pull --lazy) left pending, through cairn_fill, which pins the
 * image throughout; says on stderr what it fetched unless -q.
 */
#include "commands.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>

#define USAGE "cairn fill [-q | --no-progress] IMAGE"

static void on_log(const char *line, void *arg) {
  (void)arg;
  fprintf(stderr, "cairn: fill: %s\n", line);
}

static int fill_run(struct cli *c, int argc, char **argv) {
  static const struct option opts[] = {
      {"quiet", no_argument, NULL, 'q'}, {"no-progress", no_argument, NULL, 'q'}, {0}};
  bool quiet = false;
  int o;
  optind = 1;
  while ((o = getopt_long(argc, argv, ":q", opts, NULL)) != -1) {
    if (o == 'q')
      quiet = true;
    else
      return cli_bad_option(USAGE, argv, o, opts);
  }
  if (argc - optind != 1) return report_usage(USAGE, "fill: needs one image");
  const char *ref = argv[optind];
  cairn_store *st;
  int code = cli_store(c, &st);
  if (code != CAIRN_EXIT_OK) return code;
  cairn_id id;
  int r = cairn_image_resolve(st, ref, id);
  if (r < 0) return report_fail(r, "%s: %s", ref, report_why(st, r));
  uint64_t files = 0, bytes = 0;
  if ((r = cairn_image_pending(st, id, &files, &bytes)) < 0)
    return report_fail(r, "%s: %s", ref, report_why(st, r));
  cairn_fill_opts fo = {.log = on_log};
  r = cairn_fill(st, ref, &fo, id);
  if (r < 0) return report_fail(r, "fill %s: %s", ref, report_why(st, r));
  if (!quiet) {
    char size[32];
    cairn_human_size(bytes, size, sizeof size);
    fprintf(stderr, "%.12s: %llu files (%s) fetched; the image is complete\n", id,
            (unsigned long long)files, size);
  }
  return CAIRN_EXIT_OK;
}

const struct cli_command cmd_fill = {
    .name = "fill",
    .run = fill_run,
    .usage = USAGE,
    .summary = "Fetch every file of IMAGE that cairn pull --lazy left to fetch on first read,\n"
               "so that IMAGE is complete. Resumable: a fill that was stopped fetches the rest.",
    .options = "-q, --quiet\tsay nothing when done\n"
               "--no-progress\tthe same\n",
};
