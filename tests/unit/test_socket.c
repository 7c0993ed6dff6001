/* The acceptor behind every listening port of weft (src/bootstrap/socket.c: the rendezvous root,
 * the bootstrap ring and the tcp transport all use it): strangers sending garbage, a wrong magic,
 * 3 bytes then closing, nothing at all, or a flood of idle connections are refused without
 * delaying a valid peer that comes after them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

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

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(strangers_do_not_delay_a_peer),
                                     cmocka_unit_test(only_strangers_time_out)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
