/* TCP transport's data path: non-blocking sockets per peer pair (made by connect.c). Data goes in
 * frames {magic, length, sequence} with a bounded length, so a corrupt or foreign stream is refused
 * instead of trusted; received payload lands in a staging ring that the executor peeks into. With
 * several sockets per pair, frame k travels on socket k mod S and is read back in the same order,
 * so the byte stream needs no reordering. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "err.h"
#include "param.h"
#include "socket.h"
#include "tcp_conn.h"

static int sfd(const tcp_conn_t *c) { return c->fds[c->sframe % (uint64_t)c->nsock]; }
static int rfd(const tcp_conn_t *c) { return c->fds[c->rframe % (uint64_t)c->nsock]; }

static void tcp_teardown(void *state) {
  tcp_t *t = state;
  if (!t) return;
  for (int i = 0; i < t->nlive; i++) {
    tcp_conn_t *c = t->conns[t->live[i]];
    for (int k = 0; k < TCP_MAX_SOCKS; k++)
      if (c->fds[k] >= 0) close(c->fds[k]);
    free(c->ring);
    free(c);
  }
  tcp_connect_teardown(t);
  free(t->conns);
  free(t->live);
  free(t->pfds);
  free(t);
}

static weft_result_t tcp_setup(const weft_transport_init_t *in, void **state) {
  tcp_t *t = calloc(1, sizeof *t);
  if (!t) return weft_set_error(WEFT_ERR_NO_MEMORY, "tcp: out of memory");
  *t = (tcp_t){.rank = in->rank,
               .nranks = in->nranks,
               .host_labels = in->host_labels,
               .magic32 = (uint32_t)(in->magic >> 32),
               .abort_flag = in->abort_flag,
               .wake_fd = in->wake_fd,
               .boot = in->boot,
               .listen_fd = -1};
  t->dead_ms = (int)weft_param_get_int(WEFT_PARAM_TCP_DEAD_MS);
  int64_t mf = weft_param_get_int(WEFT_PARAM_TCP_FRAME_BYTES),
          rb = weft_param_get_int(WEFT_PARAM_TCP_BUF_BYTES);
  t->max_frame = mf < 4096 ? 4096 : (size_t)mf;
  /* a multiple of 4096: the executor relies on 16-byte alignment of the stream in the ring
   * (recv_into takes bytes past the ring and breaks that: a connection serves the executor or
   * a proxy, never both) */
  t->ring_bytes = ((rb < 65536 ? 65536 : (size_t)rb) + 4095) & ~(size_t)4095;
  t->conns = calloc((size_t)in->nranks, sizeof *t->conns);
  t->live = calloc((size_t)in->nranks, sizeof *t->live);
  t->local_rank = in->local_rank;
  t->pfds_cap = 3 + 8 + TCP_MAX_PENDING; /* tcp_conn_of grows it, 3 a pair */
  t->pfds = calloc((size_t)t->pfds_cap, sizeof *t->pfds);
  int64_t want_socks = weft_param_get_int(WEFT_PARAM_TCP_SOCKETS);
  t->want_socks = (int)(want_socks < TCP_MAX_SOCKS ? want_socks : TCP_MAX_SOCKS);
  /* runs its exchange even where the allocations above failed: the others learn of it */
  weft_result_t rc = tcp_connect_setup(in, t);
  if (rc != WEFT_SUCCESS) {
    tcp_teardown(t);
    return rc;
  }
  int npeers = 0;
  for (int p = 0; p < in->nranks; p++)
    npeers += t->use[p];
  WEFT_INFO(WEFT_SUB_NET, "rank %d: tcp to %d peers (%s), frames up to %zu bytes", in->rank, npeers,
            in->eager ? "connected" : "each connected on first use", t->max_frame);
  *state = t;
  return WEFT_SUCCESS;
}

