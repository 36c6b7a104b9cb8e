/* SPDX-License-Identifier: Apache-2.0 */
/*
 * progress_bar.c — the progress display: see progress_bar.h.
 *
 * On a terminal the display is the last lines of stderr: the first `fixed`
 * of them are frozen and left alone (a frame never moves the cursor above
 * them, so they may scroll away), the rest are rewritten in place with the
 * cursor moved up over them ("\033[NA") and each line cleared ("\033[K").
 */
#include "progress_bar.h"
#include "report.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#define REDRAW_INTERVAL 0.1 /* seconds: at most 10 frames a second */
#define BAR_WIDTH 20        /* cells of a bar at most */

struct line {
  char label[96], phase[32];
  char final[256]; /* the frozen line of a finished step, else "" */
  uint64_t done, total;
  bool bytes, used;
  double start, phase_start; /* 0: not started */
};

struct progress {
  bool quiet, tty;
  pthread_mutex_t lock;
  struct line *lines;
  size_t n;
  size_t drawn, fixed; /* lines of the display on screen; the frozen ones among them, on top */
  double last_draw;
  bool dirty; /* a change no frame has shown yet */
};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

struct progress *progress_new(bool quiet) {
  struct progress *p = calloc(1, sizeof(*p));
  if (!p) return NULL;
  p->quiet = quiet;
  p->tty = isatty(STDERR_FILENO);
  pthread_mutex_init(&p->lock, NULL);
  return p;
}

/* Line i, the lines grown to hold it; NULL if out of memory. */
static struct line *line_at(struct progress *p, size_t i, const char *label) {
  if (i >= p->n) {
    struct line *more = realloc(p->lines, (i + 1) * sizeof(*more));
    if (!more) return NULL;
    memset(more + p->n, 0, (i + 1 - p->n) * sizeof(*more));
    p->lines = more;
    p->n = i + 1;
  }
  struct line *l = &p->lines[i];
  l->used = true;
  snprintf(l->label, sizeof(l->label), "%s", label);
  return l;
}

static void amount(uint64_t v, bool bytes, char *buf, size_t len) {
  if (bytes)
    cairn_human_size(v, buf, len);
  else
    snprintf(buf, len, "%llu", (unsigned long long)v);
}

/* "1m05s", "4s". */
static void duration(double s, char *buf, size_t len) {
  unsigned long t = (unsigned long)(s + 0.5);
  if (t >= 3600)
    snprintf(buf, len, "%luh%02lum", t / 3600, t / 60 % 60);
  else if (t >= 60)
    snprintf(buf, len, "%lum%02lus", t / 60, t % 60);
  else
    snprintf(buf, len, "%lus", t);
}

/* A running line as a frame shows it in width columns: "LABEL  PHASE
 * [####....]  45%  DONE / TOTAL  RATE  ETA T", its bar as wide as fits
 * (BAR_WIDTH at most, left out below 5). */
