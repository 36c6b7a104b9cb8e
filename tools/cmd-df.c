/*
 * cmd-df.c — `cairn df [--json]`: how much the store holds, as podman
 * system df: images, layers, blobs and kept compressed layers, each
 * counted once (a layer several images use is counted once), what is
 * shared, what `cairn gc` would free, what is pinned. The numbers are
 * cairn_df's; the table makes them human, --json gives them exact.
 */
#include "commands.h"

#include <stdio.h>

static json_t *df_class_json(const char *type, const struct cairn_df_class *d) {
  return json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "type", type, "count",
                   (json_int_t)d->count, "bytes", (json_int_t)d->bytes, "shared_count",
                   (json_int_t)d->shared_count, "shared_bytes", (json_int_t)d->shared_bytes,
                   "unique_bytes", (json_int_t)(d->bytes - d->shared_bytes), "reclaimable_count",
                   (json_int_t)d->reclaimable_count, "reclaimable_bytes",
                   (json_int_t)d->reclaimable_bytes, "pinned_count", (json_int_t)d->pinned_count,
                   "pinned_bytes", (json_int_t)d->pinned_bytes);
}

static void df_table_row(const char *type, const struct cairn_df_class *d) {
  char size[32], shared[32], unique[32], recl[32], pinned[32];
  cairn_human_size(d->bytes, size, sizeof(size));
  cairn_human_size(d->shared_bytes, shared, sizeof(shared));
  cairn_human_size(d->bytes - d->shared_bytes, unique, sizeof(unique));
  cairn_human_size(d->reclaimable_bytes, recl, sizeof(recl));
  cairn_human_size(d->pinned_bytes, pinned, sizeof(pinned));
  unsigned pct = d->bytes ? (unsigned)(d->reclaimable_bytes * 100 / d->bytes) : 0;
  char recl_cell[48];
  snprintf(recl_cell, sizeof(recl_cell), "%s (%u%%)", recl, pct);
  printf("%-10s  %6llu  %10s  %10s  %10s  %-16s  %llu (%s)\n", type, (unsigned long long)d->count,
         size, shared, unique, recl_cell, (unsigned long long)d->pinned_count, pinned);
}

static int df_run(struct cli *c, int argc, char **argv) {
  struct cli_listing l;
  cairn_store *st;
  int code = cli_listing_flags(argc, argv, cmd_df.usage, 0, false, &l);
  if (code == CAIRN_EXIT_OK) code = cli_store(c, &st);
  if (code != CAIRN_EXIT_OK) return code;
  struct cairn_df df;
  int r = cairn_df(st, &df);
  if (r < 0) return report_fail(r, "df: %s", report_why(st, r));
  if (l.json) {
    json_t *rows = json_pack("[o, o, o, o]", df_class_json("images", &df.images),
                             df_class_json("layers", &df.layers), df_class_json("blobs", &df.blobs),
                             df_class_json("compressed", &df.compressed));
    if (!rows) return report_fail(-ENOMEM, "df: out of memory");
    cli_print_json(rows);
    json_decref(rows);
    return CAIRN_EXIT_OK;
  }
  printf("%-10s  %6s  %10s  %10s  %10s  %-16s  %s\n", "TYPE", "TOTAL", "SIZE", "SHARED", "UNIQUE",
         "RECLAIMABLE", "PINNED");
  df_table_row("Images", &df.images);
  df_table_row("Layers", &df.layers);
  df_table_row("Blobs", &df.blobs);
  df_table_row("Compressed", &df.compressed);
  return CAIRN_EXIT_OK;
}

const struct cli_command cmd_df = {
    .name = "df",
    .run = df_run,
    .usage = "cairn df [--json]",
    .summary = "Show the store's disk usage, as podman system df: images, layers, blobs and\n"
               "the compressed layers pulls keep (for podman's Additional Layer Store), each\n"
               "counted once (a layer several images use counts once), shared by several or\n"
               "unique, reclaimable (what cairn gc would free) and pinned.",
    .options = "--json\tone JSON array (images, layers, blobs, compressed), exact numbers of "
               "bytes\n",
};