static weft_result_t lost(const tcp_t *t, int peer, const char *what, int err) {
  if (err == ETIMEDOUT) /* keepalive or unacknowledged data (weft_sock_keepalive) */
    return weft_set_error(WEFT_ERR_TIMEOUT,
                          "tcp: rank %d (host %s) answered nothing for %d ms (WEFT_TCP_DEAD_MS): "
                          "its host is down or the link to it is cut",
                          peer, tcp_host_of(t, peer), t->dead_ms);
  /* A connection given up on while the route or the neighbour was failing ends with that
   * error rather than ETIMEDOUT (Linux keeps it as the socket's soft error): the peer's
   * process may well be alive, so this is no lost rank. */
  if (err == EHOSTUNREACH || err == ENETUNREACH || err == ENETDOWN || err == EHOSTDOWN)
    return weft_set_error(WEFT_ERR_TIMEOUT,
                          "tcp: rank %d (host %s) cannot be reached (%s): its host is down or the "
                          "link to it is cut",
                          peer, tcp_host_of(t, peer), strerror(err));
  return weft_set_error(WEFT_ERR_PEER_LOST, "tcp: connection to rank %d %s%s%s", peer, what,
                        err ? ": " : "", err ? strerror(err) : "");
}

/* Frames of up to max_frame bytes over the gathered buffers v (several make one frame where
 * they fit: a proxy's header and its chunk travel together). */
static weft_result_t tcp_sendv(void *state, int peer, const struct iovec *v, int nv,
                               size_t *accepted) {
  tcp_t *t = state;
  size_t done = 0, n = 0;
  if (nv < 0 || nv > WEFT_SENDV_MAX)
    return weft_set_error(WEFT_ERR_INVALID_ARG, "tcp: %d buffers to send (at most %d)", nv,
                          WEFT_SENDV_MAX);
  for (int i = 0; i < nv; i++)
    n += v[i].iov_len;
  int ready;
  CHECK(tcp_reach(t, peer, &ready));
  *accepted = 0;
  if (!ready) return WEFT_SUCCESS; /* the peer connects on its side's first use; wait wakes then */
  tcp_conn_t *c = t->conns[peer];
  c->send_blocked = 0;
  while (done < n) {
    if (!c->in_frame) {
      size_t len = n - done < t->max_frame ? n - done : t->max_frame;
      c->hdr[0] = t->magic32;
      c->hdr[1] = (uint32_t)len;
      c->hdr[2] = (uint32_t)c->sframe;
      c->hdr_sent = 0;
      c->payload_left = len;
      c->in_frame = 1;
    }
    struct iovec iov[1 + WEFT_SENDV_MAX];
    int k = 0;
    if (c->hdr_sent < sizeof c->hdr)
      iov[k++] = (struct iovec){(char *)c->hdr + c->hdr_sent, sizeof c->hdr - c->hdr_sent};
    /* the frame's next pl bytes: from offset done of the gathered buffers */
    size_t pl = n - done < c->payload_left ? n - done : c->payload_left, skip = done;
    for (int i = 0; i < nv && pl; i++) {
      if (skip >= v[i].iov_len) {
        skip -= v[i].iov_len;
        continue;
      }
      size_t take = v[i].iov_len - skip < pl ? v[i].iov_len - skip : pl;
      iov[k++] = (struct iovec){(char *)v[i].iov_base + skip, take};
      pl -= take, skip = 0;
    }
    struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)k};
    ssize_t r = sendmsg(sfd(c), &m, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (r < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
        c->send_blocked = 1;
        break;
      }
      return lost(t, peer, "failed on send", errno);
    }
    size_t got = (size_t)r;
    if (c->hdr_sent < sizeof c->hdr) {
      size_t h = sizeof c->hdr - c->hdr_sent < got ? sizeof c->hdr - c->hdr_sent : got;
      c->hdr_sent += h;
      got -= h;
    }
    done += got;
    c->payload_left -= got;
    if (c->hdr_sent == sizeof c->hdr && c->payload_left == 0) {
      c->in_frame = 0;
      c->sframe++;
    }
  }
  *accepted = done;
  return WEFT_SUCCESS;
}

static weft_result_t tcp_send(void *state, int peer, const void *src, size_t n, size_t *accepted) {
  struct iovec v = {(void *)src, n};
  return tcp_sendv(state, peer, &v, 1, accepted);
}

