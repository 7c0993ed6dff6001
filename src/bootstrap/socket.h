/* TCP socket helpers used by the bootstrap and the tcp transport: IPv4 listeners,
 * connects that retry until a deadline, and transfers that poll with a deadline and an
 * abort flag, so no socket wait in weft is unbounded. */
#ifndef WEFT_SOCKET_H
#define WEFT_SOCKET_H

#include <netinet/in.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "clock.h"
#include "weft.h"

/* Listens on WEFT_SOCKET_IFADDR (or all interfaces) at port (0: any); *bound gets the
 * actual port. */
weft_result_t weft_sock_listen(uint16_t port, int *fd, struct sockaddr_in *bound);
/* The address other hosts should use to reach this one (WEFT_SOCKET_IFADDR, else the
 * first non-loopback IPv4 interface that is up, else 127.0.0.1). */
weft_result_t weft_sock_host_addr(struct in_addr *addr);
/* Connects, retrying refused connections until the deadline. */
weft_result_t weft_sock_connect(const struct sockaddr_in *to, int64_t deadline,
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
int weft_sock_nonblock(int fd);
const char *weft_sock_addr_str(const struct sockaddr_in *a, char *buf, size_t len);

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
