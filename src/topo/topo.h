/* What weft knows of the machine it runs on: GPUs and NICs with their NUMA node and PCI path,
 * the NUMA nodes' CPUs, the NIC nearest each GPU, the host identity and the ranks that share
 * it. Discovered from sysfs (any root, so tests read fixture trees) or from hwloc when built
 * with it; the model itself (model.c) is pure data. */
#ifndef WEFT_TOPO_H
#define WEFT_TOPO_H

#include <pthread.h>
#include <sched.h>
#include <stddef.h>

#include "weft.h"

enum {
  WEFT_TOPO_BUSID = 16, /* "0000:1b:00.0" and its NUL */
  WEFT_TOPO_NAME = 32,  /* interface names: "mlx5_0", "ibp24s0", "eno1" */
  WEFT_TOPO_DEPTH = 12, /* PCI hops kept between the host bridge and a device */
  WEFT_TOPO_MAX_DEVS = 128,
  WEFT_TOPO_MAX_NUMA = 64,
  WEFT_TOPO_CPULIST = 256,   /* a node's cpulist text, "0-55,112-167" */
  WEFT_HOSTID_BYTES = 64,    /* a host identity, compared with memcmp across ranks */
  WEFT_HOST_LABEL_BYTES = 32 /* a host's name in messages (weft_topo_host_label) */
};

typedef enum { WEFT_TOPO_GPU = 0, WEFT_TOPO_NIC = 1 } weft_topo_kind_t;

/* How far a GPU is from a NIC, nearest first, in the spirit of NCCL's PIX/PXB/PHB/SYS:
 * traffic between them crosses a PCIe switch only, a host bridge (root complex), the memory
 * of one NUMA node, or the link between sockets. */
typedef enum {
  WEFT_TOPO_SWITCH = 1,
  WEFT_TOPO_HOSTBRIDGE = 2,
  WEFT_TOPO_NUMA = 3,
  WEFT_TOPO_SYS = 4
} weft_topo_level_t;

typedef struct {
  weft_topo_kind_t kind;
  char busid[WEFT_TOPO_BUSID]; /* PCI function, lower case: "0000:1b:00.0" */
  char name[WEFT_TOPO_NAME];   /* NIC: RDMA device ("mlx5_0") or else the netdev; GPU: "" */
  char netdev[WEFT_TOPO_NAME]; /* NIC: its network interface, "" if none was seen */
  char host[WEFT_TOPO_BUSID];  /* host bridge the device hangs from: "pci0000:17" */
  char path[WEFT_TOPO_DEPTH][WEFT_TOPO_BUSID]; /* bridges from the root port down */
  int depth;                                   /* entries of path used */
  int numa;                                    /* NUMA node, -1 unknown */
  int rdma;                                    /* NIC with an RDMA (infiniband class) device */
  int speed_mbps;                              /* NIC port speed, 0 unknown */
} weft_topo_dev_t;

typedef struct {
  int id;                          /* N of nodeN */
  char cpulist[WEFT_TOPO_CPULIST]; /* as sysfs writes it */
} weft_topo_numa_t;

typedef struct {
  const char *source; /* "sysfs" or "hwloc" */
  int ndevs, ngpus, nnics, nnuma;
  weft_topo_dev_t devs[WEFT_TOPO_MAX_DEVS]; /* GPUs then NICs, each sorted by bus id */
  weft_topo_numa_t numa[WEFT_TOPO_MAX_NUMA];
} weft_topo_t;

/* ---- model.c: pure functions of a filled weft_topo_t ---- */

/* The i-th GPU (0..ngpus-1) and NIC (0..nnics-1); NULL past the end. */
const weft_topo_dev_t *weft_topo_gpu(const weft_topo_t *t, int i);
const weft_topo_dev_t *weft_topo_nic(const weft_topo_t *t, int i);

/* Level of the path between a and b (symmetric). */
weft_topo_level_t weft_topo_level(const weft_topo_dev_t *a, const weft_topo_dev_t *b);
/* Bridges a and b share below their host bridge: a finer order within a level. */
int weft_topo_shared_bridges(const weft_topo_dev_t *a, const weft_topo_dev_t *b);