static void running_text(const struct line *l, double now, int width, char *buf, size_t len) {
  char done[32] = "", total[32] = "", amounts[72] = "", rate[48] = "", eta[48] = "", pct[8] = "";
  char head[160], tail[200] = "";
  double t = now - l->phase_start;
  double per_s = t > 0.05 ? (double)l->done / t : 0;
  uint64_t d = l->total > 0 && l->done > l->total ? l->total : l->done;
  if (l->bytes || l->total > 0) amount(d, l->bytes, done, sizeof(done)); /* else: nothing yet */
  if (per_s > 0 && l->bytes) {
    cairn_human_size((uint64_t)(per_s + 0.5), rate, sizeof(rate) - 2);
    strcat(rate, "/s");
  }
  if (l->total > 0) {
    snprintf(pct, sizeof(pct), "%3u%%", (unsigned)(d * 100 / l->total));
    amount(l->total, l->bytes, total, sizeof(total));
    if (per_s > 0 && d < l->total) {
      strcpy(eta, "ETA ");
      duration((double)(l->total - d) / per_s, eta + 4, sizeof(eta) - 4);
    }
  }
  snprintf(amounts, sizeof(amounts), "%s%s%s", done, total[0] ? " / " : "", total);
  const char *parts[] = {pct, amounts, rate, eta}; /* those there, two blanks apart */
  for (size_t k = 0, o = 0; k < sizeof(parts) / sizeof(*parts); k++)
    if (parts[k][0] && o < sizeof(tail))
      o += (size_t)snprintf(tail + o, sizeof(tail) - o, "%s%s", o ? "  " : "", parts[k]);
  snprintf(head, sizeof(head), "%s%s%s", l->label, l->phase[0] ? "  " : "", l->phase);
  int room = width - 1 - (int)strlen(head) - (int)strlen(tail) - 4; /* " [" "] " */
  int bar = l->total == 0 ? 0 : room > BAR_WIDTH ? BAR_WIDTH : room;
  if (bar < 5) {
    snprintf(buf, len, "%s%s%s", head, tail[0] ? "  " : "", tail);
    return;
  }
  char cells[BAR_WIDTH + 1];
  int fill = (int)(d * (uint64_t)bar / l->total);
  for (int k = 0; k < bar; k++) cells[k] = k < fill ? '#' : '.';
  cells[bar] = '\0';
  snprintf(buf, len, "%s [%s] %s", head, cells, tail);
}

static int term_width(void) {
  struct winsize ws;
  return ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 ? ws.ws_col : 80;
}

/* Draws a frame (unless one was drawn less than REDRAW_INTERVAL ago and
 * !force). Under the lock. */
static void draw(struct progress *p, bool force) {
  double now = now_s();
  p->dirty = true;
  if (!force && p->drawn > p->fixed && now - p->last_draw < REDRAW_INTERVAL) return;
  int width = term_width();
  char text[512];
  if (p->drawn > p->fixed) fprintf(stderr, "\033[%zuA", p->drawn - p->fixed);
  size_t drawn = p->fixed;
  for (size_t i = p->fixed; i < p->n; i++) {
    const struct line *l = &p->lines[i];
    if (!l->used) continue;
    if (l->final[0])
      snprintf(text, sizeof(text), "%s", l->final);
    else if (l->start > 0)
      running_text(l, now, width, text, sizeof(text));
    else
      snprintf(text, sizeof(text), "%s  %s", l->label, l->phase);
    if (width > 1 && strlen(text) >= (size_t)width) text[width - 1] = '\0'; /* no wrap */
    fprintf(stderr, "\r\033[K%s\n", text);
    drawn++;
  }
  p->drawn = drawn;
  while (p->fixed < p->n && (!p->lines[p->fixed].used || p->lines[p->fixed].final[0]) &&
         p->fixed < p->drawn)
    p->fixed++;
  p->last_draw = now;
  p->dirty = false;
  fflush(stderr);
}

void progress_pending(struct progress *p, size_t i, const char *label, const char *what) {
  if (!p || p->quiet || !p->tty) return;
  pthread_mutex_lock(&p->lock);
  struct line *l = line_at(p, i, label);
  if (l && !l->final[0] && l->start == 0) {
    snprintf(l->phase, sizeof(l->phase), "%.*s", (int)sizeof(l->phase) - 1, what); /* cut to fit */
    draw(p, false);
  }
  pthread_mutex_unlock(&p->lock);
}

void progress_update(struct progress *p, size_t i, const char *label, const char *phase,
                     uint64_t done, uint64_t total, bool bytes) {
  if (!p || p->quiet) return;
  pthread_mutex_lock(&p->lock);
  struct line *l = line_at(p, i, label);
  if (l && !l->final[0]) {
    double now = now_s();
    if (l->start == 0) l->start = now;
    if (l->phase_start == 0 || strcmp(l->phase, phase) != 0) {
      l->phase_start = now;
      snprintf(l->phase, sizeof(l->phase), "%s", phase);
    }
    l->done = done;
    l->total = total;
    l->bytes = bytes;
    if (p->tty) draw(p, false);
  }
  pthread_mutex_unlock(&p->lock);
}

