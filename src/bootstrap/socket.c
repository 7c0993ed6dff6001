/* Socket plumbing: every blocking call here is a poll loop with a deadline and an abort
 * flag, so a dead or silent peer turns into WEFT_ERR_TIMEOUT / WEFT_ERR_PEER_LOST. */
#include "socket.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "err.h"
#include "param.h"
#include "waitlog.h"

const char *weft_sock_addr_str(const struct sockaddr_in *a, char *buf, size_t len) {
  char ip[INET_ADDRSTRLEN] = "?";
  inet_ntop(AF_INET, &a->sin_addr, ip, sizeof ip);
  snprintf(buf, len, "%s:%u", ip, (unsigned)ntohs(a->sin_port));
  return buf;
}

int weft_sock_nonblock(int fd) {
  int fl = fcntl(fd, F_GETFL, 0);
  return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

void weft_sock_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* WEFT_SOCKET_IFADDR, else the address of WEFT_SOCKET_IFNAME, else any. */
static weft_result_t bind_addr(struct in_addr *addr) {
  const char *ifaddr = weft_param_get_str(WEFT_PARAM_SOCKET_IFADDR);
  const char *ifname = weft_param_get_str(WEFT_PARAM_SOCKET_IFNAME);
  addr->s_addr = htonl(INADDR_ANY);
  if (ifaddr[0]) {
    if (inet_pton(AF_INET, ifaddr, addr) != 1)
      return weft_set_error(WEFT_ERR_INVALID_ARG, "WEFT_SOCKET_IFADDR=%s is not an IPv4 address",
                            ifaddr);
    return WEFT_SUCCESS;
  }
  if (!ifname[0]) return WEFT_SUCCESS;
  struct ifaddrs *ifs = NULL;
  if (getifaddrs(&ifs) != 0)
    return weft_set_error(WEFT_ERR_SYSTEM, "getifaddrs: %s", strerror(errno));
  int found = 0;
  for (struct ifaddrs *i = ifs; i && !found; i = i->ifa_next)
    if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && strcmp(i->ifa_name, ifname) == 0) {
      *addr = ((struct sockaddr_in *)i->ifa_addr)->sin_addr;
      found = 1;
    }
  freeifaddrs(ifs);
  if (!found)
    return weft_set_error(WEFT_ERR_INVALID_ARG,
                          "WEFT_SOCKET_IFNAME=%s: no such interface with an "
                          "IPv4 address",
                          ifname);
  return WEFT_SUCCESS;
}

weft_result_t weft_sock_host_addr(struct in_addr *addr) {
  CHECK(bind_addr(addr));
  if (addr->s_addr != htonl(INADDR_ANY)) return WEFT_SUCCESS;
  addr->s_addr = htonl(INADDR_LOOPBACK);
  struct ifaddrs *ifs = NULL;
  if (getifaddrs(&ifs) != 0) return WEFT_SUCCESS;
  for (struct ifaddrs *i = ifs; i; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
    if (!(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK)) continue;
    *addr = ((struct sockaddr_in *)i->ifa_addr)->sin_addr;
    break;
  }
  freeifaddrs(ifs);
  return WEFT_SUCCESS;
}

weft_result_t weft_sock_listen(uint16_t port, int *fd, struct sockaddr_in *bound) {
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
  CHECK(bind_addr(&a.sin_addr));
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return weft_set_error(WEFT_ERR_SYSTEM, "socket: %s", strerror(errno));
  int one = 1;
  setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  socklen_t len = sizeof a;
  if (bind(s, (struct sockaddr *)&a, sizeof a) != 0 || listen(s, 1024) != 0 ||
      getsockname(s, (struct sockaddr *)&a, &len) != 0 || weft_sock_nonblock(s) != 0) {
    int e = errno;
    close(s);
    return weft_set_error(WEFT_ERR_SYSTEM, "listen on port %u: %s", (unsigned)port, strerror(e));
  }
  *fd = s;
  if (bound) *bound = a;
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

weft_result_t weft_sock_connect(const struct sockaddr_in *to, int64_t deadline,
                                const atomic_int *abort_flag, int *fd) {
  char name[64];
  weft_sock_addr_str(to, name, sizeof name);
  for (int delay_ms = 1;; delay_ms = delay_ms < 100 ? delay_ms * 2 : 100) {
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s < 0) return weft_set_error(WEFT_ERR_SYSTEM, "socket: %s", strerror(errno));
    int rc = connect(s, (const struct sockaddr *)to, sizeof *to), err = rc == 0 ? 0 : errno;
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
