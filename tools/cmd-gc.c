/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cmd-gc.c — `cairn gc [--dry-run] [--quiet]` and `cairn fsck [--repair
 * [--retries N] [--cert-dir DIR]]`: reclaim what nothing uses; verify what
 * is stored (a repair fetches lost layers from their registries). Both
 * print one line per thing done or found; gc shows the progress of its
 * steps on stderr (progress.h), and its --quiet silences both.
 */
#include "commands.h"
#include "progress_bar.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static void report_print(const cairn_report *r) {
  for (size_t i = 0; i < r->n_lines; i++) printf("%s\n", r->lines[i]);
}

/* Parses the flag of each command (--dry-run, --repair) and, if quiet is
 * not NULL, -q/--quiet. */
static int flags(int argc, char **argv, const char *flag, const char *usage, bool *set,
                 bool *quiet) {
  const struct option all[] = {
      {"quiet", no_argument, NULL, 'q'}, {flag, no_argument, NULL, 'f'}, {0}};
  const struct option *opts = quiet ? all : all + 1;
  int o;
  optind = 1;
  while ((o = getopt_long(argc, argv, quiet ? ":q" : ":", opts, NULL)) != -1) {
    if (o == 'f')
      *set = true;
    else if (o == 'q')
      *quiet = true;
    else
      return cli_bad_option(usage, argv, o, opts);
  }
  if (optind != argc) return report_usage(usage, "%s: takes no arguments", argv[0]);
  return CAIRN_EXIT_OK;
}

static int gc_run(struct cli *c, int argc, char **argv) {
  bool dry = false, quiet = false;
  cairn_store *st;
  int code = flags(argc, argv, "dry-run", cmd_gc.usage, &dry, &quiet);
  if (code == CAIRN_EXIT_OK) code = cli_store(c, &st);
  if (code != CAIRN_EXIT_OK) return code;
  cairn_report r = {0};
  struct progress_hook hook = {.p = progress_new(quiet)};
  cairn_store_set_progress(st, progress_hook, &hook);
  int rc = cairn_gc(st, dry, &r);
  cairn_store_set_progress(st, NULL, NULL);
  progress_free(hook.p);
  if (!quiet) report_print(&r);
  cairn_report_free(&r);
  return rc < 0 ? report_fail(rc, "gc: %s", report_why(st, rc)) : CAIRN_EXIT_OK;
}

/* Not in the light cairn (tools/cairn.c): fsck hashes blobs (libcrypto).
 * Left out at compile time, as a sanitizer keeps every global alive. */
#ifndef CAIRN_CLI_LIGHT
/* --repair, and what a repair's fetches of layers from their registries
 * use: --retries N (attempts of each request), --cert-dir DIR (CAs and
 * client certificates, as a pull's; one that is not a directory is
 * refused before anything is repaired, not taken for a registry that
 * fails). */
static int fsck_flags(int argc, char **argv, bool *repair, cairn_pull_opts *net) {
  const struct option opts[] = {{"repair", no_argument, NULL, 'f'},
                                {"retries", required_argument, NULL, 'r'},
                                {"cert-dir", required_argument, NULL, 'C'},
                                {0}};
  int o;
  optind = 1;
  while ((o = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
    if (o == 'f')
      *repair = true;
    else if (o == 'C')
      net->cert_dir = optarg;
    else if (o == 'r') {
      int code = cli_retries(optarg, "fsck", cmd_fsck.usage, &net->attempts);
      if (code != CAIRN_EXIT_OK) return code;
    } else
      return cli_bad_option(cmd_fsck.usage, argv, o, opts);
  }
  if (optind != argc) return report_usage(cmd_fsck.usage, "%s: takes no arguments", argv[0]);
  if ((net->attempts || net->cert_dir) && !*repair)
    return report_usage(cmd_fsck.usage, "fsck: --%s: only with --repair",
                        net->attempts ? "retries" : "cert-dir");
  struct stat sb;
  if (net->cert_dir && stat(net->cert_dir, &sb) < 0)
    return report_fail(-errno, "fsck: --cert-dir %s: %s", net->cert_dir, strerror(errno));
  if (net->cert_dir && !S_ISDIR(sb.st_mode))
    return report_fail(-ENOTDIR, "fsck: --cert-dir %s: %s", net->cert_dir, strerror(ENOTDIR));
  return CAIRN_EXIT_OK;
}

static int fsck_run(struct cli *c, int argc, char **argv) {
  bool repair = false;
  cairn_pull_opts net = {0}; /* credentials: auth.json's (cairn login) */
  cairn_store *st;
  int code = fsck_flags(argc, argv, &repair, &net);
  if (code == CAIRN_EXIT_OK) code = cli_store(c, &st);
  if (code != CAIRN_EXIT_OK) return code;
  cairn_report r = {0};
  int rc = cairn_fsck_net(st, repair, &net, &r);
  char why[512] = "";
  if (rc < 0) snprintf(why, sizeof(why), "%s", report_why(st, rc));
  report_print(&r);
  if (rc == 0) printf("clean\n");
  /* what is wrong, named: the first problem's line */
  const char *first = NULL;
  for (size_t i = 0; rc == -EBADMSG && !first && i < r.n_lines; i++)
    if (strncmp(r.lines[i], "problem: ", 9) == 0) first = r.lines[i] + 9;
  code = CAIRN_EXIT_OK;
  if (rc < 0)
    code = first ? report_fail(rc, "fsck: %s; the first: %s", why, first)
                 : report_fail(rc, "fsck: %s", why);
  cairn_report_free(&r);
  return code;
}
#endif

const struct cli_command cmd_gc = {
    .name = "gc",
    .run = gc_run,
    .usage = "cairn gc [--dry-run] [--quiet]",
    .summary = "Remove the layers and blobs no image and no pin uses; one line per removal.\n"
               "The layers containerd's snapshots hold (cairn-snapshotter) are kept, one\n"
               "line each.",
    .options = "--dry-run\tsay what would be removed, remove nothing\n"
               "-q, --quiet\tno progress on stderr, no lines on stdout\n",
};

#ifndef CAIRN_CLI_LIGHT
const struct cli_command cmd_fsck = {
    .name = "fsck",
    .run = fsck_run,
    .usage = "cairn fsck [--repair [--retries N] [--cert-dir DIR]]",
    .summary = "Verify every blob and the metadata; exit 5 if anything is corrupt or missing.",
    .options = "--repair\trebuild a corrupt blob from a kept compressed layer, else from\n"
               "\tthe registry its layer was pulled from (verified by the blob's\n"
               "\tdigest and the layer's diff_id); remove what cannot be rebuilt,\n"
               "\tnaming each image, layer and file (what is pinned or mounted is\n"
               "\tkept, its corrupt blobs quarantined; exit 4)\n"
               "--retries N\tattempts per registry request on transient errors (1 to 100)\n"
               "--cert-dir DIR\tCA and client certificates for the registries, as pull's\n",
};
#endif
