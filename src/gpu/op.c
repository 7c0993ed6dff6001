/* The device operation's description and the one place that maps it to the kernels'
 * encoding: a kind per collective (allreduce twice, one-shot and two-shot), a ring flag on
 * the item, and in error reports the protocol as an offset and windows and rings as bits. */
#include "op.h"

#include "dev.h"

weft_dev_op_t weft_dev_op_of(const weft_task_t *t, weft_proto_t proto) {
  weft_dev_op_t op = {.coll = t->args.coll, .algo = WEFT_ALGO_DIRECT, .proto = proto};
  weft_coll_t k = t->args.coll;
  if (k == WEFT_COLL_ALLREDUCE)
    op.algo =
        t->algo == WEFT_ALGO_ONESHOT || t->algo == WEFT_ALGO_RING ? t->algo : WEFT_ALGO_TWOSHOT;
  else if (t->algo == WEFT_ALGO_RING &&
           (k == WEFT_COLL_REDUCE_SCATTER || k == WEFT_COLL_ALLGATHER || k == WEFT_COLL_BROADCAST ||
            k == WEFT_COLL_REDUCE))
    op.algo = WEFT_ALGO_RING; /* broadcast and reduce: a chain round the ring */
  return op;
}

int weft_dev_op_kind(weft_dev_op_t op) {
  switch (op.coll) {
  case WEFT_COLL_ALLREDUCE: /* a ring runs on two-shot's segments */
    return op.algo == WEFT_ALGO_ONESHOT ? WEFT_DEV_ALLREDUCE_ONESHOT : WEFT_DEV_ALLREDUCE_TWOSHOT;
  case WEFT_COLL_REDUCE_SCATTER: return WEFT_DEV_REDUCE_SCATTER;
  case WEFT_COLL_ALLGATHER: return WEFT_DEV_ALLGATHER;
  case WEFT_COLL_BROADCAST: return WEFT_DEV_BROADCAST;
  case WEFT_COLL_REDUCE: return WEFT_DEV_REDUCE;
  case WEFT_COLL_ALLTOALL: return WEFT_DEV_ALLTOALL;
  case WEFT_COLL_ALLTOALLV: return WEFT_DEV_ALLTOALLV;
  case WEFT_COLL_SEND: return WEFT_DEV_SEND;
  default: return WEFT_DEV_RECV;
  }
}

int weft_dev_op_ring(weft_dev_op_t op) { return op.algo == WEFT_ALGO_RING; }

weft_dev_op_t weft_dev_op_from_report(uint32_t kind) {
  static const weft_coll_t colls[WEFT_DEV_KIND_COUNT] = {
      WEFT_COLL_ALLREDUCE, WEFT_COLL_ALLREDUCE, WEFT_COLL_REDUCE_SCATTER, WEFT_COLL_ALLGATHER,
      WEFT_COLL_BROADCAST, WEFT_COLL_REDUCE,    WEFT_COLL_ALLTOALL,       WEFT_COLL_ALLTOALLV,
      WEFT_COLL_SEND,      WEFT_COLL_RECV};
  weft_dev_op_t op = {.algo = WEFT_ALGO_DIRECT, .proto = WEFT_PROTO_SIMPLE};
  if (kind & WEFT_DEV_MOE_KIND) {
    op.moe = (int)(kind & 3u), op.coll = WEFT_COLL_COUNT;
    return op;
  }
  op.windows = (kind & WEFT_DEV_DIRECT_KIND) != 0;
  int ring = (kind & WEFT_DEV_RING_KIND) != 0;
  kind &= ~(WEFT_DEV_DIRECT_KIND | WEFT_DEV_RING_KIND);
  if (kind >= 2 * WEFT_DEV_KIND_COUNT)
    op.proto = WEFT_PROTO_LL128, kind -= 2 * WEFT_DEV_KIND_COUNT;
  else if (kind >= WEFT_DEV_KIND_COUNT)
    op.proto = WEFT_PROTO_LL, kind -= WEFT_DEV_KIND_COUNT;
  op.coll = kind < WEFT_DEV_KIND_COUNT ? colls[kind] : WEFT_COLL_COUNT;
  if (kind == WEFT_DEV_ALLREDUCE_ONESHOT) op.algo = WEFT_ALGO_ONESHOT;
  if (kind == WEFT_DEV_ALLREDUCE_TWOSHOT) op.algo = WEFT_ALGO_TWOSHOT;
  if (ring) op.algo = WEFT_ALGO_RING;
  return op;
}

const char *weft_dev_op_name(weft_dev_op_t op) {
  if (op.moe) return op.moe == 1 ? "MoE dispatch" : "MoE combine";
  if (op.algo == WEFT_ALGO_RING)
    return op.coll == WEFT_COLL_ALLREDUCE        ? "ring allreduce"
           : op.coll == WEFT_COLL_REDUCE_SCATTER ? "ring reduce_scatter"
           : op.coll == WEFT_COLL_BROADCAST      ? "chain broadcast"
           : op.coll == WEFT_COLL_REDUCE         ? "chain reduce"
                                                 : "ring allgather";
  if (op.coll == WEFT_COLL_ALLREDUCE)
    return op.algo == WEFT_ALGO_ONESHOT ? "one-shot allreduce" : "two-shot allreduce";
  return op.coll < WEFT_COLL_COUNT ? weft_coll_name(op.coll) : "?";
}

const char *weft_dev_proto_prefix(weft_proto_t proto) {
  return proto == WEFT_PROTO_LL128 ? "128-byte low-latency "
         : proto == WEFT_PROTO_LL  ? "low-latency "
                                   : "";
}
