/* TCP socket helpers used by the bootstrap and the tcp transport: IPv4/IPv6 listeners,
 * connects that retry until a deadline, and transfers that poll with a deadline and an
 * abort flag, so no socket wait in weft is unbounded. */
#ifndef WEFT_SOCKET_H
#define WEFT_SOCKET_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "clock.h"
#include "sockaddr.h"
#include "weft.h"

/* The address other hosts should use to reach this one: WEFT_SOCKET_IFADDR, else the
 * interface WEFT_SOCKET_IFNAME picks (ifaces.h: the default when unset), port 0. family:
 * AF_INET or AF_INET6 to require one, 0 for WEFT_SOCKET_FAMILY's (unset: either). */
weft_result_t weft_sock_host_addr(int family, weft_sockaddr_t *addr);
/* Listens at port (0: any) on an address of family (0: as weft_sock_host_addr): the one
 * WEFT_SOCKET_IFADDR or WEFT_SOCKET_IFNAME names when either is set, else every address of
 * the family. *bound (may be NULL) gets the address bound, with the actual port. */
weft_result_t weft_sock_listen(int family, uint16_t port, int *fd, weft_sockaddr_t *bound);
/* Listens at port on every address of family (AF_INET or AF_INET6), whatever
 * WEFT_SOCKET_IFNAME says: for a rendezvous root at an address the user gave (WEFT_ROOT,
 * MASTER_ADDR), which names this host in its own way (a host name, an address forwarded here). */
weft_result_t weft_sock_listen_all(int family, uint16_t port, int *fd);
/* The rendezvous root's listener: listens at port (0: any) and sets *advert to the host
 * address (weft_sock_host_addr(0)) with the port, for the unique id. */
weft_result_t weft_sock_listen_public(uint16_t port, int *fd, weft_sockaddr_t *advert);
/* A listener that peers reach the way this process reached the other end of connected_fd:
 * in its family, on the chosen address when WEFT_SOCKET_IFADDR or _IFNAME is set, else on
 * all of them, advertising the local end of connected_fd (the address the route to the root
 * leaves from). *advert gets that address with the listener's port. */
weft_result_t weft_sock_listen_near(int connected_fd, int *fd, weft_sockaddr_t *advert);
/* host (a name, an IPv4 or IPv6 literal, or "[v6]") and port to an address: with
 * WEFT_SOCKET_FAMILY unset, an IPv4 address where the name has one, else an IPv6 one. */
weft_result_t weft_sock_resolve(const char *host, uint16_t port, weft_sockaddr_t *out);
/* Connects, retrying refused connections until the deadline. */
weft_result_t weft_sock_connect(const weft_sockaddr_t *to, int64_t deadline,
                                const atomic_int *abort_flag, int *fd);
weft_result_t weft_sock_send_all(int fd, const void *buf, size_t len, int64_t deadline,
                                 const atomic_int *abort_flag);
weft_result_t weft_sock_recv_all(int fd, void *buf, size_t len, int64_t deadline,
                                 const atomic_int *abort_flag);
/* Sends sbuf on out while receiving rbuf on in (both may be the same socket): neither side
 * can block the other, whatever the sizes. */
weft_result_t weft_sock_sendrecv(int out, const void *sbuf, size_t slen, int in, void *rbuf,
                                 size_t rlen, int64_t deadline, const atomic_int *abort_flag);
void weft_sock_nodelay(int fd);
/* A peer host that answers nothing for dead_ms (no keepalive reply, data unacknowledged) makes
 * the socket fail, so that a host lost without a FIN is seen (0: the system's defaults). */
void weft_sock_keepalive(int fd, int dead_ms);
int weft_sock_nonblock(int fd);

/* Accepts connections until `want` of them sent a valid hello of hello_len bytes. Each
 * connection is read without blocking the others; the first bytes must be the 8-byte
 * magic. *want is read again after each hello, so accept_fn may raise it. accept_fn decides (0 =
 * keep, else refuse and close); a refused or slow stranger never delays the others. Kept fds go to
 * fds[] in the order accepted; with fds NULL, accept_fn takes ownership of the fds it keeps (and
 * closes them on failure). */
typedef int (*weft_hello_fn)(void *ctx, const void *hello, int fd);
weft_result_t weft_sock_accept_hellos(int listen_fd, const int *want, size_t hello_len,
                                      uint64_t magic, weft_hello_fn accept_fn, void *ctx, int *fds,
                                      int64_t deadline, const atomic_int *abort_flag);

#endif
