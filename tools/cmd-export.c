/*
 * cmd-export.c — `cairn export IMAGE`: the image's merged root filesystem
 * as a tar on stdout (never to a terminal), its progress on stderr
 * (progress.h) unless --quiet.
 */
#include "commands.h"
#include "progress.h"

#include <unistd.h>

#define USAGE "cairn export [-q | --no-progress] IMAGE > FILE.tar"

static int export_run(struct cli *c, int argc, char **argv) {
  bool quiet = false;
  int code = cli_quiet_flag(argc, argv, USAGE, &quiet);
  if (code != CAIRN_EXIT_OK) return code;
  if (argc - optind != 1) return report_usage(USAGE, "export: needs one image");
  if (isatty(STDOUT_FILENO))
    return report_usage(USAGE, "export: refusing to write a tar to a terminal; redirect stdout");
  cairn_store *st;
  code = cli_store(c, &st);
  if (code != CAIRN_EXIT_OK) return code;
  cairn_id id;
  int r = cairn_image_resolve(st, argv[optind], id);
  struct progress_hook hook = {
      .p = progress_new(quiet), .labels = (const char *const *)argv + optind, .n_labels = 1};
  cairn_store_set_progress(st, progress_hook, &hook);
  if (r == 0) r = cairn_export(st, id, STDOUT_FILENO);
  cairn_store_set_progress(st, NULL, NULL);
  progress_free(hook.p);
  return r < 0 ? report_fail(r, "%s: %s", argv[optind], report_why(st, r)) : CAIRN_EXIT_OK;
}

const struct cli_command cmd_export = {
    .name = "export",
    .run = export_run,
    .usage = USAGE,
    .summary = "Write IMAGE's merged root filesystem as a tar to stdout (never to a terminal).",
    .options = "-q, --quiet\tno progress on stderr (export prints no id)\n"
               "--no-progress\tthe same\n",
};
