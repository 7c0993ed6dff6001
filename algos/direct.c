/* Direct exchange: every rank sends to every rank at once, for small messages where
 * latency, not bandwidth, is the cost. Reductions run in rank order 0..n-1 on every rank,
 * so all ranks produce bit-identical results. */
#include "schedule.h"

/* Reduces the n contributions of one block in rank order into recvbuf. Contribution j
 * comes from peer j, or from own (buffer, offset) when j is this rank. The first write to
 * recvbuf waits for first_dep. Returns the last step. */
static int32_t reduce_in_order(const weft_coll_args_t *a, weft_sched_t *s, weft_buf_t own,
                               uint64_t own_off, int32_t first_dep) {
  int32_t last = first_dep;
  for (int j = 0; j < a->nranks; j++) {
    weft_step_kind_t kind;
    if (j == a->rank)
      kind = j == 0 ? WEFT_STEP_COPY : WEFT_STEP_REDUCE;
    else
      kind = j == 0 ? WEFT_STEP_RECV : WEFT_STEP_RECV_REDUCE;
    int32_t i = weft_sched_add(s, kind, j, WEFT_BUF_RECV, 0, j == a->rank ? own : WEFT_BUF_RECV,
                               j == a->rank ? own_off : 0, a->count, last, -1);
    if (i >= 0) last = i;
  }
  return last;
}

static void send_to_all(const weft_coll_args_t *a, weft_sched_t *s, weft_buf_t src,
                        int per_peer_block, int32_t dep) {
  for (int k = 1; k < a->nranks; k++) {
    int p = (a->rank + k) % a->nranks;
    uint64_t off = per_peer_block ? (uint64_t)p * a->count : 0;
    weft_sched_add(s, WEFT_STEP_SEND, p, src, off, 0, 0, a->count, dep, -1);
  }
}

weft_result_t weft_direct(const weft_coll_args_t *a, weft_sched_t *s) {
  int n = a->nranks, r = a->rank;
  switch (a->coll) {
  case WEFT_COLL_ALLREDUCE:
  case WEFT_COLL_REDUCE_SCATTER: {
    int rs = a->coll == WEFT_COLL_REDUCE_SCATTER;
    uint64_t own_off = rs ? (uint64_t)r * a->count : 0;
    if (!a->in_place) {
      send_to_all(a, s, WEFT_BUF_SEND, rs, -1);
      reduce_in_order(a, s, WEFT_BUF_SEND, own_off, -1);
      break;
    }
    /* In place, recvbuf is also this rank's contribution, and (allreduce) what it sends:
     * keep a snapshot in scratch before the first result lands. */
    s->scratch_count = a->count;
    int32_t snap = weft_sched_add(s, WEFT_STEP_COPY, r, WEFT_BUF_SCRATCH, 0, WEFT_BUF_SEND, own_off,
                                  a->count, -1, -1);
    send_to_all(a, s, rs ? WEFT_BUF_SEND : WEFT_BUF_SCRATCH, rs, rs ? -1 : snap);
    reduce_in_order(a, s, WEFT_BUF_SCRATCH, 0, snap);
    break;
  }
  case WEFT_COLL_ALLGATHER:
    send_to_all(a, s, WEFT_BUF_SEND, 0, -1);
    if (!a->in_place)
      weft_sched_add(s, WEFT_STEP_COPY, r, WEFT_BUF_RECV, (uint64_t)r * a->count, WEFT_BUF_SEND, 0,
                     a->count, -1, -1);
    for (int k = 1; k < n; k++) {
      int p = (r - k + n) % n;
      weft_sched_add(s, WEFT_STEP_RECV, p, WEFT_BUF_RECV, (uint64_t)p * a->count, 0, 0, a->count,
                     -1, -1);
    }
    break;
  case WEFT_COLL_ALLTOALL:
  case WEFT_COLL_ALLTOALLV: {
    /* In place, sends read a snapshot: receives overwrite the blocks still to be sent. */
    weft_buf_t src = a->in_place ? WEFT_BUF_SCRATCH : WEFT_BUF_SEND;
    int32_t snap = weft_alltoall_snapshot(a, s);
    for (int k = 0; k < n; k++) {
      int to = (r + k) % n, from = (r - k + n) % n;
      weft_a2a_block_t b = weft_a2a_block(a, to, from);
      if (k == 0) {
        weft_sched_add(s, WEFT_STEP_COPY, r, WEFT_BUF_RECV, b.recv_off, src, b.send_off,
                       b.send_count, snap, -1);
        continue;
      }
      weft_sched_add(s, WEFT_STEP_SEND, to, src, b.send_off, 0, 0, b.send_count, snap, -1);
      weft_sched_add(s, WEFT_STEP_RECV, from, WEFT_BUF_RECV, b.recv_off, 0, 0, b.recv_count, snap,
                     -1);
    }
    break;
  }
  default: return WEFT_ERR_UNSUPPORTED;
  }
  return weft_sched_status(s);
}
