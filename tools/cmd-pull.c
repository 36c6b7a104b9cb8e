/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cmd-pull.c — `cairn pull SOURCE [NAME[:TAG]]`: parses options, calls
 * cairn_pull, and shows its progress (progress.h), a line per layer: on a
 * terminal redrawn (waiting, fetching and storing with bar, bytes, rate and
 * time left; reused, or downloaded in its final time), otherwise one line
 * per layer as it finishes; --quiet shows none. The image id goes to
 * stdout.
 */
#include "commands.h"

#include "progress_bar.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>

#define PULL_USAGE                                                                                 \
  "cairn pull [--platform OS/ARCH[/VARIANT]] [--creds USER[:PASS]] [--insecure] [--jobs N]\n"      \
  "                  [--cert-dir DIR] [--retries N] [--lazy] [-q] [--no-progress]\n"               \
  "                  SOURCE [NAME[:TAG]]"

static void on_progress(const cairn_pull_layer *layers, size_t n, void *display) {
  static const struct progress_words words = {"fetching", "storing", "reused (already stored)",
                                              "downloaded"};
  progress_layers(display, layers, n, &words);
}

static void on_log(const char *msg, void *display) { progress_notice(display, msg); }

static int parse_count(const char *s, unsigned max, unsigned *out) {
  char *end;
  unsigned long v = strtoul(s, &end, 10);
  if (!*s || *end || v == 0 || v > max) return -1;
  *out = (unsigned)v;
  return 0;
}

static int pull_run(struct cli *c, int argc, char **argv) {
  static const struct option opts[] = {
      {"platform", required_argument, NULL, 'p'},
      {"creds", required_argument, NULL, 'c'},
      {"insecure", no_argument, NULL, 'k'},
      {"jobs", required_argument, NULL, 'j'},
      {"retries", required_argument, NULL, 'r'},
      {"quiet", no_argument, NULL, 'q'},
      {"cert-dir", required_argument, NULL, 'C'},
      {"no-progress", no_argument, NULL, 'q'},
      {"tls-verify", optional_argument, NULL, 'T'},
      {"lazy", no_argument, NULL, 'L'},
      {NULL, 0, NULL, 0}, /* --no-progress: -q less its ids-only output */
  };
  bool quiet = false;
  cairn_pull_opts po = {.progress = on_progress, .log = on_log};
  const char *creds_arg = NULL;
  int o;
  optind = 1;
  while ((o = getopt_long(argc, argv, ":qj:", opts, NULL)) != -1) {
    switch (o) {
    case 'p': po.platform = optarg; break;
    case 'c': creds_arg = optarg; break;
    case 'k': po.insecure = true; break;
    case 'T':
      if (cli_tls_verify(optarg, &po.insecure) < 0)
        return report_usage(PULL_USAGE, "pull: --tls-verify: needs true or false");
      break;
    case 'C': po.cert_dir = optarg; break;
    case 'j':
      if (parse_count(optarg, 64, &po.jobs) < 0)
        return report_usage(PULL_USAGE, "pull: --jobs: needs a number from 1 to 64");
      break;
    case 'r':
      if (parse_count(optarg, 100, &po.attempts) < 0)
        return report_usage(PULL_USAGE, "pull: --retries: needs a number from 1 to 100 (attempts)");
      break;
    case 'L': po.lazy = true; break;
    case 'q': quiet = true; break;
    default: return cli_bad_option(PULL_USAGE, argv, o, opts);
    }
  }
  if (argc - optind < 1 || argc - optind > 2)
    return report_usage(PULL_USAGE, "pull: needs a SOURCE and at most a NAME");
  const char *source = argv[optind], *name = argc - optind == 2 ? argv[optind + 1] : NULL;
  cairn_autofree char *creds = NULL;
  if (creds_arg) {
    int code = cli_creds(creds_arg, "pull", PULL_USAGE, &creds);
    if (code != CAIRN_EXIT_OK) return code;
    po.creds = creds;
  }

  cairn_store *st;
  int code = cli_config(c, &po.config);
  if (code == CAIRN_EXIT_OK)
    code = cli_store_open(c, CAIRN_STORE_CREATE | (quiet ? CLI_STORE_QUIET : 0), &st);
  if (code != CAIRN_EXIT_OK) return code;
  if (!po.jobs) po.jobs = po.config->pull_jobs; /* 0: libcairn's default */
  po.arg = progress_new(quiet);
  cairn_id id;
  int r = cairn_pull(st, source, name, &po, id);
  progress_free(po.arg);
  if (r < 0) return report_fail(r, "pull %s: %s", source, report_why(st, r));
  printf("%s\n", id);
  return CAIRN_EXIT_OK;
}

const struct cli_command cmd_pull = {
    .name = "pull",
    .run = pull_run,
    .usage = PULL_USAGE,
    .summary = "Store an image from a layout, an archive or a registry, and print its id.\n"
               "SOURCE: oci:DIR[:REF] | oci-archive:FILE[:REF] | docker-archive:FILE |\n"
               "  docker://[HOST[:PORT]/]REPO[:TAG|@DIGEST]\n"
               "  (no HOST: docker.io, library/ for one component, or registries.conf's first\n"
               "  unqualified-search-registries, as podman)\n"
               "NAME[:TAG]: the image's name in the store (default: from SOURCE)",
    .options = "--platform OS/ARCH[/VARIANT]\tthe platform to pick from an index (default: this "
               "machine's)\n" CLI_REGISTRY_OPTIONS
               "-j, --jobs N\tdownload up to N layers at once (1 to 64; default: cairn.conf's\n"
               "\tpull-jobs, else 3)\n"
               "--retries N\tattempts per request on transient errors (1 to 100)\n"
               "--lazy\tstore a registry's zstd:chunked and eStargz layers from their\n"
               "\ttable of contents alone: files are fetched on first read from a\n"
               "\tmount, or by cairn fill (other layers are pulled in full)\n"
               "-q, --quiet\tprint the image id only (no progress)\n"
               "--no-progress\tno progress on stderr\n",
};
