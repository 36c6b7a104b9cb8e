/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cmd-commit.c — `cairn commit DIR NAME[:TAG]`: the changes of the --rw
 * mount at DIR (its upper layer; a kept one too) as a new layer on top of
 * the mount's image, and a new image named NAME (store/commit.c). Prints
 * the new image's id on stdout, as podman commit does. A live mount then
 * moves onto the new image with a fresh, empty upper (fs/upper.c's
 * rebase(), asked through the trusted.cairn.rebase xattr of the mount's
 * root) and its record names the new image, before commit returns. If the
 * mount cannot move (an older cairnfs, a failure) it stays as it was: said
 * on stderr, exit 0 (the commit is done). The move's request waits for the
 * mount's server, which a restart may replace meanwhile (the kernel resends
 * it to the next one): at most MOVE_WAIT_S seconds, then exit 1, the mount
 * moving when a server answers.
 *
 * Between its read of the upper and the move, commit freezes the mount's
 * changes (cairn_mount_freeze, fs/rw_freeze.c): a write, create, rename...
 * made meanwhile waits, and lands in the fresh upper after the move, not
 * in the upper the move drops. The freeze ends with the move, a thaw (the
 * commit failed), commit's death, or cairnfs's bound (60 s); after the
 * bound the mount does not move (exit 0, said on stderr: the image is
 * made, the mount keeps its upper, which holds every write). A restart of
 * the server keeps the freeze. The freeze is asked first: a server that
 * does not answer it in MOVE_WAIT_S makes commit exit 1, nothing made. A
 * cairnfs that cannot freeze (older) is moved as before, unfrozen.
 */
#include "commands.h"
#include "cli_upper.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#define USAGE "cairn commit [-q] [-m MESSAGE] DIR NAME[:TAG]"
/* How long the move may wait for the mount's server: its restarts back
 * off to 5 s (fs/supervisor.c), so two of them. */
#define MOVE_WAIT_S 10

struct record {
  const char *dir;
  bool found;
  pid_t pid;
  char dev[32];
  char image[CAIRN_ID_LEN + 1];
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
  snprintf(rec->image, sizeof(rec->image), "%s", m->image);
  return 1;
}

/* Moves the live mount at dir (upper id; frozen: under commit's freeze)
 * onto image: a fresh upper; its record names image when this returns. */
static int rebase(cairn_store *st, const char *dir, const char *id, const char *image,
                  bool frozen) {
  char value[2 * CAIRN_ID_LEN + 2];
  snprintf(value, sizeof(value), "%s %s", id, image);
  int r = frozen ? cairn_mount_move_frozen(dir, id, image, MOVE_WAIT_S)
                 : cairn_xattr_bounded(dir, "trusted.cairn.rebase", value, NULL, 0, MOVE_WAIT_S);
  if (r < 0) return r;
  /* The supervisor records the move too, when its server says it moved
   * (or when it takes the move over from a server that died in it): the
   * record is read back until it names image (written here if not). */
  for (int k = 0; k < 3; k++) {
    struct record rec = {.dir = dir};
    r = cairn_mounts_foreach(st, find_record, &rec);
    if (r < 0 || !rec.found || strcmp(rec.image, image) == 0) break;
    r = cairn_mount_record(st, dir, image, rec.pid, rec.dev, true);
    if (r < 0) break;
  }
  return r < 0 ? r : 0;
}

