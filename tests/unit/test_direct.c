/* Schedules of algos/direct.c in the simulator, 1..17 ranks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "sim.h"

static void allreduce(void **st) {
  (void)st;
  assert_int_equal(sim_sweep(WEFT_COLL_ALLREDUCE, WEFT_ALGO_DIRECT, 17), 0);
}
static void reduce_scatter(void **st) {
  (void)st;
  assert_int_equal(sim_sweep(WEFT_COLL_REDUCE_SCATTER, WEFT_ALGO_DIRECT, 17), 0);
}
static void allgather(void **st) {
  (void)st;
  assert_int_equal(sim_sweep(WEFT_COLL_ALLGATHER, WEFT_ALGO_DIRECT, 17), 0);
}
static void alltoall(void **st) {
  (void)st;
  assert_int_equal(sim_sweep(WEFT_COLL_ALLTOALL, WEFT_ALGO_DIRECT, 17), 0);
}
static void alltoallv(void **st) {
  (void)st;
  assert_int_equal(sim_sweep(WEFT_COLL_ALLTOALLV, WEFT_ALGO_DIRECT, 17), 0);
}

/* Every alltoallv receive one element late: lands in a gap or past recvbuf. The
 * simulator's message for it is expected below. */
static weft_result_t recv_displ_off_by_one(const weft_coll_args_t *a, weft_sched_t *s) {
  weft_result_t rc = weft_direct(a, s);
  for (size_t i = 0; i < s->nsteps; i++)
    if (s->steps[i].kind == WEFT_STEP_RECV) s->steps[i].off++;
  return rc;
}
static void alltoallv_displ_caught(void **st) {
  (void)st;
  for (uint32_t seed = 1; seed <= 20; seed++) {
    sim_case_t c = {.coll = WEFT_COLL_ALLTOALLV,
                    .algo = WEFT_ALGO_DIRECT,
                    .dtype = WEFT_I32,
                    .nranks = 4,
                    .count = 9,
                    .chunk = 1,
                    .channel_cap = 3,
                    .seed = seed};
    assert_int_equal(sim_run(&c), 0);
    c.gen = recv_displ_off_by_one;
    assert_int_equal(sim_run(&c), -1);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(allreduce), cmocka_unit_test(reduce_scatter),
      cmocka_unit_test(allgather), cmocka_unit_test(alltoall),
      cmocka_unit_test(alltoallv), cmocka_unit_test(alltoallv_displ_caught),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
