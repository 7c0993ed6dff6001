/* weft-info: prints what weft sees of this machine (or of a fixture): the host identity, NUMA
 * nodes and their CPUs, GPUs and NICs with NUMA node and PCI path, the NIC each GPU would use,
 * whether MPS looks active, and whether hwloc or sysfs told. The transport of each rank pair
 * needs a communicator, so it is not here: WEFT_DEBUG=INFO prints it at init.
 * usage: weft-info [--sysfs | --sysfs-root DIR | --hwloc-xml FILE] */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "err.h"
#include "topo.h"

static const char *level_name(weft_topo_level_t l) {
  switch (l) {
  case WEFT_TOPO_SWITCH: return "same PCIe switch";
  case WEFT_TOPO_HOSTBRIDGE: return "same host bridge";
  case WEFT_TOPO_NUMA: return "same NUMA node";
  default: return "across NUMA nodes";
  }
}

static void print_mps(void) {
  const char *env = getenv("CUDA_MPS_PIPE_DIRECTORY");
  const char *dir = env && env[0] ? env : "/tmp/nvidia-mps";
  char control[4096];
  struct stat st;
  snprintf(control, sizeof control, "%s/control", dir);
  if (stat(control, &st) == 0)
    printf("mps          active: a control pipe in %s%s\n", dir,
           env ? " (CUDA_MPS_PIPE_DIRECTORY)" : "");
  else if (stat(dir, &st) == 0)
    printf("mps          not running: %s exists without a control pipe\n", dir);
  else
    printf("mps          not seen (no %s)\n", dir);
}

static void print_topo(const weft_topo_t *t) {
  char path[WEFT_TOPO_BUSID * (WEFT_TOPO_DEPTH + 3)];
  printf("numa nodes   %d\n", t->nnuma);
  for (int i = 0; i < t->nnuma; i++)
    printf("  node %-3d   cpus %s\n", t->numa[i].id,
           t->numa[i].cpulist[0] ? t->numa[i].cpulist : "(none)");
  int *nic = calloc((size_t)t->ngpus + 1, sizeof *nic);
  if (!nic) return;
  weft_topo_nearest_nics(t, nic);
  printf("gpus         %d\n", t->ngpus);
  for (int g = 0; g < t->ngpus; g++) {
    const weft_topo_dev_t *d = weft_topo_gpu(t, g);
    const weft_topo_dev_t *n = weft_topo_nic(t, nic[g]);
    weft_topo_path_string(d, path, sizeof path);
    printf("  gpu %-3d    %s  numa %-2d  nic %-10s %-18s %s\n", g, d->busid, d->numa,
           n ? n->name : "-", n ? level_name(weft_topo_level(d, n)) : "", path);
  }
  printf("nics         %d\n", t->nnics);
  for (int j = 0; j < t->nnics; j++) {
    const weft_topo_dev_t *d = weft_topo_nic(t, j);
    char speed[32] = "?";
    if (d->speed_mbps) snprintf(speed, sizeof speed, "%d Gb/s", d->speed_mbps / 1000);
    weft_topo_path_string(d, path, sizeof path);
    printf("  nic %-3d    %-10s %-12s %s  numa %-2d  %-8s %-4s %s\n", j, d->name,
           d->netdev[0] ? d->netdev : "-", d->busid, d->numa, speed, d->rdma ? "rdma" : "", path);
  }
  free(nic);
}

int main(int argc, char **argv) {
  const char *root = NULL, *xml = NULL;
  int force_sysfs = 0;
  static const struct option opts[] = {{"sysfs", no_argument, NULL, 's'},
                                       {"sysfs-root", required_argument, NULL, 'r'},
                                       {"hwloc-xml", required_argument, NULL, 'x'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  for (int c; (c = getopt_long(argc, argv, "sr:x:h", opts, NULL)) != -1;) {
    switch (c) {
    case 's': force_sysfs = 1; break;
    case 'r': root = optarg; break;
    case 'x': xml = optarg; break;
    default:
      fprintf(stderr,
              "usage: %s [--sysfs | --sysfs-root DIR | --hwloc-xml FILE]\n"
              "  the topology weft sees: hwloc's when built with it, else sysfs's\n",
              argv[0]);
      return c == 'h' ? 0 : 2;
    }
  }
  char id[WEFT_HOSTID_BYTES + 1] = "", host[256] = "";
  weft_topo_host_identity(id);
  gethostname(host, sizeof host - 1);
  printf("host         %s (identity \"%s\")\n", host, id);

  weft_topo_t *t = calloc(1, sizeof *t);
  if (!t) return 1;
  weft_result_t rc;
  const char *from;
  if (xml || (!root && !force_sysfs && weft_topo_have_hwloc())) {
    rc = weft_topo_from_hwloc(xml, t);
    from = xml ? xml : "this machine";
  } else {
    rc = weft_topo_from_sysfs(root, t);
    from = root ? root : "/sys";
  }
  if (rc != WEFT_SUCCESS && !xml && !root && !force_sysfs) {
    fprintf(stderr, "weft-info: %s; reading sysfs instead\n", weft_thread_error());
    rc = weft_topo_from_sysfs(NULL, t);
    from = "/sys";
  }
  if (rc != WEFT_SUCCESS) {
    fprintf(stderr, "weft-info: %s\n", weft_thread_error());
    free(t);
    return 1;
  }
  printf("topology     %s, from %s (%s)\n", t->source, from,
         weft_topo_have_hwloc() ? "this build has hwloc" : "built without hwloc");
  print_topo(t);
  print_mps();
  printf("pairs        the transport of each rank pair needs a communicator: WEFT_DEBUG=INFO "
         "logs it at init\n");
  free(t);
  return 0;
}
