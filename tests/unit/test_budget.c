/* The block budget of ranks sharing a GPU (src/gpu/budget.c): nothing where the GPU serves
 * one rank; an equal part of WEFT_SHARED_SM_PERCENT of the usable SMs otherwise, in each
 * kernel's blocks; MPS's limit counted as the whole pool; a budget that cannot hold one send
 * and one receive per peer refused; and the communicator's one budget from its ranks' cards. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>

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

static weft_dev_share_card_t card(const char *bus, int listed) {
  weft_dev_share_card_t k = {
      .listed = listed, .sms = 132, .usable = 132, .occ = 2, .occ_ll = 1, .percent = 50};
  snprintf(k.bus, sizeof k.bus, "%s", bus);
  return k;
}

/* The communicator's one budget from every rank's card: sharing seen by the ranks of the
 * communicator, by the registry, or asked for; the smallest budget of a shared GPU; none on
 * one rank; the rank whose budget cannot hold the kernels named. */
static void agreement(void **st) {
  (void)st;
  weft_dev_budget_t b;
  int bad = -1, ours = 0;
  weft_dev_share_card_t k[8] = {card("A", 1), card("A", 2), card("B", 1), card("B", 1)};
  assert_int_equal(weft_dev_budget_agree(k, 4, &b, &bad, &ours), 0); /* 2 on each GPU */
  assert_int_equal(b.sharers, 2);
  assert_int_equal(b.general, 66);
  assert_int_equal(bad, -1);
  k[0] = card("A", 1), k[1] = card("B", 1); /* a GPU each, alone */
  assert_int_equal(weft_dev_budget_agree(k, 2, &b, &bad, &ours), 0);
  assert_int_equal(b.sharers, 1);
  assert_int_equal(b.general, 0);
  k[1].listed = 8; /* the registry: B serves 8 processes, so both ranks keep its budget */
  assert_int_equal(weft_dev_budget_agree(k, 2, &b, &bad, &ours), 0);
  assert_int_equal(b.sharers, 8);
  assert_int_equal(b.general, 16);
  assert_int_equal(b.ll, 8);
  assert_int_equal(b.need, 2);
  assert_int_equal(weft_dev_budget_agree(k + 1, 1, &b, &bad, &ours), 0); /* one rank */
  assert_int_equal(b.sharers, 1);
  k[1].listed = 1, k[0].asked = 4; /* WEFT_GPU_SHARERS */
  assert_int_equal(weft_dev_budget_agree(k, 2, &b, &bad, &ours), 0);
  assert_int_equal(b.sharers, 4);
  assert_int_equal(b.sms, 16);                                        /* 66 SMs in 4 */
  k[0].asked = 0, k[0].listed = 2, k[1].listed = 2, k[1].usable = 40; /* MPS limits rank 1 */
  assert_int_equal(weft_dev_budget_agree(k, 2, &b, &bad, &ours), 0);
  assert_int_equal(b.sms, 10); /* 20 of 40 SMs in 2, not 33 */
  for (int r = 0; r < 8; r++)  /* 8 ranks on 2 GPUs, and GPU B serves 16 processes */
    k[r] = card(r < 4 ? "A" : "B", r == 6 ? 16 : 1);
  assert_int_equal(weft_dev_budget_agree(k, 8, &b, &bad, &ours), -1);
  assert_int_equal(bad, 4); /* the first rank on B */
  assert_int_equal(ours, 4);
  assert_int_equal(b.sharers, 16);
  assert_int_equal(b.general, 8);           /* 4 SMs each: short of 14 */
  k[0] = card("A", 1), k[1] = card("A", 1); /* the same bus id on two hosts: two GPUs */
  k[1].host = 7;
  assert_int_equal(weft_dev_budget_agree(k, 2, &b, &bad, &ours), 0);
  assert_int_equal(b.sharers, 1);
  k[1].host = k[0].host; /* one host: one GPU shared */
  assert_int_equal(weft_dev_budget_agree(k, 2, &b, &bad, &ours), 0);
  assert_int_equal(b.sharers, 2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(alone_has_no_budget),
      cmocka_unit_test(equal_parts_of_the_share),
      cmocka_unit_test(mps_limit_is_the_pool),
      cmocka_unit_test(too_small_refused),
      cmocka_unit_test(agreement),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