/* Says on stderr each entry the commit left out of the layer. */
static void say_left_out(const char *dir, const cairn_report *left) {
  for (size_t i = 0; i < left->n_lines; i++) {
    char msg[PATH_MAX + 1200];
    snprintf(msg, sizeof(msg), "commit: %s: %s (a layer cannot hold one)", dir, left->lines[i]);
    report_notice(msg);
  }
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
  if (r < 0) return report_fail(r, "commit: %s: %s", dir, cairn_path_why(r));
  struct cli_upper up;
  r = cli_upper_of_dir(st, abs, true, &up);
  bool live = r == 0 && up.found;
  if (r == 0 && !up.found) r = cli_upper_of_dir(st, abs, false, &up);
  if (r == 0 && !up.found) r = cairn_fail(st, -ENOENT, "not a --rw mount (no upper layer)");
  if (r < 0) return report_fail(r, "commit: %s: %s", dir, report_why(st, r));
  /* The mount's changes wait from here to the move (an older cairnfs
   * cannot: moved unfrozen, as before). */
  cairn_freeze fz = {.hold_fd = -1, .pid = -1};
  bool frozen = false;
  if (live) {
    r = cairn_mount_freeze(abs, up.id, MOVE_WAIT_S, &fz);
    frozen = r == 0;
    if (r == -EBUSY)
      return report_fail(r, "commit: %s: another commit of this mount is under way", dir);
    if (r == -ETIMEDOUT)
      return report_fail(r, "commit: %s: its server did not answer in %d s", dir, MOVE_WAIT_S);
    if (r < 0 && r != -ENOTSUP)
      return report_fail(r, "commit: %s: cannot pause its writes: %s", dir, strerror(-r));
  }
  cairn_id image, layer;
  cairn_report left = {0}; /* what no layer holds (sockets), said on stderr */
  r = cairn_commit_report(st, up.id, normal, message, image, layer, &left);
  say_left_out(dir, &left);
  cairn_report_free(&left);
  if (r < 0) {
    if (frozen) cairn_mount_thaw(abs, up.id, &fz, true);
    return report_fail(r, "commit: %s: %s", dir, report_why(st, r));
  }
  printf("%s\n", image);
  fflush(stdout);
  cairn_test_point(st, "commit: upper read");
  if (live) r = rebase(st, abs, up.id, image, frozen);
  if (frozen) cairn_mount_thaw(abs, up.id, &fz, false); /* the move thawed it */
  if (live && r == -ETIMEDOUT)
    return report_fail(r,
                       frozen ? "commit: %s: its server did not answer the move in %d s; the "
                                "mount stays on its upper over the old image unless it moved "
                                "onto %.12s"
                              : "commit: %s: its server did not answer the move in %d s; the "
                                "mount moves onto %.12s when a server answers",
                       dir, MOVE_WAIT_S, image);
  if (live && r < 0) {
    char msg[PATH_MAX + 256];
    snprintf(msg, sizeof(msg), "commit: %s: the mount stays on its upper over the old image: %s",
             dir,
             r == -EBUSY ? "its writes went on before the move (paused 60 s at most)"
             : r == -ENOTSUP || r == -EPERM ? "its cairnfs cannot move it"
                                            : report_why(st, r));
    report_notice(msg);
  }
  return CAIRN_EXIT_OK;
}

const struct cli_command cmd_commit = {
    .name = "commit",
    .run = commit_run,
    .usage = USAGE,
    .summary = "Turn the changes of the --rw mount at DIR into a new layer and image NAME.\n"
               "The layer (whiteouts and opaque directories in the OCI form) goes on top of\n"
               "the mount's image; NAME's config is the image's with a history entry; prints\n"
               "the new image's id.\n"
               "A live mount then serves the new image with a fresh, empty upper layer: later\n"
               "writes go there, also through files open for writing. The move waits 10 s at\n"
               "most for the mount's server (exit 1 past that; the mount moves when it answers).\n"
               "From its read of the changes to the move, commit pauses the mount's writes\n"
               "(reads go on), 60 s at most: past that the writes go on and the mount stays\n"
               "on its upper over the old image (said on stderr; the new image is made).\n"
               "Sockets are left out, as podman commit leaves them, each said on stderr;\n"
               "sparse files with more than 64 GiB of holes in all fail it (exit 5), naming\n"
               "the file and its owner.",
    .options = "-m, --message MESSAGE\tthe history entry's comment\n"
               "-q, --quiet\tprint the new image's id only (as without it: commit\n"
               "\tshows no progress)\n",
};
