/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cmd-tag.c — `cairn tag IMAGE NAME[:TAG]...`: more names for an image, as
 * podman tag (a name that named another image moves to this one). Quiet
 * on success, as podman tag is.
 */
#include "commands.h"

static int tag_run(struct cli *c, int argc, char **argv) {
  int code = cli_no_options(argc, argv, cmd_tag.usage, false);
  if (code != CAIRN_EXIT_OK) return code;
  if (argc - optind < 2) return report_usage(cmd_tag.usage, "tag: needs an image and a name");
  cairn_store *st;
  if ((code = cli_store(c, &st)) != CAIRN_EXIT_OK) return code;
  const char *image = argv[optind];
  for (int i = optind + 1; i < argc; i++) { /* every name valid before any is set */
    char norm[512];
    if (cairn_name_normalize(argv[i], norm, sizeof(norm)) < 0)
      return report_fail(-EINVAL, "tag: %s: not a valid NAME[:TAG]", argv[i]);
  }
  for (int i = optind + 1; i < argc; i++) {
    cairn_id id;
    int r = cairn_tag(st, image, argv[i], id);
    if (r < 0) return report_fail(r, "tag: %s: %s", image, report_why(st, r));
  }
  return CAIRN_EXIT_OK;
}

const struct cli_command cmd_tag = {
    .name = "tag",
    .run = tag_run,
    .usage = "cairn tag IMAGE NAME[:TAG]...",
    .summary = "Give IMAGE more names, as podman tag (the tag defaults to latest).\n"
               "A name that named another image moves to IMAGE.",
};
