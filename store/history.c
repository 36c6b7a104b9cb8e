/* SPDX-License-Identifier: Apache-2.0 */
/*
 * history.c — `cairn history IMAGE`: the image config's history, as podman
 * history shows it: one record per entry, newest first, each entry that
 * made a layer (not "empty_layer") matched with the image's layers in
 * order, bottom first, for its id and size. A config with no history gives
 * one bare record per layer, as podman does; entries beyond the layers
 * (a config that claims more) get no layer rather than a wrong one.
 */
#include "libcairn_store.h"

#include <string.h>
#include <time.h>

/* An RFC 3339 time ("2023-01-02T03:04:05.123Z", "...+02:00") in seconds
 * since the epoch; 0 if s is none. */
static int64_t rfc3339_seconds(const char *s) {
  struct tm tm = {0};
  const char *p = s ? strptime(s, "%Y-%m-%dT%H:%M:%S", &tm) : NULL;
  if (!p) return 0;
  if (*p == '.')
    for (p++; *p >= '0' && *p <= '9'; p++)
      ;
  int64_t t = (int64_t)timegm(&tm), off = 0;
  if ((*p == '+' || *p == '-') && strlen(p) == 6 && p[3] == ':')
    off = (int64_t)(((p[1] - '0') * 10 + (p[2] - '0')) * 3600 +
                    ((p[4] - '0') * 10 + (p[5] - '0')) * 60) *
          (*p == '+' ? 1 : -1);
  else if (*p != 'Z' && *p != 'z' && *p != '\0')
    return 0;
  return t - off;
}

struct history_walk {
  cairn_history_fn fn;
  void *arg;
};

static const char *string_or_empty(const json_t *o, const char *key) {
  const char *s = json_string_value(json_object_get(o, key));
  return s ? s : "";
}

static int history_walk(const struct cairn_image_info *info, void *arg) {
  struct history_walk *w = arg;
  cn_autojson json_t *cfg = json_loads(info->config, 0, NULL);
  if (!cfg) return -EBADMSG;
  json_t *hist = json_object_get(cfg, "history");
  size_t n = json_array_size(hist);
  if (n == 0) { /* no history: one record per layer */
    for (size_t i = info->n_layers; i-- > 0;) {
      struct cairn_history_rec h = {.created_by = "",
                                    .comment = "",
                                    .author = "",
                                    .layer = info->layers[i].id,
                                    .size = info->layers[i].size};
      int r = w->fn(&h, w->arg);
      if (r) return r;
    }
    return 0;
  }
  /* Which layer each entry made: count the non-empty entries before it. */
  size_t layer = 0;
  for (size_t i = 0; i < n; i++)
    if (!json_is_true(json_object_get(json_array_get(hist, i), "empty_layer"))) layer++;
  for (size_t i = n; i-- > 0;) {
    json_t *e = json_array_get(hist, i);
    bool empty = json_is_true(json_object_get(e, "empty_layer"));
    const char *when = json_string_value(json_object_get(e, "created"));
    /* cairn import's entries have no time (the same tars give the same
     * id): they show the image's, its config's or when the store got it */
    bool imported = !when && strcmp(string_or_empty(e, "created_by"), "cairn import") == 0;
    struct cairn_history_rec h = {
        .created = imported ? info->image.created : rfc3339_seconds(when),
        .created_by = string_or_empty(e, "created_by"),
        .comment = string_or_empty(e, "comment"),
        .author = string_or_empty(e, "author"),
        .empty_layer = empty,
    };
    if (!empty && layer-- > 0 && layer < info->n_layers) {
      h.layer = info->layers[layer].id;
      h.size = info->layers[layer].size;
    }
    int r = w->fn(&h, w->arg);
    if (r) return r;
  }
  return 0;
}

int cairn_history_foreach(cairn_store *st, const char *image_id, cairn_history_fn fn, void *arg) {
  struct history_walk w = {fn, arg};
  int r = cairn_inspect(st, image_id, history_walk, &w);
  if (r == -EBADMSG && !cairn_errmsg(st)[0])
    return cairn_fail(st, r, "image %.12s: its config is not JSON", image_id);
  return r;
}
