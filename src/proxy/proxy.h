/* The proxy: one progress thread per communicator and GPU that carries chunks between the
 * local FIFOs (fifo.h), filled and drained by the kernels, and a network transport. A send
 * connection's chunks go out as frames {channel, bytes} + payload on the transport's byte
 * stream to the peer; the receiving proxy writes each into the next free slot of that peer's
 * receive connection on the same channel and publishes it. Nothing here waits on the host
 * side of an operation, so CUDA graph replays need no host step. */
#ifndef WEFT_PROXY_H
#define WEFT_PROXY_H

#include <stdatomic.h>
#include <stdint.h>

#include "fifo.h"
#include "pump.h"
#include "transport.h"

/* Known limit: the channels to one peer share one stream, so a chunk for a channel whose
 * receiving FIFO is full holds back the chunks behind it on other channels; kernels that post
 * here must drain their channels independently (or the sender will check the receiver's
 * room per channel, to come). */

/* One direction of one channel with one peer. */
typedef struct {
  int peer, chan;    /* the same channel number on both ends */
  weft_fifo_t *fifo; /* host-mapped: the kernels and the proxy both reach it */
  char *buf;         /* WEFT_FIFO_SLOTS slots of slot_bytes, slot i at buf + i * slot_bytes */
  uint32_t slot_bytes;
} weft_proxy_conn_t;

typedef struct {
  weft_proxy_link_t link; /* pump.h */
  int nchan;
  const weft_proxy_conn_t *send, *recv; /* copied; at most one per (peer, channel) each */
  int nsend, nrecv;
} weft_proxy_init_t;

typedef struct weft_proxy weft_proxy_t;

/* Checks the connections (a channel out of range, two connections for one peer and channel
 * in one direction, a slot of 0 bytes or past the largest frame: WEFT_ERR_INVALID_ARG) and
 * starts the thread. Local: the peers' proxies need not have started yet. */
weft_result_t weft_proxy_start(const weft_proxy_init_t *in, weft_proxy_t **out);
/* WEFT_SUCCESS while the proxy runs; else its failure, with its message as the thread's
 * error (weft_thread_error). */
weft_result_t weft_proxy_status(weft_proxy_t *p);
/* Chunks this proxy sent and received so far (for tests and logs; either may be NULL). */
void weft_proxy_counts(weft_proxy_t *p, uint64_t *sent, uint64_t *received);
/* Stops the thread and frees (NULL: nothing). Chunks in flight are dropped: call it once the
 * kernels are done, or after an abort. */
void weft_proxy_stop(weft_proxy_t *p);

#endif
