/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cairn-pin.c — the pin utility.
 *   cairn-pin [ls] [--json] [IMAGE|LAYER]    every pin; stale ones marked, then deleted
 *   cairn-pin hold IMAGE... -- COMMAND...    pin each IMAGE while COMMAND runs
 *   cairn-pin wait IMAGE [--timeout S]       block until IMAGE is unpinned
 *   cairn-pin help [SUBCOMMAND]              the subcommands, or one's help
 *   cairn-pin version                        the version (also --version)
 *
 * hold works like flock(1): the pin fds are inherited by COMMAND, so the
 * pin lasts until both this process and COMMAND are gone, however they
 * end; the exit status is COMMAND's.
 */
#include "cli.h"

#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define USAGE                                                                                      \
  "cairn-pin [--store DIR] [ls] [--json] [IMAGE|LAYER]\n"                                          \
  "       cairn-pin [--store DIR] hold IMAGE... -- COMMAND...\n"                                   \
  "       cairn-pin [--store DIR] wait [--timeout SECONDS] IMAGE\n"                                \
  "       cairn-pin SUBCOMMAND --help | cairn-pin help [SUBCOMMAND] | cairn-pin --version"

static int pin_ls(struct cli *c, int argc, char **argv);
static int pin_hold(struct cli *c, int argc, char **argv);
static int pin_wait(struct cli *c, int argc, char **argv);
static int pin_help(struct cli *c, int argc, char **argv);

static const struct cli_command pin_ls_cmd = {
    .name = "ls",
    .run = pin_ls,
    .usage = "cairn-pin [--store DIR] [ls] [--json | -q | --format TEMPLATE] [--no-trunc]\n"
             "       [IMAGE|LAYER]",
    .summary = "List the pins (of IMAGE or LAYER only, if given).\n"
               "Each: kind, target, the names of the images it is or is in, holder's pid and\n"
               "command, purpose, since when; stale ones are shown once, then deleted. The\n"
               "layers containerd's snapshots hold (cairn-snapshotter) are rows too: pid -,\n"
               "purpose \"containerd snapshot KEY\". IMAGE\n"
               "and LAYER: an id or a prefix of 12 or more hex digits (as cairn images and\n"
               "cairn layers show), \"sha256:\" optional.",
    .options = "--json\tone JSON array of every pin\n" CLI_LISTING_OPTIONS,
};

static const struct cli_command pin_hold_cmd = {
    .name = "hold",
    .run = pin_hold,
    .usage = "cairn-pin [--store DIR] hold IMAGE... -- COMMAND...",
    .summary = "Pin each IMAGE and its layers while COMMAND runs; exit with COMMAND's status.\n"
               "Like flock(1): COMMAND inherits the pin, which lasts until both are gone.",
};

static const struct cli_command pin_wait_cmd = {
    .name = "wait",
    .run = pin_wait,
    .usage = "cairn-pin [--store DIR] wait [--timeout SECONDS] IMAGE",
    .summary = "Block until nothing pins IMAGE; exit 4 naming the holders if SECONDS run out.",
    .options = "--timeout SECONDS\tgive up after SECONDS (any non-negative number, inf too)\n",
};

static const struct cli_command pin_help_cmd = {
    .name = "help",
    .run = pin_help,
    .usage = "cairn-pin help [SUBCOMMAND]",
    .summary = "List the subcommands, or show SUBCOMMAND's help.",
};

static const struct cli_command pin_version_cmd = {
    .name = "version",
    .run = cli_version_run,
    .usage = "cairn-pin version",
    .summary = "Print cairn-pin's version (as cairn-pin --version).",
};

static const struct cli_command *const subcommands[] = {&pin_ls_cmd, &pin_hold_cmd, &pin_wait_cmd,
                                                        &pin_help_cmd, &pin_version_cmd};
#define N_SUBCOMMANDS (sizeof(subcommands) / sizeof(subcommands[0]))

/* An image reference, or a layer id (64 hex digits, "sha256:" allowed). */
static int target_resolve(cairn_store *st, const char *ref, cairn_id id) {
  int r = cairn_image_resolve(st, ref, id);
  if (r != -ENOENT) return r;
  r = cairn_layer_resolve(st, ref, id);
  if (r != -ENOENT) return r;
  return cairn_fail(st, r, "no such image or layer"); /* the lookup started a new message */
}

/* The rows of cairn-pin ls, and whether one is stale. */
struct pin_ls_rows {
  struct cli_rows *rows;
  bool *stale;
};

static int pin_ls_row(const struct cairn_pin_rec *p, void *arg) {
  struct pin_ls_rows *ls = arg;
  if (p->stale) *ls->stale = true;
  return cli_pin_row(p, ls->rows);
}

