/* The MoE layout's pure functions (src/moe/layout.c): which tokens go to which rank (once
 * per rank, in token order), the rows of received choices (expert-major, by source then
 * token, blocks padded), and ids refused with the token and slot that break the rules. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "moe.h"

/* 2 ranks, 4 experts (2 each), k 2; token 1 goes to rank 0 twice (experts 0 and 1) */
static const int32_t IDS[] = {3, 0, 1, 0, -1, -1, 2, -1};

static void send_side(void **st) {
  (void)st;
  weft_moe_plan_t p;
  weft_moe_bad_t bad;
  assert_int_equal(weft_moe_plan_send(&p, 2, 4, 2, IDS, WEFT_I32, 4, &bad), 0);
  assert_int_equal(p.send_tok[0], 2); /* tokens 0 and 1, token 1 once */
  assert_int_equal(p.send_tok[1], 2); /* tokens 0 and 3 */
  size_t want[] = {0, 1, 0, 3};
  for (int e = 0; e < 4; e++)
    assert_int_equal(p.send_list[e], want[e]);
  assert_int_equal(p.send_off[2], 4);
  assert_int_equal(p.send_ids[2 * 2 + 0], 3); /* entry 2 carries token 0's whole row */
  assert_int_equal(p.send_ids[2 * 2 + 1], 0);
  weft_moe_plan_free(&p);
}

/* Rank 0 receiving IDS's entries for itself from both ranks (the same ids on each). */
static void rows_padded(void **st) {
  (void)st;
  weft_moe_plan_t p;
  weft_moe_bad_t bad;
  assert_int_equal(weft_moe_plan_send(&p, 2, 4, 2, IDS, WEFT_I32, 4, &bad), 0);
  p.recv_tok = calloc(2, sizeof *p.recv_tok);
  p.recv_tok[0] = p.recv_tok[1] = 2;
  assert_int_equal(weft_moe_plan_recv_alloc(&p), 0);
  for (int s = 0; s < 2; s++) /* both sources send tokens 0 and 1: {3, 0} and {1, 0} */
    memcpy(p.recv_ids + s * 4, p.send_ids, 4 * sizeof *p.recv_ids);
  assert_int_equal(weft_moe_plan_rows(&p, 0, 4), 0);
  /* expert 0: 4 choices (each token of each source), expert 1: 2 (token 1 of each) */
  assert_int_equal(p.count[0], 4);
  assert_int_equal(p.count[1], 2);
  assert_int_equal(p.offset[1], 4);
  assert_int_equal(p.rows, 8); /* 4 + 2 padded to 4 */
  size_t N = WEFT_MOE_NO_ROW;
  /* entry order: s0 t0 {3,0}, s0 t1 {1,0}, s1 t0, s1 t1; expert 0's rows in that order */
  size_t want[] = {N, 0, 4, 1, N, 2, 5, 3};
  for (int i = 0; i < 8; i++)
    assert_int_equal(p.row_of[i], want[i]);
  weft_moe_plan_free(&p);
}

static void bad_ids(void **st) {
  (void)st;
  weft_moe_plan_t p;
  weft_moe_bad_t bad;
  int64_t out[] = {0, 1, 2, 4};
  assert_int_equal(weft_moe_plan_send(&p, 2, 4, 2, out, WEFT_I64, 2, &bad), -1);
  assert_int_equal(bad.token, 1);
  assert_int_equal(bad.slot, 1);
  assert_int_equal(bad.id, 4);
  assert_int_equal(bad.repeated, 0);
  int64_t neg[] = {-2, 1};
  assert_int_equal(weft_moe_plan_send(&p, 2, 4, 2, neg, WEFT_I64, 1, &bad), -1);
  assert_int_equal(bad.id, -2);
  int32_t rep[] = {1, -1, 2, 2};
  assert_int_equal(weft_moe_plan_send(&p, 2, 4, 2, rep, WEFT_I32, 2, &bad), -1);
  assert_int_equal(bad.token, 1);
  assert_int_equal(bad.repeated, 1);
  int32_t drops[] = {-1, -1};
  assert_int_equal(weft_moe_plan_send(&p, 2, 4, 2, drops, WEFT_I32, 1, &bad), 0);
  assert_int_equal(p.send_off[2], 0);
  weft_moe_plan_free(&p);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(send_side), cmocka_unit_test(rows_padded),
                                     cmocka_unit_test(bad_ids)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
