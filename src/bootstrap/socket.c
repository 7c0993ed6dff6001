/* Socket plumbing: every blocking call here is a poll loop with a deadline and an abort
 * flag, so a dead or silent peer turns into WEFT_ERR_TIMEOUT / WEFT_ERR_PEER_LOST. */
#include "socket.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "err.h"
#include "ifaces.h"
#include "param.h"
#include "waitlog.h"

int weft_sock_nonblock(int fd) {
  int fl = fcntl(fd, F_GETFL, 0);
  return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

void weft_sock_keepalive(int fd, int dead_ms) {
  if (dead_ms <= 0) return;
  /* probes from 1 s of silence, one a second, the last at dead_ms; unacknowledged data is
   * given up at dead_ms too (Linux: TCP_USER_TIMEOUT) */
  int one = 1, idle = 1, intvl = 1, cnt = dead_ms / 1000 > 1 ? dead_ms / 1000 - 1 : 1;
  unsigned user = (unsigned)dead_ms;
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
  setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user, sizeof user);
}

void weft_sock_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* AF_INET, AF_INET6, or 0 when WEFT_SOCKET_FAMILY is unset. A misspelt value would read as
 * unset, and the params check comes only after the bootstrap: refuse it here. */
static weft_result_t family_param(int *family) {
  const char *name = weft_param_def(WEFT_PARAM_SOCKET_FAMILY)->name, *raw = getenv(name);
  if (raw && raw[0] && !weft_param_valid(WEFT_PARAM_SOCKET_FAMILY, raw))
    return weft_set_error(WEFT_ERR_INVALID_ARG, "%s=%.32s: expected AF_INET or AF_INET6", name,
                          raw);
  const char *v = weft_param_get_str(WEFT_PARAM_SOCKET_FAMILY);
  *family = !v[0] ? 0 : strcasecmp(v, "AF_INET6") == 0 ? AF_INET6 : AF_INET;
  return WEFT_SUCCESS;
}

static const char *family_name(int family) { return family == AF_INET6 ? "IPv6" : "IPv4"; }

/* The address to use for family (0: WEFT_SOCKET_FAMILY's, else either); *chosen: whether
 * WEFT_SOCKET_IFADDR or WEFT_SOCKET_IFNAME named it (then listeners bind to it alone). */
static weft_result_t choose_addr(int family, weft_sockaddr_t *addr, int *chosen) {
  const char *ifaddr = weft_param_get_str(WEFT_PARAM_SOCKET_IFADDR);
  const char *ifname = weft_param_get_str(WEFT_PARAM_SOCKET_IFNAME);
  if (!family) CHECK(family_param(&family));
  *chosen = ifaddr[0] || ifname[0];
  if (ifaddr[0]) {
    if (weft_sockaddr_parse(ifaddr, addr) != 0)
      return weft_set_error(WEFT_ERR_INVALID_ARG,
                            "WEFT_SOCKET_IFADDR=%.64s is not an IPv4 or IPv6 address", ifaddr);
    if (family && weft_sockaddr_family(addr) != family)
      return weft_set_error(WEFT_ERR_INVALID_ARG,
                            "WEFT_SOCKET_IFADDR=%.64s is an %s address, %s is needed here "
                            "(WEFT_SOCKET_FAMILY, or the family of the root's address)",
                            ifaddr, family_name(weft_sockaddr_family(addr)), family_name(family));
    return WEFT_SUCCESS;
  }
  weft_iface_t *ifs = NULL;
  int n = 0, pick = -1;
  CHECK(weft_ifaces_list(&ifs, &n));
  weft_result_t rc = weft_ifaces_pick(ifs, n, ifname, family, &pick);
  if (rc == WEFT_SUCCESS) {
    *addr = ifs[pick].addr;
    weft_sockaddr_set_port(addr, 0);
    char s[WEFT_SOCKADDR_STRLEN];
    WEFT_TRACE(WEFT_SUB_BOOT, "interface %s, address %s (WEFT_SOCKET_IFNAME=%s)", ifs[pick].name,
               weft_sockaddr_str(addr, 0, s, sizeof s), ifname[0] ? ifname : "(unset)");
  }
  free(ifs);
  return rc;
}