/* The rows given ahead of the host's locks were not right: all go. */
static void pin_ls_undo(void *arg) {
  struct pin_ls_rows *ls = arg;
  *ls->stale = false;
  cli_rows_truncate(ls->rows, 0);
}

static int pin_ls(struct cli *c, int argc, char **argv) {
  struct cli_listing l;
  cairn_store *st;
  int code = cli_listing_flags(argc, argv, pin_ls_cmd.usage, 1, true, &l);
  /* no store: no pins, unless one is asked for by name (exit 3) */
  if (code == CAIRN_EXIT_OK)
    code = cli_store_open(c, optind < argc ? 0 : CLI_STORE_MISSING_OK, &st);
  if (code != CAIRN_EXIT_OK) return code;
  static const char *const cols[] = {"kind:KIND",   "target:TARGET",   "names:NAMES",
                                     "pid:PID",     "command:COMMAND", "purpose:PURPOSE",
                                     "since:SINCE", "stale:STALE"};
  if (!st) {
    struct cli_rows none = {0};
    return cli_listing_print(&l, pin_ls_cmd.usage, &none, cols, sizeof(cols) / sizeof(cols[0]));
  }
  cairn_id id;
  int r;
  if (optind < argc && (r = target_resolve(st, argv[optind], id)) < 0)
    return report_fail(r, "%s: %s", argv[optind], report_why(st, r));
  struct cli_rows rows = {0};
  bool stale = false;
  struct pin_ls_rows collect = {&rows, &stale};
  cairn_pins_prefetch(st); /* the names are read meanwhile, for cli_pin_row */
  r = cli_rows_read_names(st, &rows);
  if (r == 0)
    r = cairn_pins_foreach_ahead(st, optind < argc ? id : NULL, pin_ls_row, pin_ls_undo, &collect);
  if (r < 0) {
    cli_rows_free(&rows);
    return report_fail(r, "ls: %s", report_why(st, r));
  }
  if (stale) cairn_pins_clean_stale(st); /* the stale ones are shown once, then go */
  code = cli_listing_print(&l, pin_ls_cmd.usage, &rows, cols, sizeof(cols) / sizeof(cols[0]));
  cli_rows_free(&rows);
  return code;
}

static int pin_hold(struct cli *c, int argc, char **argv) {
  int code = cli_no_options(argc, argv, pin_hold_cmd.usage, true);
  if (code != CAIRN_EXIT_OK) return code;
  int dashes = 1; /* IMAGE... -- COMMAND... */
  while (dashes < argc && strcmp(argv[dashes], "--") != 0) dashes++;
  if (dashes == 1 || dashes + 1 >= argc)
    return report_usage(pin_hold_cmd.usage, "hold: needs IMAGE... -- COMMAND...");
  char **command = argv + dashes + 1;
  cairn_store *st;
  code = cli_store(c, &st);
  if (code != CAIRN_EXIT_OK) return code;
  char purpose[512];
  int off = snprintf(purpose, sizeof(purpose), "hold");
  for (char **a = command; *a && off < (int)sizeof(purpose); a++)
    off += snprintf(purpose + off, sizeof(purpose) - (size_t)off, " %s", *a);
  cairn_pinset *ps = cairn_pinset_new(purpose, false);
  if (!ps) return report_fail(-ENOMEM, "hold: %s", strerror(ENOMEM));
  int r = 0;
  for (int i = 1; i < dashes && r == 0; i++) {
    cairn_id id;
    if ((r = cairn_image_resolve(st, argv[i], id)) < 0 || (r = cairn_pin_image(st, ps, id)) < 0)
      code = report_fail(r, "%s: %s", argv[i], report_why(st, r));
  }
  if (r < 0) {
    cairn_pinset_release(st, ps);
    return code;
  }
  fflush(NULL);
  pid_t child = fork();
  if (child < 0) {
    code = report_fail(-errno, "hold: %s", strerror(errno));
    cairn_pinset_release(st, ps);
    return code;
  }
  if (child == 0) {
    execvp(command[0], command);
    int err = errno;
    report_fail(-err, "%s: %s", command[0], strerror(err));
    _exit(err == ENOENT ? CLI_EXIT_EXEC_NOT_FOUND : CLI_EXIT_EXEC_FAILED);
  }
  /* Like flock(1): signals meant for the command reach it; we wait. */
  signal(SIGINT, SIG_IGN);
  signal(SIGQUIT, SIG_IGN);
  int status;
  while ((r = waitpid(child, &status, 0)) < 0 && errno == EINTR) continue;
  code = r < 0               ? report_fail(-errno, "hold: %s", strerror(errno))
         : WIFEXITED(status) ? WEXITSTATUS(status)
                             : CLI_EXIT_SIGNAL_BASE + WTERMSIG(status);
  cairn_pinset_release(st, ps);
  return code;
}

