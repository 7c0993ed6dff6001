/* Schedules of algos/tree.c in the simulator, 1..17 ranks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "sim.h"

static void allreduce(void **st) {
  (void)st;
  assert_int_equal(sim_sweep(WEFT_COLL_ALLREDUCE, WEFT_ALGO_TREE, 17), 0);
}
static void broadcast(void **st) {
  (void)st;
  assert_int_equal(sim_sweep(WEFT_COLL_BROADCAST, WEFT_ALGO_TREE, 17), 0);
}
static void reduce(void **st) {
  (void)st;
  assert_int_equal(sim_sweep(WEFT_COLL_REDUCE, WEFT_ALGO_TREE, 17), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(allreduce),
      cmocka_unit_test(broadcast),
      cmocka_unit_test(reduce),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
