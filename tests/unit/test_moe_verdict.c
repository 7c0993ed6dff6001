/* The MoE layer's verdicts (src/moe/moe.c, weft_moe_judge): every rank gets the lowest
 * refusing rank's reason, named by rank; a record that is no verdict of the call (a rank in
 * another call) is named as such, not as a failure it never had. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <string.h>

#include "err.h"
#include "moe.h"

enum { N = 4 };

static weft_result_t judge(weft_moe_verdict_t *all) {
  struct weft_moe m = {.rank = 0, .nranks = N};
  return weft_moe_judge(&m, "weft_moe_combine", all, sizeof *all);
}

static void all_ok_passes(void **st) {
  (void)st;
  weft_moe_verdict_t all[N] = {{MOE_OK, 0, 0, 0}};
  assert_int_equal(judge(all), WEFT_SUCCESS);
}

static void the_lowest_refusing_rank_speaks(void **st) {
  (void)st;
  weft_moe_verdict_t all[N] = {{MOE_OK, 0, 0, 0}};
  all[3] = (weft_moe_verdict_t){MOE_BAD_ID, 5, 1, 99};
  all[1] = (weft_moe_verdict_t){MOE_NULL_BUF, 4, 0, 0}; /* 4: B_Y */
  assert_int_equal(judge(all), WEFT_ERR_INVALID_ARG);
  assert_string_equal(weft_thread_error(), "weft_moe_combine: rank 1: y is NULL");
}

static void out_of_memory_is_named(void **st) {
  (void)st;
  weft_moe_verdict_t all[N] = {{MOE_OK, 0, 0, 0}};
  all[2].code = MOE_NO_MEM;
  assert_int_equal(judge(all), WEFT_ERR_NO_MEMORY);
  assert_string_equal(weft_thread_error(), "weft_moe_combine: rank 2: out of memory");
}

/* A rank that failed an earlier call and went on sends another call's record; it used to
 * read as "out of memory" */
static void another_calls_record_is_a_mismatch(void **st) {
  (void)st;
  weft_moe_verdict_t all[N] = {{MOE_OK, 0, 0, 0}};
  all[1].code = 4096;
  assert_int_equal(judge(all), WEFT_ERR_MISMATCH);
  assert_non_null(strstr(weft_thread_error(), "rank 1 answered with 4096"));
  assert_non_null(strstr(weft_thread_error(), "different calls"));
  assert_null(strstr(weft_thread_error(), "memory"));
  all[1].code = -1;
  assert_int_equal(judge(all), WEFT_ERR_MISMATCH);
}

/* a peer's buffer index past the table names the first buffer rather than read past it */
static void a_buffer_index_out_of_range_stays_inside(void **st) {
  (void)st;
  weft_moe_verdict_t all[N] = {{MOE_OK, 0, 0, 0}};
  all[0] = (weft_moe_verdict_t){MOE_NOT_DEVICE, 1 << 20, 0, 0};
  assert_int_equal(judge(all), WEFT_ERR_INVALID_ARG);
  assert_string_equal(weft_thread_error(),
                      "weft_moe_combine: rank 0: topk_ids is not device memory of the "
                      "communicator's GPU");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(all_ok_passes),
      cmocka_unit_test(the_lowest_refusing_rank_speaks),
      cmocka_unit_test(out_of_memory_is_named),
      cmocka_unit_test(another_calls_record_is_a_mismatch),
      cmocka_unit_test(a_buffer_index_out_of_range_stays_inside),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
