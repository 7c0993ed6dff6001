/* Communicators over IPv6 and the interface choice, in real processes: the unique id's root,
 * the bootstrap ring and the tcp transport on ::1 (WEFT_SOCKET_FAMILY=AF_INET6 with
 * WEFT_SOCKET_IFADDR=::1, then with WEFT_SOCKET_IFNAME==lo), init from WEFT_ROOT=[::1]:port
 * with the default interface rules, and init failing at once, with the interfaces listed,
 * when WEFT_SOCKET_IFNAME matches nothing. usage: test_ipv6 RANKS; exits 77 (skipped) where
 * ::1 cannot be bound. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bootstrap.h"
#include "launch.h"
#include "rank_check.h"
#include "weft.h"

enum { COUNT = 1 << 18 }; /* 1 MiB of floats: many TCP frames */

static int ring_sum(weft_comm_t c, int rank, int n) {
  float *buf = malloc(sizeof(float) * COUNT);
  if (!buf) FAIL("out of memory");
  for (int i = 0; i < COUNT; i++)
    buf[i] = (float)(rank + 1) + (float)(i % 7);
  int bad = weft_allreduce(buf, buf, COUNT, WEFT_F32, WEFT_SUM, c, NULL) != WEFT_SUCCESS;
  for (int i = 0; i < COUNT && !bad; i++)
    bad = buf[i] != (float)(n * (n + 1) / 2) + (float)(n * (i % 7));
  free(buf);
  if (bad) FAIL("allreduce over IPv6 gave a wrong sum");
  if (weft_barrier(c, NULL) != WEFT_SUCCESS) FAIL("barrier");
  return 0;
}

static int id_main(int rank, int n, weft_unique_id_t id, void *arg) {
  (void)arg;
  weft_id_body_t body;
  memcpy(&body, id.internal, sizeof body);
  char s[WEFT_SOCKADDR_STRLEN];
  if (weft_sockaddr_family(&body.root) != AF_INET6 || !weft_sockaddr_loopback(&body.root))
    FAIL("the unique id's root is %s, not on ::1", weft_sockaddr_str(&body.root, 1, s, sizeof s));
  weft_comm_t c;
  if (weft_comm_init(&c, n, id, rank, NULL) != WEFT_SUCCESS) FAIL("init over IPv6");
  if (ring_sum(c, rank, n)) return 1;
  weft_comm_destroy(c);
  return 0;
}

static int env_main(int rank, int n, weft_unique_id_t id, void *arg) {
  (void)id;
  char buf[64];
  snprintf(buf, sizeof buf, "[::1]:%d", *(int *)arg);
  setenv("WEFT_ROOT", buf, 1);
  snprintf(buf, sizeof buf, "%d", rank);
  setenv("WEFT_RANK", buf, 1);
  snprintf(buf, sizeof buf, "%d", n);
  setenv("WEFT_NRANKS", buf, 1);
  weft_comm_t c;
  if (weft_comm_init_env(&c, NULL) != WEFT_SUCCESS) FAIL("init_env from WEFT_ROOT=[::1]");
  if (ring_sum(c, rank, n)) return 1;
  weft_comm_destroy(c);
  return 0;
}

static int free_port6(void) {
  weft_sockaddr_t a;
  weft_sockaddr_parse("::1", &a);
  int s = socket(AF_INET6, SOCK_STREAM, 0);
  socklen_t len = sizeof a.u;
  if (s < 0 || bind(s, &a.u.sa, a.len) != 0 || getsockname(s, &a.u.sa, &len) != 0) {
    if (s >= 0) close(s);
    return -1;
  }
  close(s);
  return weft_sockaddr_port(&a);
}

/* WEFT_SOCKET_IFNAME that names no interface: weft_get_unique_id, and a rank's init with a
 * good id, fail with WEFT_ERR_INVALID_ARG and the listing, instead of hanging. */
static int unmatched(void) {
  int rank = 0;
  setenv("WEFT_SOCKET_IFNAME", "weft_no_such_if", 1);
  weft_unique_id_t id;
  if (weft_get_unique_id(&id) != WEFT_ERR_INVALID_ARG) FAIL("unique id with an unmatched IFNAME");
  const char *m = weft_get_last_error(NULL);
  printf("test_ipv6: as expected: %s\n", m);
  if (!strstr(m, "WEFT_SOCKET_IFNAME=weft_no_such_if: matches no interface that is up") ||
      !strstr(m, "seen: ") || !strstr(m, "lo 127.0.0.1"))
    FAIL("the message does not list the interfaces: %s", m);
  unsetenv("WEFT_SOCKET_IFNAME");
  if (weft_get_unique_id(&id) != WEFT_SUCCESS) FAIL("unique id");
  setenv("WEFT_SOCKET_IFNAME", "=lo0,eth99", 1);
  weft_comm_t c = NULL;
  int64_t t0 = launch_now_ms();
  weft_result_t rc = weft_comm_init(&c, 1, id, 0, NULL);
  if (rc != WEFT_ERR_INVALID_ARG) FAIL("init with an unmatched IFNAME returned %d", rc);
  m = weft_get_last_error(NULL);
  if (!strstr(m, "WEFT_SOCKET_IFNAME==lo0,eth99: matches no interface") ||
      !strstr(m, "lo 127.0.0.1"))
    FAIL("init's message does not list the interfaces: %s", m);
  if (launch_now_ms() - t0 > 5000)
    FAIL("the refusal took %lld ms", (long long)(launch_now_ms() - t0));
  unsetenv("WEFT_SOCKET_IFNAME");
  unsetenv("WEFT_SOCKET_FAMILY");
  unsetenv("WEFT_SOCKET_IFADDR");
  return 0;
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 3;
  int port = free_port6();
  if (port < 0) {
    printf("test_ipv6: no IPv6 loopback on this machine (::1 cannot be bound): skipped\n");
    return 77;
  }
  setenv("WEFT_TRANSPORT", "tcp", 1);
  setenv("WEFT_SOCKET_FAMILY", "AF_INET6", 1);
  setenv("WEFT_SOCKET_IFADDR", "::1", 1);
  if (launch_local(n, id_main, NULL, 120)) return 1;
  unsetenv("WEFT_SOCKET_IFADDR");
  setenv("WEFT_SOCKET_IFNAME", "=lo", 1);
  if (launch_local(n, id_main, NULL, 120)) return 1;
  unsetenv("WEFT_SOCKET_IFNAME");
  unsetenv("WEFT_SOCKET_FAMILY");
  if (launch_local(n, env_main, &port, 120)) return 1;
  if (unmatched()) return 1;
  printf("test_ipv6: %d ranks over ::1 ok\n", n);
  return 0;
}
