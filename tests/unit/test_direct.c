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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(allreduce),
      cmocka_unit_test(reduce_scatter),
      cmocka_unit_test(allgather),
      cmocka_unit_test(alltoall),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
