/*
 * cmd-images.c — `cairn images` and `cairn layers`: what is stored, as a
 * table or, with --json, as one JSON array.
 */
#include "commands.h"

#include <string.h>

/* Collects the rows of a listing into rows (cairn_images_foreach or
 * cairn_layers_foreach with its cli_*_row). */
typedef int (*listing_fn)(cairn_store *st, struct cli_rows *rows);

static int images_collect(cairn_store *st, struct cli_rows *rows) {
  return cairn_images_foreach(st, cli_image_row, rows);
}

static int layers_collect(cairn_store *st, struct cli_rows *rows) {
  return cairn_layers_foreach(st, cli_layer_row, rows);
}

static int listing(struct cli *c, int argc, char **argv, const char *usage, listing_fn list,
                   const char *const *columns, size_t n) {
  struct cli_listing l;
  cairn_store *st;
  int code = cli_listing_flags(argc, argv, usage, 0, true, &l);
  if (code == CAIRN_EXIT_OK) code = cli_store(c, &st);
  if (code != CAIRN_EXIT_OK) return code;
  struct cli_rows rows = {0};
  int r = list(st, &rows);
  if (r < 0) {
    cli_rows_free(&rows);
    return report_fail(r, "%s: %s", argv[0], report_why(st, r));
  }
  code = cli_listing_print(&l, usage, &rows, columns, n);
  cli_rows_free(&rows);
  return code;
}

static int images_run(struct cli *c, int argc, char **argv) {
  static const char *const cols[] = {"id:IMAGE ID", "names:NAMES",     "layers:LAYERS",
                                     "size:SIZE",   "created:CREATED", "pinned:PINNED"};
  return listing(c, argc, argv, cmd_images.usage, images_collect, cols, 6);
}

static int layers_run(struct cli *c, int argc, char **argv) {
  static const char *const cols[] = {"id:LAYER (DIFF_ID)", "size:SIZE", "entries:ENTRIES",
                                     "images:IMAGES", "pinned:PINNED"};
  return listing(c, argc, argv, cmd_layers.usage, layers_collect, cols, 5);
}

const struct cli_command cmd_images = {
    .name = "images",
    .run = images_run,
    .usage = "cairn images [--json | -q | --format TEMPLATE] [--no-trunc]",
    .summary =
        "List the images, newest first: id, names, layers, size, created (relative), pinned.",
    .options = "--json\tone JSON array of every image, exact numbers, times in RFC "
               "3339\n" CLI_LISTING_OPTIONS,
};

const struct cli_command cmd_layers = {
    .name = "layers",
    .run = layers_run,
    .usage = "cairn layers [--json | -q | --format TEMPLATE] [--no-trunc]",
    .summary = "List the layers: diff_id, size, entries, images using it, pinned.",
    .options = "--json\tone JSON array of every layer, exact numbers\n" CLI_LISTING_OPTIONS,
};
