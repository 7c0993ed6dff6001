/* WEFT_SOCKET_IFNAME's matcher (src/bootstrap/ifaces.c) on made-up hosts: prefix lists and
 * their order, "^" exclusion, "=" exact names, the default that skips docker, veth and virbr
 * and falls back to the loopback, the address family, and the listing of what was seen when
 * nothing matches. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "ifaces.h"

enum { UP = WEFT_IF_UP, LOOP = WEFT_IF_LOOPBACK };

static weft_iface_t ifc(const char *name, unsigned flags, const char *addr) {
  weft_iface_t i = {.flags = flags};
  snprintf(i.name, sizeof i.name, "%s", name);
  if (addr) assert_int_equal(weft_sockaddr_parse(addr, &i.addr), 0);
  return i;
}

/* A busy host, in the order getifaddrs gives: addresses grouped by family. */
static int busy_host(weft_iface_t *h) {
  int n = 0;
  h[n++] = ifc("lo", UP | LOOP, "127.0.0.1");
  h[n++] = ifc("docker0", UP, "172.17.0.1");
  h[n++] = ifc("veth1a2b", UP, "169.254.7.1");
  h[n++] = ifc("eth0", UP, "10.0.0.3");
  h[n++] = ifc("eth1", 0, "10.1.0.3"); /* down */
  h[n++] = ifc("ens5", UP, "10.2.0.3");
  h[n++] = ifc("virbr0", UP, "192.168.122.1");
  h[n++] = ifc("ib0", UP, "192.168.1.3");
  h[n++] = ifc("ifb0", 0, NULL); /* down, no address */
  h[n++] = ifc("lo", UP | LOOP, "::1");
  h[n++] = ifc("eth0", UP, "fe80::1");
  h[n++] = ifc("eth0", UP, "fd00::3");
  h[n++] = ifc("ens5", UP, "fe80::5");
  return n;
}

/* The name and address picked, "name addr", or "error". */
static const char *pick(const weft_iface_t *h, int n, const char *spec, int family) {
  static char out[128];
  int k = -1;
  if (weft_ifaces_pick(h, n, spec, family, &k) != WEFT_SUCCESS) return "error";
  assert_true(k >= 0 && k < n);
  char a[WEFT_SOCKADDR_STRLEN];
  snprintf(out, sizeof out, "%s %s", h[k].name, weft_sockaddr_str(&h[k].addr, 0, a, sizeof a));
  return out;
}

static void positions(void **st) {
  (void)st;
  assert_int_equal(weft_ifspec_position("eth,ib", "eth0"), 0);
  assert_int_equal(weft_ifspec_position("eth,ib", "ib1"), 1);
  assert_int_equal(weft_ifspec_position("eth,ib", "ens5"), -1);
  assert_int_equal(weft_ifspec_position("^eth,ib", "ib1"), 1); /* the list, whatever it does */
  assert_int_equal(weft_ifspec_position("=eth0", "eth0"), 0);
  assert_int_equal(weft_ifspec_position("=eth", "eth0"), -1);
  assert_int_equal(weft_ifspec_position("^=eth0,eth1", "eth1"), 1);
  assert_int_equal(weft_ifspec_position("eth,,ib", "ib0"), 1); /* empty entries skipped */
  assert_int_equal(weft_ifspec_position(",ib", "ib0"), 0);
  assert_int_equal(weft_ifspec_position("", "eth0"), -1);
  assert_int_equal(weft_ifspec_position("^", "eth0"), -1);
  assert_int_equal(weft_ifspec_position("ethernet0", "eth0"), -1); /* longer than the name */
}

static void default_rules(void **st) {
  (void)st;
  weft_iface_t h[32];
  int n = busy_host(h);
  assert_string_equal(pick(h, n, "", 0), "ib0 192.168.1.3");   /* ib first */
  assert_string_equal(pick(h, n - 6, "", 0), "eth0 10.0.0.3"); /* no ib0: the first other */
  /* IPv6: eth0's global address, never the link-local one before it */
  assert_string_equal(pick(h, n, "", AF_INET6), "eth0 fd00::3");
  /* IPv4 before IPv6 whatever the order: an IPv6-only interface listed first waits */
  weft_iface_t v6first[] = {ifc("eth0", UP, "fd00::3"), ifc("eth1", UP, "10.1.0.3")};
  assert_string_equal(pick(v6first, 2, "", 0), "eth1 10.1.0.3");
  assert_string_equal(pick(v6first, 1, "", 0), "eth0 fd00::3");
}

