/*
 * cmd-inspect.c — `cairn inspect IMAGE`: the image's config, layers and
 * pins as JSON.
 */
#include "commands.h"

#include <stdio.h>
#include <string.h>

int cmd_inspect(struct cli *c, int argc, char **argv) {
  int i = 1;
  if (i < argc && strcmp(argv[i], "--json") == 0) i++; /* inspect is JSON already */
  if (argc - i != 1) return cli_usage("cairn inspect IMAGE", "inspect: needs one image");
  cairn_store *st = cli_store(c);
  if (!st) return 1;
  cairn_id id;
  int r = cairn_image_resolve(st, argv[i], id);
  if (r < 0) return cli_fail(c, r, argv[i]);
  json_t *info = cairn_inspect_json(st, id);
  if (!info) return cli_fail(c, -ENOENT, argv[i]);
  json_dumpf(info, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  fputc('\n', stdout);
  json_decref(info);
  return 0;
}
