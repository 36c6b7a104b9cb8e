/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cairn.c — the `cairn` admin command: takes --store out of argv and
 * dispatches to one function per command (tools/cmd-*.c). Every command
 * answers -h/--help, as does `cairn help [COMMAND]`.
 *
 * It is built twice. The full cairn (LIBEXECDIR/cairn/cairn) has every
 * command. `cairn` (CAIRN_CLI_LIGHT) has those that need only SQLite
 * (and Jansson): mount, umount, mounts, images, rm, gc, ... With
 * --gc-sections and --as-needed it loads 5 shared libraries instead of
 * 47 (libcurl, libarchive, libcrypto and what they need), which took 18 ms
 * warm and 85 ms with cold caches before main; it execs the full cairn,
 * with the argv it was given, for every other command and for the help
 * that lists them all. A command's code and output are the same in both.
 */
#include "commands.h"
#include "self.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

#ifdef CAIRN_CLI_LIGHT
static const struct cli_command *const commands[] = {
    &cmd_images, &cmd_layers, &cmd_inspect, &cmd_history, &cmd_tag,
    &cmd_rm,     &cmd_gc,     &cmd_mount,   &cmd_umount,  &cmd_mounts,
    &cmd_bundle, &cmd_df,     &cmd_info,    &cmd_help,    &cmd_version,
};
#else
static const struct cli_command *const commands[] = {
    &cmd_import, &cmd_images, &cmd_layers, &cmd_inspect, &cmd_history, &cmd_tag,
    &cmd_rm,     &cmd_gc,     &cmd_export, &cmd_fsck,    &cmd_pull,    &cmd_fill,
    &cmd_push,   &cmd_login,  &cmd_logout, &cmd_mount,   &cmd_umount,  &cmd_mounts,
    &cmd_commit, &cmd_bundle, &cmd_df,     &cmd_info,    &cmd_help,    &cmd_version,
};
#endif
#define N_COMMANDS (sizeof(commands) / sizeof(commands[0]))

/* What a podman user types, and what cairn runs for it: an alias (cmd, with
 * opt put first among its arguments) or, where none fits, the cairn way
 * said in a usage error (hint). sub NULL: the word alone; "*": any
 * subcommand that is a cairn command (image tag runs tag). This table is
 * doc/podman.md's, which scripts/check-doc-tables.sh keeps in step. */
static const struct habit {
  const char *word, *sub; /* podman's */
  const char *cmd, *opt;  /* cairn's, or NULL */
  const char *hint;       /* when there is no alias */
} habits[] = {
    {"rmi", NULL, "rm", NULL, NULL},
    {"image", "ls", "images", NULL, NULL},
    {"image", "list", "images", NULL, NULL},
    {"image", "rm", "rm", NULL, NULL},
    {"image", "prune", "rm", "--untagged", NULL},
    {"image", "save", NULL, NULL, "cairn push IMAGE docker-archive:FILE (or oci-archive:FILE)"},
    {"image", "load", NULL, NULL, "cairn pull docker-archive:FILE (or oci-archive:FILE)"},
    {"image", "*", "*", NULL, NULL},
    {"system", "df", "df", NULL, NULL},
    {"system", "info", "info", NULL, NULL},
    {"system", "prune", NULL, NULL, "cairn rm --untagged, then cairn gc"},
    {"save", NULL, NULL, NULL, "cairn push IMAGE docker-archive:FILE (or oci-archive:FILE)"},
    {"load", NULL, NULL, NULL, "cairn pull docker-archive:FILE (or oci-archive:FILE)"},
};

/* Rewrites argv (from argv[1], the command) by the habit it matches, into
 * *out (freed by the caller); 0 if none does, 1 if rewritten, or a usage
 * error's exit code (+ 2) where podman's command has no cairn alias. */
