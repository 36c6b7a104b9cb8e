/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cmd-import.c — `cairn import NAME[:TAG] LAYER.tar[.gz|.zst|.xz]...|-`: an image
 * from layer tarballs, bottom first. Unsafe or corrupt input is exit 5 and
 * commits nothing. Each layer's progress is a line of the display
 * (progress.h). The id goes to stdout; -q/--quiet prints it alone (no
 * progress), as podman import -q does; --no-progress shows no progress.
 */
#include "commands.h"
#include "progress_bar.h"

#include <getopt.h>
#include <stdio.h>

#define USAGE                                                                                      \
  "cairn import [-q] [--no-progress] [-c|--change KEY=VALUE]... NAME[:TAG]\n"                      \
  "       LAYER.tar[.gz|.zst|.xz|.bz2]...|-"

static int import_run(struct cli *c, int argc, char **argv) {
  static const struct option opts[] = {{"quiet", no_argument, NULL, 'q'},
                                       {"no-progress", no_argument, NULL, 'P'},
                                       {"change", required_argument, NULL, 'c'},
                                       {0}};
  bool quiet = false;
  const char *changes[64];
  size_t n_changes = 0;
  int o;
  optind = 1;
  while ((o = getopt_long(argc, argv, "+:qc:", opts, NULL)) != -1) {
    if (o == 'q' || o == 'P')
      quiet = true;
    else if (o == 'c' && n_changes < sizeof(changes) / sizeof(changes[0]))
      changes[n_changes++] = optarg;
    else if (o == 'c')
      return report_usage(USAGE, "import: --change: at most 64");
    else
      return cli_bad_option(USAGE, argv, o, opts);
  }
  if (argc - optind < 2) return report_usage(USAGE, "import: needs a name and at least one layer");
  char name[512];
  if (cairn_name_normalize(argv[optind], name, sizeof(name)) < 0)
    return report_usage(USAGE, "import: %s: not a valid image name", argv[optind]);
  cairn_store *st;
  int code = cli_store_open(c, CAIRN_STORE_CREATE | (quiet ? CLI_STORE_QUIET : 0), &st);
  if (code != CAIRN_EXIT_OK) return code;
  const char *const *layers = (const char *const *)argv + optind + 1;
  size_t n = (size_t)(argc - optind - 1);
  struct progress_hook hook = {.p = progress_new(quiet), .labels = layers, .n_labels = n};
  cairn_store_set_progress(st, progress_hook, &hook);
  cairn_id id;
  int r = cairn_import_files_changes(st, name, layers, n, changes, n_changes, id);
  cairn_store_set_progress(st, NULL, NULL);
  progress_free(hook.p);
  if (r < 0) return report_fail(r, "import: %s", report_why(st, r));
  printf("%s\n", id);
  return CAIRN_EXIT_OK;
}

const struct cli_command cmd_import = {
    .name = "import",
    .run = import_run,
    .usage = USAGE,
    .summary = "Make an image from layer tars, bottom layer first, and print its id.\n"
               "A layer is a tar, plain or compressed (gzip, zstd, xz, bzip2: found from its\n"
               "bytes, not its name); - reads one from the standard input. Its config: linux,\n"
               "the host's architecture, and what --change says, as podman import --change.",
    .options = "-q, --quiet\tprint the image id only (no progress)\n"
               "--no-progress\tno progress on stderr\n"
               "-c, --change KEY=VALUE\tset the config's KEY: CMD or ENTRYPOINT (a JSON array,\n"
               "\t[\"/bin/sh\",\"-c\",\"x\"], else a command run by /bin/sh -c), ENV=K=V,\n"
               "\tWORKDIR=DIR, USER=U, LABEL=K=V, EXPOSE=PORT[/PROTO], STOPSIGNAL=SIG\n",
};
