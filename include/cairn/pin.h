/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cairn/pin.h — libcairn's public face: pins.
 * Included by cairn.h, whose comment gives the conventions every function
 * here keeps (errors, ids, handles).
 */
#ifndef CAIRN_PIN_H
#define CAIRN_PIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cairn/store.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- pins -------------------------------------------------------------- */

enum cairn_pin_kind { CAIRN_PIN_IMAGE = 0, CAIRN_PIN_LAYER = 1 };

/* A set of shared pins held by this process. Released (and annotations
 * dropped) by cairn_pinset_release, or by the kernel when the process
 * dies. The pin fds are inherited by children unless cloexec is asked. */
typedef struct cairn_pinset cairn_pinset;

/* A new, empty set whose pins are annotated with purpose (NULL: "").
 * Returns the set (cairn_pinset_release frees it); NULL: out of memory. */
cairn_pinset *cairn_pinset_new(const char *purpose, bool cloexec);
void cairn_pinset_release(cairn_store *st, cairn_pinset *ps);

/* Pins an image and every one of its layers, and writes the annotations
 * of every pin of ps not yet annotated (those cairn_pin_image_early took).
 * Returns 0; -ENOENT: the image is gone; -EINVAL: image_id is not an id. */
int cairn_pin_image(cairn_store *st, cairn_pinset *ps, const char *image_id);

/* A mount's pins without SQLite (refs.c): resolves ref by STORE/refs (a
 * name, or an id prefix, as cairn_image_resolve would), starts reading the
 * image's index, and takes the locks of the image's pin and its layers'
 * into ps, without annotations; id gets the image. When it did, the image
 * was in the file again once its pin was held, so it exists and stays
 * (its deleter rewrites the file before it lets go of the pin).
 * cairn_pin_image on the same ps later writes the annotations.
 * Returns 1: it did; 0: the file does not say, or the image has no index (ps may hold some
 * locks: release it). */
int cairn_pin_image_early(cairn_store *st, cairn_pinset *ps, const char *ref, cairn_id id);
/* Writes STORE/refs if there is none (a store from before it, a crash),
 * unless a writer holds it, which writes it then. */
void cairn_refs_repair(cairn_store *st);

/* Waits until the image (and its live mounts) has no pins; timeout_ms < 0
 * waits for ever.
 * Returns 0; -ETIMEDOUT: time ran out; -EINVAL: image_id is not an id. */
int cairn_pin_wait_free(cairn_store *st, const char *image_id, int64_t timeout_ms);

/* One pin as a listing shows it: an annotation (who pins and why), or a
 * kernel lock on a pin file that no annotation explains. Strings are valid
 * only during the callback. */
typedef struct cairn_pin_rec {
  enum cairn_pin_kind kind;
  const char *target;  /* image or layer id */
  pid_t pid;           /* the process that took the lock */
  const char *command; /* pid's command, or "HEIR (inherited)" (see held_by) */
  const char *purpose; /* "" for a lock with no annotation */
  int64_t since;       /* seconds since the epoch; 0 for a lock with no annotation */
  bool stale;          /* an annotation whose lock is gone */
  /* The locker exited but its lock lives on in what inherited its fd:
   * held_by lists the live processes with the pin file open (maybe none). */
  bool locker_gone;
  const pid_t *held_by;
  size_t n_held_by;
} cairn_pin_rec;
typedef int (*cairn_pin_fn)(const cairn_pin_rec *p, void *arg);

/* Calls fn for every pin annotation and every kernel lock on a pin file
 * that has none, target by target; filter_id (image or layer id, or NULL)
 * narrows it. Stale annotations are reported, not deleted: see
 * cairn_pins_clean_stale.
 * Returns 0, or fn's non-zero return (which stops the walk). */
int cairn_pins_foreach(cairn_store *st, const char *filter_id, cairn_pin_fn fn, void *arg);
/* As cairn_pins_foreach, for a listing that can take its rows back: while
 * the host's locks are read (cairn_pins_prefetch), fn is given the rows as
 * they are if every annotation has its lock and every lock its annotation
 * (the common case: a listing costs little more than that read). If the
 * locks say otherwise (a stale pin, an unexplained lock), undo(arg) is
 * called, and fn is given every row again.
 * Returns as cairn_pins_foreach. */
int cairn_pins_foreach_ahead(cairn_store *st, const char *filter_id, cairn_pin_fn fn,
                             void (*undo)(void *arg), void *arg);
/* Starts reading the host's locks (/proc/locks) on a thread, for the next
 * cairn_pins_foreach, which starts it itself otherwise: a listing calls it
 * first and asks the store its other questions meanwhile. */
void cairn_pins_prefetch(cairn_store *st);

/* Deletes the annotations whose lock is gone.
 * Returns how many (0: none). */
int cairn_pins_clean_stale(cairn_store *st);

/* A one-line description of who holds pins on the target, such as
 * "pid 42 (sleep) hold; pid 51 (cairnfs) mount /mnt/x".
 * Returns it (caller frees): "" if no one does, "unknown holders" if the pins cannot be read;
 * NULL: out of memory. */
char *cairn_pin_holders(cairn_store *st, enum cairn_pin_kind kind, const char *id);

#ifdef __cplusplus
}
#endif

#endif
