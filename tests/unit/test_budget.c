/* The block budget of ranks sharing a GPU (src/gpu/budget.c): nothing where the GPU serves
 * one rank; an equal part of WEFT_SHARED_SM_PERCENT of the usable SMs otherwise, in each
 * kernel's blocks; MPS's limit counted as the whole pool; a budget that cannot hold one send
 * and one receive per peer refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "budget.h"

/* An H100's 132 SMs; the general kernel 2 blocks an SM, the low-latency one 1 (as measured
 * by cudaOccupancyMaxActiveBlocksPerMultiprocessor for sm_90 builds). */
static weft_dev_share_in_t h100(int sharers, int nranks) {
  weft_dev_share_in_t in = {.sms_total = 132,
                            .sms_usable = 132,
                            .sharers = sharers,
                            .percent = 50,
                            .occ_general = 2,
                            .occ_ll = 1,
                            .nranks = nranks};
  return in;
}

static void alone_has_no_budget(void **st) {
  (void)st;
  weft_dev_budget_t b;
  for (int s = -1; s <= 1; s++) {
    weft_dev_share_in_t in = h100(s, 2);
    assert_int_equal(weft_dev_budget(&in, &b), 0);
    assert_int_equal(b.sharers, 1);
    assert_int_equal(b.general, 0);
    assert_int_equal(b.ll, 0);
  }
}

static void equal_parts_of_the_share(void **st) {
  (void)st;
  weft_dev_budget_t b;
  weft_dev_share_in_t in = h100(2, 2);
  assert_int_equal(weft_dev_budget(&in, &b), 0);
  assert_int_equal(b.sharers, 2);
  assert_int_equal(b.sms, 33); /* 66 of 132 SMs, halved */
  assert_int_equal(b.general, 66);
  assert_int_equal(b.ll, 33);
  assert_int_equal(b.need, 2);
  in = h100(3, 3);
  assert_int_equal(weft_dev_budget(&in, &b), 0);
  assert_int_equal(b.sms, 22);
  in = h100(8, 8); /* 8 SMs: 16 blocks, 14 needed */
  assert_int_equal(weft_dev_budget(&in, &b), 0);
  assert_int_equal(b.sms, 8);
  assert_int_equal(b.general, 16);
  assert_int_equal(b.need, 14);
  /* every rank's blocks together stay within the share */
  for (int s = 2; s <= 8; s++) {
    in = h100(s, s);
    assert_int_equal(weft_dev_budget(&in, &b), 0);
    assert_true(s * b.sms <= 66);
    assert_true(s * b.general <= 66 * 2 && s * b.ll <= 66);
  }
  in = h100(4, 2);
  in.percent = 100;
  assert_int_equal(weft_dev_budget(&in, &b), 0);
  assert_int_equal(b.sms, 33);
}

static void mps_limit_is_the_pool(void **st) {
  (void)st;
  weft_dev_budget_t b;
  weft_dev_share_in_t in = h100(3, 3);
  in.sms_usable = 40; /* CUDA_MPS_ACTIVE_THREAD_PERCENTAGE about 30 */
  assert_int_equal(weft_dev_budget(&in, &b), 0);
  assert_int_equal(b.sms, 6); /* 20 SMs of 40, in 3 */
  in.sms_usable = 0;          /* not known: the whole GPU */
  assert_int_equal(weft_dev_budget(&in, &b), 0);
  assert_int_equal(b.sms, 22);
  in.sms_usable = 500;
  assert_int_equal(weft_dev_budget(&in, &b), 0);
  assert_int_equal(b.sms, 22);
}

static void too_small_refused(void **st) {
  (void)st;
  weft_dev_budget_t b;
  weft_dev_share_in_t in = h100(8, 8);
  in.sms_usable = 16; /* 8 SMs for 8 ranks: 1 each, 2 blocks, 14 needed */
  assert_int_equal(weft_dev_budget(&in, &b), -1);
  assert_int_equal(b.general, 2);
  assert_int_equal(b.need, 14);
  in = h100(2, 2);
  in.percent = 1; /* 1 SM for 2 ranks: none each */
  assert_int_equal(weft_dev_budget(&in, &b), -1);
  assert_int_equal(b.sms, 0);
  assert_int_equal(b.ll, 0);
  in = h100(8, 7);     /* 7 ranks need 12 blocks */
  in.sms_usable = 112; /* 56 / 8 = 7 SMs: 14 blocks */
  assert_int_equal(weft_dev_budget(&in, &b), 0);
  assert_int_equal(b.general, 14);
  in.sms_usable = 96; /* 48 / 8 = 6 SMs: 12, just enough */
  assert_int_equal(weft_dev_budget(&in, &b), 0);
  assert_int_equal(b.general, b.need);
  in.sms_usable = 95; /* 47 / 8 = 5 SMs: 10 */
  assert_int_equal(weft_dev_budget(&in, &b), -1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(alone_has_no_budget),
      cmocka_unit_test(equal_parts_of_the_share),
      cmocka_unit_test(mps_limit_is_the_pool),
      cmocka_unit_test(too_small_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
