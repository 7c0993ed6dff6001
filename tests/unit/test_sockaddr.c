/* The socket address type (src/bootstrap/sockaddr.c): numeric IPv4 and IPv6 literals in and
 * out, ports, the wildcard, and what is refused (names, malformed text, other families). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <string.h>
#include <sys/un.h>

#include "sockaddr.h"

static const char *str(const weft_sockaddr_t *a, int port) {
  static char buf[WEFT_SOCKADDR_STRLEN];
  return weft_sockaddr_str(a, port, buf, sizeof buf);
}

static void ipv4_round_trip(void **st) {
  (void)st;
  weft_sockaddr_t a;
  assert_int_equal(weft_sockaddr_parse("10.0.0.3", &a), 0);
  assert_int_equal(weft_sockaddr_family(&a), AF_INET);
  assert_int_equal(a.len, sizeof(struct sockaddr_in));
  assert_true(weft_sockaddr_valid(&a));
  assert_int_equal(weft_sockaddr_port(&a), 0);
  weft_sockaddr_set_port(&a, 29500);
  assert_int_equal(weft_sockaddr_port(&a), 29500);
  assert_int_equal(ntohs(a.u.v4.sin_port), 29500);
  assert_string_equal(str(&a, 1), "10.0.0.3:29500");
  assert_string_equal(str(&a, 0), "10.0.0.3");
  assert_false(weft_sockaddr_loopback(&a));
  assert_false(weft_sockaddr_link_local(&a));
  assert_int_equal(weft_sockaddr_parse("127.0.0.1", &a), 0);
  assert_true(weft_sockaddr_loopback(&a));
}

static void ipv6_round_trip(void **st) {
  (void)st;
  weft_sockaddr_t a;
  assert_int_equal(weft_sockaddr_parse("fd00::2", &a), 0);
  assert_int_equal(weft_sockaddr_family(&a), AF_INET6);
  assert_int_equal(a.len, sizeof(struct sockaddr_in6));
  assert_true(weft_sockaddr_valid(&a));
  weft_sockaddr_set_port(&a, 5000);
  assert_int_equal(ntohs(a.u.v6.sin6_port), 5000);
  assert_string_equal(str(&a, 1), "[fd00::2]:5000");
  assert_string_equal(str(&a, 0), "fd00::2");
  assert_int_equal(weft_sockaddr_parse("[::1]", &a), 0); /* the URL form */
  assert_int_equal(weft_sockaddr_family(&a), AF_INET6);
  assert_true(weft_sockaddr_loopback(&a));
  assert_string_equal(str(&a, 1), "[::1]:0");
  assert_int_equal(weft_sockaddr_parse("fe80::1%1", &a), 0); /* numeric scope */
  assert_true(weft_sockaddr_link_local(&a));
  assert_int_equal(a.u.v6.sin6_scope_id, 1);
  assert_int_equal(weft_sockaddr_parse("2001:db8:0:0:1:0:0:1", &a), 0);
  assert_string_equal(str(&a, 0), "2001:db8::1:0:0:1"); /* written the canonical way */
}

static void refused(void **st) {
  (void)st;
  weft_sockaddr_t a;
  const char *bad[] = {"",
                       "10.0.0",
                       "10.0.0.256",
                       "localhost",
                       "::g",
                       "[10.0.0.1]",
                       "[::1",
                       "fe80::1%no_such_interface_x",
                       "fd00::2:5000:1:2:3:4:5:6",
                       "01234567890123456789012345678901234567890123456789012345678901234567890123"
                       "456789"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    assert_int_equal(weft_sockaddr_parse(bad[i], &a), -1);
    assert_false(weft_sockaddr_valid(&a));
  }
  struct sockaddr_un un = {.sun_family = AF_UNIX};
  assert_int_equal(weft_sockaddr_from((struct sockaddr *)&un, &a), -1);
  assert_int_equal(weft_sockaddr_from(NULL, &a), -1);
  /* from the network: a family and a length that do not go together */
  assert_int_equal(weft_sockaddr_parse("fd00::2", &a), 0);
  a.len = sizeof(struct sockaddr_in);
  assert_false(weft_sockaddr_valid(&a));
}

static void wildcard_and_copy(void **st) {
  (void)st;
  weft_sockaddr_t a, b;
  weft_sockaddr_any(AF_INET6, &a);
  assert_true(weft_sockaddr_valid(&a) && weft_sockaddr_is_any(&a));
  assert_string_equal(str(&a, 0), "::");
  weft_sockaddr_any(AF_INET, &a);
  assert_true(weft_sockaddr_valid(&a) && weft_sockaddr_is_any(&a));
  assert_string_equal(str(&a, 0), "0.0.0.0");
  assert_int_equal(weft_sockaddr_parse("::1", &a), 0);
  assert_false(weft_sockaddr_is_any(&a));
  weft_sockaddr_set_port(&a, 7);
  assert_int_equal(weft_sockaddr_from(&a.u.sa, &b), 0);
  assert_int_equal(b.len, a.len);
  assert_memory_equal(&b.u.v6, &a.u.v6, sizeof a.u.v6);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(ipv4_round_trip),
                                     cmocka_unit_test(ipv6_round_trip), cmocka_unit_test(refused),
                                     cmocka_unit_test(wildcard_and_copy)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
