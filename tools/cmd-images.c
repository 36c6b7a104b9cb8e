/*
 * cmd-images.c — `cairn images` and `cairn layers`: what is stored, as a
 * table or, with --json, as one JSON array.
 */
#include "commands.h"

#include <string.h>

typedef json_t *(*listing_fn)(cairn_store *st);

static int listing(struct cli *c, int argc, char **argv, listing_fn list,
                   const char *const *columns, size_t n) {
  bool json;
  int code = cli_listing_flags(argc, argv, "cairn images|layers [--json]", 0, &json);
  if (code) return code;
  cairn_store *st = cli_store(c);
  if (!st) return 1;
  json_t *rows = list(st);
  if (!rows) return cli_fail(c, -EIO, argv[0]);
  if (json)
    cli_print_json(rows);
  else
    cli_print_table(rows, columns, n);
  json_decref(rows);
  return 0;
}

int cmd_images(struct cli *c, int argc, char **argv) {
  static const char *const cols[] = {"id:IMAGE ID", "names:NAMES", "layers:LAYERS", "size:SIZE",
                                     "pinned:PINNED"};
  return listing(c, argc, argv, cairn_images_json, cols, 5);
}

int cmd_layers(struct cli *c, int argc, char **argv) {
  static const char *const cols[] = {"id:LAYER (DIFF_ID)", "size:SIZE", "entries:ENTRIES",
                                     "images:IMAGES", "pinned:PINNED"};
  return listing(c, argc, argv, cairn_layers_json, cols, 5);
}