weft_result_t weft_sock_host_addr(int family, weft_sockaddr_t *addr) {
  int chosen;
  return choose_addr(family, addr, &chosen);
}

/* Binds and listens on a (its port included); *bound gets the address with the port. */
static weft_result_t listen_on(const weft_sockaddr_t *a, int *fd, weft_sockaddr_t *bound) {
  char name[WEFT_SOCKADDR_STRLEN];
  weft_sockaddr_str(a, 1, name, sizeof name);
  int s = socket(weft_sockaddr_family(a), SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return weft_set_error(WEFT_ERR_SYSTEM, "socket for %s: %s", name, strerror(errno));
  int one = 1;
  setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  weft_sockaddr_t got = *a;
  socklen_t len = sizeof got.u;
  if (bind(s, &a->u.sa, a->len) != 0 || listen(s, 1024) != 0 ||
      getsockname(s, &got.u.sa, &len) != 0 || weft_sock_nonblock(s) != 0) {
    int e = errno;
    close(s);
    return weft_set_error(WEFT_ERR_SYSTEM, "listen on %s: %s", name, strerror(e));
  }
  *fd = s;
  if (bound) *bound = got;
  return WEFT_SUCCESS;
}

weft_result_t weft_sock_listen(int family, uint16_t port, int *fd, weft_sockaddr_t *bound) {
  weft_sockaddr_t a = {.len = 0};
  int chosen = 0;
  const char *ifaddr = weft_param_get_str(WEFT_PARAM_SOCKET_IFADDR);
  const char *ifname = weft_param_get_str(WEFT_PARAM_SOCKET_IFNAME);
  if (!family || ifaddr[0] || ifname[0]) CHECK(choose_addr(family, &a, &chosen));
  if (!chosen) weft_sockaddr_any(family ? family : weft_sockaddr_family(&a), &a);
  weft_sockaddr_set_port(&a, port);
  weft_result_t rc = listen_on(&a, fd, bound);
  if (rc != WEFT_SUCCESS && ifaddr[0])
    return weft_set_error(rc, "%s (WEFT_SOCKET_IFADDR=%.64s: is it an address of this host?)",
                          weft_thread_error(), ifaddr);
  return rc;
}

weft_result_t weft_sock_listen_all(int family, uint16_t port, int *fd) {
  weft_sockaddr_t a;
  weft_sockaddr_any(family, &a);
  weft_sockaddr_set_port(&a, port);
  return listen_on(&a, fd, NULL);
}

weft_result_t weft_sock_listen_public(uint16_t port, int *fd, weft_sockaddr_t *advert) {
  weft_sockaddr_t host;
  CHECK(weft_sock_host_addr(0, &host));
  weft_sockaddr_t bound;
  CHECK(weft_sock_listen(weft_sockaddr_family(&host), port, fd, &bound));
  *advert = host;
  weft_sockaddr_set_port(advert, weft_sockaddr_port(&bound));
  char s[WEFT_SOCKADDR_STRLEN];
  WEFT_INFO(WEFT_SUB_BOOT, "rendezvous root listens at %s",
            weft_sockaddr_str(advert, 1, s, sizeof s));
  return WEFT_SUCCESS;
}

weft_result_t weft_sock_listen_near(int connected_fd, int *fd, weft_sockaddr_t *advert) {
  struct sockaddr_storage ss;
  socklen_t len = sizeof ss;
  weft_sockaddr_t local;
  if (getsockname(connected_fd, (struct sockaddr *)&ss, &len) != 0)
    return weft_set_error(WEFT_ERR_SYSTEM, "getsockname: %s", strerror(errno));
  if (weft_sockaddr_from((struct sockaddr *)&ss, &local) != 0)
    return weft_set_error(WEFT_ERR_SYSTEM, "getsockname: family %d", ss.ss_family);
  weft_sockaddr_t bound;
  CHECK(weft_sock_listen(weft_sockaddr_family(&local), 0, fd, &bound));
  /* Bound to one address: that one is where peers must come. Bound to all of them: the one
   * the route to the root left from is reachable at least from there. */
  *advert = weft_sockaddr_is_any(&bound) ? local : bound;
  weft_sockaddr_set_port(advert, weft_sockaddr_port(&bound));
  char s[WEFT_SOCKADDR_STRLEN], b[WEFT_SOCKADDR_STRLEN];
  WEFT_INFO(WEFT_SUB_BOOT, "peers reach this process at %s (listening on %s)",
            weft_sockaddr_str(advert, 1, s, sizeof s), weft_sockaddr_str(&bound, 1, b, sizeof b));
  return WEFT_SUCCESS;
}

weft_result_t weft_sock_resolve(const char *host, uint16_t port, weft_sockaddr_t *out) {
  int family = 0;
  CHECK(family_param(&family));
  if (weft_sockaddr_parse(host, out) != 0) {
    int e = EAI_NONAME;
    for (int k = 0; k < 2 && e != 0; k++) {
      int f = family ? family : k == 0 ? AF_INET : AF_INET6;
      if (family && k) break;
      struct addrinfo hints = {.ai_family = f, .ai_socktype = SOCK_STREAM}, *res = NULL;
      e = getaddrinfo(host, NULL, &hints, &res);
      if (e == 0 && (!res || weft_sockaddr_from(res->ai_addr, out) != 0)) e = EAI_FAMILY;
      if (res) freeaddrinfo(res);
    }
    if (e != 0)
      return weft_set_error(WEFT_ERR_INVALID_ARG, "cannot resolve root host '%.128s'%s: %s", host,
                            family ? (family == AF_INET6 ? " (AF_INET6)" : " (AF_INET)") : "",
                            gai_strerror(e));
  } else if (family && weft_sockaddr_family(out) != family) {
    return weft_set_error(WEFT_ERR_INVALID_ARG,
                          "root host '%.128s' is an %s address but WEFT_SOCKET_FAMILY wants %s",
                          host, family_name(weft_sockaddr_family(out)), family_name(family));
  }
  weft_sockaddr_set_port(out, port);
  return WEFT_SUCCESS;
}

static weft_result_t wait_fd(int fd, short events, int64_t deadline, const atomic_int *abort_flag,
                             const char *what) {
  for (;;) {
    if (abort_flag && atomic_load(abort_flag))
      return weft_set_error(WEFT_ERR_ABORTED, "%s: communicator aborted", what);
    int64_t left = deadline - weft_now_ms();
    if (left <= 0) return weft_set_error(WEFT_ERR_TIMEOUT, "%s: timed out", what);
    weft_waitlog_tick_current(); /* the caller's wait, if it set one (waitlog.h) */
    struct pollfd p = {.fd = fd, .events = events};
    int rc = poll(&p, 1, left > 100 ? 100 : (int)left);
    if (rc > 0) return WEFT_SUCCESS;
    if (rc < 0 && errno != EINTR)
      return weft_set_error(WEFT_ERR_SYSTEM, "poll: %s", strerror(errno));
  }
}

weft_result_t weft_sock_connect(const weft_sockaddr_t *to, int64_t deadline,
                                const atomic_int *abort_flag, int *fd) {
  char name[WEFT_SOCKADDR_STRLEN];
  if (!weft_sockaddr_valid(to))
    return weft_set_error(WEFT_ERR_PROTOCOL, "connect: not an IPv4 or IPv6 address (family %d)",
                          weft_sockaddr_family(to));
  weft_sockaddr_str(to, 1, name, sizeof name);
  for (int delay_ms = 1;; delay_ms = delay_ms < 100 ? delay_ms * 2 : 100) {
    int s = socket(weft_sockaddr_family(to), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s < 0) return weft_set_error(WEFT_ERR_SYSTEM, "socket: %s", strerror(errno));
    int rc = connect(s, &to->u.sa, to->len), err = rc == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      weft_result_t w = wait_fd(s, POLLOUT, deadline, abort_flag, "connect");
      if (w != WEFT_SUCCESS) {
        close(s);
        return weft_set_error(w, "connect to %s: %s", name, weft_thread_error());
      }
      socklen_t len = sizeof err;
      getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len);
    }
    if (err == 0) {
      weft_sock_nodelay(s);
      *fd = s;
      return WEFT_SUCCESS;
    }
    close(s);
    if (err != ECONNREFUSED && err != ETIMEDOUT && err != ECONNRESET && err != EAGAIN)
      return weft_set_error(WEFT_ERR_SYSTEM, "connect to %s: %s", name, strerror(err));
    if (abort_flag && atomic_load(abort_flag))
      return weft_set_error(WEFT_ERR_ABORTED, "connect to %s: communicator aborted", name);
    if (weft_now_ms() + delay_ms >= deadline)
      return weft_set_error(WEFT_ERR_TIMEOUT, "connect to %s: %s until the timeout", name,
                            strerror(err));
    weft_waitlog_tick_current();
    struct timespec ts = {0, delay_ms * 1000000L};
    nanosleep(&ts, NULL);
  }
}

