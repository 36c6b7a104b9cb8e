/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cmd-rm.c — `cairn rm [-f] [--wait[=SECONDS]] IMAGE...`: removes names or
 * images (-a: every image; --untagged: those with no name). A pinned
 * image is exit 4 naming every holder, unless --wait, which waits for the
 * pins to go (for ever, or SECONDS) and tries again.
 * An image under a kept or crashed --rw mount's upper layer is exit 4
 * naming it, unless -f/--force (podman rm -f's spelling), which drops it.
 * Like every option with a value, --wait takes it as --wait=SECONDS or
 * --wait SECONDS: an argument after a bare --wait that reads as a number of
 * seconds is its value (`--wait -- 10` waits for ever for an image 10).
 *
 * What changed goes to stdout as podman rmi says it ("Untagged: NAME",
 * "Deleted: ID", then the layers freed); that --wait waits goes to stderr,
 * once per image. -q silences both.
 */
#include "commands.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define USAGE "cairn rm [-q] [-f] [--wait [SECONDS]] IMAGE... | -a | --untagged"

static int64_t monotonic_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

struct rm_opts {
  bool wait, quiet;
  unsigned flags;  /* CAIRN_RM_FORCE */
  int64_t wait_ms; /* < 0 waits for ever */
};

/* Runs cairn_rm on ref, prints what changed unless quiet, and returns its
 * answer. */
static int rm_try(cairn_store *st, const char *ref, const struct rm_opts *o) {
  cairn_report rep = {0};
  int r = cairn_rm_report(st, ref, o->flags, &rep);
  for (size_t i = 0; !o->quiet && i < rep.n_lines; i++) printf("%s\n", rep.lines[i]);
  cairn_report_free(&rep);
  return r;
}

/* The exit code of rm's answer r for ref, reported if it failed. */
static int rm_result(cairn_store *st, int r, const char *ref) {
  return r < 0 ? report_fail(r, "%s: %s", ref, report_why(st, r)) : CAIRN_EXIT_OK;
}

static int rm_one(cairn_store *st, const char *ref, const struct rm_opts *o) {
  int64_t start = monotonic_ms();
  bool said = false;
  for (;;) {
    int r = rm_try(st, ref, o);
    if (r != -EBUSY || !o->wait) return rm_result(st, r, ref);
    cairn_autofree char *why = strdup(report_why(st, r));
    cairn_id id;
    if (cairn_image_resolve(st, ref, id) < 0) continue;
    /* Refused with no pin to wait for (an upper layer left on it): no
     * pin's going changes that. */
    if (cairn_pin_wait_free(st, id, 0) == 0) return rm_result(st, rm_try(st, ref, o), ref);
    if (!said && !o->quiet) { /* who holds it, once */
      fprintf(stderr, "%s: rm: %s: waiting: %s\n", report_prog, ref, why ? why : "pinned");
      said = true;
    }
    int64_t left = o->wait_ms < 0 ? -1 : o->wait_ms - (monotonic_ms() - start);
    r = o->wait_ms >= 0 && left <= 0 ? -ETIMEDOUT : cairn_pin_wait_free(st, id, left);
    if (r == -ETIMEDOUT) /* the holders as they are now */
      return rm_result(st, rm_try(st, ref, o), ref);
    if (r < 0) return rm_result(st, r, ref);
  }
}

struct rm_ids {
  bool untagged_only;
  char **ids;
  size_t n;
  int err;
};

static int rm_collect(const cairn_image_rec *im, void *arg) {
  struct rm_ids *l = arg;
  if (l->untagged_only && im->n_names) return 0;
  char **ids = realloc(l->ids, (l->n + 1) * sizeof *ids);
  if (!ids || !(ids[l->n] = strdup(im->id))) {
    if (ids) l->ids = ids;
    return l->err = -ENOMEM;
  }
  l->ids = ids;
  l->n++;
  return 0;
}

static int rm_run(struct cli *c, int argc, char **argv) {
  static const struct option opts[] = {
      {"wait", optional_argument, NULL, 'w'}, {"quiet", no_argument, NULL, 'q'},
      {"force", no_argument, NULL, 'f'},      {"all", no_argument, NULL, 'a'},
      {"untagged", no_argument, NULL, 'u'},   {0}};
  struct rm_opts ro = {.wait_ms = -1};
  bool all = false, untagged = false;
  int o;
  optind = 1;
  while ((o = getopt_long(argc, argv, ":qfa", opts, NULL)) != -1) {
    if (o == 'q' || o == 'f' || o == 'a' || o == 'u') {
      if (o == 'q') ro.quiet = true;
      if (o == 'f') ro.flags |= CAIRN_RM_FORCE;
      if (o == 'a') all = true;
      if (o == 'u') untagged = true;
      continue;
    }
    if (o != 'w') return cli_bad_option(USAGE, argv, o, opts);
    ro.wait = true;
    if (optarg && cli_parse_seconds(optarg, &ro.wait_ms) < 0)
      return report_usage(USAGE, "rm: --wait=%s: not a number of seconds", optarg);
    if (!optarg && optind < argc && cli_parse_seconds(argv[optind], &ro.wait_ms) == 0) optind++;
  }
  if ((all || untagged) && optind < argc)
    return report_usage(USAGE, "rm: %s: not with images named", all ? "--all" : "--untagged");
  if (all && untagged) return report_usage(USAGE, "rm: --all or --untagged, not both");
  if (optind == argc && !all && !untagged)
    return report_usage(USAGE, "rm: needs at least one image (or -a, --untagged)");
  cairn_store *st;
  int worst = cli_store(c, &st);
  if (worst != CAIRN_EXIT_OK) return worst;
  if (all || untagged) { /* by id, each image once, whatever its names */
    struct rm_ids l = {.untagged_only = untagged};
    int r = cairn_images_foreach(st, rm_collect, &l);
    if (r == 0 && l.err) r = l.err;
    for (size_t i = 0; r == 0 && i < l.n; i++) {
      int code = rm_one(st, l.ids[i], &ro);
      if (code > worst) worst = code;
    }
    for (size_t i = 0; i < l.n; i++) free(l.ids[i]);
    free(l.ids);
    return r < 0 ? report_fail(r, "rm: %s", report_why(st, r)) : worst;
  }
  for (int i = optind; i < argc; i++) {
    int code = rm_one(st, argv[i], &ro);
    if (code > worst) worst = code;
  }
  return worst;
}

const struct cli_command cmd_rm = {
    .name = "rm",
    .run = rm_run,
    .usage = USAGE,
    .summary = "Remove names or images, with the layers no other image uses.\n"
               "A name of an image that has other names only loses that name; the image goes\n"
               "with its last name or its id. A pinned image is refused (exit 4) naming its\n"
               "holders, and so is one with a layer a containerd snapshot holds\n"
               "(cairn-snapshotter), naming the snapshots. Says what changed on stdout, as\n"
               "podman rmi: \"Untagged: NAME\" for each name removed, \"Deleted: ID\" for an\n"
               "image, then the layers it freed (\"Removed layer sha256:ID (SIZE)\").\n"
               "An image under a --rw mount's upper layer that is kept (umount --keep) or\n"
               "left by a crash is refused too (exit 4) naming the upper, unless --force.",
    .options = "-a, --all\tremove every image (as podman rmi -a)\n"
               "--untagged\tremove the images with no name (<none>; as podman image prune)\n"
               "-f, --force\tdrop the uncommitted changes left on the image (kept or crashed\n"
               "\t--rw mounts' upper layers) first, saying each (Dropped: upper ID of DIR\n"
               "\t(N entries, SIZE)); a live mount or a pin still refuses\n"
               "-q, --quiet\tprint nothing on success (nor that --wait waits)\n"
               "--wait [SECONDS]\twait for the pins to go (for ever, or SECONDS), then remove;\n"
               "\talso --wait=SECONDS (--wait -- 10: for ever, for an image named 10)\n",
};
