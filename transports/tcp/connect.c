/* The tcp transport's connections (tcp_conn.h). Of each pair the higher rank connects and the
 * lower one accepts, nsock sockets, each opened by a hello naming the rank and the socket. At
 * setup every rank says where it listens; then either every pair connects at once (eager: the
 * region proxy's workers, whose heartbeats need their streams from the start), or each pair on
 * its first use, so that sockets and rings follow the pairs that talk, not every rank on other
 * hosts. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "err.h"
#include "socket.h"
#include "tcp_conn.h"
#include "topo.h"
#include "waitlog.h"

typedef struct {
  uint64_t magic;
  uint32_t version, type;
  int32_t rank;
  uint16_t sock, nsock; /* which of the pair's nsock sockets this is */
} tcp_hello_t;

_Static_assert(sizeof(tcp_hello_t) <= sizeof(((tcp_pending_t *)0)->buf), "a hello fits");

/* What each rank tells the others at setup: where it listens, or why it cannot (code != 0). */
enum { WHY_BYTES = 200, STRANGER_MS = 5000 };
typedef struct {
  weft_sockaddr_t addr;
  int32_t code;
  char why[WHY_BYTES]; /* from the network: printable characters only once read */
} card_t;

const char *tcp_host_of(const tcp_t *t, int peer) {
  return t->host_labels ? t->host_labels + (size_t)peer * WEFT_HOST_LABEL_BYTES : "?";
}

tcp_conn_t *tcp_conn_of(tcp_t *t, int peer) {
  if (t->conns[peer]) return t->conns[peer];
  /* per pair: 2 descriptors polled while it is up, 1 while it connects */
  int cap = 3 * (t->nlive + 1) + 8 + TCP_MAX_PENDING;
  if (cap > t->pfds_cap) {
    struct pollfd *p = realloc(t->pfds, sizeof *p * (size_t)cap);
    if (!p) return weft_set_error(WEFT_ERR_NO_MEMORY, "tcp: out of memory"), NULL;
    t->pfds = p, t->pfds_cap = cap;
  }
  tcp_conn_t *c = calloc(1, sizeof *c);
  if (!c) return weft_set_error(WEFT_ERR_NO_MEMORY, "tcp: out of memory"), NULL;
  for (int k = 0; k < TCP_MAX_SOCKS; k++)
    c->fds[k] = -1;
  /* Between hosts, two streams fill a network link better than one (separate congestion
   * windows and NIC queues); over loopback a second one buys nothing. */
  c->nsock = t->want_socks > 0 ? t->want_socks : (t->local_rank[peer] >= 0 ? 1 : 2);
  t->live[t->nlive++] = peer;
  return t->conns[peer] = c;
}

/* Every socket of the pair is in: non-blocking, probed for a dead host, with its ring. */
static weft_result_t finish(tcp_t *t, int p) {
  tcp_conn_t *c = t->conns[p];
  for (int k = 0; k < c->nsock; k++) {
    weft_sock_nonblock(c->fds[k]);
    weft_sock_keepalive(c->fds[k], t->dead_ms);
  }
  c->ring = malloc(t->ring_bytes);
  if (!c->ring) return weft_set_error(WEFT_ERR_NO_MEMORY, "tcp: out of memory");
  c->ready = 1;
  t->unready--;
  return WEFT_SUCCESS;
}

/* A hello from a higher rank: 0 kept (the pair finished once its last socket came), -1 refused
 * (closed by the caller); *rc is set where finishing failed. */
static int take_hello(tcp_t *t, const void *hello, int fd, weft_result_t *rc) {
  tcp_hello_t h;
  memcpy(&h, hello, sizeof h);
  if (h.version != WEFT_WIRE_VERSION || h.type != WEFT_MSG_TCP_HELLO || h.rank <= t->rank ||
      h.rank >= t->nranks || !t->use[h.rank])
    return -1;
  tcp_conn_t *c = tcp_conn_of(t, h.rank);
  if (!c) {
    *rc = WEFT_ERR_NO_MEMORY;
    return -1;
  }
  if (h.nsock != c->nsock || h.sock >= c->nsock || c->fds[h.sock] >= 0) return -1;
  c->fds[h.sock] = fd;
  for (int k = 0; k < c->nsock; k++)
    if (c->fds[k] < 0) return 0;
  weft_result_t frc = finish(t, h.rank);
  if (frc != WEFT_SUCCESS) *rc = frc; /* a later pair must not hide it */
  return 0;
}

