/* Failure notices (declared in comm.h). A rank learns of a failure from a notice (shm segment
 * or ring socket), from a ring neighbour whose socket closed without a bye, or from a
 * local peer whose process is gone or whose heartbeat stopped; it then forwards the notice,
 * keeping its origin and its text. */
#include "comm.h"

#include <stdio.h>

#include "err.h"

void weft_fail_notify(weft_comm_t c, weft_result_t err, uint64_t seq, const char *text) {
  /* notified and told change together: a proxy that asks in between would tell nothing */
  pthread_mutex_lock(&c->mu);
  if (atomic_exchange(&c->notified, 1)) {
    pthread_mutex_unlock(&c->mu);
    return;
  }
  /* A rank that only relays a notice passes the reporter's op and words on, not its own. */
  int origin = atomic_load(&c->fail_origin);
  weft_notice_t n = {.origin = origin >= 0 ? origin : c->rank,
                     .code = err,
                     .seq = c->relay_seq ? c->relay_seq : seq};
  snprintf(n.text, sizeof n.text, "%s", c->relay_text[0] ? c->relay_text : text ? text : "");
  c->told = n;
  pthread_mutex_unlock(&c->mu);
  weft_bootstrap_notify(c->boot, &n);
  for (int t = 0; t < WEFT_MAX_TRANSPORTS; t++)
    if (c->tr[t] && c->tr_state[t] && c->tr[t]->notify) c->tr[t]->notify(c->tr_state[t], &n);
}

/* How a rank that found a peer dead says it, whichever channel showed it first. */
#define GONE                                                                                       \
  "rank %d (host %s) is gone (its process died, or it left without destroying the communicator)"

int weft_fail_told_others(weft_comm_t c, weft_notice_t *n) {
  pthread_mutex_lock(&c->mu);
  int told = c->told.code != WEFT_SUCCESS;
  if (told) *n = c->told;
  pthread_mutex_unlock(&c->mu);
  return told;
}

/* Says failure rc of notice n (a local finding, or a proxy's bare abort, when n.seq is 0),
 * keeping its origin, op and text to pass on. */
static weft_result_t report(weft_comm_t c, weft_result_t rc, weft_notice_t n) {
  pthread_mutex_lock(&c->mu); /* the proxy's workers and the heartbeat thread may all report */
  atomic_store(&c->fail_origin, n.origin);
  snprintf(c->relay_text, sizeof c->relay_text, "%s", n.text);
  c->relay_seq = n.seq;
  pthread_mutex_unlock(&c->mu);
  if (n.origin == c->rank)
    return weft_set_error(rc, "rank %d: a neighbour reported this rank's own failure", c->rank);
  char what[192];
  unsigned long long op = (unsigned long long)n.seq;
  /* Found here (seq 0), with the detector's precise words (a stopped rank): those alone. */
  if (n.seq == 0 && n.text[0]) return weft_set_error(rc, "rank %d: %s", c->rank, n.text);
  if (n.seq == 0 && rc == WEFT_ERR_ABORTED) /* a proxy's bare abort */
    snprintf(what, sizeof what, "rank %d aborted the communicator", n.origin);
  else if (n.seq == 0)
    snprintf(what, sizeof what, GONE, n.origin, weft_comm_host(c, n.origin));
  else if (rc == WEFT_ERR_PEER_LOST)
    snprintf(what, sizeof what, "rank %d (host %s) is gone (noticed during op %llu)", n.origin,
             weft_comm_host(c, n.origin), op);
  else if (rc == WEFT_ERR_TIMEOUT)
    snprintf(what, sizeof what, "rank %d timed out in op %llu waiting for a peer", n.origin, op);
  else if (rc == WEFT_ERR_ABORTED)
    snprintf(what, sizeof what, "rank %d aborted the communicator (op %llu)", n.origin, op);
  else if (rc == WEFT_ERR_MISMATCH)
    snprintf(what, sizeof what, "rank %d saw mismatched calls in op %llu", n.origin, op);
  else
    snprintf(what, sizeof what, "rank %d failed in op %llu (%s)", n.origin, op,
             weft_result_string(rc));
  /* The reporter's own words, when its notice came over the ring. */
  if (n.text[0]) return weft_set_error(rc, "rank %d: %s: %s", c->rank, what, n.text);
  return weft_set_error(rc, "rank %d: %s", c->rank, what);
}

static weft_result_t check(weft_comm_t c, int ring) {
  weft_notice_t n = {0};
  /* Notices carry the reporter's message; a local finding (seq 0) may carry its own. */
  weft_result_t rc = ring && c->boot ? weft_bootstrap_check(c->boot, &n) : WEFT_SUCCESS;
  for (int t = 0; t < WEFT_MAX_TRANSPORTS && rc == WEFT_SUCCESS; t++)
    if (c->tr[t] && c->tr_state[t] && c->tr[t]->check) rc = c->tr[t]->check(c->tr_state[t], &n);
  if (rc == WEFT_SUCCESS) return rc;
  return report(c, rc, n);
}

weft_result_t weft_fail_heard(weft_comm_t c, const weft_notice_t *n) {
  return report(c, n->code, *n);
}

weft_result_t weft_fail_check(weft_comm_t c) { return check(c, 1); }

weft_result_t weft_fail_check_local(weft_comm_t c) { return check(c, 0); }

weft_result_t weft_fail_peer_gone(weft_comm_t c, int peer, const char *detail) {
  /* the notice the others get (over the ring, or relayed by a proxy) names the lost peer */
  int none = -1;
  atomic_compare_exchange_strong(&c->fail_origin, &none, peer);
  WEFT_INFO(WEFT_SUB_NET, "rank %d: rank %d lost: %s", c->rank, peer, detail);
  return weft_set_error(WEFT_ERR_PEER_LOST, "rank %d: " GONE, c->rank, peer,
                        weft_comm_host(c, peer));
}

weft_result_t weft_fail_root_cause(weft_comm_t c, weft_result_t rc, int peer, const char *what,
                                   uint64_t seq) {
  if (atomic_load(&c->aborted))
    return weft_set_error(WEFT_ERR_ABORTED, "%s (op %llu) ended: communicator aborted", what,
                          (unsigned long long)seq);
  if (rc == WEFT_ERR_PEER_LOST || rc == WEFT_ERR_PROTOCOL) {
    char first[512];
    snprintf(first, sizeof first, "%s", weft_thread_error());
    weft_result_t why = weft_fail_check(c);
    if (why != WEFT_SUCCESS) return why;
    if (rc == WEFT_ERR_PEER_LOST) return weft_fail_peer_gone(c, peer, first);
    weft_set_error(rc, "%s", first);
  }
  return rc;
}
