/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cmd-push.c — `cairn push IMAGE DEST`: parses options, calls cairn_push,
 * and shows its progress as pull does (progress.h), a line per layer:
 * waiting, compressing (its exact tar rebuilt), sending, then sent or
 * skipped (the destination had it). The manifest's digest goes to stdout.
 */
#include "commands.h"

#include "progress_bar.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>

#define PUSH_USAGE                                                                                 \
  "cairn push [--compress gzip|zstd|none [--force-compression]]\n"                                 \
  "                  [--format zstd:chunked|estargz] [--creds USER[:PASS]] [--insecure]\n"         \
  "                  [--cert-dir DIR] [--retries N] [-q] [--no-progress] IMAGE [DEST]"

static void on_progress(const cairn_pull_layer *layers, size_t n, void *display) {
  static const struct progress_words words = {"sending", "compressing", "skipped (already there)",
                                              "sent"};
  progress_layers(display, layers, n, &words);
}

static void on_log(const char *msg, void *display) { progress_notice(display, msg); }

static int push_run(struct cli *c, int argc, char **argv) {
  static const struct option opts[] = {
      {"compress", required_argument, NULL, 'z'},
      {"force-compression", no_argument, NULL, 'F'},
      {"format", required_argument, NULL, 'f'},
      {"creds", required_argument, NULL, 'c'},
      {"insecure", no_argument, NULL, 'k'},
      {"retries", required_argument, NULL, 'r'},
      {"quiet", no_argument, NULL, 'q'},
      {"cert-dir", required_argument, NULL, 'C'},
      {"no-progress", no_argument, NULL, 'q'}, /* -q less its ids-only output */
      {"tls-verify", optional_argument, NULL, 'T'},
      {NULL, 0, NULL, 0},
  };
  bool quiet = false;
  cairn_push_opts po = {.net = {.progress = on_progress, .log = on_log}};
  const char *creds_arg = NULL;
  bool compress_set = false, force = false;
  int o;
  optind = 1;
  while ((o = getopt_long(argc, argv, ":q", opts, NULL)) != -1) {
    switch (o) {
    case 'z':
      if (strcmp(optarg, "gzip") == 0)
        po.compress = CAIRN_COMPRESS_GZIP;
      else if (strcmp(optarg, "zstd") == 0)
        po.compress = CAIRN_COMPRESS_ZSTD;
      else if (strcmp(optarg, "none") == 0)
        po.compress = CAIRN_COMPRESS_NONE;
      else
        return report_usage(PUSH_USAGE, "push: --compress: needs gzip, zstd or none");
      compress_set = true;
      break;
    case 'F': force = true; break;
    case 'f':
      if (strcmp(optarg, "zstd:chunked") == 0)
        po.format = CAIRN_PUSH_FORMAT_ZSTD_CHUNKED;
      else if (strcmp(optarg, "estargz") == 0)
        po.format = CAIRN_PUSH_FORMAT_ESTARGZ;
      else
        return report_usage(PUSH_USAGE, "push: --format: needs zstd:chunked or estargz");
      break;
    case 'c': creds_arg = optarg; break;
    case 'k': po.net.insecure = true; break;
    case 'T':
      if (cli_tls_verify(optarg, &po.net.insecure) < 0)
        return report_usage(PUSH_USAGE, "push: --tls-verify: needs true or false");
      break;
    case 'C': po.net.cert_dir = optarg; break;
    case 'r':
      if (cli_retries(optarg, "push", PUSH_USAGE, &po.net.attempts) != CAIRN_EXIT_OK)
        return CAIRN_EXIT_USAGE;
      break;
    case 'q': quiet = true; break;
    default: return cli_bad_option(PUSH_USAGE, argv, o, opts);
    }
  }
  /* As podman's --compression-format: a layer pulled in another
   * compression is compressed anew; --force-compression: every layer. */
  po.kept = force          ? CAIRN_PUSH_KEPT_NONE
            : compress_set ? CAIRN_PUSH_KEPT_SAME
                           : CAIRN_PUSH_KEPT_ANY;
  if (po.format != CAIRN_PUSH_FORMAT_PLAIN && (compress_set || force))
    return report_usage(PUSH_USAGE, "push: --format: not with --compress or --force-compression"
                                    " (it compresses every layer itself)");
  if (argc - optind < 1 || argc - optind > 2)
    return report_usage(PUSH_USAGE, "push: needs an IMAGE and a DEST");
  const char *image = argv[optind], *dest = argv[optind + 1]; /* NULL: image's registry */
  cairn_autofree char *creds = NULL;
  if (creds_arg) {
    int code = cli_creds(creds_arg, "push", PUSH_USAGE, &creds);
    if (code != CAIRN_EXIT_OK) return code;
    po.net.creds = creds;
  }

  cairn_store *st;
  int code = cli_config(c, &po.net.config);
  if (code == CAIRN_EXIT_OK) code = cli_store(c, &st);
  if (code != CAIRN_EXIT_OK) return code;
  po.net.arg = progress_new(quiet);
  char digest[CAIRN_DIGEST_BUF];
  int r = cairn_push(st, image, dest, &po, digest);
  progress_free(po.net.arg);
  if (r < 0) return report_fail(r, "push %s: %s", image, report_why(st, r));
  printf("%s\n", digest);
  return CAIRN_EXIT_OK;
}

const struct cli_command cmd_push = {
    .name = "push",
    .run = push_run,
    .usage = PUSH_USAGE,
    .summary = "Send an image to a registry, an OCI layout or an archive; print its digest.\n"
               "Each layer is its exact tar (the diff_ids and image id do not change); the\n"
               "digest printed is the manifest's.\n"
               "A layer pulled is sent as it was pulled (its blob, digest and media type),\n"
               "unless --compress names another compression or --force-compression is given.\n"
               "--format writes every layer lazily pullable (zstd:chunked: the same tar, the\n"
               "same image id; estargz: its TOC joins each tar, a new image id, logged).\n"
               "IMAGE: a name or id of the store\n"
               "DEST: docker://HOST[:PORT]/REPO[:TAG] | oci:DIR[:TAG] | oci-archive:FILE[:TAG]\n"
               "  (TAG: latest if not given; an archive's: IMAGE's name, as podman save)\n"
               "  | docker-archive:FILE[:NAME[:TAG]] (its layers uncompressed; prints the\n"
               "  image id); no transport is docker://, and no\n"
               "  DEST the registry of IMAGE's name (HOST[:PORT]/REPO[:TAG]), as podman's",
    .options = "--compress gzip|zstd|none\tcompress with it the layers not pulled in it (default:\n"
               "\tgzip, for the layers no pull kept: imported, committed)\n"
               "--force-compression\tcompress every layer anew, none sent as pulled\n"
               "--format zstd:chunked|estargz\twrite every layer anew, each file's data in\n"
               "\tframes of its own, and a table of contents: for lazy and partial\n"
               "\tpulls (not with --compress)\n" CLI_REGISTRY_OPTIONS
               "--retries N\tattempts per request on transient errors (1 to 100)\n"
               "-q, --quiet\tprint the manifest's digest only (no progress)\n"
               "--no-progress\tno progress on stderr\n",
};