/* For each GPU g, nic[g] = index of its nearest NIC (-1 when there is none). Only RDMA NICs
 * are candidates when the machine has one. Among equally near NICs the faster port wins,
 * then the one fewest GPUs picked so far, so 8 GPUs behind 4 equal NICs get 2 each. */
void weft_topo_nearest_nics(const weft_topo_t *t, int nic[]);

/* Writes dev's PCI path, "pci0000:17/0000:17:01.0/.../0000:1b:00.0", into buf. */
void weft_topo_path_string(const weft_topo_dev_t *dev, char *buf, size_t len);

/* Sorts the devices (GPUs first, each kind by bus id), sets the counts; called by the
 * discoveries once they have added devices. */
void weft_topo_finish(weft_topo_t *t);
/* Appends a device (zeroed, numa -1) of kind; NULL with an error set when the table is full. */
weft_topo_dev_t *weft_topo_add(weft_topo_t *t, weft_topo_kind_t kind);
/* Splits a sysfs device path, "/sys/devices/pci0000:17/0000:17:01.0/.../0000:1b:00.0/net/x",
 * into host bridge, bridges and the device's bus id (the deepest PCI component); 0 on
 * success, -1 when the path holds no PCI device. */
int weft_topo_parse_pci_path(const char *path, weft_topo_dev_t *dev);

/* ---- sysfs.c ---- */

/* Fills t from the sysfs under root ("" or "/" for this machine; a fixture directory holding
 * sys/ in tests). Symbolic links are followed inside root, absolute ones included. */
weft_result_t weft_topo_from_sysfs(const char *root, weft_topo_t *t);

/* ---- hwloc.c (topo_nohwloc.c in builds without hwloc) ---- */

/* 1 when this build reads topologies with hwloc. */
int weft_topo_have_hwloc(void);
/* Fills t from hwloc: this machine's topology, or the XML file xml when it is not NULL.
 * WEFT_ERR_UNSUPPORTED in builds without hwloc. */
weft_result_t weft_topo_from_hwloc(const char *xml, weft_topo_t *t);

/* ---- pin.c ---- */

/* Parses a cpulist ("0-3,8,10-11") into set; WEFT_ERR_INVALID_ARG with a message on bad text
 * or a CPU past what cpu_set_t holds. */
weft_result_t weft_topo_parse_cpulist(const char *text, cpu_set_t *set);
/* Reads root's sys/devices/system/node/node<numa>/cpulist into set. */
weft_result_t weft_topo_numa_cpus(const char *root, int numa, cpu_set_t *set);
/* Binds thread to NUMA node numa's CPUs (those of root's sysfs) among those it may run on now
 * (the launcher's binding); WEFT_ERR_SYSTEM, changing nothing, where they have none in common. */
weft_result_t weft_topo_pin_thread(pthread_t thread, const char *root, int numa);

/* ---- hostid.c ---- */

/* This host's identity: "id:<WEFT_HOSTID>" when set (its first 43 characters), else
 * "<hostname>/<boot id>", NUL padded to WEFT_HOSTID_BYTES; ranks with equal identities share
 * memory. A forced one ends with the machine's key (weft_topo_machine_ranks), so that fake
 * hosts on one machine, or one WEFT_HOSTID set on two, are still told apart by machine. */
void weft_topo_host_identity(char out[WEFT_HOSTID_BYTES]);
/* A 64-bit key of that identity (FNV-1a), for cards that must tell hosts apart. */
uint64_t weft_topo_host_key(void);
/* A host's name for messages, from its identity: WEFT_HOSTID's value, else the host name. */
void weft_topo_host_label(const char id[WEFT_HOSTID_BYTES], char out[WEFT_HOST_LABEL_BYTES]);
/* From every rank's identity (nranks rows of WEFT_HOSTID_BYTES): local_rank[p] = p's index
 * among the ranks of me's host (-1 elsewhere), host_of[p] = the lowest rank on p's host;
 * returns how many ranks share me's host. */
int weft_topo_local_ranks(const char (*hosts)[WEFT_HOSTID_BYTES], int nranks, int me,
                          int *local_rank, int *host_of);
/* How many ranks run on me's machine (one kernel: host name and boot id), whatever hosts
 * WEFT_HOSTID makes of them: the ranks that compete for its cores. */
int weft_topo_machine_ranks(const char (*hosts)[WEFT_HOSTID_BYTES], int nranks, int me);

#endif
