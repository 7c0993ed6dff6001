/* Failure notices (see failure.h). A rank learns of a failure from a notice (shm header
 * or ring socket), from a ring neighbour whose socket closed without a bye, or from a
 * local peer whose process is gone; it then forwards the notice, keeping its origin. */
#include "failure.h"

#include "err.h"

void weft_fail_notify(weft_comm_t c, weft_result_t err, uint64_t seq) {
  if (atomic_exchange(&c->notified, 1)) return;
  int origin = atomic_load(&c->fail_origin);
  weft_notice_t n = {.origin = origin >= 0 ? origin : c->rank, .code = err, .seq = seq};
  weft_bootstrap_notify(c->boot, &n);
  for (int t = 0; t < WEFT_TR_COUNT; t++)
    if (c->tr[t] && c->tr_state[t] && c->tr[t]->notify) c->tr[t]->notify(c->tr_state[t], &n);
}

weft_result_t weft_fail_check(weft_comm_t c) {
  weft_notice_t n = {0};
  weft_result_t rc = WEFT_SUCCESS;
  for (int t = 0; t < WEFT_TR_COUNT && rc == WEFT_SUCCESS; t++)
    if (c->tr[t] && c->tr_state[t] && c->tr[t]->check) rc = c->tr[t]->check(c->tr_state[t], &n);
  if (rc == WEFT_SUCCESS && c->boot) rc = weft_bootstrap_check(c->boot, &n);
  if (rc == WEFT_SUCCESS) return rc;
  atomic_store(&c->fail_origin, n.origin);
  if (n.origin == c->rank)
    return weft_set_error(rc, "rank %d: a neighbour reported this rank's own failure", c->rank);
  if (n.seq == 0)
    return weft_set_error(
        rc,
        "rank %d: rank %d is gone (its process died or stopped, or it left without "
        "destroying the communicator)",
        c->rank, n.origin);
  unsigned long long op = (unsigned long long)n.seq;
  switch (rc) {
  case WEFT_ERR_PEER_LOST:
    return weft_set_error(rc, "rank %d: rank %d is gone (noticed during op %llu)", c->rank,
                          n.origin, op);
  case WEFT_ERR_TIMEOUT:
    return weft_set_error(rc,
                          "rank %d: rank %d timed out in op %llu waiting for a peer (one hangs "
                          "or called a different operation)",
                          c->rank, n.origin, op);
  case WEFT_ERR_ABORTED:
    return weft_set_error(rc, "rank %d: rank %d aborted the communicator (op %llu)", c->rank,
                          n.origin, op);
  case WEFT_ERR_MISMATCH:
    return weft_set_error(rc,
                          "rank %d: rank %d saw mismatched calls in op %llu (its error names "
                          "both)",
                          c->rank, n.origin, op);
  default:
    return weft_set_error(rc, "rank %d: rank %d failed in op %llu (%s); stopping here too", c->rank,
                          n.origin, op, weft_result_string(rc));
  }
}
