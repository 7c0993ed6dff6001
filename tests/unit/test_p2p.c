/* Send/recv schedules (algos/p2p.c) in the simulator: groups of sends and receives between
 * random pairs of 1..17 ranks, self included, with gaps between the buffers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "sim.h"

static void group(void **st) {
  (void)st;
  assert_int_equal(sim_sweep(WEFT_COLL_SEND, WEFT_ALGO_DIRECT, 17), 0);
}

/* A receive one element longer than its buffer: the simulator names the operation and step
 * (its message is expected below). */
static weft_result_t recv_one_past(const weft_coll_args_t *a, weft_sched_t *s) {
  weft_result_t rc = weft_p2p(a, s);
  if (a->coll == WEFT_COLL_RECV && s->nsteps) s->steps[0].count++;
  return rc;
}
static void overrun_caught(void **st) {
  (void)st;
  sim_case_t c = {.coll = WEFT_COLL_SEND,
                  .algo = WEFT_ALGO_DIRECT,
                  .dtype = WEFT_I32,
                  .nranks = 3,
                  .count = 5,
                  .chunk = 1,
                  .channel_cap = 2,
                  .seed = 3};
  assert_int_equal(sim_run(&c), 0);
  c.gen = recv_one_past;
  assert_int_equal(sim_run(&c), -1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(group),
      cmocka_unit_test(overrun_caught),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
