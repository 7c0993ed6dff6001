/* src/topo/pin.c: cpulists as sysfs writes them, the fixture servers' node cpulists, bad text
 * and missing nodes refused with a message; pinning this thread to its own node's CPUs is
 * tried but a machine that forbids it (a cpuset-limited container) only skips; a thread bound
 * to one CPU stays bound to it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <limits.h>
#include <stdlib.h>

#include "err.h"
#include "topo_fixture.h"

static void parses_ranges_and_singles(void **st) {
  (void)st;
  cpu_set_t set;
  assert_int_equal(weft_topo_parse_cpulist("0-3,8,10-11\n", &set), WEFT_SUCCESS);
  assert_int_equal(CPU_COUNT(&set), 7);
  assert_true(CPU_ISSET(0, &set) && CPU_ISSET(3, &set) && CPU_ISSET(8, &set));
  assert_false(CPU_ISSET(4, &set) || CPU_ISSET(9, &set) || CPU_ISSET(12, &set));
  assert_int_equal(weft_topo_parse_cpulist("5", &set), WEFT_SUCCESS);
  assert_int_equal(CPU_COUNT(&set), 1);
  assert_true(CPU_ISSET(5, &set));
}

static void refuses_bad_text(void **st) {
  (void)st;
  cpu_set_t set;
  const char *bad[] = {"", "\n", "3-1", "1,,2", "a", "0-", "1-2x", "99999"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    if (weft_topo_parse_cpulist(bad[i], &set) != WEFT_ERR_INVALID_ARG)
      fail_msg("cpulist \"%s\" was accepted", bad[i]);
    assert_non_null(strstr(weft_thread_error(), "cpulist"));
    assert_int_equal(CPU_COUNT(&set), 0);
  }
}

static void reads_fixture_nodes(void **st) {
  (void)st;
  char dir[PATH_MAX];
  fixture_dir(dir, sizeof dir, "dgx-h100");
  cpu_set_t set;
  assert_int_equal(weft_topo_numa_cpus(dir, 1, &set), WEFT_SUCCESS);
  assert_int_equal(CPU_COUNT(&set), 112); /* 56-111,168-223 */
  assert_true(CPU_ISSET(56, &set) && CPU_ISSET(223, &set));
  assert_false(CPU_ISSET(0, &set) || CPU_ISSET(112, &set));
  assert_int_equal(weft_topo_numa_cpus(dir, 2, &set), WEFT_ERR_SYSTEM);
  assert_non_null(strstr(weft_thread_error(), "node2/cpulist"));
  assert_int_equal(weft_topo_numa_cpus(dir, -1, &set), WEFT_ERR_INVALID_ARG);
  assert_int_equal(weft_topo_pin_thread(pthread_self(), dir, 7), WEFT_ERR_SYSTEM);
}

static void pins_this_thread_to_its_node(void **st) {
  (void)st;
  cpu_set_t before, after, node;
  assert_int_equal(pthread_getaffinity_np(pthread_self(), sizeof before, &before), 0);
  if (weft_topo_numa_cpus(NULL, 0, &node) != WEFT_SUCCESS) skip(); /* no NUMA sysfs here */
  if (weft_topo_pin_thread(pthread_self(), NULL, 0) != WEFT_SUCCESS) {
    assert_non_null(strstr(weft_thread_error(), "NUMA node 0"));
    skip();
  }
  assert_int_equal(pthread_getaffinity_np(pthread_self(), sizeof after, &after), 0);
  cpu_set_t extra;
  CPU_AND(&extra, &after, &node);
  assert_true(CPU_EQUAL(&extra, &after)); /* nothing outside node 0 */
  pthread_setaffinity_np(pthread_self(), sizeof before, &before);
}

/* A thread bound to one CPU (as a launcher binds a rank) stays on it: pinning never widens. */
static void keeps_the_launchers_binding(void **st) {
  (void)st;
  cpu_set_t before, one, after, node;
  assert_int_equal(pthread_getaffinity_np(pthread_self(), sizeof before, &before), 0);
  if (weft_topo_numa_cpus(NULL, 0, &node) != WEFT_SUCCESS) skip();
  int cpu = -1;
  for (int i = 0; i < CPU_SETSIZE && cpu < 0; i++)
    if (CPU_ISSET(i, &before) && CPU_ISSET(i, &node)) cpu = i;
  if (cpu < 0) skip();
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  assert_int_equal(pthread_setaffinity_np(pthread_self(), sizeof one, &one), 0);
  weft_result_t rc = weft_topo_pin_thread(pthread_self(), NULL, 0);
  assert_int_equal(pthread_getaffinity_np(pthread_self(), sizeof after, &after), 0);
  pthread_setaffinity_np(pthread_self(), sizeof before, &before);
  assert_int_equal(rc, WEFT_SUCCESS);
  assert_true(CPU_EQUAL(&after, &one));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(parses_ranges_and_singles),   cmocka_unit_test(refuses_bad_text),
      cmocka_unit_test(reads_fixture_nodes),         cmocka_unit_test(pins_this_thread_to_its_node),
      cmocka_unit_test(keeps_the_launchers_binding),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
