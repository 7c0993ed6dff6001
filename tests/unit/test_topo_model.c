/* src/topo/model.c: PCI paths read out of sysfs device paths, the level between a GPU and a
 * NIC, and the nearest NIC per GPU on hand-built machines: switch beats host bridge beats
 * NUMA node, RDMA NICs beat management ports, faster ports win ties, and equal NICs share
 * the GPUs evenly. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "topo.h"

static void parse_splits_host_bridges_and_device(void **st) {
  (void)st;
  weft_topo_dev_t d = {0};
  assert_int_equal(weft_topo_parse_pci_path("/sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/"
                                            "0000:17:01.0/0000:19:00.0/infiniband/mlx5_0",
                                            &d),
                   0);
  assert_string_equal(d.host, "pci0000:15");
  assert_int_equal(d.depth, 3);
  assert_string_equal(d.path[0], "0000:15:01.0");
  assert_string_equal(d.path[2], "0000:17:01.0");
  assert_string_equal(d.busid, "0000:19:00.0");
  /* a virtio NIC: the PCI function is the parent of virtio0 */
  assert_int_equal(weft_topo_parse_pci_path("/sys/devices/pci0000:00/0000:00:03.0/virtio0", &d), 0);
  assert_string_equal(d.busid, "0000:00:03.0");
  assert_int_equal(d.depth, 0);
  /* upper case and VMD's 5-digit domains */
  assert_int_equal(
      weft_topo_parse_pci_path("/sys/devices/pci0000:00/0000:00:0E.0/10000:E1:00.0", &d), 0);
  assert_string_equal(d.busid, "10000:e1:00.0");
  assert_string_equal(d.path[0], "0000:00:0e.0");
  assert_int_equal(weft_topo_parse_pci_path("/sys/devices/virtual/net/lo", &d), -1);
  assert_int_equal(weft_topo_parse_pci_path("/sys/devices/pci0000:00/not-a-device", &d), -1);
  char buf[128];
  weft_topo_parse_pci_path("/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0", &d);
  weft_topo_path_string(&d, buf, sizeof buf);
  assert_string_equal(buf, "pci0000:00/0000:00:01.0/0000:01:00.0");
}

static void parse_keeps_root_bridges_of_a_deep_path(void **st) {
  (void)st;
  char path[1024] = "/sys/devices/pci0000:00";
  for (int i = 0; i < WEFT_TOPO_DEPTH + 5; i++)
    snprintf(path + strlen(path), sizeof path - strlen(path), "/0000:%02x:00.0", i);
  weft_topo_dev_t d = {0};
  assert_int_equal(weft_topo_parse_pci_path(path, &d), 0);
  assert_int_equal(d.depth, WEFT_TOPO_DEPTH);
  assert_string_equal(d.path[0], "0000:00:00.0");
  assert_string_equal(d.path[WEFT_TOPO_DEPTH - 1], "0000:0b:00.0");
  char want[16];
  snprintf(want, sizeof want, "0000:%02x:00.0", WEFT_TOPO_DEPTH + 4);
  assert_string_equal(d.busid, want);
}

/* a device at sysfs path p on node numa */
static weft_topo_dev_t *add(weft_topo_t *t, weft_topo_kind_t kind, const char *p, int numa,
                            const char *name, int rdma, int speed) {
  weft_topo_dev_t *d = weft_topo_add(t, kind);
  assert_non_null(d);
  assert_int_equal(weft_topo_parse_pci_path(p, d), 0);
  d->numa = numa;
  snprintf(d->name, sizeof d->name, "%s", name);
  d->rdma = rdma;
  d->speed_mbps = speed;
  return d;
}