static weft_result_t fill_socket(tcp_t *t, int peer);

/* Moves what the socket holds into the staging ring, checking every frame header. A peer
 * that closed after sending its last bytes is not an error until those bytes are used. */
static weft_result_t fill(tcp_t *t, int peer) {
  tcp_conn_t *c = t->conns[peer];
  if (c->rerr != WEFT_SUCCESS) return WEFT_SUCCESS;
  weft_result_t rc = fill_socket(t, peer);
  if (rc == WEFT_ERR_PEER_LOST) {
    c->rerr = rc;
    snprintf(c->rerr_msg, sizeof c->rerr_msg, "%s", weft_thread_error());
    return WEFT_SUCCESS;
  }
  return rc;
}

/* Reads what the socket has of the next frame's header; *more is 0 when it would block. */
static weft_result_t read_header(tcp_t *t, int peer, int *more) {
  tcp_conn_t *c = t->conns[peer];
  ssize_t r =
      recv(rfd(c), (char *)c->rhdr + c->rhdr_got, sizeof c->rhdr - c->rhdr_got, MSG_DONTWAIT);
  *more = 0;
  if (r == 0) return lost(t, peer, "was closed by the peer", 0);
  if (r < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return WEFT_SUCCESS;
    return lost(t, peer, "failed on receive", errno);
  }
  *more = 1;
  c->rhdr_got += (size_t)r;
  if (c->rhdr_got < sizeof c->rhdr) return WEFT_SUCCESS;
  c->rhdr_got = 0;
  if (c->rhdr[2] != (uint32_t)c->rframe && c->rhdr[0] == t->magic32)
    return weft_set_error(WEFT_ERR_PROTOCOL,
                          "tcp: rank %d sent frame %u where frame %u was due (lost or "
                          "reordered data)",
                          peer, c->rhdr[2], (uint32_t)c->rframe);
  if (c->rhdr[0] != t->magic32 || c->rhdr[1] == 0 || c->rhdr[1] > t->max_frame)
    return weft_set_error(WEFT_ERR_PROTOCOL,
                          "tcp: rank %d sent a bad frame header (magic %08x, length %u, "
                          "largest allowed %zu)",
                          peer, c->rhdr[0], c->rhdr[1], t->max_frame);
  c->in_rframe = 1;
  c->rpayload_left = c->rhdr[1];
  return WEFT_SUCCESS;
}

/* Receives up to want bytes of the current frame's payload into dst; *got 0: it would block. */
static weft_result_t read_payload(tcp_t *t, int peer, char *dst, size_t want, size_t *got) {
  tcp_conn_t *c = t->conns[peer];
  if (want > c->rpayload_left) want = c->rpayload_left;
  ssize_t r = recv(rfd(c), dst, want, MSG_DONTWAIT);
  *got = 0;
  if (r == 0) return lost(t, peer, "was closed by the peer", 0);
  if (r < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return WEFT_SUCCESS;
    return lost(t, peer, "failed on receive", errno);
  }
  *got = (size_t)r;
  c->rpayload_left -= (size_t)r;
  if (c->rpayload_left == 0) {
    c->in_rframe = 0;
    c->rframe++;
  }
  return WEFT_SUCCESS;
}

static weft_result_t fill_socket(tcp_t *t, int peer) {
  tcp_conn_t *c = t->conns[peer];
  for (;;) {
    size_t used = (size_t)(c->head - c->tail), got = 0;
    if (!c->in_rframe) {
      int more = 0;
      CHECK(read_header(t, peer, &more));
      if (!more) return WEFT_SUCCESS;
      continue;
    }
    if (used == t->ring_bytes) return WEFT_SUCCESS;
    size_t pos = (size_t)(c->head % t->ring_bytes);
    size_t room = t->ring_bytes - used, contig = t->ring_bytes - pos;
    CHECK(read_payload(t, peer, c->ring + pos, room < contig ? room : contig, &got));
    if (!got) return WEFT_SUCCESS;
    c->head += (uint64_t)got;
  }
}