static tcp_hello_t hello_of(const tcp_t *t, int k, int nsock) {
  return (tcp_hello_t){.magic = t->magic,
                       .version = WEFT_WIRE_VERSION,
                       .type = WEFT_MSG_TCP_HELLO,
                       .rank = t->rank,
                       .sock = (uint16_t)k,
                       .nsock = (uint16_t)nsock};
}

/* Connects the nsock sockets of the pair with the lower rank p, until deadline (at setup). */
static weft_result_t connect_pair(tcp_t *t, int p, int64_t deadline) {
  tcp_conn_t *c = tcp_conn_of(t, p);
  if (!c) return WEFT_ERR_NO_MEMORY;
  for (int k = 0; k < c->nsock; k++) {
    CHECK(weft_sock_connect(&t->addrs[p], deadline, t->abort_flag, &c->fds[k]));
    tcp_hello_t h = hello_of(t, k, c->nsock);
    CHECK(weft_sock_send_all(c->fds[k], &h, sizeof h, deadline, t->abort_flag));
  }
  return finish(t, p);
}

/* The pair's sockets closed, to start again or to fail. */
static void drop_pair(tcp_conn_t *c) {
  for (int k = 0; k < c->nsock; k++)
    if (c->fds[k] >= 0) close(c->fds[k]), c->fds[k] = -1;
  c->connecting = 0;
}

/* On first use, towards the lower rank p: starts each socket's connect, or looks whether one in
 * progress ended, without blocking; sends its hello once connected (into an empty socket
 * buffer: it cannot block). A refusal starts all over, until WEFT_TCP_DEAD_MS of them. */
