/* The servers of tests/unit/fixtures/topo/mkfixtures.py as the topology tests expect them,
 * whichever discovery read them (sysfs trees or hwloc XML): the directory comes from
 * WEFT_TOPO_FIXTURES, which meson sets after running the script. */
#ifndef WEFT_TEST_TOPO_FIXTURE_H
#define WEFT_TEST_TOPO_FIXTURE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "topo.h"

/* OUT/name: a fixture's root (its sys/ tree and hwloc.xml) */
static inline void fixture_dir(char *buf, size_t len, const char *name) {
  const char *dir = getenv("WEFT_TOPO_FIXTURES");
  if (!dir || !dir[0]) fail_msg("WEFT_TOPO_FIXTURES is unset (meson test sets it)");
  snprintf(buf, len, "%s/%s", dir, name);
}

static inline const char *nic_of(const weft_topo_t *t, const int *nic, int g) {
  const weft_topo_dev_t *n = weft_topo_nic(t, nic[g]);
  return n ? n->name : "-";
}

/* 8 GPUs, 4 switches of 2 GPUs + 2 NDR NICs, a management port: GPU g uses mlx5_g */
static inline void expect_dgx_h100(const weft_topo_t *t) {
  assert_int_equal(t->nnuma, 2);
  assert_int_equal(t->numa[0].id, 0);
  assert_string_equal(t->numa[0].cpulist, "0-55,112-167");
  assert_string_equal(t->numa[1].cpulist, "56-111,168-223");
  assert_int_equal(t->ngpus, 8); /* not the BMC's VGA, not the NVSwitches */
  assert_int_equal(t->nnics, 9);
  assert_string_equal(weft_topo_gpu(t, 0)->busid, "0000:18:00.0");
  assert_string_equal(weft_topo_gpu(t, 0)->host, "pci0000:15");
  assert_int_equal(weft_topo_gpu(t, 0)->depth, 3);
  const weft_topo_dev_t *mgmt = weft_topo_nic(t, 0);
  assert_string_equal(mgmt->name, "eno2");
  assert_false(mgmt->rdma);
  const weft_topo_dev_t *ib0 = weft_topo_nic(t, 1);
  assert_string_equal(ib0->name, "mlx5_0");
  assert_string_equal(ib0->netdev, "ibp25s0"); /* its IPoIB netdev: the same NIC */
  assert_true(ib0->rdma);
  int nic[8];
  weft_topo_nearest_nics(t, nic);
  for (int g = 0; g < 8; g++) {
    char want[16];
    snprintf(want, sizeof want, "mlx5_%d", g);
    assert_int_equal(weft_topo_gpu(t, g)->numa, g / 4);
    assert_int_equal(weft_topo_nic(t, g + 1)->numa, g / 4);
    assert_string_equal(nic_of(t, nic, g), want);
    assert_int_equal(weft_topo_level(weft_topo_gpu(t, g), weft_topo_nic(t, nic[g])),
                     WEFT_TOPO_SWITCH);
  }
}

/* 8 GPUs, 4 switches of 2 GPUs + 1 HDR NIC: both GPUs of a switch use its NIC */
static inline void expect_hgx_4nic(const weft_topo_t *t) {
  assert_int_equal(t->nnuma, 2);
  assert_int_equal(t->ngpus, 8);
  assert_int_equal(t->nnics, 5);
  int nic[8];
  weft_topo_nearest_nics(t, nic);
  for (int g = 0; g < 8; g++) {
    char want[16];
    snprintf(want, sizeof want, "mlx5_%d", g / 2);
    assert_int_equal(weft_topo_gpu(t, g)->numa, g / 4);
    assert_string_equal(nic_of(t, nic, g), want);
    assert_int_equal(weft_topo_level(weft_topo_gpu(t, g), weft_topo_nic(t, nic[g])),
                     WEFT_TOPO_SWITCH);
  }
}

/* 8 GPUs and 4 RoCE NICs on their own root ports: each GPU has 2 equally near NICs on its
 * node, and each NIC serves 2 GPUs */
static inline void expect_epyc_4nic(const weft_topo_t *t) {
  assert_int_equal(t->nnuma, 2);
  assert_string_equal(t->numa[1].cpulist, "64-127");
  assert_int_equal(t->ngpus, 8);
  assert_int_equal(t->nnics, 4);
  assert_string_equal(weft_topo_nic(t, 0)->netdev, "ens65f0np0");
  int nic[8], load[4] = {0};
  weft_topo_nearest_nics(t, nic);
  const int want[8] = {0, 1, 0, 1, 2, 3, 2, 3};
  for (int g = 0; g < 8; g++) {
    assert_int_equal(nic[g], want[g]);
    load[nic[g]]++;
    assert_int_equal(weft_topo_level(weft_topo_gpu(t, g), weft_topo_nic(t, nic[g])),
                     WEFT_TOPO_NUMA);
  }
  for (int j = 0; j < 4; j++)
    assert_int_equal(load[j], 2);
}

/* one NUMA node, one VGA-class GPU whose numa_node says -1, no NIC */
static inline void expect_one_gpu(const weft_topo_t *t) {
  assert_int_equal(t->nnuma, 1);
  assert_string_equal(t->numa[0].cpulist, "0-15");
  assert_int_equal(t->ngpus, 1);
  assert_int_equal(t->nnics, 0);
  assert_string_equal(weft_topo_gpu(t, 0)->busid, "0000:01:00.0");
  assert_int_equal(weft_topo_gpu(t, 0)->numa, 0);
  int nic[1];
  weft_topo_nearest_nics(t, nic);
  assert_int_equal(nic[0], -1);
}

#endif
