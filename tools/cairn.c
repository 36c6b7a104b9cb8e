/*
 * cairn.c — the `cairn` admin command: takes --store out of argv and
 * dispatches to one function per command (tools/cmd-*.c). Every command
 * answers -h/--help, as does `cairn help [COMMAND]`.
 */
#include "commands.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>

const char *report_prog = "cairn";

#define USAGE "cairn [--store DIR] COMMAND [ARGS]"

static int help_run(struct cli *c, int argc, char **argv);

static const struct cli_command cmd_help = {
    .name = "help",
    .run = help_run,
    .usage = "cairn help [COMMAND]",
    .summary = "List the commands, or show COMMAND's help (as cairn COMMAND --help).",
};

static const struct cli_command cmd_version = {
    .name = "version",
    .run = cli_version_run,
    .usage = "cairn version",
    .summary = "Print cairn's version (as cairn --version).",
};

static const struct cli_command *const commands[] = {
    &cmd_import, &cmd_images, &cmd_layers, &cmd_inspect, &cmd_rm,     &cmd_gc,
    &cmd_export, &cmd_fsck,   &cmd_pull,   &cmd_mount,   &cmd_umount, &cmd_mounts,
    &cmd_commit, &cmd_df,     &cmd_info,   &cmd_help,   &cmd_version,
};
#define N_COMMANDS (sizeof(commands) / sizeof(commands[0]))

static void program_help(void) {
  cli_program_help(USAGE "\n       cairn COMMAND --help | cairn help [COMMAND]", commands,
                   N_COMMANDS,
                   "--store DIR\tthe store to use (see below)\n"
                   "-h, --help\tshow this help and exit\n"
                   "--version\tprint the version and exit\n");
}

static int help_run(struct cli *c, int argc, char **argv) {
  (void)c;
  return cli_help_run(&cmd_help, commands, N_COMMANDS, program_help, "command", argc, argv);
}

int main(int argc, char **argv) {
  struct cli c = {0};
  opterr = 0; /* a refused option gets one line, from cli_bad_option */
  if (cli_take_store_option(&c, &argc, argv) < 0)
    return report_usage(USAGE, "--store: needs a directory");
  if (argc < 2) return report_usage(USAGE, "needs a command (cairn --help lists them)");
  if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
    program_help();
    return CAIRN_EXIT_OK;
  }
  if (strcmp(argv[1], "--version") == 0) return cli_version_run(&c, argc - 1, argv + 1);
  const struct cli_command *cmd = cli_command_find(commands, N_COMMANDS, argv[1]);
  if (!cmd)
    return report_usage(USAGE " (cairn --help lists the commands)", "%s: unknown command", argv[1]);
  if (cli_wants_help(argc - 1, argv + 1)) {
    cli_command_help(cmd);
    return CAIRN_EXIT_OK;
  }
  int code = cmd->run(&c, argc - 1, argv + 1);
  cli_close(&c);
  return code;
}
