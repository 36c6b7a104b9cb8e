/* SPDX-License-Identifier: Apache-2.0 */
/*
 * progress_bar.h — the one progress display of cairn's commands (import, pull,
 * export, gc; push and commit are to use it too). Each step (a layer, an
 * export, a step of gc) is one line on stderr.
 *
 * On a terminal the lines are redrawn in place, at most 10 times a second:
 * the step's label, what it does, a bar, the percentage, what is done of
 * the total (bytes made human), the rate and the time left. A finished
 * step's line is frozen with its final time and never changes again.
 * Elsewhere (a file, a pipe) a step prints one plain line when it
 * finishes, and nothing while it runs. A quiet display shows nothing.
 * Every function may be called from any thread, and takes a NULL display
 * (out of memory), which shows nothing.
 */
#ifndef CAIRN_PROGRESS_H
#define CAIRN_PROGRESS_H

#include "cairn.h"

struct progress;

/* A display on stderr, a terminal's if stderr is one; NULL if out of
 * memory. */
struct progress *progress_new(bool quiet);
/* Draws the last frame and frees the display. */
void progress_free(struct progress *p);

/* Step i (lines are shown in the order of i) waits: "LABEL  WHAT", with no
 * clock running yet. */
void progress_pending(struct progress *p, size_t i, const char *label, const char *what);
/* Step i runs: LABEL, what it does (PHASE: "fetching", "storing"), done of
 * total (0: unknown) bytes, or things if !bytes. The step's clock starts
 * at its first update; the rate and the time left are the current phase's
 * (a new PHASE starts them over). */
void progress_update(struct progress *p, size_t i, const char *label, const char *phase,
                     uint64_t done, uint64_t total, bool bytes);
/* Step i is over: its line becomes "LABEL  SUMMARY", with " in T s" (the
 * time since its first update) if timed, and is frozen. */
void progress_done(struct progress *p, size_t i, const char *label, const char *summary,
                   bool timed);
/* Prints "PROG: MSG" above the display (a retry of pull, say). */
void progress_notice(struct progress *p, const char *msg);

/* The words of a transfer's layer lines (pull's, push's): the phase while
 * bytes move over the network, the phase while they are stored or
 * compressed, and the summaries of a layer that needed none and of one
 * done (followed by its size). */
struct progress_words {
  const char *network, *local, *skipped, *done;
};
/* Shows libcairn's view of a transfer's layers: a line per layer, labelled
 * with its short id. */
void progress_layers(struct progress *p, const cairn_pull_layer *layers, size_t n,
                     const struct progress_words *w);

/* What progress_hook shows libcairn's steps (cairn_progress) with: the
 * k-th step is line k, labelled labels[k] with the step's name as its
 * phase (import: the layer files), or the step's name alone once labels
 * run out (gc). */
struct progress_hook {
  struct progress *p;
  const char *const *labels;
  size_t n_labels;
  size_t step; /* the step running now */
};
/* A cairn_progress_fn (cairn_store_set_progress) whose arg is a struct
 * progress_hook. */
void progress_hook(const cairn_progress *cp, void *hook);

#endif
