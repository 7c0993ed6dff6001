/* The topology model: adding and ordering devices, reading a PCI path out of a sysfs device
 * path, how near a GPU is to a NIC, and the choice of each GPU's NIC. Pure functions of the
 * weft_topo_t, shared by the sysfs and hwloc discoveries and tested on fixtures. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "topo.h"

weft_topo_dev_t *weft_topo_add(weft_topo_t *t, weft_topo_kind_t kind) {
  if (t->ndevs >= WEFT_TOPO_MAX_DEVS) {
    weft_set_error(WEFT_ERR_UNSUPPORTED, "topology: more than %d GPUs and NICs",
                   WEFT_TOPO_MAX_DEVS);
    return NULL;
  }
  weft_topo_dev_t *d = &t->devs[t->ndevs++];
  memset(d, 0, sizeof *d);
  d->kind = kind;
  d->numa = -1;
  return d;
}

static int dev_order(const void *pa, const void *pb) {
  const weft_topo_dev_t *a = pa, *b = pb;
  if (a->kind != b->kind) return a->kind < b->kind ? -1 : 1;
  return strcmp(a->busid, b->busid);
}

static int numa_order(const void *pa, const void *pb) {
  const weft_topo_numa_t *a = pa, *b = pb;
  return (a->id > b->id) - (a->id < b->id);
}

void weft_topo_finish(weft_topo_t *t) {
  qsort(t->devs, (size_t)t->ndevs, sizeof t->devs[0], dev_order);
  qsort(t->numa, (size_t)t->nnuma, sizeof t->numa[0], numa_order);
  t->ngpus = t->nnics = 0;
  for (int i = 0; i < t->ndevs; i++) {
    if (t->devs[i].kind == WEFT_TOPO_GPU)
      t->ngpus++;
    else
      t->nnics++;
  }
}

const weft_topo_dev_t *weft_topo_gpu(const weft_topo_t *t, int i) {
  return i >= 0 && i < t->ngpus ? &t->devs[i] : NULL;
}

const weft_topo_dev_t *weft_topo_nic(const weft_topo_t *t, int i) {
  return i >= 0 && i < t->nnics ? &t->devs[t->ngpus + i] : NULL;
}

/* "dddd:bb:dd.f" (the domain may be longer, as VMD's 10000:...) */
static int is_busid(const char *s, size_t n) {
  size_t i = 0;
  while (i < n && isxdigit((unsigned char)s[i]))
    i++;
  if (i < 4 || n != i + 8) return 0;
  const char *r = s + i;
  return r[0] == ':' && isxdigit((unsigned char)r[1]) && isxdigit((unsigned char)r[2]) &&
         r[3] == ':' && isxdigit((unsigned char)r[4]) && isxdigit((unsigned char)r[5]) &&
         r[6] == '.' && r[7] >= '0' && r[7] <= '7';
}

static void copy_lower(char *dst, size_t cap, const char *src, size_t n) {
  if (n >= cap) n = cap - 1;
  for (size_t i = 0; i < n; i++)
    dst[i] = (char)tolower((unsigned char)src[i]);
  dst[n] = 0;
}

int weft_topo_parse_pci_path(const char *path, weft_topo_dev_t *dev) {
  char chain[WEFT_TOPO_DEPTH + 1][WEFT_TOPO_BUSID];
  int n = 0, in_pci = 0;
  dev->host[0] = 0;
  for (const char *p = path; *p;) {
    while (*p == '/')
      p++;
    size_t len = strcspn(p, "/");
    if (!len) break;
    if (!in_pci && len > 3 && strncmp(p, "pci", 3) == 0 && len < WEFT_TOPO_BUSID) {
      copy_lower(dev->host, sizeof dev->host, p, len);
      in_pci = 1;
    } else if (in_pci && is_busid(p, len) && len < WEFT_TOPO_BUSID) {
      /* a path deeper than the table keeps its first bridges and its device */
      int slot = n <= WEFT_TOPO_DEPTH ? n++ : WEFT_TOPO_DEPTH;
      copy_lower(chain[slot], sizeof chain[slot], p, len);
    } else if (in_pci) {
      break; /* net/eth0, infiniband/mlx5_0, virtio0: below the PCI function */
    }
    p += len;
  }
  if (n == 0) return -1;
  snprintf(dev->busid, sizeof dev->busid, "%s", chain[n - 1]);
  dev->depth = n - 1;
  for (int i = 0; i < dev->depth; i++)
    memcpy(dev->path[i], chain[i], WEFT_TOPO_BUSID);
  return 0;
}

int weft_topo_shared_bridges(const weft_topo_dev_t *a, const weft_topo_dev_t *b) {
  if (!a->host[0] || strcmp(a->host, b->host) != 0) return 0;
  int n = 0;
  while (n < a->depth && n < b->depth && strcmp(a->path[n], b->path[n]) == 0)
    n++;
  return n;
}

weft_topo_level_t weft_topo_level(const weft_topo_dev_t *a, const weft_topo_dev_t *b) {
  /* Below one root port there is only a switch's fan-out: sharing any bridge means the
   * traffic turns around in a switch without reaching the root complex. */
  if (a->host[0] && strcmp(a->host, b->host) == 0)
    return weft_topo_shared_bridges(a, b) > 0 ? WEFT_TOPO_SWITCH : WEFT_TOPO_HOSTBRIDGE;
  if (a->numa >= 0 && a->numa == b->numa) return WEFT_TOPO_NUMA;
  return WEFT_TOPO_SYS;
}

/* <0 when NIC x is the better choice for gpu than NIC y */
static int nic_cmp(const weft_topo_dev_t *gpu, const weft_topo_dev_t *x, int xload,
                   const weft_topo_dev_t *y, int yload) {
  int lx = (int)weft_topo_level(gpu, x), ly = (int)weft_topo_level(gpu, y);
  if (lx != ly) return lx - ly;
  int sx = weft_topo_shared_bridges(gpu, x), sy = weft_topo_shared_bridges(gpu, y);
  if (sx != sy) return sy - sx;
  if (x->speed_mbps != y->speed_mbps) return x->speed_mbps > y->speed_mbps ? -1 : 1;
  return xload - yload;
}

void weft_topo_nearest_nics(const weft_topo_t *t, int nic[]) {
  int load[WEFT_TOPO_MAX_DEVS] = {0}, any_rdma = 0;
  for (int j = 0; j < t->nnics; j++)
    any_rdma |= weft_topo_nic(t, j)->rdma;
  for (int g = 0; g < t->ngpus; g++) {
    const weft_topo_dev_t *gpu = weft_topo_gpu(t, g);
    int best = -1;
    for (int j = 0; j < t->nnics; j++) {
      const weft_topo_dev_t *n = weft_topo_nic(t, j);
      /* a management port next to the GPU must not win over the fabric's NICs */
      if (any_rdma && !n->rdma) continue;
      if (best < 0 || nic_cmp(gpu, n, load[j], weft_topo_nic(t, best), load[best]) < 0) best = j;
    }
    nic[g] = best;
    if (best >= 0) load[best]++;
  }
}

void weft_topo_path_string(const weft_topo_dev_t *dev, char *buf, size_t len) {
  size_t n = (size_t)snprintf(buf, len, "%s", dev->host[0] ? dev->host : "?");
  for (int i = 0; i < dev->depth && n < len; i++)
    n += (size_t)snprintf(buf + n, len - n, "/%s", dev->path[i]);
  if (n < len) snprintf(buf + n, len - n, "/%s", dev->busid);
}
