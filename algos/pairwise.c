/* Pairwise all-to-all: in round k a rank sends to r+k and receives from r-k, and a round
 * starts only when the previous one is done, so each rank has one exchange in flight
 * (gentle on links and receive buffers when many ranks share a host). */
#include "schedule.h"

weft_result_t weft_pairwise(const weft_coll_args_t *a, weft_sched_t *s) {
  if (a->coll != WEFT_COLL_ALLTOALL && a->coll != WEFT_COLL_ALLTOALLV) return WEFT_ERR_UNSUPPORTED;
  int n = a->nranks, r = a->rank, v = a->coll == WEFT_COLL_ALLTOALLV;
  weft_buf_t src = a->in_place ? WEFT_BUF_SCRATCH : WEFT_BUF_SEND;
  int32_t snap = weft_alltoall_snapshot(a, s);
  int32_t prev_send = snap, prev_recv = snap;
  for (int k = 0; k < n; k++) {
    int to = (r + k) % n, from = (r - k + n) % n;
    uint64_t so = v ? a->sdispls[to] : (uint64_t)to * a->count;
    uint64_t sc = v ? a->sendcounts[to] : a->count;
    uint64_t ro = v ? a->rdispls[from] : (uint64_t)from * a->count;
    uint64_t rc = v ? a->recvcounts[from] : a->count;
    if (k == 0) {
      weft_sched_add(s, WEFT_STEP_COPY, r, WEFT_BUF_RECV, ro, src, so, sc, snap, -1);
      continue;
    }
    int32_t si = weft_sched_add(s, WEFT_STEP_SEND, to, src, so, 0, 0, sc, prev_send, prev_recv);
    int32_t ri =
        weft_sched_add(s, WEFT_STEP_RECV, from, WEFT_BUF_RECV, ro, 0, 0, rc, prev_send, prev_recv);
    /* An empty exchange adds no step; the round after it waits on the last real one. */
    if (si >= 0) prev_send = si;
    if (ri >= 0) prev_recv = ri;
  }
  return weft_sched_status(s);
}
