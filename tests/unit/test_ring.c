/* Ring schedules (algos/ring.c) in the simulator, 1..17 ranks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "sim.h"

static void allreduce(void **st) {
  (void)st;
  assert_int_equal(sim_sweep(WEFT_COLL_ALLREDUCE, WEFT_ALGO_RING, 17), 0);
}
static void reduce_scatter(void **st) {
  (void)st;
  assert_int_equal(sim_sweep(WEFT_COLL_REDUCE_SCATTER, WEFT_ALGO_RING, 17), 0);
}
static void allgather(void **st) {
  (void)st;
  assert_int_equal(sim_sweep(WEFT_COLL_ALLGATHER, WEFT_ALGO_RING, 17), 0);
}
/* A channel of one element forces the strictest interleaving. */
static void tight_channel(void **st) {
  (void)st;
  for (int n = 2; n <= 6; n++) {
    sim_case_t c = {.coll = WEFT_COLL_ALLREDUCE,
                    .algo = WEFT_ALGO_RING,
                    .dtype = WEFT_F32,
                    .op = WEFT_SUM,
                    .nranks = n,
                    .count = 257,
                    .chunk = 5,
                    .channel_cap = 1,
                    .seed = (uint32_t)n};
    assert_int_equal(sim_run(&c), 0);
  }
}
/* Steps only reference earlier steps, and the segment count matches 2(n-1) per chunk. */
static void shape(void **st) {
  (void)st;
  weft_coll_args_t a = {
      .coll = WEFT_COLL_ALLREDUCE, .nranks = 4, .rank = 1, .count = 400, .chunk = 100};
  weft_sched_t s;
  weft_sched_init(&s);
  assert_int_equal(weft_ring(&a, &s), WEFT_SUCCESS);
  assert_int_equal(s.nsteps, 2 * 2 * 3);
  for (size_t i = 0; i < s.nsteps; i++) {
    assert_true(s.steps[i].dep[0] < (int32_t)i);
    assert_true(s.steps[i].dep[1] < (int32_t)i);
  }
  weft_sched_free(&s);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(allreduce), cmocka_unit_test(reduce_scatter),
                                     cmocka_unit_test(allgather), cmocka_unit_test(tight_channel),
                                     cmocka_unit_test(shape)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
