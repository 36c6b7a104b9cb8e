/*
 * cmd-gc.c — `cairn gc [--dry-run]` and `cairn fsck [--repair]`: reclaim
 * what nothing uses; verify what is stored. Both print one line per thing
 * done or found.
 */
#include "commands.h"

#include <getopt.h>
#include <stdio.h>

static void report_print(const cairn_report *r) {
  for (size_t i = 0; i < r->n_lines; i++) printf("%s\n", r->lines[i]);
}

/* Parses the single flag both commands take. */
static int one_flag(int argc, char **argv, const char *flag, const char *usage, bool *set) {
  const struct option opts[] = {{flag, no_argument, NULL, 'f'}, {0}};
  int o;
  optind = 1;
  while ((o = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
    if (o != 'f') return cli_bad_option(usage, argv, o, opts);
    *set = true;
  }
  if (optind != argc) return report_usage(usage, "%s: takes no arguments", argv[0]);
  return CAIRN_EXIT_OK;
}

static int gc_run(struct cli *c, int argc, char **argv) {
  bool dry = false;
  cairn_store *st;
  int code = one_flag(argc, argv, "dry-run", cmd_gc.usage, &dry);
  if (code == CAIRN_EXIT_OK) code = cli_store(c, &st);
  if (code != CAIRN_EXIT_OK) return code;
  cairn_report r = {0};
  int rc = cairn_gc(st, dry, &r);
  report_print(&r);
  cairn_report_free(&r);
  return rc < 0 ? report_fail(rc, "gc: %s", report_why(st, rc)) : CAIRN_EXIT_OK;
}

static int fsck_run(struct cli *c, int argc, char **argv) {
  bool repair = false;
  cairn_store *st;
  int code = one_flag(argc, argv, "repair", cmd_fsck.usage, &repair);
  if (code == CAIRN_EXIT_OK) code = cli_store(c, &st);
  if (code != CAIRN_EXIT_OK) return code;
  cairn_report r = {0};
  int rc = cairn_fsck(st, repair, &r);
  report_print(&r);
  if (rc == 0) printf("clean\n");
  cairn_report_free(&r);
  return rc < 0 ? report_fail(rc, "fsck: %s", report_why(st, rc)) : CAIRN_EXIT_OK;
}

const struct cli_command cmd_gc = {
    .name = "gc",
    .run = gc_run,
    .usage = "cairn gc [--dry-run]",
    .summary = "Remove the layers and blobs no image and no pin uses; one line per removal.",
    .options = "--dry-run\tsay what would be removed, remove nothing\n",
};

const struct cli_command cmd_fsck = {
    .name = "fsck",
    .run = fsck_run,
    .usage = "cairn fsck [--repair]",
    .summary = "Verify every blob and the metadata; exit 5 if anything is corrupt or missing.",
    .options = "--repair\tremove what is corrupt (what is pinned or mounted is kept, its\n"
               "\tcorrupt blobs quarantined; exit 4)\n",
};
