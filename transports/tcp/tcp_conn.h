/* The tcp transport's state (tcp.c: the data path) and its connections (connect.c): where each
 * rank listens, and the sockets of each pair, made at setup or on the pair's first use. Internal
 * to transports/tcp. */
#ifndef WEFT_TCP_CONN_H
#define WEFT_TCP_CONN_H

#include <poll.h>
#include <stdatomic.h>
#include <stdint.h>

#include "sockaddr.h"
#include "transport.h"

enum { TCP_MAX_SOCKS = 8, TCP_MAX_PENDING = 64 };

typedef struct {
  int fds[TCP_MAX_SOCKS];
  int nsock;
  int ready; /* all nsock sockets connected, the ring allocated */
  /* the higher rank's connects on first use: sockets still in progress (a bit each), and
   * since when the peer refuses (0: it has not) */
  uint32_t connecting;
  int64_t refused_since;
  uint64_t sframe, rframe; /* frames sent / received so far: pick the socket */
  /* send side: the frame being written */
  int in_frame;
  uint32_t hdr[3]; /* magic, payload length, frame sequence */
  size_t hdr_sent, payload_left;
  int send_blocked;
  /* receive side */
  char *ring;
  uint64_t head, tail;
  int in_rframe;
  uint32_t rhdr[3];
  size_t rhdr_got, rpayload_left;
  weft_result_t rerr; /* EOF or error seen; raised once the staged bytes run out */
  char rerr_msg[200];
} tcp_conn_t;

/* A connection accepted whose hello is still being read. */
typedef struct {
  int fd;
  size_t got;
  int64_t since;
  unsigned char buf[32];
} tcp_pending_t;

typedef struct {
  int rank, nranks;
  uint64_t magic;
  uint32_t magic32;
  size_t max_frame, ring_bytes;
  /* a pair's state, allocated when it first connects (or is offered a connection): the memory
   * and each wait's work grow with the peers this rank talks to, not with nranks */
  tcp_conn_t **conns; /* [nranks], NULL until then */
  int *live, nlive;   /* the ranks with a conns entry, in the order they came */
  int pfds_cap;
  const int *local_rank; /* weft_transport_init_t's: -1 for a rank on another host */
  int want_socks;        /* WEFT_TCP_SOCKETS, at most TCP_MAX_SOCKS (0: by host) */
  const atomic_int *abort_flag;
  int wake_fd;
  int dead_ms;                  /* WEFT_TCP_DEAD_MS */
  const char *host_labels;      /* weft_transport_init_t's */
  const weft_bootstrap_t *boot; /* its ring sockets carry failure notices: poll them too */
  struct pollfd *pfds;
  /* connections on first use (weft_transport_init_t.eager unset): where every rank listens,
   * this rank's listening socket, the peers served, and the accepted ones still saying hello */
  weft_sockaddr_t *addrs;
  int listen_fd;
  uint8_t *use;
  int unready; /* peers served whose sockets are not all connected yet */
  tcp_pending_t pend[TCP_MAX_PENDING];
  int npend;
} tcp_t;

/* Collective: exchanges where every rank listens (a rank that cannot listen, or whose conns
 * and pfds t could not allocate, tells the others why, and all fail at once), then connects
 * every pair served (in->eager) or leaves each pair to its first use. */
weft_result_t tcp_connect_setup(const weft_transport_init_t *in, tcp_t *t);
/* Whether the pair with peer can carry bytes now (*ready), without blocking: where this rank
 * is the higher one of a pair not yet connected, starts or advances its connects (a peer that
 * refuses for WEFT_TCP_DEAD_MS fails it; one that does not answer is left to the operation's
 * timeout, since a full accept queue looks the same); else takes what the listening socket
 * holds. 0 with nothing failed means later. */
weft_result_t tcp_reach(tcp_t *t, int peer, int *ready);
/* Before a wait: takes waiting connections (so that none keeps the listening socket readable),
 * then puts in t->pfds (which a new pair may have moved) what a new one, a hello or a connect in
 * progress would wake, *count of them (at most 1 + TCP_MAX_PENDING, plus 1 per pair connecting:
 * t->pfds has room for that). *now is set where a pair became ready meanwhile: the caller should
 * not sleep. Fails as accepting a pair does.
 */
weft_result_t tcp_connect_pollfds(tcp_t *t, int *count, int *now);
void tcp_connect_teardown(tcp_t *t);
/* The pair with peer, allocated on the first call (no sockets yet, WEFT_TCP_SOCKETS of them to
 * come, or 1 on one host and 2 between hosts), with room for its descriptors in t->pfds; NULL
 * when out of memory, with the error set. */
tcp_conn_t *tcp_conn_of(tcp_t *t, int peer);
/* Rank peer's host as messages name it. */
const char *tcp_host_of(const tcp_t *t, int peer);

#endif
