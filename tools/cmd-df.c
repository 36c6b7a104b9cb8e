/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cmd-df.c — `cairn df [--json]`: how much the store holds, as podman
 * system df: images, layers, blobs and kept compressed layers, each
 * counted once (a layer several images use is counted once), what is
 * shared, what `cairn gc` would free, what is pinned. The numbers are
 * cairn_df's; the table makes them human, --json gives them exact.
 */
#include "commands.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>

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
  static const struct option opts[] = {
      {"json", no_argument, NULL, 'j'}, {"format", required_argument, NULL, 'f'}, {0}};
  struct cli_listing l = {.cmd = argv[0]};
  cairn_store *st;
  int o, code = CAIRN_EXIT_OK;
  optind = 1;
  while ((o = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
    if (o == 'j')
      l.json = true;
    else if (o == 'f' && strcmp(optarg, "json") == 0)
      l.json = true;
    else if (o == 'f')
      l.format = optarg;
    else
      return cli_bad_option(cmd_df.usage, argv, o, opts);
  }
  if (optind < argc) return report_usage(cmd_df.usage, "df: takes no arguments");
  if (code == CAIRN_EXIT_OK) code = cli_store(c, &st);
  if (code != CAIRN_EXIT_OK) return code;
  struct cairn_df df;
  int r = cairn_df(st, &df);
  if (r < 0) return report_fail(r, "df: %s", report_why(st, r));
  if (l.json || l.format) {
    json_t *rows = json_pack("[o, o, o, o]", df_class_json("images", &df.images),
                             df_class_json("layers", &df.layers), df_class_json("blobs", &df.blobs),
                             df_class_json("compressed", &df.compressed));
    if (!rows) return report_fail(-ENOMEM, "df: out of memory");
    /* what lazy pulls have not fetched yet, with the images */
    json_t *im = json_array_get(rows, 0);
    json_object_set_new(im, "pending_count", json_integer((json_int_t)df.pending_images));
    json_object_set_new(im, "pending_files", json_integer((json_int_t)df.pending_files));
    json_object_set_new(im, "pending_bytes", json_integer((json_int_t)df.pending_bytes));
    size_t i;
    json_t *row;
    if (l.json) cli_print_json(rows);
    json_array_foreach(rows, i, row) { /* --format: each class by the template */
      if (l.format &&
          (code = cli_json_template_print("df", cmd_df.usage, l.format, row, NULL)) != 0)
        break;
    }
    json_decref(rows);
    return code;
  }
  printf("%-10s  %6s  %10s  %10s  %10s  %-16s  %s\n", "TYPE", "TOTAL", "SIZE", "SHARED", "UNIQUE",
         "RECLAIMABLE", "PINNED");
  df_table_row("Images", &df.images);
  df_table_row("Layers", &df.layers);
  df_table_row("Blobs", &df.blobs);
  df_table_row("Compressed", &df.compressed);
  if (df.pending_files) { /* a lazy pull's files not fetched yet: none stored */
    char size[32];
    cairn_human_size(df.pending_bytes, size, sizeof(size));
    printf("%-10s  %6llu  %10s  %10s  %10s  %-16s  %s\n", "Pending",
           (unsigned long long)df.pending_files, size, "-", "-", "-", "-");
  }
  return CAIRN_EXIT_OK;
}

const struct cli_command cmd_df = {
    .name = "df",
    .run = df_run,
    .usage = "cairn df [--json | --format TEMPLATE]",
    .summary = "Show the store's disk usage, as podman system df.\n"
               "Images, layers, blobs and the compressed layers pulls keep (for podman's\n"
               "Additional Layer Store), each\n"
               "counted once (a layer several images use counts once), shared by several or\n"
               "unique, reclaimable (what cairn gc would free) and pinned.\n"
               "Pending (a row only when there are some): the files lazy pulls have not\n"
               "fetched yet (pull --lazy; cairn fill fetches them) and their bytes, which\n"
               "the store does not hold; in --json, the images object's pending_count\n"
               "(partial images), pending_files and pending_bytes.",
    .options = "--json\tone JSON array (images, layers, blobs, compressed), exact numbers of "
               "bytes\n"
               "--format TEMPLATE\teach class as TEMPLATE: {{.Key}} a key of --json's objects\n"
               "\t({{.Type}}, {{.Bytes}}, {{.Reclaimable_bytes}}...), \\t, \\n;\n"
               "\t--format json is --json\n",
};