static void levels_order_switch_hostbridge_numa_sys(void **st) {
  (void)st;
  weft_topo_t *t = calloc(1, sizeof *t);
  assert_non_null(t);
  weft_topo_dev_t *g = add(t, WEFT_TOPO_GPU,
                           "/sys/devices/pci0000:10/0000:10:01.0/0000:11:00.0/"
                           "0000:12:00.0/0000:13:00.0",
                           0, "", 0, 0);
  weft_topo_dev_t *sw = add(t, WEFT_TOPO_NIC,
                            "/sys/devices/pci0000:10/0000:10:01.0/0000:11:00.0/"
                            "0000:12:01.0/0000:14:00.0",
                            0, "sw", 1, 0);
  weft_topo_dev_t *hb =
      add(t, WEFT_TOPO_NIC, "/sys/devices/pci0000:10/0000:10:02.0/0000:20:00.0", 0, "hb", 1, 0);
  weft_topo_dev_t *nn =
      add(t, WEFT_TOPO_NIC, "/sys/devices/pci0000:30/0000:30:01.0/0000:31:00.0", 0, "numa", 1, 0);
  weft_topo_dev_t *far =
      add(t, WEFT_TOPO_NIC, "/sys/devices/pci0000:90/0000:90:01.0/0000:91:00.0", 1, "far", 1, 0);
  assert_int_equal(weft_topo_level(g, sw), WEFT_TOPO_SWITCH);
  assert_int_equal(weft_topo_level(sw, g), WEFT_TOPO_SWITCH);
  assert_int_equal(weft_topo_shared_bridges(g, sw), 2);
  assert_int_equal(weft_topo_level(g, hb), WEFT_TOPO_HOSTBRIDGE);
  assert_int_equal(weft_topo_level(g, nn), WEFT_TOPO_NUMA);
  assert_int_equal(weft_topo_level(g, far), WEFT_TOPO_SYS);
  far->numa = -1; /* unknown nodes are never "the same" */
  g->numa = -1;
  assert_int_equal(weft_topo_level(g, far), WEFT_TOPO_SYS);
  g->numa = 0;
  weft_topo_finish(t);
  assert_int_equal(t->ngpus, 1);
  assert_int_equal(t->nnics, 4);
  /* removing the nearer ones in turn moves the choice outwards */
  int nic[1];
  const char *want[] = {"sw", "hb", "numa", "far"};
  for (int k = 0; k < 4; k++) {
    weft_topo_nearest_nics(t, nic);
    assert_true(nic[0] >= 0);
    assert_string_equal(weft_topo_nic(t, nic[0])->name, want[k]);
    weft_topo_dev_t *chosen = &t->devs[t->ngpus + nic[0]];
    chosen->rdma = 0; /* no longer a candidate while others are RDMA */
  }
  free(t);
}

static void rdma_beats_management_port_and_speed_breaks_ties(void **st) {
  (void)st;
  weft_topo_t *t = calloc(1, sizeof *t);
  assert_non_null(t);
  add(t, WEFT_TOPO_GPU, "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0", 0, "", 0, 0);
  /* the 1G port shares the GPU's host bridge; the RDMA NICs are only on its NUMA node */
  add(t, WEFT_TOPO_NIC, "/sys/devices/pci0000:00/0000:00:02.0/0000:02:00.0", 0, "eno1", 0, 1000);
  add(t, WEFT_TOPO_NIC, "/sys/devices/pci0000:40/0000:40:01.0/0000:41:00.0", 0, "slow", 1, 100000);
  add(t, WEFT_TOPO_NIC, "/sys/devices/pci0000:40/0000:40:02.0/0000:42:00.0", 0, "fast", 1, 400000);
  weft_topo_finish(t);
  int nic[1];
  weft_topo_nearest_nics(t, nic);
  assert_string_equal(weft_topo_nic(t, nic[0])->name, "fast");
  /* without RDMA NICs the plain port nearest the GPU is the one */
  for (int j = 0; j < t->nnics; j++)
    t->devs[t->ngpus + j].rdma = 0;
  weft_topo_nearest_nics(t, nic);
  assert_string_equal(weft_topo_nic(t, nic[0])->name, "eno1");
  free(t);
}