static weft_result_t connect_step(tcp_t *t, int p) {
  tcp_conn_t *c = t->conns[p];
  const weft_sockaddr_t *to = &t->addrs[p];
  int64_t now = weft_now_ms();
  for (int k = 0; k < c->nsock; k++) {
    int err = 0;
    if (c->fds[k] < 0) {
      int s = socket(weft_sockaddr_family(to), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
      if (s < 0) return weft_set_error(WEFT_ERR_SYSTEM, "socket: %s", strerror(errno));
      c->fds[k] = s;
      err = connect(s, &to->u.sa, to->len) == 0 ? 0 : errno;
      if (err == EINPROGRESS) {
        c->connecting |= 1u << k;
        continue;
      }
    } else if (c->connecting & (1u << k)) {
      struct pollfd q = {.fd = c->fds[k], .events = POLLOUT};
      if (poll(&q, 1, 0) <= 0) continue; /* still in progress */
      socklen_t len = sizeof err;
      getsockopt(c->fds[k], SOL_SOCKET, SO_ERROR, &err, &len);
      c->connecting &= ~(1u << k);
    } else {
      continue; /* connected, hello sent */
    }
    if (err == ECONNREFUSED) {
      drop_pair(c); /* the lower rank took none of them, or would see a half pair */
      if (!c->refused_since) c->refused_since = now;
      int64_t bound = t->dead_ms > 0 ? t->dead_ms : t->boot->timeout_ms;
      if (now - c->refused_since < bound) return WEFT_SUCCESS; /* again at the next look */
      return weft_set_error(WEFT_ERR_PEER_LOST,
                            "tcp: rank %d could not connect to rank %d (host %s) on first use: "
                            "refused for %lld ms (WEFT_TCP_DEAD_MS): it has left the "
                            "communicator or died",
                            t->rank, p, tcp_host_of(t, p), (long long)bound);
    }
    if (err) {
      drop_pair(c);
      char name[WEFT_SOCKADDR_STRLEN];
      return weft_set_error(WEFT_ERR_PEER_LOST,
                            "tcp: rank %d could not connect to rank %d (host %s) at %s on first "
                            "use: %s",
                            t->rank, p, tcp_host_of(t, p),
                            weft_sockaddr_str(to, 1, name, sizeof name), strerror(err));
    }
    weft_sock_nodelay(c->fds[k]);
    tcp_hello_t h = hello_of(t, k, c->nsock);
    if (send(c->fds[k], &h, sizeof h, MSG_DONTWAIT | MSG_NOSIGNAL) != (ssize_t)sizeof h) {
      int e = errno;
      drop_pair(c);
      return weft_set_error(WEFT_ERR_PEER_LOST,
                            "tcp: rank %d: the hello to rank %d (host %s) on first use: %s",
                            t->rank, p, tcp_host_of(t, p), strerror(e));
    }
  }
  for (int k = 0; k < c->nsock; k++)
    if (c->fds[k] < 0 || (c->connecting & (1u << k))) return WEFT_SUCCESS;
  c->refused_since = 0;
  return finish(t, p);
}

/* Takes the connections waiting at the listening socket and reads their hellos, without
 * blocking: a refused or slow stranger is logged and closed. */
static weft_result_t accept_waiting(tcp_t *t) {
  int64_t now = weft_now_ms();
  while (t->npend < TCP_MAX_PENDING) {
    int fd = accept4(t->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) break;
    weft_sock_nodelay(fd);
    t->pend[t->npend++] = (tcp_pending_t){.fd = fd, .since = now};
  }
  weft_result_t rc = WEFT_SUCCESS;
  for (int i = t->npend - 1; i >= 0; i--) {
    tcp_pending_t *q = &t->pend[i];
    ssize_t r = recv(q->fd, q->buf + q->got, sizeof(tcp_hello_t) - q->got, MSG_DONTWAIT);
    if (r > 0) q->got += (size_t)r;
    int gone = r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
    uint64_t m = 0;
    if (q->got >= sizeof m) memcpy(&m, q->buf, sizeof m);
    const char *why = gone                           ? "closed before its hello"
                      : q->got >= 8 && m != t->magic ? "a wrong magic"
                      : q->got < sizeof(tcp_hello_t) && now - q->since > STRANGER_MS
                          ? "too little of a hello within 5 s"
                          : NULL;
    if (!why && q->got == sizeof(tcp_hello_t)) {
      if (take_hello(t, q->buf, q->fd, &rc) == 0)
        q->fd = -1;
      else
        why = "an invalid hello";
    }
    if (why) WEFT_WARN(WEFT_SUB_NET, "tcp: rank %d refused a connection: %s", t->rank, why);
    if (why || q->fd < 0) {
      if (q->fd >= 0) close(q->fd);
      t->pend[i] = t->pend[--t->npend];
    }
  }
  return rc;
}

weft_result_t tcp_reach(tcp_t *t, int peer, int *ready) {
  tcp_conn_t *c = t->conns[peer];
  if (!c && t->listen_fd >= 0 && !(c = tcp_conn_of(t, peer))) return WEFT_ERR_NO_MEMORY;
  *ready = c && c->ready;
  if (!c || c->ready || t->listen_fd < 0) return WEFT_SUCCESS;
  CHECK(t->rank < peer ? accept_waiting(t) : connect_step(t, peer));
  *ready = c->ready;
  return WEFT_SUCCESS;
}

weft_result_t tcp_connect_pollfds(tcp_t *t, int *count, int *now) {
  *count = *now = 0;
  if (t->listen_fd < 0 || t->unready == 0) return WEFT_SUCCESS;
  int before = t->unready;
  CHECK(accept_waiting(t));
  *now = t->unready < before;
  struct pollfd *p = t->pfds;
  int n = 0;
  p[n++] = (struct pollfd){.fd = t->listen_fd, .events = POLLIN};
  for (int i = 0; i < t->npend; i++)
    p[n++] = (struct pollfd){.fd = t->pend[i].fd, .events = POLLIN};
  for (int i = 0; i < t->nlive; i++) { /* one socket in progress a pair wakes it enough */
    const tcp_conn_t *c = t->conns[t->live[i]];
    for (int k = 0; c->connecting && k < c->nsock; k++)
      if (c->connecting & (1u << k)) {
        p[n++] = (struct pollfd){.fd = c->fds[k], .events = POLLOUT};
        break;
      }
  }
  *count = n;
  return WEFT_SUCCESS;
}

typedef struct {
  tcp_t *t;
  weft_result_t rc;
} eager_ctx_t;

static int eager_accept(void *ctx, const void *hello, int fd) {
  eager_ctx_t *e = ctx;
  return take_hello(e->t, hello, fd, &e->rc);
}

/* A higher rank this one still waits to connect all its sockets. */
static int unconnected(const void *ctx, int p) {
  const tcp_t *t = ((const eager_ctx_t *)ctx)->t;
  return p > t->rank && t->use[p] && !(t->conns[p] && t->conns[p]->ready);
}

static void accept_waits_for(const void *ctx, char *buf, size_t len) {
  const tcp_t *t = ((const eager_ctx_t *)ctx)->t;
  char ranks[160];
  int n = weft_waitlog_ranks(ranks, sizeof ranks, t->nranks, unconnected, ctx);
  snprintf(buf, len, "rank %d of %d: waiting for rank%s %s to connect (init, tcp transport)",
           t->rank, t->nranks, n == 1 ? "" : "s", ranks);
}

/* Every pair now: the lower ranks first, then the higher ones' connections. */
static weft_result_t connect_all(const weft_transport_init_t *in, tcp_t *t) {
  int64_t deadline = weft_deadline(in->boot->timeout_ms);
  int want = 0;
  weft_waitlog_t wl;
  for (int p = 0; p < in->nranks; p++) {
    if (!in->use[p] || p == in->rank) continue;
    if (p > in->rank) {
      tcp_conn_t *c = tcp_conn_of(t, p);
      if (!c) return WEFT_ERR_NO_MEMORY;
      want += c->nsock;
      continue;
    }
    char what[160], name[64];
    snprintf(what, sizeof what, "rank %d of %d: connecting to rank %d at %s (init, tcp transport)",
             in->rank, in->nranks, p, weft_sockaddr_str(&t->addrs[p], 1, name, sizeof name));
    weft_waitlog_init(&wl, WEFT_SUB_NET, deadline, what, NULL, NULL);
    weft_waitlog_enter(&wl);
    weft_result_t rc = connect_pair(t, p, deadline);
    weft_waitlog_leave(&wl);
    CHECK(rc);
  }
  eager_ctx_t ctx = {.t = t, .rc = WEFT_SUCCESS};
  weft_waitlog_init(&wl, WEFT_SUB_NET, deadline, NULL, accept_waits_for, &ctx);
  weft_waitlog_enter(&wl);
  weft_result_t rc = weft_sock_accept_hellos(t->listen_fd, &want, sizeof(tcp_hello_t), in->magic,
                                             eager_accept, &ctx, NULL, deadline, in->abort_flag);
  weft_waitlog_leave(&wl);
  CHECK(rc);
  return ctx.rc;
}

weft_result_t tcp_connect_setup(const weft_transport_init_t *in, tcp_t *t) {
  weft_result_t rc = WEFT_SUCCESS;
  t->listen_fd = -1;
  t->magic = in->magic;
  t->addrs = calloc((size_t)in->nranks, sizeof *t->addrs);
  t->use = calloc((size_t)in->nranks, 1);
  card_t *cards = calloc((size_t)in->nranks, sizeof *cards);
  /* without the cards this rank cannot take part in the exchange below: the others wait */
  if (!cards) ERR_GOTO(rc, out, WEFT_ERR_NO_MEMORY, "tcp: out of memory");
  /* A rank that fails here still takes part in the exchange of addresses, with none of its
   * own: the others learn of it at once, instead of waiting for it until their timeout (or
   * reading its next collective's bytes as its address). */
  weft_sockaddr_t bound;
  if (!t->addrs || !t->use || !t->conns || !t->live || !t->pfds)
    rc = weft_set_error(WEFT_ERR_NO_MEMORY, "tcp: out of memory");
  else
    rc = weft_sock_listen(weft_sockaddr_family(&in->boot->my_addr), 0, &t->listen_fd, &bound);
  card_t *mine = &cards[in->rank];
  char why[512];
  snprintf(why, sizeof why, "%s", weft_thread_error());
  if (rc == WEFT_SUCCESS) {
    mine->addr = in->boot->my_addr;
    weft_sockaddr_set_port(&mine->addr, weft_sockaddr_port(&bound));
  } else {
    mine->code = (int32_t)rc;
    snprintf(mine->why, sizeof mine->why, "%.*s", WHY_BYTES - 1, why);
  }
  weft_result_t xrc = weft_bootstrap_allgather(in->boot, cards, sizeof *cards);
  if (rc != WEFT_SUCCESS) ERR_GOTO(rc, out, rc, "%s", why);
  CHECK_GOTO(xrc, rc, out);
  for (int p = 0; p < in->nranks; p++) {
    card_t *c = &cards[p];
    t->addrs[p] = c->addr;
    t->use[p] = in->use[p] && p != in->rank;
    t->unready += t->use[p];
    if (c->code == WEFT_SUCCESS) continue;
    weft_result_t code = weft_net_code(c->code);
    int known = (int32_t)code == c->code;
    ERR_GOTO(rc, out, code, "tcp: rank %d (host %s) could not set up its connections: %s", p,
             tcp_host_of(t, p),
             known ? weft_net_text(c->why, sizeof c->why) : "a code no rank sends");
  }
  if (in->eager) {
    CHECK_GOTO(connect_all(in, t), rc, out);
    close(t->listen_fd);
    t->listen_fd = -1;
  } else {
    weft_sock_nonblock(t->listen_fd);
  }
out:
  free(cards);
  return rc;
}

void tcp_connect_teardown(tcp_t *t) {
  if (t->listen_fd >= 0) close(t->listen_fd);
  for (int i = 0; i < t->npend; i++)
    close(t->pend[i].fd);
  free(t->addrs);
  free(t->use);
}