static int pin_wait(struct cli *c, int argc, char **argv) {
  static const struct option opts[] = {{"timeout", required_argument, NULL, 't'}, {0}};
  int64_t timeout_ms = -1;
  const char *timeout = NULL;
  int o;
  optind = 1;
  while ((o = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
    if (o != 't') return cli_bad_option(pin_wait_cmd.usage, argv, o, opts);
    if (cli_parse_seconds(optarg, &timeout_ms) < 0)
      return report_usage(pin_wait_cmd.usage, "wait: --timeout %s: not a number of seconds",
                          optarg);
    timeout = optarg;
  }
  if (argc - optind != 1) return report_usage(pin_wait_cmd.usage, "wait: needs one image");
  cairn_store *st;
  int code = cli_store(c, &st);
  if (code != CAIRN_EXIT_OK) return code;
  cairn_id id;
  int r = cairn_image_resolve(st, argv[optind], id);
  if (r < 0) return report_fail(r, "%s: %s", argv[optind], report_why(st, r));
  r = cairn_pin_wait_free(st, id, timeout_ms);
  if (r == -ETIMEDOUT) {
    cairn_autofree char *who = cairn_pin_holders(st, CAIRN_PIN_IMAGE, id);
    return report_fail(-EBUSY, "%s: still pinned after %s second%s by %s", argv[optind], timeout,
                       timeout_ms == 1000 ? "" : "s", who && *who ? who : "a mount");
  }
  return r < 0 ? report_fail(r, "%s: %s", argv[optind], report_why(st, r)) : CAIRN_EXIT_OK;
}

static void program_help(void) {
  cli_program_help(USAGE, subcommands, N_SUBCOMMANDS,
                   "--store DIR\tthe store to use (see below)\n"
                   "--trust-store\tas root, use a store another user owns\n"
                   "-h, --help\tshow this help and exit\n"
                   "--version\tprint the version and exit\n");
}

static int pin_help(struct cli *c, int argc, char **argv) {
  (void)c;
  return cli_help_run(&pin_help_cmd, subcommands, N_SUBCOMMANDS, program_help, "subcommand", argc,
                      argv);
}

int main(int argc, char **argv) {
  report_prog = "cairn-pin";
  struct cli c = {0};
  opterr = 0; /* a refused option gets one line, from cli_bad_option */
  if (cli_take_store_option(&c, &argc, argv) < 0)
    return report_usage(USAGE, "--store: needs a directory");
  if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
    program_help();
    return CAIRN_EXIT_OK;
  }
  if (argc >= 2 && strcmp(argv[1], "--version") == 0)
    return cli_version_run(&c, argc - 1, argv + 1);
  /* No subcommand (or an option or operand first) is ls; but a mistyped
   * subcommand (lst) is not an image to list. */
  const struct cli_command *cmd =
      argc >= 2 ? cli_command_find(subcommands, N_SUBCOMMANDS, argv[1]) : NULL;
  const char *near = argc >= 2 && !cmd && argv[1][0] != '-'
                         ? cli_command_nearest(subcommands, N_SUBCOMMANDS, argv[1])
                         : NULL;
  if (near) return report_usage(USAGE, "%s: unknown subcommand (did you mean %s?)", argv[1], near);
  if (argc >= 2 && !cmd && argv[1][0] == '-' && argv[1][1] == '-' &&
      strcmp(argv[1], "--json") != 0 && strcmp(argv[1], "--") != 0) {
    /* an option of cairn-pin itself, mistyped (--stor): not ls's */
    static const char *const globals[] = {"--store", "--version", "--help"};
    for (size_t i = 0; i < 3; i++)
      if (cairn_near(argv[1], globals[i]))
        return report_usage(USAGE, "%s: unknown option (did you mean %s?)", argv[1], globals[i]);
  }
  int code;
  if (cli_wants_help(cmd ? argc - 1 : argc, cmd ? argv + 1 : argv)) {
    cli_command_help(cmd ? cmd : &pin_ls_cmd);
    code = CAIRN_EXIT_OK;
  } else {
    char *ls_argv0 = argv[0];
    if (!cmd) argv[0] = (char *)"ls"; /* ls's errors say "ls:", not the program twice */
    code = cmd ? cmd->run(&c, argc - 1, argv + 1) : pin_ls(&c, argc, argv);
    argv[0] = ls_argv0;
  }
  cli_close(&c);
  return code;
}