/* The staged bytes first (they came before anything still in the sockets), then payload
 * straight from the sockets: one copy fewer than peek for large receives. A lost peer is
 * raised once nothing more can be given, as fill does. */
static weft_result_t tcp_recv_into(void *state, int peer, void *dst, size_t n, size_t *got) {
  tcp_t *t = state;
  char *out = dst;
  size_t done = 0;
  int ready;
  *got = 0;
  CHECK(tcp_reach(t, peer, &ready));
  if (!ready) return WEFT_SUCCESS;
  tcp_conn_t *c = t->conns[peer];
  while (done < n && c->head > c->tail) {
    size_t pos = (size_t)(c->tail % t->ring_bytes), total = (size_t)(c->head - c->tail);
    size_t k = t->ring_bytes - pos < total ? t->ring_bytes - pos : total;
    if (k > n - done) k = n - done;
    memcpy(out + done, c->ring + pos, k);
    c->tail += k;
    done += k;
  }
  weft_result_t rc = WEFT_SUCCESS;
  while (done < n && c->rerr == WEFT_SUCCESS && rc == WEFT_SUCCESS) {
    size_t k = 0;
    int more = 0;
    if (!c->in_rframe) {
      rc = read_header(t, peer, &more);
      if (rc == WEFT_SUCCESS && !more) break;
      continue;
    }
    rc = read_payload(t, peer, out + done, n - done, &k);
    if (rc == WEFT_SUCCESS && !k) break;
    done += k;
  }
  if (rc == WEFT_ERR_PEER_LOST) {
    c->rerr = rc;
    snprintf(c->rerr_msg, sizeof c->rerr_msg, "%s", weft_thread_error());
    rc = WEFT_SUCCESS;
  }
  *got = done;
  if (rc == WEFT_SUCCESS && !done && n && c->rerr != WEFT_SUCCESS)
    return weft_set_error(c->rerr, "%s", c->rerr_msg);
  return rc;
}

static weft_result_t tcp_peek(void *state, int peer, const void **p, size_t *contig,
                              size_t *total) {
  tcp_t *t = state;
  int ready;
  *contig = *total = 0;
  *p = NULL;
  CHECK(tcp_reach(t, peer, &ready));
  if (!ready) return WEFT_SUCCESS;
  tcp_conn_t *c = t->conns[peer];
  if (c->head - c->tail < t->ring_bytes) CHECK(fill(t, peer));
  size_t pos = (size_t)(c->tail % t->ring_bytes);
  *total = (size_t)(c->head - c->tail);
  if (*total == 0 && c->rerr != WEFT_SUCCESS) return weft_set_error(c->rerr, "%s", c->rerr_msg);
  *contig = t->ring_bytes - pos < *total ? t->ring_bytes - pos : *total;
  *p = c->ring + pos;
  return WEFT_SUCCESS;
}

static void tcp_consume(void *state, int peer, size_t n) {
  tcp_t *t = state;
  t->conns[peer]->tail += n;
}

static uint64_t tcp_arm(void *state) {
  (void)state;
  return 0;
}

static weft_result_t tcp_wait(void *state, uint64_t token, int timeout_ms) {
  (void)token;
  tcp_t *t = state;
  nfds_t n = 0;
  int more = 0, now = 0; /* connections, then bytes or an end, that came since the last look */
  CHECK(tcp_connect_pollfds(t, &more, &now)); /* may grow t->pfds: read it after */
  n = (nfds_t)more;
  for (int i = 0; i < t->nlive; i++) {
    int p = t->live[i];
    tcp_conn_t *c = t->conns[p];
    if (!c->ready) continue;
    /* Data left in the kernel would make poll return at once: stage it first. Only the
     * socket that carries the next frame matters on each side. */
    uint64_t head = c->head;
    weft_result_t rerr = c->rerr;
    if (c->head - c->tail < t->ring_bytes) CHECK(fill(t, p));
    now |= c->head != head || c->rerr != rerr;
    if (c->head - c->tail < t->ring_bytes && c->rerr == WEFT_SUCCESS)
      t->pfds[n++] = (struct pollfd){.fd = rfd(c), .events = POLLIN};
    if (c->send_blocked) t->pfds[n++] = (struct pollfd){.fd = sfd(c), .events = POLLOUT};
  }
  if (now) timeout_ms = 0; /* the caller looks again before it sleeps */
  if (t->wake_fd >= 0) t->pfds[n++] = (struct pollfd){.fd = t->wake_fd, .events = POLLIN};
  int ring[2], nring = weft_bootstrap_watch_fds(t->boot, ring);
  for (int i = 0; i < nring; i++)
    t->pfds[n++] = (struct pollfd){.fd = ring[i], .events = POLLIN};
  if (poll(t->pfds, n, timeout_ms) < 0 && errno != EINTR)
    return weft_set_error(WEFT_ERR_SYSTEM, "tcp: poll: %s", strerror(errno));
  return WEFT_SUCCESS;
}