static int habit_apply(int argc, char **argv, int *out_argc, char ***out) {
  for (size_t i = 0; i < sizeof habits / sizeof *habits; i++) {
    const struct habit *h = &habits[i];
    if (strcmp(argv[1], h->word) != 0) continue;
    bool two = h->sub != NULL;
    if (two && (argc < 3 || (strcmp(h->sub, "*") != 0 && strcmp(argv[2], h->sub) != 0))) continue;
    const char *typed = two ? argv[2] : argv[1];
    if (two && strcmp(h->sub, "*") == 0 && !cli_command_find(commands, N_COMMANDS, typed)) continue;
    if (!h->cmd) {
      int code = report_usage(USAGE " (cairn --help lists the commands)",
                              "%s%s%s: no such command; the cairn way: %s", argv[1], two ? " " : "",
                              two ? argv[2] : "", h->hint);
      return code + 2;
    }
    int skip = two ? 3 : 2, n = 0;
    char **v = calloc((size_t)argc + 2, sizeof *v);
    if (!v) return report_fail(-ENOMEM, "out of memory") + 2;
    v[n++] = argv[0];
    v[n++] = (char *)(strcmp(h->cmd, "*") == 0 ? typed : h->cmd);
    if (h->opt) v[n++] = (char *)h->opt;
    for (int k = skip; k < argc; k++) v[n++] = argv[k];
    *out = v;
    *out_argc = n;
    return 1;
  }
  return 0;
}

static void program_help(void) {
  cli_program_help(USAGE "\n       cairn COMMAND --help | cairn help [COMMAND]", commands,
                   N_COMMANDS,
                   "--store DIR\tthe store to use (see below)\n"
                   "--trust-store\tas root, use a store another user owns\n"
                   "-h, --help\tshow this help and exit\n"
                   "--version\tprint the version and exit\n");
}

static int help_run(struct cli *c, int argc, char **argv) {
  (void)c;
  return cli_help_run(&cmd_help, commands, N_COMMANDS, program_help, "command", argc, argv);
}

#ifdef CAIRN_CLI_LIGHT
/* Whether cairn (light) runs argv's command itself: one in its table, but
 * not help (which lists them all). */
static bool light_runs(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--store") == 0) {
      i++;
      continue;
    }
    if (strncmp(argv[i], "--store=", 8) == 0 || strcmp(argv[i], "--trust-store") == 0) continue;
    if (strcmp(argv[i], "--version") == 0) return true;
    return strcmp(argv[i], "help") != 0 && cli_command_find(commands, N_COMMANDS, argv[i]);
  }
  return false;
}

/* Runs the full cairn with argv, libexec's (self_libexec). Its name is
 * cairn too, so that ps, pgrep and the pins' COMMAND show the same name.
 * Returns only if it does not run. */
static int full_exec(char **argv) {
  char path[PATH_MAX];
  self_libexec("cairn", path, sizeof(path));
  execv(path, argv);
  return report_fail(-errno, "%s: %s", path, strerror(errno));
}
#endif

int main(int argc, char **argv) {
  report_prog = "cairn";
  struct cli c = {0};
  opterr = 0; /* a refused option gets one line, from cli_bad_option */
#ifdef CAIRN_CLI_LIGHT
  if (!light_runs(argc, argv)) return full_exec(argv);
#endif
  if (cli_take_store_option(&c, &argc, argv) < 0)
    return report_usage(USAGE, "--store: needs a directory");
  if (argc < 2) return report_usage(USAGE, "needs a command (cairn --help lists them)");
  if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
    program_help();
    return CAIRN_EXIT_OK;
  }
  if (strcmp(argv[1], "--version") == 0) return cli_version_run(&c, argc - 1, argv + 1);
  const struct cli_command *cmd = cli_command_find(commands, N_COMMANDS, argv[1]);
  cairn_autofree char **habit_argv = NULL;
  if (!cmd) { /* podman's words: image ls, system df, rmi, save... */
    int h = habit_apply(argc, argv, &argc, &habit_argv);
    if (h > 1) return h - 2;
    if (h == 1) {
      argv = habit_argv;
      cmd = cli_command_find(commands, N_COMMANDS, argv[1]);
    }
  }
  if (!cmd && argv[1][0] == '-') { /* an option where the command goes: --stor, -V */
    static const char *const globals[] = {"--store", "--trust-store", "--version", "--help"};
    const char *near = NULL;
    for (size_t i = 0; i < 4 && !near; i++)
      if (cairn_near(argv[1], globals[i])) near = globals[i];
    if (near) return report_usage(USAGE, "%s: unknown option (did you mean %s?)", argv[1], near);
    return report_usage(USAGE,
                        "%s: unknown option (the options are --store DIR, --trust-store, "
                        "--help, --version; then a command)",
                        argv[1]);
  }
  const char *near = cmd ? NULL : cli_command_nearest(commands, N_COMMANDS, argv[1]);
  if (near)
    return report_usage(USAGE " (cairn --help lists the commands)",
                        "%s: unknown command (did you mean %s?)", argv[1], near);
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