static void default_skips_virtual_and_falls_back_to_loopback(void **st) {
  (void)st;
  weft_iface_t h[] = {ifc("lo", UP | LOOP, "127.0.0.1"), ifc("docker0", UP, "172.17.0.1"),
                      ifc("veth9", UP, "169.254.1.1"),   ifc("virbr0", UP, "192.168.122.1"),
                      ifc("eth0", 0, "10.0.0.3"),        ifc("lo", UP | LOOP, "::1")};
  int n = sizeof h / sizeof h[0];
  assert_string_equal(pick(h, n, "", 0), "lo 127.0.0.1");
  assert_string_equal(pick(h, n, "", AF_INET6), "lo ::1");
  assert_string_equal(pick(h, n, "", AF_INET), "lo 127.0.0.1");
  /* a loopback not called lo is still one */
  weft_iface_t odd[] = {ifc("loop7", UP | LOOP, "127.0.0.2"), ifc("docker0", UP, "172.17.0.1")};
  assert_string_equal(pick(odd, 2, "", 0), "loop7 127.0.0.2");
  /* with eth0 up, the loopback is no longer taken */
  h[4].flags = UP;
  assert_string_equal(pick(h, n, "", 0), "eth0 10.0.0.3");
  /* nothing up at all */
  weft_iface_t none[] = {ifc("lo", LOOP, "127.0.0.1"), ifc("docker0", UP, "172.17.0.1")};
  assert_string_equal(pick(none, 2, "", 0), "error");
  assert_non_null(strstr(weft_thread_error(), "no network interface is up"));
}

static void lists(void **st) {
  (void)st;
  weft_iface_t h[32];
  int n = busy_host(h);
  assert_string_equal(pick(h, n, "eth", 0), "eth0 10.0.0.3");     /* eth1 is down */
  assert_string_equal(pick(h, n, "ens,eth", 0), "ens5 10.2.0.3"); /* earlier entry first */
  assert_string_equal(pick(h, n, "eth,ens", 0), "eth0 10.0.0.3");
  assert_string_equal(pick(h, n, "e", 0), "eth0 10.0.0.3"); /* one entry: the system's order */
  assert_string_equal(pick(h, n, "nope,,ib", 0), "ib0 192.168.1.3");
  assert_string_equal(pick(h, n, "docker", 0), "docker0 172.17.0.1"); /* asked for: allowed */
  assert_string_equal(pick(h, n, "lo", 0), "lo 127.0.0.1");
  assert_string_equal(pick(h, n, "lo", AF_INET6), "lo ::1");
  assert_string_equal(pick(h, n, "ens", AF_INET6), "error"); /* link-local only */
  assert_string_equal(pick(h, n, "=eth0", 0), "eth0 10.0.0.3");
  assert_string_equal(pick(h, n, "=eth0", AF_INET6), "eth0 fd00::3");
  assert_string_equal(pick(h, n, "=eth", 0), "error");
  assert_string_equal(pick(h, n, "=eth1", 0), "error"); /* down */
  assert_string_equal(pick(h, n, "=", 0), "error");
}

