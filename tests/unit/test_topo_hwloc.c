/* src/topo/hwloc.c on the hwloc XML of mkfixtures.py's servers: the same GPUs, NICs, NUMA
 * nodes, PCI paths and nearest NICs as the sysfs trees of the same servers give; a file that
 * is not a topology is refused with a message. Built only with hwloc. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <limits.h>
#include <stdlib.h>

#include "err.h"
#include "topo_fixture.h"

static weft_topo_t *load_xml(const char *name) {
  char dir[PATH_MAX], xml[PATH_MAX + 16];
  fixture_dir(dir, sizeof dir, name);
  snprintf(xml, sizeof xml, "%s/hwloc.xml", dir);
  weft_topo_t *t = calloc(1, sizeof *t);
  assert_non_null(t);
  if (weft_topo_from_hwloc(xml, t) != WEFT_SUCCESS) fail_msg("%s: %s", xml, weft_thread_error());
  assert_string_equal(t->source, "hwloc");
  return t;
}

/* hwloc and sysfs agree on every device of the server */
static void same_as_sysfs(const char *name, const weft_topo_t *h) {
  char dir[PATH_MAX];
  fixture_dir(dir, sizeof dir, name);
  weft_topo_t *s = calloc(1, sizeof *s);
  assert_non_null(s);
  assert_int_equal(weft_topo_from_sysfs(dir, s), WEFT_SUCCESS);
  assert_int_equal(h->ndevs, s->ndevs);
  assert_int_equal(h->nnuma, s->nnuma);
  for (int i = 0; i < h->nnuma; i++)
    assert_string_equal(h->numa[i].cpulist, s->numa[i].cpulist);
  for (int i = 0; i < h->ndevs; i++) {
    const weft_topo_dev_t *a = &h->devs[i], *b = &s->devs[i];
    assert_int_equal(a->kind, b->kind);
    assert_string_equal(a->busid, b->busid);
    assert_string_equal(a->host, b->host);
    assert_int_equal(a->numa, b->numa);
    assert_int_equal(a->depth, b->depth);
    for (int k = 0; k < a->depth; k++)
      assert_string_equal(a->path[k], b->path[k]);
    assert_string_equal(a->name, b->name);
    assert_string_equal(a->netdev, b->netdev);
    assert_int_equal(a->rdma, b->rdma);
  }
  free(s);
}

static void dgx_h100(void **st) {
  (void)st;
  weft_topo_t *t = load_xml("dgx-h100");
  expect_dgx_h100(t);
  same_as_sysfs("dgx-h100", t);
  free(t);
}

static void hgx_4nic(void **st) {
  (void)st;
  weft_topo_t *t = load_xml("hgx-4nic");
  expect_hgx_4nic(t);
  same_as_sysfs("hgx-4nic", t);
  free(t);
}

static void epyc_4nic(void **st) {
  (void)st;
  weft_topo_t *t = load_xml("epyc-4nic");
  expect_epyc_4nic(t);
  same_as_sysfs("epyc-4nic", t);
  free(t);
}

static void one_gpu(void **st) {
  (void)st;
  weft_topo_t *t = load_xml("one-gpu");
  expect_one_gpu(t);
  same_as_sysfs("one-gpu", t);
  free(t);
}

static void bad_xml_is_refused(void **st) {
  (void)st;
  char dir[PATH_MAX], path[PATH_MAX + 64];
  fixture_dir(dir, sizeof dir, "one-gpu");
  snprintf(path, sizeof path, "%s/sys/devices/system/node/online", dir);
  weft_topo_t *t = calloc(1, sizeof *t);
  assert_non_null(t);
  assert_true(weft_topo_have_hwloc());
  assert_int_equal(weft_topo_from_hwloc(path, t), WEFT_ERR_SYSTEM);
  assert_non_null(strstr(weft_thread_error(), "hwloc"));
  assert_int_equal(weft_topo_from_hwloc("/nonexistent/weft.xml", t), WEFT_ERR_SYSTEM);
  free(t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(dgx_h100), cmocka_unit_test(hgx_4nic),           cmocka_unit_test(epyc_4nic),
      cmocka_unit_test(one_gpu),  cmocka_unit_test(bad_xml_is_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
