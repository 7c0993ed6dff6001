/* weft-info: prints what weft sees of this machine (or of a fixture): the host identity, NUMA
 * nodes and their CPUs, GPUs and NICs with NUMA node and PCI path, the NIC each GPU would use,
 * whether MPS looks active, and whether hwloc or sysfs told. With --ranks N it also starts N
 * local ranks (--hosts K: as K fake hosts; --gpus G: device communicators, rank r on GPU
 * r % G) and prints how each reaches every other (weft_comm_peer_path).
 * usage: weft-info [--sysfs | --sysfs-root DIR | --hwloc-xml FILE] [--ranks N [--hosts K]
 *                  [--gpus G]] */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "err.h"
#include "launch.h"
#include "topo.h"

typedef struct {
  int gpus;
} pairs_arg_t;

/* One rank: its communicator, then its row of paths, printed in rank order (a barrier
 * between rows). */
static int print_pairs(int rank, int n, weft_unique_id_t id, void *argp) {
  const pairs_arg_t *a = argp;
  weft_config_t cfg = WEFT_CONFIG_INIT;
  if (a->gpus > 0) cfg.device = rank % a->gpus;
  weft_comm_t c;
  if (weft_comm_init(&c, n, id, rank, &cfg) != WEFT_SUCCESS) {
    printf("rank %d: init: %s\n", rank, weft_get_last_error(NULL));
    return 1;
  }
  int bad = 0;
  for (int k = 0; k < n && !bad; k++) {
    if (k == rank) {
      char line[4096], path[64];
      int used = snprintf(line, sizeof line, "  rank %-3d  ", rank);
      for (int p = 0; p < n && !bad && used < (int)sizeof line; p++) {
        bad = weft_comm_peer_path(c, p, path, sizeof path) != WEFT_SUCCESS;
        used +=
            snprintf(line + used, sizeof line - (size_t)used, "%s%d %s", p ? "; " : "", p, path);
      }
      printf("%s\n", bad ? weft_get_last_error(NULL) : line);
      fflush(stdout);
    }
    bad |= weft_barrier(c, NULL) != WEFT_SUCCESS;
  }
  weft_comm_destroy(c);
  return bad;
}

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
  int force_sysfs = 0, ranks = 0, hosts = 0;
  pairs_arg_t pa = {0};
  static const struct option opts[] = {{"sysfs", no_argument, NULL, 's'},
                                       {"sysfs-root", required_argument, NULL, 'r'},
                                       {"hwloc-xml", required_argument, NULL, 'x'},
                                       {"ranks", required_argument, NULL, 'n'},
                                       {"hosts", required_argument, NULL, 'k'},
                                       {"gpus", required_argument, NULL, 'g'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  for (int c; (c = getopt_long(argc, argv, "sr:x:n:k:g:h", opts, NULL)) != -1;) {
    switch (c) {
    case 's': force_sysfs = 1; break;
    case 'r': root = optarg; break;
    case 'x': xml = optarg; break;
    case 'n': ranks = atoi(optarg); break;
    case 'k': hosts = atoi(optarg); break;
    case 'g': pa.gpus = atoi(optarg); break;
    default:
      fprintf(stderr,
              "usage: %s [--sysfs | --sysfs-root DIR | --hwloc-xml FILE] [--ranks N [--hosts K] "
              "[--gpus G]]\n"
              "  the topology weft sees: hwloc's when built with it, else sysfs's; with --ranks,\n"
              "  N local ranks (as K fake hosts; on G GPUs) and how each reaches every other\n",
              argv[0]);
      return c == 'h' ? 0 : 2;
    }
  }
  if (ranks < 0 || hosts < 0 || pa.gpus < 0 || (ranks == 0 && (hosts || pa.gpus)) || ranks == 1) {
    fprintf(stderr, "weft-info: --ranks takes 2 or more; --hosts and --gpus need --ranks\n");
    return 2;
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
  free(t);
  if (!ranks) {
    printf("pairs        --ranks N starts local ranks and prints how each reaches the others\n");
    return 0;
  }
  char k[16];
  snprintf(k, sizeof k, "%d", hosts);
  if (hosts) setenv("WEFT_TEST_HOSTS", k, 1); /* launch_fake_hosts: rank r on host r % K */
  printf("pairs        %d ranks%s%s, %s buffers: host transport, device path\n", ranks,
         hosts ? " on fake hosts " : "", hosts ? k : "", pa.gpus ? "device" : "host");
  fflush(stdout);
  return launch_local(ranks, print_pairs, &pa, 120) != 0;
}
