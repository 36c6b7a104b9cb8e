/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cmd-export.c — `cairn export [-o FILE] IMAGE`: the image's merged root
 * filesystem as a tar on stdout (never to a terminal) or into FILE, its
 * progress on stderr (progress.h) unless -q/--no-progress. An image a lazy
 * pull left with files to fetch is filled first (cairn_fill), said.
 */
#include "commands.h"
#include "progress_bar.h"

#include <fcntl.h>
#include <getopt.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define USAGE "cairn export [-q | --no-progress] [-o FILE] IMAGE [> FILE.tar]"

/* FILE for writing, as podman export -o opens it (created, or emptied),
 * but never through a symlink, and an existing file only if it is a
 * regular file of ours with one link: what root writes outside the store
 * goes nowhere it was not asked to. The fd, or -errno with *why set. */
static int output_open(const char *path, const char **why) {
  /* O_NONBLOCK: a FIFO put at FILE does not block (nor wait for a
   * reader: ENXIO); it is refused below. */
  int fd = open(path, O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY, 0644);
  struct stat sb;
  *why = NULL;
  if (fd < 0) {
    if (errno == ELOOP) *why = "is a symlink; not followed";
    if (errno == ENXIO) *why = "not a regular file";
    return errno == ENXIO ? -EPERM : -errno;
  }
  if (fstat(fd, &sb) < 0) {
    int e = errno;
    close(fd);
    return -e;
  }
  if (!S_ISREG(sb.st_mode) || sb.st_uid != geteuid() || sb.st_nlink != 1) {
    close(fd);
    *why = !S_ISREG(sb.st_mode) ? "not a regular file"
           : sb.st_nlink != 1   ? "has other hard links; not written"
                                : "belongs to another user; not written";
    return -EPERM;
  }
  if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) < 0 || ftruncate(fd, 0) < 0) {
    int e = errno;
    close(fd);
    return -e;
  }
  return fd;
}

static void on_log(const char *line, void *arg) {
  (void)arg;
  fprintf(stderr, "cairn: export: %s\n", line);
}

static int export_run(struct cli *c, int argc, char **argv) {
  static const struct option opts[] = {{"quiet", no_argument, NULL, 'q'},
                                       {"no-progress", no_argument, NULL, 'q'},
                                       {"output", required_argument, NULL, 'o'},
                                       {0}};
  bool quiet = false;
  const char *output = NULL;
  int o;
  optind = 1;
  while ((o = getopt_long(argc, argv, ":qo:", opts, NULL)) != -1) {
    if (o == 'q')
      quiet = true;
    else if (o == 'o')
      output = optarg;
    else
      return cli_bad_option(USAGE, argv, o, opts);
  }
  if (argc - optind != 1) return report_usage(USAGE, "export: needs one image");
  if (!output && isatty(STDOUT_FILENO))
    return report_usage(USAGE, "export: refusing to write a tar to a terminal; redirect stdout "
                               "or give -o FILE");
  cairn_store *st;
  int code = cli_store(c, &st);
  if (code != CAIRN_EXIT_OK) return code;
  cairn_id id;
  int r = cairn_image_resolve(st, argv[optind], id);
  if (r < 0) return report_fail(r, "%s: %s", argv[optind], report_why(st, r));
  /* a lazy pull's: its files fetched first, as cairn fill */
  if ((r = cairn_fill_lazy(st, id, quiet ? NULL : on_log, NULL)) < 0)
    return report_fail(r, "%s: %s", argv[optind], report_why(st, r));
  int fd = STDOUT_FILENO;
  if (output) {
    const char *why;
    if ((fd = output_open(output, &why)) < 0)
      return report_fail(fd, "export: %s: %s", output, why ? why : strerror(-fd));
  }
  struct progress_hook hook = {
      .p = progress_new(quiet), .labels = (const char *const *)argv + optind, .n_labels = 1};
  cairn_store_set_progress(st, progress_hook, &hook);
  r = cairn_export(st, id, fd);
  cairn_store_set_progress(st, NULL, NULL);
  progress_free(hook.p);
  if (output && close(fd) < 0 && r == 0)
    r = cairn_fail(st, -errno, "%s: %s", output, strerror(errno));
  return r < 0 ? report_fail(r, "%s: %s", argv[optind], report_why(st, r)) : CAIRN_EXIT_OK;
}

const struct cli_command cmd_export = {
    .name = "export",
    .run = export_run,
    .usage = USAGE,
    .summary = "Write IMAGE's merged root filesystem as a tar to stdout (never to a terminal)\n"
               "or to FILE.",
    .options = "-o, --output FILE\twrite the tar to FILE, created or emptied as podman export's\n"
               "\t(never through a symlink; an existing FILE must be the caller's)\n"
               "-q, --quiet\tno progress on stderr (export prints no id)\n"
               "--no-progress\tthe same\n",
};
