/* Failure propagation: the first rank that sees a failure tells every other rank (over the
 * bootstrap ring, forwarded hop by hop, and straight into the shared memory of ranks on its
 * host), so that no survivor waits for its own timeout. */
#ifndef WEFT_FAILURE_H
#define WEFT_FAILURE_H

#include "comm.h"

/* Tells the others (once per communicator) that this comm failed with err; text is the
 * error message they will quote. */
void weft_fail_notify(weft_comm_t c, weft_result_t err, uint64_t seq, const char *text);
/* WEFT_SUCCESS, or the reported failure with a message naming who saw what. */
weft_result_t weft_fail_check(weft_comm_t c);
/* The same without the bootstrap ring, for threads other than the one that may be using
 * the ring (the heartbeat thread watching a device communicator). */
weft_result_t weft_fail_check_local(weft_comm_t c);
/* A data connection to peer was lost and no notice explains it: the peer is dead, said as
 * weft_fail_check says it of a dead rank (detail, the transport's words, is logged at INFO). */
weft_result_t weft_fail_peer_gone(weft_comm_t c, int peer, const char *detail);

#endif
