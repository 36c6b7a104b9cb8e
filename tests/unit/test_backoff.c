/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_backoff.c — cairn_backoff_ms stays in [base, cap] for every attempt
 * number (the overflow that turns a retry loop into a spin), grows by
 * doubling, and reaches the cap.
 */
#include <criterion/criterion.h>
#include <limits.h>
#include <stdint.h>

#include "cairn.h"

static const unsigned attempts[] = {0, 1, 2, 10, 31, 32, 63, 64, 65, 1000, UINT_MAX - 1, UINT_MAX};
static const uint64_t rnds[] = {
    0, 1, 2, 12345, UINT32_MAX, (uint64_t)INT64_MAX, UINT64_MAX - 1, UINT64_MAX};

static void check_range(uint64_t base, uint64_t cap) {
  for (size_t a = 0; a < sizeof attempts / sizeof *attempts; a++)
    for (size_t r = 0; r < sizeof rnds / sizeof *rnds; r++) {
      uint64_t w = cairn_backoff_ms(attempts[a], base, cap, rnds[r]);
      cr_assert(w >= base && w <= cap,
                "attempt %u rnd %llu base %llu cap %llu: wait %llu out of range", attempts[a],
                (unsigned long long)rnds[r], (unsigned long long)base, (unsigned long long)cap,
                (unsigned long long)w);
    }
}

Test(backoff, every_attempt_in_range) {
  check_range(200, 10000);
  check_range(1, 1);
  check_range(1, UINT64_MAX);
  check_range(3, UINT64_MAX - 1);
  check_range(UINT64_MAX / 2 + 1, UINT64_MAX);
  check_range(1000, 1000);
}

Test(backoff, large_attempts_reach_the_cap_not_zero) {
  const unsigned big[] = {63, 64, 65, 1000, UINT_MAX};
  for (size_t i = 0; i < sizeof big / sizeof *big; i++) {
    /* rnd = step - half selects the top of the range: the cap itself. */
    cr_assert_eq(cairn_backoff_ms(big[i], 200, 10000, 5000), 10000, "attempt %u", big[i]);
    /* The lower half of the step is fixed: never below cap / 2. */
    cr_assert_geq(cairn_backoff_ms(big[i], 200, 10000, 0), 5000, "attempt %u", big[i]);
    cr_assert_eq(cairn_backoff_ms(big[i], 2, UINT64_MAX, UINT64_MAX / 2 + 1), UINT64_MAX,
                 "attempt %u", big[i]);
  }
}

Test(backoff, grows_by_doubling) {
  cr_assert_eq(cairn_backoff_ms(0, 200, 10000, 0), 200);
  cr_assert_eq(cairn_backoff_ms(0, 200, 10000, UINT64_MAX), 200);
  cr_assert_eq(cairn_backoff_ms(1, 200, 10000, 0), 200);
  cr_assert_eq(cairn_backoff_ms(1, 200, 10000, 200), 400);
  cr_assert_eq(cairn_backoff_ms(3, 200, 10000, 0), 800);
  cr_assert_eq(cairn_backoff_ms(3, 200, 10000, 800), 1600);
  cr_assert_eq(cairn_backoff_ms(5, 200, 10000, 0), 3200);
  cr_assert_eq(cairn_backoff_ms(6, 200, 10000, 0), 5000);
}

Test(backoff, jitter_varies) {
  uint64_t lo = cairn_backoff_ms(4, 100, 100000, 0);
  uint64_t hi = cairn_backoff_ms(4, 100, 100000, 800);
  cr_assert_eq(lo, 800);
  cr_assert_eq(hi, 1600);
}

Test(backoff, degenerate_bounds) {
  cr_assert_eq(cairn_backoff_ms(UINT_MAX, 0, 0, 7), 0);
  cr_assert_eq(cairn_backoff_ms(0, 500, 100, 7), 100, "base above cap reads as the cap");
  cr_assert_eq(cairn_backoff_ms(UINT_MAX, 500, 100, UINT64_MAX), 100);
}
