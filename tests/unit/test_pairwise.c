/* Schedules of algos/pairwise.c in the simulator, 1..17 ranks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "sim.h"

static void alltoall(void **st) {
  (void)st;
  assert_int_equal(sim_sweep(WEFT_COLL_ALLTOALL, WEFT_ALGO_PAIRWISE, 17), 0);
}
static void alltoallv(void **st) {
  (void)st;
  assert_int_equal(sim_sweep(WEFT_COLL_ALLTOALLV, WEFT_ALGO_PAIRWISE, 17), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(alltoall),
      cmocka_unit_test(alltoallv),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
