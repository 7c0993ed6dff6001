/* src/topo/sysfs.c on the fake sysfs trees of mkfixtures.py: NUMA nodes, GPUs by class and
 * vendor, NICs merged from class/infiniband and class/net with their port speed, links
 * resolved inside the root (absolute ones too), and a root with no sysfs refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <limits.h>
#include <stdlib.h>

#include "err.h"
#include "topo_fixture.h"

static weft_topo_t *load(const char *name) {
  char dir[PATH_MAX];
  fixture_dir(dir, sizeof dir, name);
  weft_topo_t *t = calloc(1, sizeof *t);
  assert_non_null(t);
  if (weft_topo_from_sysfs(dir, t) != WEFT_SUCCESS) fail_msg("%s: %s", dir, weft_thread_error());
  assert_string_equal(t->source, "sysfs");
  return t;
}

static void dgx_h100(void **st) {
  (void)st;
  weft_topo_t *t = load("dgx-h100");
  expect_dgx_h100(t);
  assert_int_equal(weft_topo_nic(t, 0)->speed_mbps, 1000);
  assert_int_equal(weft_topo_nic(t, 1)->speed_mbps, 400000); /* "400 Gb/sec (4X NDR)" */
  free(t);
}

static void hgx_4nic(void **st) {
  (void)st;
  weft_topo_t *t = load("hgx-4nic");
  expect_hgx_4nic(t);
  assert_int_equal(weft_topo_nic(t, 1)->speed_mbps, 200000);
  free(t);
}

static void epyc_4nic(void **st) {
  (void)st;
  weft_topo_t *t = load("epyc-4nic");
  expect_epyc_4nic(t);
  free(t);
}

/* its links are absolute: they must land in the fixture, not in this machine's /sys */
static void one_gpu_with_absolute_links(void **st) {
  (void)st;
  weft_topo_t *t = load("one-gpu");
  expect_one_gpu(t);
  assert_string_equal(weft_topo_gpu(t, 0)->host, "pci0000:00");
  free(t);
}

static void trailing_slash_reads_the_same(void **st) {
  (void)st;
  char dir[PATH_MAX];
  fixture_dir(dir, sizeof dir, "hgx-4nic/");
  weft_topo_t *t = calloc(1, sizeof *t);
  assert_non_null(t);
  assert_int_equal(weft_topo_from_sysfs(dir, t), WEFT_SUCCESS);
  expect_hgx_4nic(t);
  free(t);
}

static void missing_root_is_refused(void **st) {
  (void)st;
  weft_topo_t *t = calloc(1, sizeof *t);
  assert_non_null(t);
  assert_int_equal(weft_topo_from_sysfs("/nonexistent/weft-topo", t), WEFT_ERR_SYSTEM);
  assert_non_null(strstr(weft_thread_error(), "/nonexistent/weft-topo/sys/devices"));
  assert_int_equal(weft_topo_from_sysfs("/", NULL), WEFT_ERR_INVALID_ARG);
  free(t);
}

/* whatever this machine has, reading it works and names its devices */
static void this_machine(void **st) {
  (void)st;
  weft_topo_t *t = calloc(1, sizeof *t);
  assert_non_null(t);
  if (weft_topo_from_sysfs(NULL, t) != WEFT_SUCCESS) {
    free(t);
    skip(); /* a container without /sys */
  }
  for (int i = 0; i < t->ndevs; i++)
    assert_true(strlen(t->devs[i].busid) >= 12);
  free(t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(dgx_h100),
      cmocka_unit_test(hgx_4nic),
      cmocka_unit_test(epyc_4nic),
      cmocka_unit_test(one_gpu_with_absolute_links),
      cmocka_unit_test(trailing_slash_reads_the_same),
      cmocka_unit_test(missing_root_is_refused),
      cmocka_unit_test(this_machine),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
