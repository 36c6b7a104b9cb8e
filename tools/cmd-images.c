/* SPDX-License-Identifier: Apache-2.0 */
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

/* What `images NAME` keeps, as podman images NAME: the image NAME
 * resolves to, and with no tag given every tag of its repository. */
struct images_filter {
  char id[CAIRN_ID_LEN + 1]; /* the image it resolves to, or "" */
  char repo[512];            /* "" if a tag was given; else the normalised repository */
  char shrt[512];            /* the repository as typed, if short (no host), for /REPO */
};

static bool images_keep(const struct cli_rows *rows, const struct cli_cell *row, void *arg) {
  const struct images_filter *f = arg;
  const struct cli_cell *id = cli_row_get(rows, row, "id");
  const struct cli_cell *names = cli_row_get(rows, row, "names");
  if (id && id->s && f->id[0] && strcmp(id->s, f->id) == 0) return true;
  for (uint32_t i = 0; f->repo[0] && names && i < names->n; i++) {
    const char *n = ((const char *const *)names->list)[i];
    size_t len = strrchr(n, ':') ? (size_t)(strrchr(n, ':') - n) : strlen(n);
    size_t s = strlen(f->shrt);
    if ((len == strlen(f->repo) && strncmp(n, f->repo, len) == 0) ||
        (s && len > s && n[len - s - 1] == '/' && strncmp(n + len - s, f->shrt, s) == 0))
      return true;
  }
  return false;
}

/* An images table's columns, as podman images's, then cairn's own; a
 * template also has {{.Names}} (every name of the row's image). PENDING
 * (the bytes a lazy pull has not fetched yet) and UNVERIFIED (its layers
 * whose diff_id is not proven yet) only when a listed image is a lazy
 * pull's, partial or unverified: a store without one lists as before. */
static const char *const image_columns[] = {"repository:REPOSITORY", "tag:TAG",    "id:IMAGE ID",
                                            "created:CREATED",       "size:SIZE",  "layers:LAYERS",
                                            "pinned:PINNED",         "names:NAMES"};
static const char *const image_columns_pending[] = {"repository:REPOSITORY",
                                                    "tag:TAG",
                                                    "id:IMAGE ID",
                                                    "created:CREATED",
                                                    "size:SIZE",
                                                    "layers:LAYERS",
                                                    "pinned:PINNED",
                                                    "pending_bytes:PENDING",
                                                    "unverified:UNVERIFIED",
                                                    "names:NAMES"};

static const char *const image_columns_template[] = {"repository:REPOSITORY",
                                                     "tag:TAG",
                                                     "id:IMAGE ID",
                                                     "created:CREATED",
                                                     "size:SIZE",
                                                     "layers:LAYERS",
                                                     "pinned:PINNED",
                                                     "pending_files:PENDING FILES",
                                                     "pending_bytes:PENDING",
                                                     "unverified:UNVERIFIED",
                                                     "names:NAMES"};

static bool any_pending(const struct cli_rows *rows) {
  for (size_t i = 0; rows->schema && i < rows->n; i++) {
    const struct cli_cell *row = rows->cells + i * rows->schema->n;
    const struct cli_cell *c = cli_row_get(rows, row, "pending_bytes");
    const struct cli_cell *u = cli_row_get(rows, row, "unverified");
    if ((c && c->set) || (u && u->set)) return true;
  }
  return false;
}

static bool dangling_keep(const struct cli_rows *rows, const struct cli_cell *row, void *arg) {
  const struct cli_cell *names = cli_row_get(rows, row, "names");
  bool untagged = !names || names->n == 0;
  return untagged == *(const bool *)arg;
}

/* images's podman flags, taken out of argv (to "--" or its end) before the
 * listing's: -a, --all (every image: cairn has no intermediate ones) and
 * -f, --filter dangling=BOOL | reference=NAME. *dangling: -1 no filter, else
 * whether to keep the untagged images only (1) or the tagged only (0). */
static int images_podman_flags(int *argc, char **argv, const char *usage, int *dangling,
                               const char **reference) {
  int out = 1;
  *dangling = -1;
  for (int i = 1; i < *argc; i++) {
    const char *a = argv[i], *f = NULL;
    if (strcmp(a, "--") == 0) {
      while (i < *argc) argv[out++] = argv[i++];
      break;
    }
    if (strcmp(a, "-a") == 0 || strcmp(a, "--all") == 0) continue;
    if (strcmp(a, "-f") == 0 || strcmp(a, "--filter") == 0) {
      if (i + 1 >= *argc) return report_usage(usage, "images: %s: needs a value", a);
      f = argv[++i];
    } else if (strncmp(a, "--filter=", 9) == 0) {
      f = a + 9;
    } else {
      argv[out++] = argv[i];
      continue;
    }
    if (strcmp(f, "dangling=true") == 0 || strcmp(f, "dangling=false") == 0)
      *dangling = f[9] == 't';
    else if (strncmp(f, "reference=", 10) == 0 && f[10])
      *reference = f + 10;
    else
      return report_usage(usage,
                          "images: --filter %s: not a filter (dangling=true|false, "
                          "reference=NAME)",
                          f);
  }
  argv[out] = NULL;
  *argc = out;
  return CAIRN_EXIT_OK;
}