static int tcp_reaches(int same_host) {
  (void)same_host;
  return 1;
}

const weft_transport_t weft_transport_tcp = {
    .size = sizeof(weft_transport_t),
    .name = "tcp",
    .priority = 10,
    .reaches = tcp_reaches,
    /* poll() on the sockets and the abort eventfd wakes it; the bound only limits how stale
     * a look at the failure notices gets */
    .wait_ms = 100,
    /* set for TCP between ranks of one host (loopback; the tuner has always used these): 25 us
     * a message, ~1.7 GB/s; between hosts the network sets them, and no run has measured that
     * yet (scripts/host/tune.sh measures the crossovers) */
    .cost = {.alpha = 25e-6, .beta = 0.6e-9, .gamma = 0.24e-9, .ring_step = 60e-6},
    .setup = tcp_setup,
    .teardown = tcp_teardown,
    .send = tcp_send,
    .sendv = tcp_sendv,
    .peek = tcp_peek,
    .consume = tcp_consume,
    .recv_into = tcp_recv_into,
    .arm = tcp_arm,
    .wait = tcp_wait,
};

weft_result_t weft_tcp_fuzz_receive(const uint8_t *data, size_t n, uint32_t magic32,
                                    size_t max_frame) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return WEFT_ERR_SYSTEM;
  tcp_conn_t conns[2] = {{.nsock = 1, .fds = {-1, -1, -1, -1, -1, -1, -1, -1}},
                         {.nsock = 1, .ready = 1, .fds = {sv[0], -1, -1, -1, -1, -1, -1, -1}}};
  tcp_conn_t *of[2] = {&conns[0], &conns[1]};
  tcp_t t = {.rank = 0,
             .nranks = 2,
             .magic32 = magic32,
             .max_frame = max_frame,
             .ring_bytes = 65536,
             .conns = of,
             .wake_fd = -1,
             .listen_fd = -1};
  conns[1].ring = malloc(t.ring_bytes);
  weft_result_t rc = conns[1].ring ? WEFT_SUCCESS : WEFT_ERR_NO_MEMORY;
  weft_sock_nonblock(sv[0]);
  size_t sent = 0;
  for (int guard = 0; rc == WEFT_SUCCESS && guard < 100000; guard++) {
    if (sent < n) { /* write what the socket takes, then drain some: like a real peer */
      ssize_t w = send(sv[1], data + sent, n - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (w > 0) sent += (size_t)w;
      if (sent == n) shutdown(sv[1], SHUT_WR);
    }
    const void *p;
    size_t contig, total;
    char buf[3000];
    if (guard % 3 == 2) /* the proxies' path: straight out of the socket, odd sizes */
      rc = tcp_recv_into(&t, 1, buf, 1 + (size_t)guard % sizeof buf, &total);
    else if ((rc = tcp_peek(&t, 1, &p, &contig, &total)) == WEFT_SUCCESS && total)
      tcp_consume(&t, 1, contig > 7 ? contig - 7 : contig);
    if (rc == WEFT_SUCCESS && !total && sent == n && conns[1].rerr == WEFT_SUCCESS && guard > 1000)
      break; /* a frame that never completes: the peer would time out */
  }
  close(sv[0]);
  close(sv[1]);
  free(conns[1].ring);
  return rc;
}
