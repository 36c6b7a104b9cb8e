/*
 * cmd-images.c — `cairn images` and `cairn layers`: what is stored, as a
 * table or, with --json, as one JSON array.
 */
#include "commands.h"

#include <getopt.h>
#include <string.h>

typedef json_t *(*listing_fn)(cairn_store *st);

static int listing(struct cli *c, int argc, char **argv, listing_fn list,
                   const char *const *columns, size_t n) {
  static const struct option opts[] = {{"json", no_argument, NULL, 'j'}, {0}};
  bool json = false;
  int o;
  optind = 1;
  while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    if (o == 'j') json = true;
    else return cli_usage("cairn images|layers [--json]", "%s: unknown option", argv[0]);
  }
  if (optind != argc) return cli_usage("cairn images|layers [--json]", "%s: takes no arguments", argv[0]);
  cairn_store *st = cli_store(c);
  if (!st) return 1;
  json_t *rows = list(st);
  if (!rows) return cli_fail(c, -EIO, argv[0]);
  if (json) cli_print_json(rows);
  else cli_print_table(rows, columns, n);
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