static void equal_nics_share_gpus_evenly(void **st) {
  (void)st;
  for (int nnics = 1; nnics <= 8; nnics *= 2) {
    weft_topo_t *t = calloc(1, sizeof *t);
    assert_non_null(t);
    char p[128];
    for (int g = 0; g < 8; g++) {
      snprintf(p, sizeof p, "/sys/devices/pci0000:%02x/0000:%02x:01.0/0000:%02x:00.0", g * 8, g * 8,
               g * 8 + 1);
      add(t, WEFT_TOPO_GPU, p, 0, "", 0, 0);
    }
    for (int j = 0; j < nnics; j++) {
      snprintf(p, sizeof p, "/sys/devices/pci0000:%02x/0000:%02x:01.0/0000:%02x:00.0", 0x80 + j * 8,
               0x80 + j * 8, 0x81 + j * 8);
      char name[16];
      snprintf(name, sizeof name, "mlx5_%d", j);
      add(t, WEFT_TOPO_NIC, p, 0, name, 1, 200000);
    }
    weft_topo_finish(t);
    int nic[8], load[8] = {0};
    weft_topo_nearest_nics(t, nic);
    for (int g = 0; g < 8; g++) {
      assert_in_range(nic[g], 0, nnics - 1);
      load[nic[g]]++;
    }
    for (int j = 0; j < nnics; j++)
      assert_int_equal(load[j], 8 / nnics);
    free(t);
  }
}

static void no_nic_gives_minus_one_and_full_table_refuses(void **st) {
  (void)st;
  weft_topo_t *t = calloc(1, sizeof *t);
  assert_non_null(t);
  add(t, WEFT_TOPO_GPU, "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0", 0, "", 0, 0);
  weft_topo_finish(t);
  int nic[1] = {7};
  weft_topo_nearest_nics(t, nic);
  assert_int_equal(nic[0], -1);
  assert_null(weft_topo_nic(t, 0));
  assert_null(weft_topo_gpu(t, 1));
  while (t->ndevs < WEFT_TOPO_MAX_DEVS)
    assert_non_null(weft_topo_add(t, WEFT_TOPO_NIC));
  assert_null(weft_topo_add(t, WEFT_TOPO_NIC));
  assert_non_null(strstr(weft_thread_error(), "more than"));
  free(t);
}

static void finish_sorts_gpus_first_by_bus_id(void **st) {
  (void)st;
  weft_topo_t *t = calloc(1, sizeof *t);
  assert_non_null(t);
  add(t, WEFT_TOPO_NIC, "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0", 0, "n", 1, 0);
  add(t, WEFT_TOPO_GPU, "/sys/devices/pci0000:00/0000:00:03.0/0000:03:00.0", 0, "", 0, 0);
  add(t, WEFT_TOPO_GPU, "/sys/devices/pci0000:00/0000:00:02.0/0000:02:00.0", 0, "", 0, 0);
  t->numa[0].id = 1;
  t->numa[1].id = 0;
  t->nnuma = 2;
  weft_topo_finish(t);
  assert_int_equal(t->ngpus, 2);
  assert_int_equal(t->nnics, 1);
  assert_string_equal(weft_topo_gpu(t, 0)->busid, "0000:02:00.0");
  assert_string_equal(weft_topo_gpu(t, 1)->busid, "0000:03:00.0");
  assert_string_equal(weft_topo_nic(t, 0)->busid, "0000:01:00.0");
  assert_int_equal(t->numa[0].id, 0);
  free(t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(parse_splits_host_bridges_and_device),
      cmocka_unit_test(parse_keeps_root_bridges_of_a_deep_path),
      cmocka_unit_test(levels_order_switch_hostbridge_numa_sys),
      cmocka_unit_test(rdma_beats_management_port_and_speed_breaks_ties),
      cmocka_unit_test(equal_nics_share_gpus_evenly),
      cmocka_unit_test(no_nic_gives_minus_one_and_full_table_refuses),
      cmocka_unit_test(finish_sorts_gpus_first_by_bus_id),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
