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

/* Reduce's non-roots accumulating in sendbuf instead of scratch: the results stay right,
 * so only the simulator's sendbuf check can see it (its message is expected below). */
static weft_result_t acc_in_sendbuf(const weft_coll_args_t *a, weft_sched_t *s) {
  weft_result_t rc = weft_tree(a, s);
  for (size_t i = 0; i < s->nsteps; i++) {
    if (s->steps[i].buf == WEFT_BUF_SCRATCH) s->steps[i].buf = WEFT_BUF_SEND;
    if (s->steps[i].kind == WEFT_STEP_RECV_REDUCE && s->steps[i].src_buf == WEFT_BUF_SCRATCH)
      s->steps[i].src_buf = WEFT_BUF_SEND;
  }
  return rc;
}
static void sendbuf_write_caught(void **st) {
  (void)st;
  sim_case_t c = {.coll = WEFT_COLL_REDUCE,
                  .algo = WEFT_ALGO_TREE,
                  .dtype = WEFT_I32,
                  .op = WEFT_SUM,
                  .nranks = 5,
                  .root = 1,
                  .count = 33,
                  .chunk = 3,
                  .channel_cap = 2,
                  .seed = 7};
  assert_int_equal(sim_run(&c), 0);
  c.gen = acc_in_sendbuf;
  assert_int_equal(sim_run(&c), -1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(allreduce),
      cmocka_unit_test(broadcast),
      cmocka_unit_test(reduce),
      cmocka_unit_test(sendbuf_write_caught),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