void progress_done(struct progress *p, size_t i, const char *label, const char *summary,
                   bool timed) {
  if (!p || p->quiet) return;
  pthread_mutex_lock(&p->lock);
  struct line *l = line_at(p, i, label);
  if (l && !l->final[0]) {
    double now = now_s();
    if (timed)
      snprintf(l->final, sizeof(l->final), "%s  %s in %.1fs", l->label, summary,
               l->start > 0 ? now - l->start : 0);
    else
      snprintf(l->final, sizeof(l->final), "%s  %s", l->label, summary);
    if (p->tty) {
      draw(p, false);
    } else {
      fprintf(stderr, "%s\n", l->final);
      fflush(stderr);
    }
  }
  pthread_mutex_unlock(&p->lock);
}

void progress_notice(struct progress *p, const char *msg) {
  if (p) pthread_mutex_lock(&p->lock);
  if (p && p->tty && p->drawn > p->fixed) {
    fprintf(stderr, "\033[%zuA\r\033[J", p->drawn - p->fixed); /* redrawn below it */
    p->drawn = p->fixed;
  }
  report_notice(msg);
  if (p && p->tty && !p->quiet) draw(p, true);
  if (p) pthread_mutex_unlock(&p->lock);
}

void progress_free(struct progress *p) {
  if (!p) return;
  if (p->tty && !p->quiet && p->dirty) draw(p, true);
  pthread_mutex_destroy(&p->lock);
  free(p->lines);
  free(p);
}

void progress_hook(const cairn_progress *cp, void *arg) {
  struct progress_hook *h = arg;
  bool labelled = h->step < h->n_labels;
  const char *label = labelled ? h->labels[h->step] : cp->step, *phase = labelled ? cp->step : "";
  if (!cp->finished) {
    progress_update(h->p, h->step, label, phase, cp->done, cp->total, cp->bytes);
    return;
  }
  char size[32] = "", summary[96];
  if (cp->bytes) cairn_human_size(cp->done, size, sizeof(size));
  snprintf(summary, sizeof(summary), "%s%sdone%s%s", phase, *phase ? " " : "", *size ? ", " : "",
           size);
  progress_done(h->p, h->step++, label, summary, true);
}

void progress_layers(struct progress *p, const cairn_pull_layer *layers, size_t n,
                     const struct progress_words *w) {
  for (size_t i = 0; i < n; i++) {
    const cairn_pull_layer *l = &layers[i];
    char id[16], size[32], what[128];
    snprintf(id, sizeof(id), "%.12s", l->diff_id);
    cairn_human_size(l->size, size, sizeof(size));
    switch (l->state) {
    case CAIRN_PULL_WAITING:
      snprintf(what, sizeof(what), "waiting  %s", size);
      progress_pending(p, i, id, what);
      break;
    case CAIRN_PULL_FETCHING:
      progress_update(p, i, id, w->network, l->fetched, l->size, true);
      break;
    case CAIRN_PULL_STORING: /* a partial pull's rebuilt stream is not size long */
      progress_update(p, i, id, w->local, l->stored, l->partial ? 0 : l->size, true);
      break;
    case CAIRN_PULL_REUSED: progress_done(p, i, id, w->skipped, false); break;
    case CAIRN_PULL_DONE:
      if (l->partial) {
        char fetched[32];
        cairn_human_size(l->fetched, fetched, sizeof(fetched));
        snprintf(what, sizeof(what), "%s %s of %s (partial pull)", w->done, fetched, size);
        progress_done(p, i, id, what, true);
        break;
      }
      snprintf(what, sizeof(what), "%s %s", w->done, size);
      progress_done(p, i, id, what, true);
      break;
    }
  }
}
