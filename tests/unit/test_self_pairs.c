/* Pairing a device rank's sends to itself with its receives from itself
 * (src/gpu/self_pairs.c): issue order decides, other tasks are left alone, and a send
 * without its receive or sizes that differ are refused with a message. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdint.h>
#include <string.h>

#include "err.h"
#include "self_pairs.h"

static weft_task_t p2p(weft_coll_t k, int peer, uint64_t count, weft_dtype_t dt) {
  return (weft_task_t){.args = {.coll = k, .count = count, .root = peer}, .dtype = dt};
}

static void pairs_in_issue_order(void **st) {
  (void)st;
  weft_task_t t[7] = {
      p2p(WEFT_COLL_RECV, 2, 5, WEFT_F32), /* from itself, before its send */
      p2p(WEFT_COLL_SEND, 1, 5, WEFT_F32), /* to a peer: not paired */
      p2p(WEFT_COLL_SEND, 2, 5, WEFT_F32), /* 20 bytes */
      p2p(WEFT_COLL_SEND, 2, 10, WEFT_U8), /* 10 bytes */
      p2p(WEFT_COLL_RECV, 1, 5, WEFT_F32), /* from a peer */
      p2p(WEFT_COLL_RECV, 2, 5, WEFT_F16), /* 10 bytes: the second send */
      {.args = {.coll = WEFT_COLL_ALLREDUCE, .count = 3, .root = 2}, .dtype = WEFT_F32},
  };
  int pair[7], nself = -1;
  assert_int_equal(weft_dev_self_pairs(2, t, 7, pair, &nself), WEFT_SUCCESS);
  assert_int_equal(nself, 4);
  int want[7] = {2, -1, -1, -1, -1, 3, -1};
  for (int i = 0; i < 7; i++)
    assert_int_equal(pair[i], want[i]);
  /* seen by rank 1, the tasks with peer 1 are its self pair */
  assert_int_equal(weft_dev_self_pairs(1, t, 7, pair, &nself), WEFT_SUCCESS);
  assert_int_equal(nself, 2);
  assert_int_equal(pair[4], 1);
  assert_int_equal(pair[0], -1);
  assert_int_equal(weft_dev_self_pairs(0, t, 7, pair, &nself), WEFT_SUCCESS);
  assert_int_equal(nself, 0);
  assert_int_equal(weft_dev_is_self(2, &t[6]), 0); /* a collective's root is no peer */
}

static void refusals(void **st) {
  (void)st;
  int pair[3], nself = 0;
  weft_task_t lone[1] = {p2p(WEFT_COLL_SEND, 0, 4, WEFT_F32)};
  assert_int_equal(weft_dev_self_pairs(0, lone, 1, pair, &nself), WEFT_ERR_INVALID_ARG);
  assert_non_null(strstr(weft_thread_error(), "1 sends to itself and 0 receives"));
  weft_task_t two_recvs[3] = {p2p(WEFT_COLL_RECV, 0, 4, WEFT_F32),
                              p2p(WEFT_COLL_SEND, 0, 4, WEFT_F32),
                              p2p(WEFT_COLL_RECV, 0, 4, WEFT_F32)};
  assert_int_equal(weft_dev_self_pairs(0, two_recvs, 3, pair, &nself), WEFT_ERR_INVALID_ARG);
  weft_task_t sizes[2] = {p2p(WEFT_COLL_SEND, 0, 4, WEFT_F32), p2p(WEFT_COLL_RECV, 0, 4, WEFT_F64)};
  assert_int_equal(weft_dev_self_pairs(0, sizes, 2, pair, &nself), WEFT_ERR_INVALID_ARG);
  assert_non_null(strstr(weft_thread_error(), "sends 16 bytes to itself but receives 32"));
  weft_task_t empty[2] = {p2p(WEFT_COLL_SEND, 0, 0, WEFT_F32), p2p(WEFT_COLL_RECV, 0, 0, WEFT_I8)};
  assert_int_equal(weft_dev_self_pairs(0, empty, 2, pair, &nself), WEFT_SUCCESS);
  assert_int_equal(pair[1], 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(pairs_in_issue_order),
                                     cmocka_unit_test(refusals)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
