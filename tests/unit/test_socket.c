/* The acceptor behind every listening port of weft (src/bootstrap/socket.c: the rendezvous root,
 * the bootstrap ring and the tcp transport all use it): strangers sending garbage, a wrong magic,
 * 3 bytes then closing, nothing at all, or a flood of idle connections are refused without
 * delaying a valid peer that comes after them. And the addresses socket.c chooses from
 * WEFT_SOCKET_IFADDR, _IFNAME and _FAMILY: IPv6 listeners, refusals that say why. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "err.h"
#include "socket.h"

enum { HELLO = 40, FLOOD = 50 };
static const uint64_t MAGIC = 0x0123456789abcdefull;

static int accept_any(void *ctx, const void *hello, int fd) {
  (void)ctx;
  (void)fd;
  return ((const unsigned char *)hello)[8] == 0x42 ? 0 : -1; /* a field check, like the real ones */
}

static int dial(const weft_sockaddr_t *a) {
  int s = socket(weft_sockaddr_family(a), SOCK_STREAM, 0);
  if (connect(s, &a->u.sa, a->len) != 0) {
    close(s);
    return -1;
  }
  return s;
}

static void strangers_do_not_delay_a_peer(void **st) {
  (void)st;
  setenv("WEFT_SOCKET_IFADDR", "127.0.0.1", 1);
  int lfd;
  weft_sockaddr_t a;
  assert_int_equal(weft_sock_listen(0, 0, &lfd, &a), WEFT_SUCCESS);
  int idle[FLOOD + 4], n = 0;
  for (int i = 0; i < FLOOD; i++)
    idle[n++] = dial(&a); /* connect and say nothing */
  int g = dial(&a);
  send(g, "GET / HTTP/1.0\r\n\r\nGARBAGE GARBAGE GARBAGE GARBAGE", 48, 0);
  idle[n++] = g;
  unsigned char wrong[HELLO] = {0};
  uint64_t m = MAGIC ^ 1;
  memcpy(wrong, &m, 8);
  int w = dial(&a);
  send(w, wrong, sizeof wrong, 0);
  idle[n++] = w;
  int t = dial(&a);
  send(t, "abc", 3, 0);
  close(t);
  unsigned char bad_field[HELLO] = {0}; /* right magic, refused by the hello check */
  memcpy(bad_field, &MAGIC, 8);
  int b = dial(&a);
  send(b, bad_field, sizeof bad_field, 0);
  idle[n++] = b;
  unsigned char good[HELLO] = {0};
  memcpy(good, &MAGIC, 8);
  good[8] = 0x42;
  int p = dial(&a);
  send(p, good, sizeof good, 0);
  int want = 1, got = -1;
  int64_t t0 = weft_now_ms();
  assert_int_equal(weft_sock_accept_hellos(lfd, &want, HELLO, MAGIC, accept_any, NULL, &got,
                                           weft_now_ms() + 5000, NULL),
                   WEFT_SUCCESS);
  int64_t took = weft_now_ms() - t0;
  assert_true(got >= 0);
  assert_true(took < 1000); /* not held up by the silent ones (they would cost 5 s each) */
  close(got);
  close(p);
  for (int i = 0; i < n; i++)
    if (idle[i] >= 0) close(idle[i]);
  close(lfd);
  unsetenv("WEFT_SOCKET_IFADDR");
}

/* Nobody valid comes: the acceptor gives up at its deadline with a timeout, not a hang. */
static void only_strangers_time_out(void **st) {
  (void)st;
  int lfd;
  weft_sockaddr_t a;
  setenv("WEFT_SOCKET_IFADDR", "127.0.0.1", 1);
  assert_int_equal(weft_sock_listen(0, 0, &lfd, &a), WEFT_SUCCESS);
  int s = dial(&a);
  int want = 1, got = -1;
  int64_t t0 = weft_now_ms();
  assert_int_equal(weft_sock_accept_hellos(lfd, &want, HELLO, MAGIC, accept_any, NULL, &got,
                                           weft_now_ms() + 300, NULL),
                   WEFT_ERR_TIMEOUT);
  int64_t took = weft_now_ms() - t0;
  assert_true(took >= 290 && took < 1500);
  close(s);
  close(lfd);
  unsetenv("WEFT_SOCKET_IFADDR");
}

static void unset_all(void) {
  unsetenv("WEFT_SOCKET_IFADDR");
  unsetenv("WEFT_SOCKET_IFNAME");
  unsetenv("WEFT_SOCKET_FAMILY");
}

static int have_ipv6_loopback(void) {
  weft_sockaddr_t a;
  weft_sockaddr_parse("::1", &a);
  int s = socket(AF_INET6, SOCK_STREAM, 0);
  int ok = s >= 0 && bind(s, &a.u.sa, a.len) == 0;
  if (s >= 0) close(s);
  return ok;
}

/* An interface list that matches nothing fails with what was there to match. */
static void unmatched_ifname_lists_the_interfaces(void **st) {
  (void)st;
  unset_all();
  setenv("WEFT_SOCKET_IFNAME", "=no_such_if0", 1);
  weft_sockaddr_t a;
  int fd = -1;
  assert_int_equal(weft_sock_host_addr(0, &a), WEFT_ERR_INVALID_ARG);
  const char *m = weft_thread_error();
  assert_non_null(strstr(m, "WEFT_SOCKET_IFNAME==no_such_if0: matches no interface that is up"));
  assert_non_null(strstr(m, "seen: "));
  assert_non_null(strstr(m, "lo 127.0.0.1"));
  assert_int_equal(weft_sock_listen(AF_INET, 0, &fd, &a), WEFT_ERR_INVALID_ARG);
  assert_int_equal(weft_sock_listen_public(0, &fd, &a), WEFT_ERR_INVALID_ARG);
  assert_int_equal(fd, -1);
  setenv("WEFT_SOCKET_IFNAME", "lo", 1);
  assert_int_equal(weft_sock_host_addr(AF_INET, &a), WEFT_SUCCESS);
  assert_true(weft_sockaddr_loopback(&a));
  unset_all();
}

