/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cmd-commit.c — `cairn commit DIR NAME[:TAG]`: the changes of the --rw
 * mount at DIR (its upper layer; a kept one too) as a new layer on top of
 * the mount's image, and a new image named NAME (store/commit.c). Prints
 * the new image's id on stdout, as podman commit does. A live mount then
 * moves onto the new image with a fresh, empty upper (fs/upper.c's
 * rebase(), asked through the trusted.cairn.rebase xattr of the mount's
 * root) and its record names the new image. If the mount cannot move (an
 * older cairnfs, a failure) it stays as it was: said on stderr, exit 0
 * (the commit is done).
 */
#include "commands.h"
#include "cli_upper.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/xattr.h>

#define USAGE "cairn commit [-q] [-m MESSAGE] DIR NAME[:TAG]"

struct record {
  const char *dir;
  bool found;
  pid_t pid;
  char dev[32];
};

static int find_record(const struct cairn_mount_rec *m, void *arg) {
  struct record *rec = arg;
  /* Restarting too: the server that moved it may have died since (its
   * supervisor serves the new image with the next). */
  if (strcmp(m->dir, rec->dir) != 0 ||
      (m->state != CAIRN_MOUNT_LIVE && m->state != CAIRN_MOUNT_RESTARTING))
    return 0;
  rec->found = true;
  rec->pid = m->pid;
  snprintf(rec->dev, sizeof(rec->dev), "%s", m->dev);
  return 1;
}

/* Moves the live mount at dir (upper id) onto image: a fresh upper. */
static int rebase(cairn_store *st, const char *dir, const char *id, const char *image) {
  char value[2 * CAIRN_ID_LEN + 2];
  snprintf(value, sizeof(value), "%s %s", id, image);
  if (lsetxattr(dir, "trusted.cairn.rebase", value, strlen(value), 0) < 0) return -errno;
  struct record rec = {.dir = dir};
  int r = cairn_mounts_foreach(st, find_record, &rec);
  if (r >= 0 && rec.found) r = cairn_mount_record(st, dir, image, rec.pid, rec.dev, true);
  return r < 0 ? r : 0;
}

static int commit_run(struct cli *c, int argc, char **argv) {
  static const struct option opts[] = {{"quiet", no_argument, NULL, 'q'},
                                       {"message", required_argument, NULL, 'm'},
                                       {NULL, 0, NULL, 0}};
  const char *message = NULL;
  int o;
  optind = 1;
  while ((o = getopt_long(argc, argv, ":qm:", opts, NULL)) != -1) {
    if (o == 'q')
      continue; /* the id is all commit prints */
    else if (o == 'm')
      message = optarg;
    else
      return cli_bad_option(USAGE, argv, o, opts);
  }
  if (argc - optind != 2) return report_usage(USAGE, "commit: needs a directory and a name");
  const char *dir = argv[optind], *name = argv[optind + 1];
  char normal[512];
  int r = cairn_name_normalize(name, normal, sizeof(normal));
  if (r < 0) return report_usage(USAGE, "commit: %s: not a valid name", name);
  cairn_store *st;
  int code = cli_store(c, &st);
  if (code != CAIRN_EXIT_OK) return code;
  char abs[PATH_MAX];
  r = cairn_mountpoint_resolve(dir, abs, sizeof(abs));
  if (r < 0) return report_fail(r, "commit: %s: %s", dir, strerror(-r));
  struct cli_upper up;
  r = cli_upper_of_dir(st, abs, true, &up);
  bool live = r == 0 && up.found;
  if (r == 0 && !up.found) r = cli_upper_of_dir(st, abs, false, &up);
  if (r == 0 && !up.found) r = cairn_fail(st, -ENOENT, "not a --rw mount (no upper layer)");
  if (r < 0) return report_fail(r, "commit: %s: %s", dir, report_why(st, r));
  cairn_id image, layer;
  r = cairn_commit(st, up.id, normal, message, image, layer);
  if (r < 0) return report_fail(r, "commit: %s: %s", dir, report_why(st, r));
  printf("%s\n", image);
  fflush(stdout);
  if (live && (r = rebase(st, abs, up.id, image)) < 0) {
    char msg[PATH_MAX + 256];
    snprintf(msg, sizeof(msg), "commit: %s: the mount stays on its upper over the old image: %s",
             dir, r == -ENOTSUP || r == -EPERM ? "its cairnfs cannot move it" : report_why(st, r));
    report_notice(msg);
  }
  return CAIRN_EXIT_OK;
}

const struct cli_command cmd_commit = {
    .name = "commit",
    .run = commit_run,
    .usage = USAGE,
    .summary = "Turn the changes of the --rw mount at DIR into a new layer (whiteouts and opaque\n"
               "directories in the OCI form) on top of its image, and a new image NAME whose\n"
               "config is the image's with a history entry; prints the new image's id. A\n"
               "live mount then serves the new image with a fresh, empty upper layer: later\n"
               "writes go there, also through files open for writing.",
    .options = "-m, --message MESSAGE\tthe history entry's comment\n"
               "-q, --quiet\tprint the new image's id only (as without it: commit\n"
               "\tshows no progress)\n",
};
