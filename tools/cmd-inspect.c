/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cmd-inspect.c — `cairn inspect IMAGE`: the image's config, layers and
 * pins as JSON.
 */
#include "commands.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>

struct inspected {
  json_t *pins;                          /* handed to the printed object */
  const char *format;                    /* --format TEMPLATE, or NULL */
  int code;                              /* the template's exit code */
  uint64_t pending_files, pending_bytes; /* a lazy pull's, not fetched yet */
  int access_files;                      /* its recorded access list's, 0: none */
  char **unverified;                     /* diff_ids a lazy pull recorded, not proven yet */
  size_t n_unverified;
};

static int inspected_print(const struct cairn_image_info *info, void *arg) {
  struct inspected *out = arg;
  json_t *obj = cli_inspect_json(info, out->pins);
  out->pins = NULL;
  if (!obj) return -ENOMEM;
  if (out->pending_files) /* a lazy pull's image: how much is not here yet */
    json_object_set_new(obj, "Pending",
                        json_pack("{sI sI}", "Files", (json_int_t)out->pending_files, "Bytes",
                                  (json_int_t)out->pending_bytes));
  if (out->n_unverified) { /* a lazy pull's layers whose diff_id is not proven yet */
    json_t *u = json_array();
    for (size_t i = 0; u && i < out->n_unverified; i++) {
      char d[80];
      snprintf(d, sizeof d, "sha256:%s", out->unverified[i]);
      json_array_append_new(u, json_string(d));
    }
    json_object_set_new(obj, "Unverified", u);
  }
  if (out->access_files > 0) /* cairn mount --record-access's */
    json_object_set_new(obj, "AccessList",
                        json_pack("{sI}", "Files", (json_int_t)out->access_files));
  if (out->format) { /* podman's fields first, then cairn's JSON */
    json_t *podman = cli_inspect_podman_json(info);
    if (!podman) {
      json_decref(obj);
      return -ENOMEM;
    }
    out->code = cli_json_template_print("inspect", cmd_inspect.usage, out->format, podman, obj);
    json_decref(podman);
    json_decref(obj);
    return 0;
  }
  json_dumpf(obj, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  fputc('\n', stdout);
  json_decref(obj);
  return 0;
}

static int inspect_run(struct cli *c, int argc, char **argv) {
  static const struct option opts[] = {
      {"json", no_argument, NULL, 'j'}, {"format", required_argument, NULL, 'f'}, {0}};
  const char *format = NULL;
  int o;
  optind = 1;
  while ((o = getopt_long(argc, argv, ":f:", opts, NULL)) != -1) { /* inspect is JSON already */
    if (o == 'f')
      format = strcmp(optarg, "json") == 0 ? NULL : optarg;
    else if (o != 'j')
      return cli_bad_option(cmd_inspect.usage, argv, o, opts);
  }
  int i = optind;
  if (argc - i != 1) return report_usage(cmd_inspect.usage, "inspect: needs one image");
  cairn_store *st;
  int code = cli_store(c, &st);
  if (code != CAIRN_EXIT_OK) return code;
  cairn_id id;
  int r = cairn_image_resolve(st, argv[i], id);
  if (r < 0) return report_fail(r, "%s: %s", argv[i], report_why(st, r));
  struct cli_rows rows = {0};
  json_t *pins = cairn_pins_foreach(st, id, cli_pin_row, &rows) == 0 ? cli_rows_json(&rows) : NULL;
  cli_rows_free(&rows); /* pins NULL: left out, as a listing that failed */
  struct inspected out = {.pins = pins, .format = format};
  if ((r = cairn_image_pending(st, id, &out.pending_files, &out.pending_bytes)) < 0) {
    json_decref(pins);
    return report_fail(r, "%s: %s", argv[i], report_why(st, r));
  }
  if ((out.access_files = cairn_access_list_count(st, id)) < 0) {
    json_decref(pins);
    return report_fail(out.access_files, "%s: %s", argv[i], report_why(st, out.access_files));
  }
  if ((r = cairn_image_unverified(st, id, &out.unverified, &out.n_unverified)) < 0) {
    json_decref(pins);
    return report_fail(r, "%s: %s", argv[i], report_why(st, r));
  }
  r = cairn_inspect(st, id, inspected_print, &out);
  for (size_t k = 0; k < out.n_unverified; k++) free(out.unverified[k]);
  free(out.unverified);
  json_decref(out.pins);
  return r < 0 ? report_fail(r, "%s: %s", argv[i], report_why(st, r)) : out.code;
}

const struct cli_command cmd_inspect = {
    .name = "inspect",
    .run = inspect_run,
    .usage = "cairn inspect [--json | -f TEMPLATE] IMAGE",
    .summary = "Print IMAGE's names, config, layers and pins as JSON.\n"
               "created is the image's creation time (its config's), stored when this store\n"
               "got it. Pending: a lazy pull's files not here yet; Unverified: the diff_ids\n"
               "of its layers a lazy pull recorded that no rebuilt tar has proven yet (cairn\n"
               "fill proves them); AccessList: how many files the image's recorded access\n"
               "list names (cairn mount's record-access; push puts them first).",
    .options = "--json\taccepted for habit: the output is JSON already\n"
               "-f, --format TEMPLATE\tprint TEMPLATE, as podman image inspect: its fields\n"
               "\t({{.Id}}, {{.Digest}}, {{.RepoTags}}, {{.Architecture}}, {{.Os}},\n"
               "\t{{.Config.Cmd}}, {{.RootFS.Layers}}, {{.Labels}}, {{.History}}...),\n"
               "\tthen the JSON's keys ({{.Names}}, {{.Layers}}; case aside);\n"
               "\t{{json .Key}}, {{range .Key}}...{{.}}...{{end}}, \\t, \\n\n",
};
