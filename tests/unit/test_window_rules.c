/* The window rules (src/gpu/window_rules.c) without a GPU: which buffers an operation on
 * windows reaches in its peers and when it stays staged, when an allreduce splits for the copy
 * engines, and where a buffer lies in a window, without wrapping for a bad size. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdint.h>

#include "dev_task.h"
#include "window_rules.h"

/* Which buffers an operation on windows touches in its peers, and when it stays staged. */
static void direct_rules(void **st) {
  (void)st;
  const uint64_t M = 1 << 20, cap = 64 * M, blk = M / 4; /* 1 MiB blocks of f32 */
  const uintptr_t a = 1 << 30, b = 2u << 30;
  weft_task_t t = coll(WEFT_COLL_ALLGATHER, blk, a, b);
  assert_int_equal(weft_dev_direct_needs(&t, 2, 1, cap), WEFT_DEV_DIRECT_RECV);
  assert_int_equal(weft_dev_direct_needs(&t, 2, 0, cap), 0);     /* off */
  assert_int_equal(weft_dev_direct_needs(&t, 2, M + 1, cap), 0); /* under the threshold */
  assert_int_equal(weft_dev_direct_needs(&t, 2, M, cap), WEFT_DEV_DIRECT_RECV);
  t = coll(WEFT_COLL_ALLGATHER, 0, a, b);
  assert_int_equal(weft_dev_direct_needs(&t, 2, 1, cap), 0); /* nothing moves */
  t = coll(WEFT_COLL_ALLTOALL, blk, a, b);
  assert_int_equal(weft_dev_direct_needs(&t, 4, 1, cap), WEFT_DEV_DIRECT_RECV);
  t = coll(WEFT_COLL_ALLTOALL, blk, a, a);
  assert_int_equal(weft_dev_direct_needs(&t, 4, 1, cap), 0); /* in place */
  t = coll(WEFT_COLL_ALLTOALL, blk, a, a + 4 * M - 16);
  assert_int_equal(weft_dev_direct_needs(&t, 4, 1, cap), 0); /* overlapping by 16 bytes */
  t = coll(WEFT_COLL_ALLTOALL, blk, a, a + 4 * M);
  assert_int_equal(weft_dev_direct_needs(&t, 4, 1, cap), WEFT_DEV_DIRECT_RECV);
  t = coll(WEFT_COLL_REDUCE_SCATTER, 64 * blk, a, b); /* 64 MiB read a peer */
  assert_int_equal(weft_dev_direct_needs(&t, 2, 1, cap), WEFT_DEV_DIRECT_SEND);
  t = coll(WEFT_COLL_REDUCE_SCATTER, 64 * blk + 4, a, b);
  assert_int_equal(weft_dev_direct_needs(&t, 2, 1, cap), 0);
  t = coll(WEFT_COLL_ALLREDUCE, 128 * blk, a, a); /* in place, 64 MiB a peer */
  assert_int_equal(weft_dev_direct_needs(&t, 2, 1, cap),
                   WEFT_DEV_DIRECT_RECV | WEFT_DEV_DIRECT_SEND);
  t = coll(WEFT_COLL_ALLREDUCE, 128 * blk + 4, a, b);
  assert_int_equal(weft_dev_direct_needs(&t, 2, 1, cap), 0);
  assert_int_equal(weft_dev_direct_needs(&t, 4, 1, cap),
                   WEFT_DEV_DIRECT_RECV | WEFT_DEV_DIRECT_SEND);
  t = coll(WEFT_COLL_BROADCAST, blk, a, b);
  assert_int_equal(weft_dev_direct_needs(&t, 2, 1, cap), 0);
  t = coll(WEFT_COLL_ALLTOALLV, blk, a, b);
  assert_int_equal(weft_dev_direct_needs(&t, 2, 1, cap), 0);
}

/* An allreduce splits into reduce_scatter + copy-engine allgather only with even segments of
 * at least twice the copy engines' threshold. */
static void ce_allreduce_split(void **st) {
  (void)st;
  const uint64_t m = (uint64_t)64 << 20; /* bytes */
  weft_task_t t = {.args = {.coll = WEFT_COLL_ALLREDUCE, .count = (4 * m) / 4},
                   .dtype = WEFT_F32,
                   .op = WEFT_SUM};
  assert_int_equal(weft_dev_ce_split(&t, 2, m), m / 2); /* 128 MiB segments of f32 */
  assert_int_equal(weft_dev_ce_split(&t, 2, 0), 0);     /* copy engines off */
  assert_int_equal(weft_dev_ce_split(&t, 4, m), 0);     /* 64 MiB segments: not twice m */
  assert_int_equal(weft_dev_ce_split(&t, 1, m), 0);
  t.args.count = (4 * m) / 4 + 1; /* uneven */
  assert_int_equal(weft_dev_ce_split(&t, 2, m), 0);
  t.args.count = (4 * m) / 4;
  t.dtype = WEFT_BF16; /* the same count holds half the bytes: 64 MiB segments */
  assert_int_equal(weft_dev_ce_split(&t, 2, m), 0);
  assert_int_equal(weft_dev_ce_split(&t, 2, m / 2), m / 2);
  assert_int_equal(weft_dev_ce_split(&t, 2, m / 2 + 1), 0);
  t.args.coll = WEFT_COLL_ALLGATHER;
  assert_int_equal(weft_dev_ce_split(&t, 2, 1), 0);
}

/* A buffer lies in a window only whole; sizes that would wrap p + bytes are refused. */
static void holds(void **st) {
  (void)st;
  static char mem[192]; /* the window is its middle third: neighbours stay in bounds */
  char *win = mem + 64;
  size_t off = 99;
  assert_true(weft_window_holds(win, 64, win, 64, &off));
  assert_int_equal(off, 0);
  assert_true(weft_window_holds(win, 64, win + 16, 48, &off));
  assert_int_equal(off, 16);
  assert_true(weft_window_holds(win, 64, win + 64, 0, &off)); /* empty, at the end */
  off = 99;
  assert_false(weft_window_holds(win, 64, win + 16, 49, &off)); /* one byte past */
  assert_false(weft_window_holds(win, 64, win - 1, 2, &off));   /* starts before */
  assert_false(weft_window_holds(win, 64, win + 65, 0, &off));  /* after */
  assert_false(weft_window_holds(win, 64, win + 8, SIZE_MAX, &off));
  assert_false(weft_window_holds(win, 64, win + 8, SIZE_MAX - 4, &off)); /* p + bytes wraps */
  assert_int_equal(off, 99);                                             /* untouched */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(direct_rules),
      cmocka_unit_test(ce_allreduce_split),
      cmocka_unit_test(holds),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