static int listing(struct cli *c, int argc, char **argv, const char *usage, listing_fn list,
                   const char *const *columns, size_t n) {
  struct cli_listing l;
  cairn_store *st;
  bool images = list == images_collect;
  int dangling = -1;
  const char *reference = NULL;
  int code = images ? images_podman_flags(&argc, argv, usage, &dangling, &reference) : 0;
  if (code == CAIRN_EXIT_OK) code = cli_listing_flags(argc, argv, usage, images ? 1 : 0, true, &l);
  if (code == CAIRN_EXIT_OK && reference && optind < argc)
    return report_usage(usage, "images: a NAME or --filter reference=, not both");
  if (code == CAIRN_EXIT_OK) code = cli_store_open(c, CLI_STORE_MISSING_OK, &st);
  if (code != CAIRN_EXIT_OK) return code;
  struct cli_rows rows = {0};
  int r = st ? list(st, &rows) : 0; /* no store: an empty one */
  if (r < 0) {
    cli_rows_free(&rows);
    return report_fail(r, "%s: %s", argv[0], report_why(st, r));
  }
  if (images && dangling >= 0) {
    bool keep = dangling == 1;
    cli_rows_filter(&rows, dangling_keep, &keep);
  }
  if (images && st && (optind < argc || reference)) {
    const char *ref = reference ? reference : argv[optind];
    struct images_filter f = {0};
    char norm[512];
    if (cairn_image_resolve(st, ref, f.id) < 0) f.id[0] = '\0';
    const char *slash = strrchr(ref, '/');
    if (!strchr(slash ? slash : ref, ':') && cairn_name_normalize(ref, norm, sizeof(norm)) == 0) {
      snprintf(f.repo, sizeof(f.repo), "%.*s", (int)(strrchr(norm, ':') - norm), norm);
      if (strncmp(f.repo, "localhost/", 10) == 0 && strncmp(ref, "localhost/", 10) != 0)
        memcpy(f.shrt, f.repo + 10, strlen(f.repo + 10) + 1);
    }
    cli_rows_filter(&rows, images_keep, &f);
  }
  struct cli_rows by_name = {0};
  if (images && l.format) { /* {{.Pending_files}}, {{.Pending_bytes}}, {{.Unverified}}: empty if
                               complete and proven */
    columns = image_columns_template;
    n = sizeof(image_columns_template) / sizeof(image_columns_template[0]);
  } else if (images && !l.json && !l.quiet && any_pending(&rows)) {
    columns = image_columns_pending;
    n = sizeof(image_columns_pending) / sizeof(image_columns_pending[0]);
  }
  if (images && !l.json && !l.quiet) { /* podman's rows: one per name */
    if (cli_image_rows_by_name(&rows, &by_name) < 0) {
      cli_rows_free(&by_name);
      cli_rows_free(&rows);
      return report_fail(-ENOMEM, "%s: out of memory", argv[0]);
    }
    if (!l.format) n--; /* NAMES: for templates only */
  }
  code = cli_listing_print(&l, usage, by_name.schema ? &by_name : &rows, columns, n);
  cli_rows_free(&by_name);
  cli_rows_free(&rows);
  return code;
}

static int images_run(struct cli *c, int argc, char **argv) {
  return listing(c, argc, argv, cmd_images.usage, images_collect, image_columns,
                 sizeof(image_columns) / sizeof(image_columns[0]));
}

static int layers_run(struct cli *c, int argc, char **argv) {
  static const char *const cols[] = {"id:LAYER (DIFF_ID)", "size:SIZE", "entries:ENTRIES",
                                     "images:IMAGES", "pinned:PINNED"};
  return listing(c, argc, argv, cmd_layers.usage, layers_collect, cols, 5);
}

const struct cli_command cmd_images = {
    .name = "images",
    .run = images_run,
    .usage = "cairn images [--json | -q | --format TEMPLATE] [--no-trunc] [-a]\n"
             "                    [--filter dangling=BOOL|reference=NAME] [NAME]",
    .summary = "List the images, newest stored first, a row per name as podman images.\n"
               "The columns: repository, tag (<none> <none>: no name), id, created (the\n"
               "image's, from its config, relative), size, layers, pinned; --json: an object\n"
               "per image (its names, stored too).\n"
               "A partial image (pull --lazy; cairn fill completes it) has a PENDING column\n"
               "(the bytes not fetched yet) and, in --json, pending_files and pending_bytes;\n"
               "an image with layers whose diff_id is not proven yet (pull --lazy; cairn fill\n"
               "proves it) an UNVERIFIED column (how many), unverified in --json. The columns\n"
               "are there only when some image is a lazy pull's.\n"
               "NAME: only the image it names, or with no tag every tag of its repository (as\n"
               "podman images NAME: alpine lists docker.io/library/alpine's).",
    .options = "--json\tone JSON array of every image, exact numbers, times in RFC "
               "3339\n" CLI_LISTING_OPTIONS
               "-a, --all\taccepted for habit: every image is listed (none is intermediate)\n"
               "-f, --filter F\tas podman's, F: dangling=true, only the images with no name\n"
               "\t(<none>); dangling=false, only those with one; reference=NAME, as NAME\n",
};

const struct cli_command cmd_layers = {
    .name = "layers",
    .run = layers_run,
    .usage = "cairn layers [--json | -q | --format TEMPLATE] [--no-trunc]",
    .summary = "List the layers: diff_id, size, entries, images using it, pinned.",
    .options = "--json\tone JSON array of every layer, exact numbers\n" CLI_LISTING_OPTIONS,
};
