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
#include "transport.h"

/* One direction of one channel with one peer. */
typedef struct {
  int peer, chan;    /* the same channel number on both ends */
  weft_fifo_t *fifo; /* host-mapped: the kernels and the proxy both reach it */
  char *buf;         /* WEFT_FIFO_SLOTS slots of slot_bytes, slot i at buf + i * slot_bytes */
  uint32_t slot_bytes;
} weft_proxy_conn_t;

typedef struct {
  int rank, nranks, nchan;
  const weft_transport_t *tr; /* the network transport and its state (set up by the caller) */
  void *tr_state;
  const weft_proxy_conn_t *send, *recv; /* copied; at most one per (peer, channel) each */
  int nsend, nrecv;
  const atomic_int *abort_flag; /* the communicator's: set, the proxy stops at once */
  /* Set to 1 by the proxy when it stops on a failure, so that the kernels' waits end; may be
   * NULL. Host-mapped where kernels read it. */
  int32_t *kernel_abort;
  int64_t timeout_ms; /* work waiting that long without any progress fails */
  /* Optional: a failure seen elsewhere (notices, dead peers) ends the proxy too; called every
   * few milliseconds from the proxy thread. */
  weft_result_t (*check)(void *ctx);
  /* Optional: a transport's error with peer (a closed socket, bad bytes) is often the echo of
   * a failure elsewhere: returns the error to report instead, or rc (setting the thread's
   * error either way). From the proxy thread. */
  weft_result_t (*explain)(void *ctx, weft_result_t rc, int peer);
  /* Optional: told once of the proxy's own failure (code and message), e.g. to fail the
   * communicator and tell the peers. From the proxy thread. */
  void (*fail)(void *ctx, weft_result_t rc, const char *msg);
  void *ctx;
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
