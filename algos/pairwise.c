/* Pairwise all-to-all: in round k a rank sends to r+k and receives from r-k, and a round
 * starts only when the previous one is done, so each rank has one exchange in flight
 * (gentle on links and receive buffers when many ranks share a host). */
#include "schedule.h"

weft_result_t weft_pairwise(const weft_coll_args_t *a, weft_sched_t *s) {
  if (a->coll != WEFT_COLL_ALLTOALL && a->coll != WEFT_COLL_ALLTOALLV) return WEFT_ERR_UNSUPPORTED;
  int n = a->nranks, r = a->rank;
  weft_buf_t src = a->in_place ? WEFT_BUF_SCRATCH : WEFT_BUF_SEND;
  int32_t snap = weft_alltoall_snapshot(a, s);
  int32_t prev_send = snap, prev_recv = snap;
  for (int k = 0; k < n; k++) {
    int to = (r + k) % n, from = (r - k + n) % n;
    weft_a2a_block_t b = weft_a2a_block(a, to, from);
    if (k == 0) {
      weft_sched_add(s, WEFT_STEP_COPY, r, WEFT_BUF_RECV, b.recv_off, src, b.send_off, b.send_count,
                     snap, -1);
      continue;
    }
    int32_t si = weft_sched_add(s, WEFT_STEP_SEND, to, src, b.send_off, 0, 0, b.send_count,
                                prev_send, prev_recv);
    int32_t ri = weft_sched_add(s, WEFT_STEP_RECV, from, WEFT_BUF_RECV, b.recv_off, 0, 0,
                                b.recv_count, prev_send, prev_recv);
    /* An empty exchange adds no step; the round after it waits on the last real one. */
    if (si >= 0) prev_send = si;
    if (ri >= 0) prev_recv = ri;
  }
  return weft_sched_status(s);
}
