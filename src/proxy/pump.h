/* The proxy's thread (region.c runs one per worker): it passes over every peer in turn until
 * stopped, reads the communicator's abort word, asks for failures found elsewhere, fails work that
 * stalls, and sleeps on the transport when idle. A failure sets the kernels' abort word, is
 * explained, kept, and reported once. */
#ifndef WEFT_PUMP_H
#define WEFT_PUMP_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "transport.h"

/* What both proxies are given: the rank, the network transport (set up by the caller), the
 * words that stop them, the stall timeout, and the communicator's callbacks. */
typedef struct {
  int rank, nranks;
  const weft_transport_t *tr;
  void *tr_state;
  const atomic_int *abort_flag; /* the communicator's: set, the proxy stops at once */
  /* set to 1 when the proxy stops on a failure, so that the kernels' waits end (host-mapped
   * where kernels read it; may be NULL) */
  int32_t *kernel_abort;
  int64_t timeout_ms; /* work waiting that long without any progress fails */
  /* Optional: a failure seen elsewhere (notices, dead peers) ends the proxy too; called every
   * few milliseconds from the proxy thread, so it must be safe beside the communicator's
   * other threads. */
  weft_result_t (*check)(void *ctx);
  /* Optional: a transport's error with peer (a closed socket, bad bytes) is often the echo of
   * a failure elsewhere: returns the error to report instead, or rc (setting the thread's
   * error either way). */
  weft_result_t (*explain)(void *ctx, weft_result_t rc, int peer);
  /* Optional: told once of the proxy's own failure (code and message), e.g. to fail the
   * communicator and tell the peers. */
  void (*fail)(void *ctx, weft_result_t rc, const char *msg);
  /* Optional: whether this rank told the other ranks of a failure (weft_fail_told_others),
   * filling *n with the notice: the proxy then stops, and passes it to the peers' proxies
   * (bye), for ranks on other hosts that hear nothing else. Called from the proxy thread. */
  int (*told_others)(void *ctx, weft_notice_t *n);
  /* Optional: a peer's proxy passed on notice n (its text made printable): returns the error
   * to report, setting the thread's error (weft_fail_heard); NULL: the proxy words it. */
  weft_result_t (*heard)(void *ctx, const weft_notice_t *n);
  void *ctx;
} weft_proxy_link_t;

typedef struct {
  weft_proxy_link_t link;
  /* The proxy's own: one pass over peer; *moved when bytes moved, *busy when some frame with
   * peer is under way or waits to go. */
  weft_result_t (*pass)(void *self, int peer, int *moved, int *busy);
  /* Optional: pass over peers 0..npeers-1 (0: link.nranks, the ranks themselves), peer i
   * being rank peer_rank[i] in what the pump reports (NULL: rank i). */
  int npeers;
  const int32_t *peer_rank;
  /* Optional: the communicator failed here (n, from told_others) or was aborted (n NULL):
   * tell the peers so, without blocking, before the connections close (they would read the
   * close as this rank gone). */
  void (*bye)(void *self, const weft_notice_t *n);
  void *self;
  /* Optional (kicks NULL; kick_fd -1, and only read with kicks): work is coming. The host bumps
   * *kicks as it queues an operation (weft_rproxy_kick), and writes kick_fd (an eventfd in the
   * transport's waits: its wake_fd) where a pump naps; a pump that sees *kicks move polls on for
   * spin_us, as after traffic, so the kernels' first flags find it awake. */
  const _Atomic uint64_t *kicks;
  int kick_fd;
  /* Optional: while *holds is above 0 the pump never naps (weft_rproxy_hold: a CUDA graph
   * that may replay work through it, with no host step to kick it). */
  const _Atomic int64_t *holds;
} weft_pump_init_t;

/* What a pump did (weft_pump_stats): its passes, its naps, and its pauses: gaps of more than
 * WEFT_PUMP_PAUSE_US between two passes, naps aside, where the thread lost its core (another
 * runnable thread on it, a hypervisor's steal) or blocked while the kernels may wait on it. */
enum { WEFT_PUMP_PAUSE_US = 1000 };
typedef struct {
  uint64_t passes, naps, pauses;
  int64_t longest_us; /* the longest gap between two passes, naps aside */
} weft_proxy_stats_t;

typedef struct {
  weft_pump_init_t in;
  pthread_t thread;
  int started;
  atomic_int stop;
  atomic_int status; /* weft_result_t; msg is written before it leaves WEFT_SUCCESS */
  atomic_int heard;  /* set by a pass before it returns a peer's notice: no echo to explain */
  char msg[1024];
  _Atomic uint64_t sent, received;       /* frames, counted by the passes */
  int64_t spin_us;                       /* WEFT_PROXY_SPIN_US */
  atomic_int napping;                    /* in the transport's wait: a kick must write kick_fd */
  _Atomic uint64_t passes, naps, pauses; /* weft_pump_stats's */
  _Atomic int64_t longest_us;
} weft_pump_t;

weft_result_t weft_pump_start(weft_pump_t *p, const weft_pump_init_t *in);
weft_result_t weft_pump_status(weft_pump_t *p);
/* Up to n bytes of peer's stream into dst, consumed: straight from the network where the
 * transport can (recv_into), else copied out of what peek shows; *got 0 when none came yet. */
weft_result_t weft_proxy_take(const weft_proxy_link_t *l, int peer, void *dst, size_t n,
                              size_t *got);
/* Sends what the transport takes of hdr (hn bytes) then body (bn) from offset *at of the two
 * together, advancing *at: in one message where the transport has sendv. *moved when any
 * byte went. */
weft_result_t weft_proxy_give(const weft_proxy_link_t *l, int peer, const void *hdr, size_t hn,
                              const void *body, size_t bn, size_t *at, int *moved);
/* Frames sent and received so far (either may be NULL). */
void weft_pump_counts(weft_pump_t *p, uint64_t *sent, uint64_t *received);
/* Adds p's passes, naps and pauses to *s, and keeps the longer longest gap: so far, from any
 * thread. */
void weft_pump_stats(weft_pump_t *p, weft_proxy_stats_t *s);
void weft_pump_stop(weft_pump_t *p);

#endif