weft_result_t weft_sock_sendrecv(int out, const void *sbuf, size_t slen, int in, void *rbuf,
                                 size_t rlen, int64_t deadline, const atomic_int *abort_flag) {
  size_t sent = 0, got = 0;
  while (sent < slen || got < rlen) {
    if (abort_flag && atomic_load(abort_flag))
      return weft_set_error(WEFT_ERR_ABORTED, "socket transfer: communicator aborted");
    int64_t left = deadline - weft_now_ms();
    if (left <= 0)
      return weft_set_error(WEFT_ERR_TIMEOUT,
                            "socket transfer: timed out (%zu/%zu sent, %zu/%zu "
                            "received)",
                            sent, slen, got, rlen);
    weft_waitlog_tick_current();
    struct pollfd p[2];
    int np = 0, si = -1, ri = -1;
    if (sent < slen) {
      si = np;
      p[np++] = (struct pollfd){.fd = out, .events = POLLOUT};
    }
    if (got < rlen) {
      if (si >= 0 && in == out) {
        p[si].events |= POLLIN;
        ri = si;
      } else {
        ri = np;
        p[np++] = (struct pollfd){.fd = in, .events = POLLIN};
      }
    }
    int rc = poll(p, (nfds_t)np, left > 100 ? 100 : (int)left);
    if (rc < 0 && errno != EINTR)
      return weft_set_error(WEFT_ERR_SYSTEM, "poll: %s", strerror(errno));
    if (rc <= 0) continue;
    if (si >= 0 && (p[si].revents & (POLLOUT | POLLERR | POLLHUP))) {
      ssize_t n = send(out, (const char *)sbuf + sent, slen - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0)
        sent += (size_t)n;
      else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
        return weft_set_error(WEFT_ERR_PEER_LOST, "send: %s", strerror(errno));
    }
    if (ri >= 0 && (p[ri].revents & (POLLIN | POLLERR | POLLHUP))) {
      ssize_t n = recv(in, (char *)rbuf + got, rlen - got, MSG_DONTWAIT);
      if (n > 0)
        got += (size_t)n;
      else if (n == 0)
        return weft_set_error(WEFT_ERR_PEER_LOST, "connection closed by peer (%zu/%zu received)",
                              got, rlen);
      else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
        return weft_set_error(WEFT_ERR_PEER_LOST, "recv: %s", strerror(errno));
    }
  }
  return WEFT_SUCCESS;
}

