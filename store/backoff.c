/* SPDX-License-Identifier: Apache-2.0 */
/*
 * backoff.c — the wait between retries (registry requests, remounts).
 *
 * Invariant: for every attempt number the result lies in [base, cap]. The
 * step is grown by doubling with a comparison against cap before each
 * doubling, so no shift or multiply ever overflows; the doubling stops as
 * soon as the cap is reached, which bounds the loop at 64 iterations even
 * for attempt == UINT_MAX. (A "base << attempt" would wrap to 0 for large
 * attempts and turn the retry loop into a spin that fills the disk with
 * log lines.)
 */
#include "cairn.h"

uint64_t cairn_backoff_ms(unsigned attempt, uint64_t base_ms, uint64_t cap_ms, uint64_t rnd) {
  if (base_ms > cap_ms) base_ms = cap_ms;
  if (base_ms == 0) return 0;

  uint64_t step = base_ms;
  for (unsigned i = 0; i < attempt && step < cap_ms; i++)
    step = step > cap_ms / 2 ? cap_ms : step * 2;

  /* Equal jitter: the lower half of the step is fixed, the upper random. */
  uint64_t half = step / 2;
  uint64_t wait = half + rnd % (step - half + 1);
  return wait < base_ms ? base_ms : wait;
}