static void exclusions(void **st) {
  (void)st;
  weft_iface_t h[32];
  int n = busy_host(h);
  assert_string_equal(pick(h, n, "^eth,ib", 0), "ens5 10.2.0.3");
  assert_string_equal(pick(h, n, "^=eth0", 0), "ib0 192.168.1.3");
  assert_string_equal(pick(h, n, "^=eth0,ib0", 0), "ens5 10.2.0.3");
  assert_string_equal(pick(h, n, "^=eth", 0), "ib0 192.168.1.3"); /* no interface is "eth" */
  assert_string_equal(pick(h, n, "^", 0), "ib0 192.168.1.3");
  /* past the ordinary ones: virtual interfaces, which "^" does not exclude by itself */
  assert_string_equal(pick(h, n, "^eth,ib,ens", 0), "docker0 172.17.0.1");
  assert_string_equal(pick(h, n, "^eth,ib,ens,docker,veth,virbr", 0), "lo 127.0.0.1");
  assert_string_equal(pick(h, n, "^eth,ib,ens,docker,veth,virbr,lo", 0), "error");
  assert_string_equal(pick(h, n, "^ib", AF_INET6), "eth0 fd00::3");
}

static void nothing_matches_lists_what_was_seen(void **st) {
  (void)st;
  weft_iface_t h[32];
  int n = busy_host(h);
  assert_int_equal(weft_ifaces_pick(h, n, "eth7", 0, &(int){0}), WEFT_ERR_INVALID_ARG);
  const char *m = weft_thread_error();
  assert_string_equal(m, "WEFT_SOCKET_IFNAME=eth7: matches no interface that is up with an "
                         "address; seen: lo 127.0.0.1, ::1; docker0 172.17.0.1; veth1a2b "
                         "169.254.7.1; eth0 10.0.0.3, fe80::1, fd00::3; eth1 (down) 10.1.0.3; "
                         "ens5 10.2.0.3, fe80::5; virbr0 192.168.122.1; ib0 192.168.1.3; ifb0 "
                         "(down)");
  assert_int_equal(weft_ifaces_pick(h, n, "ens", AF_INET6, &(int){0}), WEFT_ERR_INVALID_ARG);
  assert_non_null(strstr(weft_thread_error(), "WEFT_SOCKET_IFNAME=ens: matches no interface "
                                              "that is up with an IPv6 address other than "
                                              "link-local; seen: lo"));
}

/* Hundreds of interfaces (a host full of containers): the message stays in the error
 * buffer, cut short with "...". */
static void long_listings_are_cut(void **st) {
  (void)st;
  static weft_iface_t h[300];
  for (int i = 0; i < 300; i++) {
    char name[16], addr[32];
    snprintf(name, sizeof name, "veth%05d", i);
    snprintf(addr, sizeof addr, "fd00::%x", i + 1);
    h[i] = ifc(name, UP, addr);
  }
  char small[64];
  weft_ifaces_describe(h, 300, small, sizeof small);
  assert_int_equal(strlen(small), sizeof small - 1);
  assert_string_equal(small + sizeof small - 4, "...");
  assert_int_equal(weft_ifaces_pick(h, 300, "", 0, &(int){0}), WEFT_ERR_INVALID_ARG);
  const char *m = weft_thread_error();
  assert_true(strlen(m) < 1000);
  assert_string_equal(m + strlen(m) - 3, "...");
  assert_non_null(strstr(m, "seen: veth00000 fd00::1; veth00001 fd00::2;"));
}

/* The real host: at least the loopback, and whatever is found can be described. */
static void real_host(void **st) {
  (void)st;
  weft_iface_t *h = NULL;
  int n = 0;
  assert_int_equal(weft_ifaces_list(&h, &n), WEFT_SUCCESS);
  int loop = 0;
  for (int i = 0; i < n; i++)
    loop |= (h[i].flags & WEFT_IF_LOOPBACK) && weft_sockaddr_valid(&h[i].addr);
  assert_true(loop);
  char buf[600];
  weft_ifaces_describe(h, n, buf, sizeof buf);
  assert_non_null(strstr(buf, "lo"));
  int k = -1;
  assert_int_equal(weft_ifaces_pick(h, n, "", 0, &k), WEFT_SUCCESS);
  free(h);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(positions),
      cmocka_unit_test(default_rules),
      cmocka_unit_test(default_skips_virtual_and_falls_back_to_loopback),
      cmocka_unit_test(lists),
      cmocka_unit_test(exclusions),
      cmocka_unit_test(nothing_matches_lists_what_was_seen),
      cmocka_unit_test(long_listings_are_cut),
      cmocka_unit_test(real_host)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
