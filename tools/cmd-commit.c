/*
 * cmd-commit.c — `cairn commit DIR NAME[:TAG]`: the changes of the --rw
 * mount at DIR (its upper layer; a kept one too) as a new layer on top of
 * the mount's image, and a new image named NAME (store/commit.c). Prints
 * the new image's id on stdout, as podman commit does. The mount is not
 * touched and keeps serving.
 */
#include "commands.h"
#include "upper.h"

#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#define USAGE "cairn commit [-q] [-m MESSAGE] DIR NAME[:TAG]"

static int commit_run(struct cli *c, int argc, char **argv) {
  static const struct option opts[] = {{"quiet", no_argument, NULL, 'q'},
                                       {"message", required_argument, NULL, 'm'},
                                       {NULL, 0, NULL, 0}};
  bool quiet = false;
  const char *message = NULL;
  int o;
  optind = 1;
  while ((o = getopt_long(argc, argv, ":qm:", opts, NULL)) != -1) {
    if (o == 'q')
      quiet = true;
    else if (o == 'm')
      message = optarg;
    else
      return cli_bad_option(USAGE, argv, o, opts);
  }
  if (argc - optind != 2) return report_usage(USAGE, "commit: needs a directory and a name");
  const char *dir = argv[optind], *name = argv[optind + 1];
  char normal[512];
  int r = cairn_name_normalize(name, normal, sizeof(normal));
  if (r < 0) return report_usage(USAGE, "commit: %s: not a valid name", name);
  cairn_store *st;
  int code = cli_store(c, &st);
  if (code != CAIRN_EXIT_OK) return code;
  char abs[PATH_MAX];
  r = cairn_mountpoint_resolve(dir, abs, sizeof(abs));
  if (r < 0) return report_fail(r, "commit: %s: %s", dir, strerror(-r));
  struct cli_upper up;
  r = cli_upper_of_dir(st, abs, true, &up);
  if (r == 0 && !up.found) r = cli_upper_of_dir(st, abs, false, &up);
  if (r == 0 && !up.found) r = cairn_fail(st, -ENOENT, "not a --rw mount (no upper layer)");
  if (r < 0) return report_fail(r, "commit: %s: %s", dir, report_why(st, r));
  cairn_id image, layer;
  r = cairn_commit(st, up.id, normal, message, image, layer);
  if (r < 0) return report_fail(r, "commit: %s: %s", dir, report_why(st, r));
  if (!quiet) printf("%s\n", image);
  return CAIRN_EXIT_OK;
}

const struct cli_command cmd_commit = {
    .name = "commit",
    .run = commit_run,
    .usage = USAGE,
    .summary = "Turn the changes of the --rw mount at DIR into a new layer (whiteouts and opaque\n"
               "directories in the OCI form) on top of its image, and a new image NAME whose\n"
               "config is the image's with a history entry; prints the new image's id. The\n"
               "mount keeps serving, unchanged.",
    .options = "-m, --message MESSAGE\tthe history entry's comment\n"
               "-q, --quiet\tprint nothing on success\n",
};
