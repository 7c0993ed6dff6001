/* The device operation's description (src/gpu/op.c): every call maps to one kernel kind, the
 * ring flag only where a ring runs, and every kind a kernel can report decodes back to the
 * operation and protocol that the error message then names. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdint.h>
#include <string.h>

#include "dev.h"
#include "op.h"

static weft_task_t task(weft_coll_t coll, weft_algo_t algo) {
  return (weft_task_t){.args = {.coll = coll, .count = 16}, .algo = algo, .dtype = WEFT_F32};
}

static void calls_map_to_kinds(void **st) {
  (void)st;
  struct {
    weft_coll_t coll;
    weft_algo_t algo;
    int kind, ring;
    const char *name;
  } cases[] = {
      {WEFT_COLL_ALLREDUCE, WEFT_ALGO_ONESHOT, WEFT_DEV_ALLREDUCE_ONESHOT, 0, "one-shot allreduce"},
      {WEFT_COLL_ALLREDUCE, WEFT_ALGO_TWOSHOT, WEFT_DEV_ALLREDUCE_TWOSHOT, 0, "two-shot allreduce"},
      {WEFT_COLL_ALLREDUCE, WEFT_ALGO_RING, WEFT_DEV_ALLREDUCE_TWOSHOT, 1, "ring allreduce"},
      {WEFT_COLL_ALLREDUCE, WEFT_ALGO_DIRECT, WEFT_DEV_ALLREDUCE_TWOSHOT, 0, "two-shot allreduce"},
      {WEFT_COLL_REDUCE_SCATTER, WEFT_ALGO_RING, WEFT_DEV_REDUCE_SCATTER, 1, "ring reduce_scatter"},
      {WEFT_COLL_REDUCE_SCATTER, WEFT_ALGO_DIRECT, WEFT_DEV_REDUCE_SCATTER, 0, "reduce_scatter"},
      {WEFT_COLL_ALLGATHER, WEFT_ALGO_RING, WEFT_DEV_ALLGATHER, 1, "ring allgather"},
      {WEFT_COLL_BROADCAST, WEFT_ALGO_RING, WEFT_DEV_BROADCAST, 1, "chain broadcast"},
      {WEFT_COLL_BROADCAST, WEFT_ALGO_DIRECT, WEFT_DEV_BROADCAST, 0, "broadcast"},
      {WEFT_COLL_REDUCE, WEFT_ALGO_RING, WEFT_DEV_REDUCE, 1, "chain reduce"},
      {WEFT_COLL_REDUCE, WEFT_ALGO_DIRECT, WEFT_DEV_REDUCE, 0, "reduce"},
      {WEFT_COLL_ALLTOALL, WEFT_ALGO_RING, WEFT_DEV_ALLTOALL, 0, "alltoall"},
      {WEFT_COLL_ALLTOALL, WEFT_ALGO_DIRECT, WEFT_DEV_ALLTOALL, 0, "alltoall"},
      {WEFT_COLL_ALLTOALLV, WEFT_ALGO_DIRECT, WEFT_DEV_ALLTOALLV, 0, "alltoallv"},
      {WEFT_COLL_SEND, WEFT_ALGO_DIRECT, WEFT_DEV_SEND, 0, "send"},
      {WEFT_COLL_RECV, WEFT_ALGO_DIRECT, WEFT_DEV_RECV, 0, "recv"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    weft_task_t t = task(cases[i].coll, cases[i].algo);
    weft_dev_op_t op = weft_dev_op_of(&t, WEFT_PROTO_SIMPLE);
    assert_int_equal(weft_dev_op_kind(op), cases[i].kind);
    assert_int_equal(weft_dev_op_ring(op), cases[i].ring);
    assert_string_equal(weft_dev_op_name(op), cases[i].name);
  }
}

/* What a kernel writes into its error report decodes to what it ran. */
static void reports_decode(void **st) {
  (void)st;
  for (int kind = 0; kind < WEFT_DEV_KIND_COUNT; kind++)
    for (int proto = 0; proto < WEFT_PROTO_COUNT; proto++)
      for (int flags = 0; flags < 4; flags++) {
        uint32_t k = proto == WEFT_PROTO_LL128 ? (uint32_t)WEFT_DEV_LL128_KIND(kind)
                     : proto == WEFT_PROTO_LL  ? (uint32_t)WEFT_DEV_LL_KIND(kind)
                                               : (uint32_t)kind;
        int windows = flags & 1,
            ring = (flags & 2) && (kind == WEFT_DEV_ALLREDUCE_TWOSHOT ||
                                   kind == WEFT_DEV_REDUCE_SCATTER || kind == WEFT_DEV_ALLGATHER ||
                                   kind == WEFT_DEV_BROADCAST || kind == WEFT_DEV_REDUCE);
        k |= (windows ? WEFT_DEV_DIRECT_KIND : 0) | (ring ? WEFT_DEV_RING_KIND : 0);
        weft_dev_op_t op = weft_dev_op_from_report(k);
        assert_int_equal(op.proto, proto);
        assert_int_equal(op.windows, windows);
        assert_int_equal(weft_dev_op_ring(op), ring);
        assert_int_equal(weft_dev_op_kind(op), kind); /* the round trip */
      }
  weft_dev_op_t bad = weft_dev_op_from_report(3 * WEFT_DEV_KIND_COUNT + 1);
  assert_string_equal(weft_dev_op_name(bad), "?");
  /* the MoE low-latency kernels' reports */
  assert_string_equal(weft_dev_op_name(weft_dev_op_from_report(WEFT_DEV_MOE_KIND | 1)),
                      "MoE dispatch");
  assert_string_equal(weft_dev_op_name(weft_dev_op_from_report(WEFT_DEV_MOE_KIND | 2)),
                      "MoE combine");
  assert_int_equal(weft_dev_op_from_report(WEFT_DEV_MOE_KIND | 2).proto, WEFT_PROTO_SIMPLE);
  assert_string_equal(weft_dev_proto_prefix(WEFT_PROTO_SIMPLE), "");
  assert_string_equal(weft_dev_proto_prefix(WEFT_PROTO_LL), "low-latency ");
  assert_string_equal(weft_dev_proto_prefix(WEFT_PROTO_LL128), "128-byte low-latency ");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(calls_map_to_kinds),
      cmocka_unit_test(reports_decode),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