weft_result_t weft_sock_send_all(int fd, const void *buf, size_t len, int64_t deadline,
                                 const atomic_int *abort_flag) {
  return weft_sock_sendrecv(fd, buf, len, fd, NULL, 0, deadline, abort_flag);
}

weft_result_t weft_sock_recv_all(int fd, void *buf, size_t len, int64_t deadline,
                                 const atomic_int *abort_flag) {
  return weft_sock_sendrecv(fd, NULL, 0, fd, buf, len, deadline, abort_flag);
}

enum { MAX_PENDING = 256, HELLO_MAX = 256, STRANGER_MS = 5000 };

typedef struct {
  int fd;
  size_t got;
  int64_t since;
  unsigned char buf[HELLO_MAX];
} pending_t;

weft_result_t weft_sock_accept_hellos(int listen_fd, const int *want, size_t hello_len,
                                      uint64_t magic, weft_hello_fn accept_fn, void *ctx, int *fds,
                                      int64_t deadline, const atomic_int *abort_flag) {
  if (hello_len > HELLO_MAX || hello_len < 8) return WEFT_ERR_INTERNAL;
  pending_t *pend = calloc(MAX_PENDING, sizeof *pend);
  if (!pend) return weft_set_error(WEFT_ERR_NO_MEMORY, "accept: out of memory");
  struct pollfd *p = calloc(MAX_PENDING + 1, sizeof *p);
  if (!p) {
    free(pend);
    return weft_set_error(WEFT_ERR_NO_MEMORY, "accept: out of memory");
  }
  int npend = 0, kept = 0;
  weft_result_t rc = WEFT_SUCCESS;
  while (kept < *want) {
    if (abort_flag && atomic_load(abort_flag)) {
      rc = weft_set_error(WEFT_ERR_ABORTED, "accept: communicator aborted");
      break;
    }
    int64_t now = weft_now_ms();
    if (now >= deadline) {
      rc = weft_set_error(WEFT_ERR_TIMEOUT, "accept: %d of %d peers connected before the timeout",
                          kept, *want);
      break;
    }
    weft_waitlog_tick_current();
    p[0] = (struct pollfd){.fd = listen_fd, .events = POLLIN};
    for (int i = 0; i < npend; i++)
      p[i + 1] = (struct pollfd){.fd = pend[i].fd, .events = POLLIN};
    int64_t left = deadline - now;
    int n = poll(p, (nfds_t)npend + 1, left > 100 ? 100 : (int)left);
    if (n < 0 && errno != EINTR) {
      rc = weft_set_error(WEFT_ERR_SYSTEM, "poll: %s", strerror(errno));
      break;
    }
    /* Read what the pending connections sent; drop the ones that break the protocol. */
    for (int i = npend - 1; i >= 0; i--) {
      pending_t *c = &pend[i];
      int drop = 0;
      if (p[i + 1].revents) {
        ssize_t r = recv(c->fd, c->buf + c->got, hello_len - c->got, MSG_DONTWAIT);
        if (r > 0)
          c->got += (size_t)r;
        else if (r == 0 || (errno != EAGAIN && errno != EINTR))
          drop = 1;
        if (!drop && c->got >= 8) {
          uint64_t m;
          memcpy(&m, c->buf, 8);
          if (m != magic) {
            WEFT_WARN(WEFT_SUB_BOOT, "refused a connection with a wrong magic");
            drop = 1;
          }
        }
        if (!drop && c->got == hello_len) {
          if (accept_fn(ctx, c->buf, c->fd) == 0) {
            if (fds) fds[kept] = c->fd;
            kept++;
            c->fd = -1;
          } else {
            WEFT_WARN(WEFT_SUB_BOOT, "refused a connection with an invalid hello");
          }
          drop = 1;
        }
      }
      if (!drop && now - c->since > STRANGER_MS) {
        WEFT_WARN(WEFT_SUB_BOOT, "dropped a connection that sent %zu of %zu hello bytes", c->got,
                  hello_len);
        drop = 1;
      }
      if (drop) {
        if (c->fd >= 0) close(c->fd);
        pend[i] = pend[--npend];
      }
    }
    if (p[0].revents & POLLIN) {
      for (;;) {
        int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) break;
        if (npend == MAX_PENDING) { /* flooded: the oldest stranger goes first */
          close(pend[0].fd);
          pend[0] = pend[--npend];
        }
        weft_sock_nodelay(fd);
        pend[npend++] = (pending_t){.fd = fd, .since = now};
      }
    }
  }
  for (int i = 0; i < npend; i++)
    close(pend[i].fd);
  if (rc != WEFT_SUCCESS && fds)
    for (int i = 0; i < kept; i++)
      close(fds[i]);
  free(pend);
  free(p);
  return rc;
}
