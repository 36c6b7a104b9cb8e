/*
 * cairn-pin.c — the pin utility.
 *   cairn-pin [ls] [--json] [IMAGE|LAYER]    every pin; stale ones marked, then deleted
 *   cairn-pin hold IMAGE -- COMMAND...       pin IMAGE while COMMAND runs
 *   cairn-pin wait IMAGE [--timeout S]       block until IMAGE is unpinned
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

const char *report_prog = "cairn-pin";

#define USAGE                                                                                      \
  "cairn-pin [--store DIR] [ls] [--json] [IMAGE|LAYER]\n"                                          \
  "       cairn-pin [--store DIR] hold IMAGE -- COMMAND...\n"                                      \
  "       cairn-pin [--store DIR] wait IMAGE [--timeout SECONDS]"

/* An image reference, or a layer id (64 hex digits, "sha256:" allowed). */
static int target_resolve(cairn_store *st, const char *ref, cairn_id id) {
  int r = cairn_image_resolve(st, ref, id);
  if (r != -ENOENT) return r;
  const char *hex = strncmp(ref, "sha256:", 7) == 0 ? ref + 7 : ref;
  if (strlen(hex) == CAIRN_ID_LEN && cairn_layer_exists(st, hex) == 1) {
    snprintf(id, sizeof(cairn_id), "%s", hex);
    return 0;
  }
  return r;
}

static int pin_ls(struct cli *c, int argc, char **argv) {
  bool json;
  int code = cli_listing_flags(argc, argv, USAGE, 1, &json);
  if (code) return code;
  cairn_store *st = cli_store(c);
  if (!st) return 1;
  cairn_id id;
  int r;
  if (optind < argc && (r = target_resolve(st, argv[optind], id)) < 0)
    return cli_fail(c, r, argv[optind]);
  json_t *rows = json_array();
  r = rows ? cairn_pins_foreach(st, optind < argc ? id : NULL, cli_pin_row, rows) : -ENOMEM;
  if (r < 0) {
    json_decref(rows);
    return cli_fail(c, r, "ls");
  }
  cairn_pins_clean_stale(st); /* the stale ones are shown once, then go */
  static const char *const cols[] = {"kind:KIND",       "target:TARGET",   "pid:PID",
                                     "command:COMMAND", "purpose:PURPOSE", "since:SINCE",
                                     "stale:STALE"};
  if (json)
    cli_print_json(rows);
  else
    cli_print_table(rows, cols, 7);
  json_decref(rows);
  return 0;
}

static int pin_hold(struct cli *c, int argc, char **argv) {
  if (argc < 4 || strcmp(argv[2], "--") != 0)
    return report_usage(USAGE, "hold: needs IMAGE -- COMMAND...");
  cairn_store *st = cli_store(c);
  if (!st) return 1;
  cairn_id id;
  int r = cairn_image_resolve(st, argv[1], id);
  if (r < 0) return cli_fail(c, r, argv[1]);
  char purpose[512];
  int off = snprintf(purpose, sizeof(purpose), "hold");
  for (int i = 3; i < argc && off < (int)sizeof(purpose); i++)
    off += snprintf(purpose + off, sizeof(purpose) - (size_t)off, " %s", argv[i]);
  cairn_pinset *ps = cairn_pinset_new(purpose, false);
  if (!ps) return cli_fail(c, -ENOMEM, "hold");
  if ((r = cairn_pin_image(st, ps, id)) < 0) {
    cairn_pinset_release(st, ps);
    return cli_fail(c, r, argv[1]);
  }
  fflush(NULL);
  pid_t child = fork();
  if (child < 0) {
    cairn_pinset_release(st, ps);
    return cli_fail(c, -errno, "hold");
  }
  if (child == 0) {
    execvp(argv[3], argv + 3);
    fprintf(stderr, "cairn-pin: %s: %s\n", argv[3], strerror(errno));
    _exit(errno == ENOENT ? 127 : 126);
  }
  /* Like flock(1): signals meant for the command reach it; we wait. */
  signal(SIGINT, SIG_IGN);
  signal(SIGQUIT, SIG_IGN);
  int status;
  while (waitpid(child, &status, 0) < 0)
    if (errno != EINTR) break;
  cairn_pinset_release(st, ps);
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + WTERMSIG(status);
}

static int pin_wait(struct cli *c, int argc, char **argv) {
  static const struct option opts[] = {{"timeout", required_argument, NULL, 't'}, {0}};
  int64_t timeout_ms = -1;
  const char *timeout = NULL;
  int o;
  optind = 1;
  while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    if (o != 't') return cli_bad_option(USAGE, argv);
    if (cli_parse_seconds(optarg, &timeout_ms) < 0)
      return report_usage(USAGE, "wait: --timeout %s: not a number of seconds", optarg);
    timeout = optarg;
  }
  if (argc - optind != 1) return report_usage(USAGE, "wait: needs one image");
  cairn_store *st = cli_store(c);
  if (!st) return 1;
  cairn_id id;
  int r = cairn_image_resolve(st, argv[optind], id);
  if (r < 0) return cli_fail(c, r, argv[optind]);
  r = cairn_pin_wait_free(st, id, timeout_ms);
  if (r == -ETIMEDOUT) {
    char *who = cairn_pin_holders(st, CAIRN_PIN_IMAGE, id);
    fprintf(stderr, "cairn-pin: %s: still pinned after %s seconds by %s\n", argv[optind], timeout,
            who && *who ? who : "a mount");
    free(who);
    return 4;
  }
  return r < 0 ? cli_fail(c, r, argv[optind]) : 0;
}

int main(int argc, char **argv) {
  struct cli c = {0};
  opterr = 0; /* a refused option gets one line, from cli_bad_option */
  if (cli_take_store_option(&c, &argc, argv) < 0)
    return report_usage(USAGE, "--store needs a directory");
  int code;
  if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
    printf("usage: %s\n", USAGE);
    return 0;
  }
  if (argc >= 2 && strcmp(argv[1], "hold") == 0)
    code = pin_hold(&c, argc - 1, argv + 1);
  else if (argc >= 2 && strcmp(argv[1], "wait") == 0)
    code = pin_wait(&c, argc - 1, argv + 1);
  else if (argc >= 2 && strcmp(argv[1], "ls") == 0)
    code = pin_ls(&c, argc - 1, argv + 1);
  else
    code = pin_ls(&c, argc, argv);
  cli_close(&c);
  return code;
}