static void refusals(void **st) {
  (void)st;
  unset_all();
  weft_sockaddr_t a;
  setenv("WEFT_SOCKET_IFADDR", "10.0.0", 1);
  assert_int_equal(weft_sock_host_addr(0, &a), WEFT_ERR_INVALID_ARG);
  assert_non_null(strstr(weft_thread_error(), "is not an IPv4 or IPv6 address"));
  setenv("WEFT_SOCKET_IFADDR", "::1", 1);
  setenv("WEFT_SOCKET_FAMILY", "AF_INET", 1);
  assert_int_equal(weft_sock_host_addr(0, &a), WEFT_ERR_INVALID_ARG);
  assert_non_null(strstr(weft_thread_error(), "is an IPv6 address, IPv4 is needed"));
  setenv("WEFT_SOCKET_FAMILY", "inet6", 1);
  assert_int_equal(weft_sock_host_addr(0, &a), WEFT_ERR_INVALID_ARG);
  assert_non_null(strstr(weft_thread_error(), "WEFT_SOCKET_FAMILY=inet6: expected"));
  setenv("WEFT_SOCKET_FAMILY", "af_inet6", 1); /* any case */
  assert_int_equal(weft_sock_host_addr(0, &a), WEFT_SUCCESS);
  assert_int_equal(weft_sockaddr_family(&a), AF_INET6);
  /* a connect to something that is no address (a table entry off the wire) */
  memset(&a, 0, sizeof a);
  int fd = -1;
  assert_int_equal(weft_sock_connect(&a, weft_now_ms() + 1000, NULL, &fd), WEFT_ERR_PROTOCOL);
  unset_all();
}

static void resolve(void **st) {
  (void)st;
  unset_all();
  weft_sockaddr_t a;
  char s[WEFT_SOCKADDR_STRLEN];
  assert_int_equal(weft_sock_resolve("127.0.0.1", 80, &a), WEFT_SUCCESS);
  assert_string_equal(weft_sockaddr_str(&a, 1, s, sizeof s), "127.0.0.1:80");
  assert_int_equal(weft_sock_resolve("[::1]", 81, &a), WEFT_SUCCESS);
  assert_string_equal(weft_sockaddr_str(&a, 1, s, sizeof s), "[::1]:81");
  assert_int_equal(weft_sock_resolve("localhost", 82, &a), WEFT_SUCCESS);
  /* IPv4 first, as before IPv6 came, where the name has an IPv4 address */
  struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
  int has_v4 = getaddrinfo("localhost", NULL, &hints, &res) == 0;
  if (res) freeaddrinfo(res);
  assert_int_equal(weft_sockaddr_family(&a), has_v4 ? AF_INET : AF_INET6);
  assert_int_equal(weft_sockaddr_port(&a), 82);
  setenv("WEFT_SOCKET_FAMILY", "AF_INET", 1);
  assert_int_equal(weft_sock_resolve("::1", 80, &a), WEFT_ERR_INVALID_ARG);
  assert_int_equal(weft_sock_resolve("no-such-host.invalid", 80, &a), WEFT_ERR_INVALID_ARG);
  assert_non_null(strstr(weft_thread_error(), "cannot resolve root host 'no-such-host.invalid'"));
  unset_all();
}

/* A listener on ::1 (WEFT_SOCKET_IFADDR), reached over IPv6; one that follows a connection
 * bound to nothing in particular advertises the connection's local end. */
static void ipv6_listen_and_connect(void **st) {
  (void)st;
  if (!have_ipv6_loopback()) {
    print_message("no IPv6 loopback here (::1 cannot be bound): skipped\n");
    skip();
  }
  unset_all();
  setenv("WEFT_SOCKET_IFADDR", "::1", 1);
  int lfd = -1, cfd = -1, near = -1;
  weft_sockaddr_t a, adv;
  assert_int_equal(weft_sock_listen_public(0, &lfd, &a), WEFT_SUCCESS);
  assert_int_equal(weft_sockaddr_family(&a), AF_INET6);
  assert_true(weft_sockaddr_loopback(&a) && weft_sockaddr_port(&a) != 0);
  assert_int_equal(weft_sock_connect(&a, weft_now_ms() + 5000, NULL, &cfd), WEFT_SUCCESS);
  unset_all();
  assert_int_equal(weft_sock_listen_near(cfd, &near, &adv), WEFT_SUCCESS);
  assert_int_equal(weft_sockaddr_family(&adv), AF_INET6);
  assert_true(weft_sockaddr_loopback(&adv) && weft_sockaddr_port(&adv) != 0);
  int dialed = dial(&adv);
  assert_true(dialed >= 0);
  close(dialed);
  close(near);
  close(cfd);
  close(lfd);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(strangers_do_not_delay_a_peer),
                                     cmocka_unit_test(only_strangers_time_out),
                                     cmocka_unit_test(unmatched_ifname_lists_the_interfaces),
                                     cmocka_unit_test(refusals),
                                     cmocka_unit_test(resolve),
                                     cmocka_unit_test(ipv6_listen_and_connect)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
