/* The proxies' thread (src/proxy/pump.c) on a stand-in transport and pass: it counts its
 * passes and naps, a pass that stalls 30 ms counts as a pause and as the longest gap, and a
 * nap (200 ms here) does not; while held (a CUDA graph's hold) it never naps, and naps again
 * once the hold goes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "clock.h"
#include "pump.h"

enum { STALL_AT = 50, STALL_US = 30000, BUSY_PASSES = 100, NAP_US = 200000 };

typedef struct {
  atomic_int passes, waits;
} stand_in_t;

static uint64_t arm(void *state) {
  (void)state;
  return 0;
}

/* A nap: far longer than any pause the test asserts, so one counted would show. */
static weft_result_t nap(void *state, uint64_t token, int timeout_ms) {
  (void)token, (void)timeout_ms;
  atomic_fetch_add(&((stand_in_t *)state)->waits, 1);
  usleep(NAP_US);
  return WEFT_SUCCESS;
}

/* Traffic for BUSY_PASSES passes, one of them stalled; then none, so the pump naps. */
static weft_result_t pass(void *self, int peer, int *moved, int *busy) {
  stand_in_t *s = self;
  (void)peer, (void)busy;
  int k = atomic_fetch_add(&s->passes, 1);
  if (k == STALL_AT) usleep(STALL_US);
  if (k < BUSY_PASSES) *moved = 1;
  return WEFT_SUCCESS;
}

/* A pump over one peer on the stand-in transport (state s), with pass fn and holds. */
static void start(weft_pump_t *p, stand_in_t *s, weft_result_t (*fn)(void *, int, int *, int *),
                  const _Atomic int64_t *holds) {
  static const weft_transport_t tr = {.name = "stand-in", .arm = arm, .wait = nap};
  weft_pump_init_t in = {
      .link = {.rank = 0, .nranks = 2, .tr = &tr, .tr_state = s, .timeout_ms = 60000},
      .pass = fn,
      .self = s,
      .npeers = 1,
      .kick_fd = -1,
      .holds = holds};
  assert_int_equal(weft_pump_start(p, &in), WEFT_SUCCESS);
}

static void counts_passes_naps_and_pauses(void **st) {
  (void)st;
  stand_in_t s = {0};
  weft_pump_t p;
  start(&p, &s, pass, NULL);
  for (int64_t t = weft_now_us(); atomic_load(&s.waits) < 2 && weft_now_us() - t < 10000000;)
    usleep(1000);
  weft_pump_stop(&p);
  assert_int_equal(weft_pump_status(&p), WEFT_SUCCESS);
  weft_proxy_stats_t a = {0};
  weft_pump_stats(&p, &a);
  assert_true(atomic_load(&s.waits) >= 2);
  assert_true(a.naps >= 2);
  assert_true(a.passes >= BUSY_PASSES);
  assert_true(a.pauses >= 1);
  assert_true(a.longest_us >= STALL_US);
  assert_true(a.longest_us < NAP_US); /* naps are no pauses */
  /* added to what s holds, the longest kept */
  weft_proxy_stats_t b = {.passes = 1, .naps = 1, .pauses = 1, .longest_us = 10 * NAP_US};
  weft_pump_stats(&p, &b);
  assert_int_equal(b.passes, a.passes + 1);
  assert_int_equal(b.naps, a.naps + 1);
  assert_int_equal(b.pauses, a.pauses + 1);
  assert_int_equal(b.longest_us, 10 * NAP_US);
}

/* No traffic at all: held, the pump polls on past WEFT_PROXY_SPIN_US (20 ms); let go, it naps. */
static weft_result_t idle(void *self, int peer, int *moved, int *busy) {
  (void)peer, (void)moved, (void)busy;
  atomic_fetch_add(&((stand_in_t *)self)->passes, 1);
  return WEFT_SUCCESS;
}

static void never_naps_while_held(void **st) {
  (void)st;
  stand_in_t s = {0};
  _Atomic int64_t holds = 1;
  weft_pump_t p;
  start(&p, &s, idle, &holds);
  usleep(100000); /* five times the spin */
  int held_waits = atomic_load(&s.waits);
  atomic_store(&holds, 0);
  for (int64_t t = weft_now_us(); atomic_load(&s.waits) < 1 && weft_now_us() - t < 10000000;)
    usleep(1000);
  weft_pump_stop(&p);
  assert_int_equal(held_waits, 0);
  assert_true(atomic_load(&s.waits) >= 1);
  assert_true(atomic_load(&s.passes) > 0);
}

int main(void) {
  /* naps after 20 ms without traffic, as by default, but said here: the test counts on it */
  setenv("WEFT_PROXY_SPIN_US", "20000", 1);
  const struct CMUnitTest tests[] = {cmocka_unit_test(counts_passes_naps_and_pauses),
                                     cmocka_unit_test(never_naps_while_held)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
