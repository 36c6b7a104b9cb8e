/*
 * cairn.c — the `cairn` admin command: takes --store out of argv and
 * dispatches to one function per subcommand (tools/cmd-*.c).
 */
#include "commands.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>

const char *report_prog = "cairn";

static const struct command {
  const char *name;
  cmd_fn fn;
  const char *summary;
} commands[] = {
    {"import", cmd_import,
     "import NAME[:TAG] LAYER.tar[.gz|.zst]...   make an image from layer tars"},
    {"images", cmd_images, "images [--json]                             list images"},
    {"layers", cmd_layers, "layers [--json]                             list layers"},
    {"inspect", cmd_inspect, "inspect IMAGE                               config, layers and pins"},
    {"rm", cmd_rm, "rm [--wait[=SECONDS]] IMAGE...              remove names or images"},
    {"gc", cmd_gc, "gc [--dry-run]                              remove what nothing uses"},
    {"export", cmd_export,
     "export IMAGE > FILE.tar                     the merged root filesystem as a tar"},
    {"fsck", cmd_fsck, "fsck [--repair]                             verify blobs and metadata"},
    {"pull", cmd_pull,
     "pull SOURCE [NAME[:TAG]]                    oci:, docker-archive: or docker:// image"},
    {"mount", cmd_mount,
     "mount [--suid] [--dev] IMAGE DIR            serve an image at DIR (cairnfs)"},
    {"umount", cmd_umount,
     "umount DIR                                  stop serving DIR (live or stale)"},
    {"mounts", cmd_mounts,
     "mounts [--json]                             list mounts: live, detached or stale"},
};

static void usage(FILE *f) {
  fprintf(f, "usage: cairn [--store DIR] COMMAND [ARGS]\n\ncommands:\n");
  for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
    fprintf(f, "  %s\n", commands[i].summary);
}

int main(int argc, char **argv) {
  struct cli c = {0};
  opterr = 0; /* a refused option gets one line, from cli_bad_option */
  if (cli_take_store_option(&c, &argc, argv) < 0)
    return report_usage("cairn [--store DIR] COMMAND [ARGS]", "--store: needs a directory");
  if (argc < 2) {
    usage(stderr);
    return CAIRN_EXIT_USAGE;
  }
  if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
      strcmp(argv[1], "help") == 0) {
    usage(stdout);
    return CAIRN_EXIT_OK;
  }
  for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
    if (strcmp(argv[1], commands[i].name) != 0) continue;
    int code = commands[i].fn(&c, argc - 1, argv + 1);
    cli_close(&c);
    return code;
  }
  return report_usage("cairn [--store DIR] COMMAND [ARGS] (cairn --help lists the commands)",
                      "%s: unknown command", argv[1]);
}
