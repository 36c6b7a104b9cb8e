/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cmd-history.c — `cairn history IMAGE`: the image config's history, as
 * podman history: newest first, the layer each entry made (or <missing>
 * for one that made none), when, by what command (cut to 45 characters
 * in a table unless --no-trunc), the layer's size, the comment. The
 * records come from cairn_history_foreach.
 */
#include "commands.h"

#include <string.h>

#define CREATED_BY_WIDTH 45 /* podman history's */

struct history_rows {
  struct cli_rows rows;
  bool table; /* cut created_by, say <missing> */
};

enum { H_ID, H_CREATED, H_CREATED_BY, H_SIZE, H_COMMENT, H_EMPTY_LAYER, H_FIELDS };
static const struct cli_field history_fields[H_FIELDS] = {
    [H_ID] = {"id", CLI_ID, false},
    [H_CREATED] = {"created", CLI_TIME, false},
    [H_CREATED_BY] = {"created_by", CLI_STR, false},
    [H_SIZE] = {"size", CLI_SIZE, false},
    [H_COMMENT] = {"comment", CLI_STR, false},
    [H_EMPTY_LAYER] = {"empty_layer", CLI_BOOL, false},
};
static const struct cli_schema history_schema = {history_fields, H_FIELDS};

static int history_row(const struct cairn_history_rec *h, void *arg) {
  struct history_rows *hr = arg;
  char by[CREATED_BY_WIDTH + 1];
  const char *created_by = h->created_by;
  if (hr->table && strlen(created_by) > CREATED_BY_WIDTH) {
    snprintf(by, sizeof(by), "%.*s...", CREATED_BY_WIDTH - 3, created_by);
    created_by = by;
  }
  struct cli_cell *c = cli_rows_add(&hr->rows, &history_schema);
  if (!c) return -ENOMEM;
  if (h->created) c[H_CREATED] = (struct cli_cell){.set = true, .i = h->created};
  c[H_SIZE] = (struct cli_cell){.set = true, .i = (int64_t)h->size};
  c[H_EMPTY_LAYER] = (struct cli_cell){.set = true, .b = h->empty_layer};
  const char *id = h->layer ? h->layer : hr->table ? "<missing>" : NULL;
  bool ok = (!id || cli_cell_set_str(&hr->rows, &c[H_ID], id)) &&
            cli_cell_set_str(&hr->rows, &c[H_CREATED_BY], created_by) &&
            cli_cell_set_str(&hr->rows, &c[H_COMMENT], h->comment);
  return ok ? 0 : -ENOMEM;
}

static int history_run(struct cli *c, int argc, char **argv) {
  struct cli_listing l;
  cairn_store *st;
  int code = cli_listing_flags(argc, argv, cmd_history.usage, 1, true, &l);
  if (code != CAIRN_EXIT_OK) return code;
  if (optind != argc - 1) return report_usage(cmd_history.usage, "history: needs one image");
  const char *image = argv[optind];
  if ((code = cli_store(c, &st)) != CAIRN_EXIT_OK) return code;
  cairn_id id;
  int r = cairn_image_resolve(st, image, id);
  struct history_rows hr = {.table = !l.json && !l.format && !l.no_trunc};
  if (r == 0) r = cairn_history_foreach(st, id, history_row, &hr);
  if (r < 0) {
    cli_rows_free(&hr.rows);
    return report_fail(r, "history: %s: %s", image, report_why(st, r));
  }
  static const char *const columns[] = {"id:ID", "created:CREATED", "created_by:CREATED BY",
                                        "size:SIZE", "comment:COMMENT"};
  code = cli_listing_print(&l, cmd_history.usage, &hr.rows, columns,
                           sizeof(columns) / sizeof(columns[0]));
  cli_rows_free(&hr.rows);
  return code;
}

const struct cli_command cmd_history = {
    .name = "history",
    .run = history_run,
    .usage = "cairn history [--json | -q | --format TEMPLATE] [--no-trunc] IMAGE",
    .summary = "Show IMAGE's history (from its config), newest first, as podman history.\n"
               "Each step: the layer it made (<missing>: none), created, created by, size,\n"
               "comment.",
    .options = "--json\tone JSON array of the entries: id (the layer's diff_id, or null),\n"
               "\tcreated (RFC 3339, or null), created_by, size (bytes), comment, "
               "empty_layer\n" CLI_LISTING_OPTIONS,
};
