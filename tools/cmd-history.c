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
  json_t *rows;
  bool table; /* cut created_by, say <missing> */
};

static int history_row(const struct cairn_history_rec *h, void *arg) {
  struct history_rows *hr = arg;
  char created[32], by[CREATED_BY_WIDTH + 1];
  if (h->created) cli_rfc3339(h->created, created, sizeof(created));
  const char *created_by = h->created_by;
  if (hr->table && strlen(created_by) > CREATED_BY_WIDTH) {
    snprintf(by, sizeof(by), "%.*s...", CREATED_BY_WIDTH - 3, created_by);
    created_by = by;
  }
  json_t *id = h->layer    ? json_string(h->layer)
               : hr->table ? json_string("<missing>")
                           : json_null();
  json_t *row =
      json_pack("{s:o s:o s:s s:I s:s s:b}", "id", id, "created",
                h->created ? json_string(created) : json_null(), "created_by", created_by, "size",
                (json_int_t)h->size, "comment", h->comment, "empty_layer", h->empty_layer);
  return row && json_array_append_new(hr->rows, row) == 0 ? 0 : -ENOMEM;
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
  struct history_rows hr = {.rows = json_array(), .table = !l.json && !l.format && !l.no_trunc};
  if (r == 0) r = hr.rows ? cairn_history_foreach(st, id, history_row, &hr) : -ENOMEM;
  if (r < 0) {
    json_decref(hr.rows);
    return report_fail(r, "history: %s: %s", image, report_why(st, r));
  }
  static const char *const columns[] = {"id:ID", "created:CREATED", "created_by:CREATED BY",
                                        "size:SIZE", "comment:COMMENT"};
  code = cli_listing_print(&l, cmd_history.usage, hr.rows, columns,
                           sizeof(columns) / sizeof(columns[0]));
  json_decref(hr.rows);
  return code;
}

const struct cli_command cmd_history = {
    .name = "history",
    .run = history_run,
    .usage = "cairn history [--json | -q | --format TEMPLATE] [--no-trunc] IMAGE",
    .summary = "Show IMAGE's history from its config, newest first, as podman history: the layer\n"
               "each step made (<missing>: none), created, created by, size, comment.",
    .options = "--json\tone JSON array of the entries: id (the layer's diff_id, or null),\n"
               "\tcreated (RFC 3339, or null), created_by, size (bytes), comment, "
               "empty_layer\n" CLI_LISTING_OPTIONS,
};
