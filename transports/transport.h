/* The transport interface: a byte channel per ordered pair of ranks, with non-blocking
 * send, and peek/consume on the receive side so that reductions can read incoming bytes
 * where they lie. Every transport fills one weft_transport_t with designated initializers
 * and takes a line in weft_transports (select.c), which also picks one for every pair;
 * `size` lets the struct grow; optional operations may be NULL. */
#ifndef WEFT_TRANSPORT_H
#define WEFT_TRANSPORT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "bootstrap.h"
#include "weft.h"

typedef struct {
  weft_bootstrap_t *boot;
  int rank, nranks;
  const uint8_t *use; /* use[p] != 0: this transport serves peer p (collective: all ranks) */
  /* index of each rank among those on this host, -1 elsewhere; lives as long as the transport
   * (tcp sizes a pair's sockets by it when the pair first connects) */
  const int *local_rank;
  int nlocal;
  /* each rank's host for messages: nranks rows of WEFT_HOST_LABEL_BYTES (topo.h); lives as
   * long as the transport */
  const char *host_labels;
  uint64_t magic;
  const atomic_int *abort_flag;
  int wake_fd; /* eventfd that weft_comm_abort writes, for transports that poll */
  /* connect every pair served at setup; else a transport may connect a pair on its first use
   * (tcp does: sockets and buffers then follow the pairs that talk) */
  int eager;
} weft_transport_init_t;

/* The tuner's alpha-beta-gamma costs of a link (each transport says how its were measured). */
typedef struct {
  double alpha;     /* seconds per message */
  double beta;      /* seconds per byte moved */
  double gamma;     /* seconds per byte reduced */
  double ring_step; /* extra per ring step: every step waits for the slowest neighbour */
} weft_link_cost_t;

typedef struct weft_transport {
  size_t size;
  const char *name; /* as WEFT_TRANSPORT names it */
  /* Selection: each pair of ranks takes the transport of highest priority that reaches it. */
  int priority;
  /* Whether it carries bytes between two ranks; same_host: their host identities match. */
  int (*reaches)(int same_host);
  /* The longest one wait sleeps when only this transport has traffic in flight. */
  int wait_ms;
  weft_link_cost_t cost;
  /* Collective over the communicator; allocates *state. */
  weft_result_t (*setup)(const weft_transport_init_t *init, void **state);
  void (*teardown)(void *state);
  /* Takes up to n bytes of src; *accepted may be 0 when the channel is full. */
  weft_result_t (*send)(void *state, int peer, const void *src, size_t n, size_t *accepted);
  /* Optional: as send, of the nv (at most WEFT_SENDV_MAX) buffers v back to back, with fewer
   * messages on the wire where it can (a header and its payload in one). */
  weft_result_t (*sendv)(void *state, int peer, const struct iovec *v, int nv, size_t *accepted);
  /* Bytes received from peer and not consumed: *contig of them at *p, *total in all. */
  weft_result_t (*peek)(void *state, int peer, const void **p, size_t *contig, size_t *total);
  void (*consume)(void *state, int peer, size_t n);
  /* Optional: moves up to n bytes of peer's stream (what peek would show first) into dst and
   * consumes them, without staging them where the transport can avoid it; *got may be 0. Fails
   * as peek does once nothing more will come. */
  weft_result_t (*recv_into)(void *state, int peer, void *dst, size_t n, size_t *got);
  /* Before the last progress attempt: a token for wait (so no wake-up is lost). */
  uint64_t (*arm)(void *state);
  /* Sleeps until something may have changed since arm returned token, at most timeout_ms. */
  weft_result_t (*wait)(void *state, uint64_t token, int timeout_ms);
  /* Optional: wakes a thread sleeping in wait (abort). */
  void (*wake)(void *state);
  /* Optional: delivers a failure notice to the peers this transport reaches directly. */
  void (*notify)(void *state, const weft_notice_t *n);
  /* Optional: a failure notice or a dead peer seen by this transport (WEFT_SUCCESS: none). */
  weft_result_t (*check)(void *state, weft_notice_t *n);
  /* Optional: called every 100 ms by the comm's heartbeat thread. */
  void (*beat)(void *state);
  /* Optional, for transports whose hardware reads and writes user memory (verbs, to come):
   * pins buf for the transport; *handle goes back to dereg. */
  weft_result_t (*reg)(void *state, void *buf, size_t bytes, void **handle);
  void (*dereg)(void *state, void *handle);
} weft_transport_t;

/* Every transport of this build, in select.c's list. */
enum { WEFT_MAX_TRANSPORTS = 4, WEFT_SENDV_MAX = 4 };
extern const weft_transport_t *const weft_transports[];
extern const int weft_ntransports;

/* Every rank decides from the same table: peer_tr[p] is the index in weft_transports of the
 * one serving rank to p, used[t] whether any pair of any ranks takes transport t (its setup,
 * collective, runs on every rank then). host_of[r] is rank r's host (ranks of one host share a
 * number); force is WEFT_TRANSPORT ("auto" or "" for the priorities). A forced transport that
 * cannot connect some pair fails, naming it; a rank's own pair takes the reaching transport of
 * highest priority, forced or not. */
weft_result_t weft_transport_select(int rank, int nranks, const int *host_of, const char *force,
                                    uint8_t *peer_tr, uint8_t *used);

/* For tests/fuzz: feeds bytes to a TCP receive channel as if a peer had sent them and drains
 * it as the executor does. WEFT_SUCCESS or WEFT_ERR_PEER_LOST (clean end of the bytes) for a
 * well-formed stream, WEFT_ERR_PROTOCOL for a malformed one; anything else is a bug. */
weft_result_t weft_tcp_fuzz_receive(const uint8_t *data, size_t n, uint32_t magic32,
                                    size_t max_frame);

#endif
