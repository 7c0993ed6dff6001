/* Topology from sysfs under any root: NUMA nodes and their CPUs (devices/system/node), NVIDIA
 * GPUs by PCI class (bus/pci/devices), NICs from class/infiniband and class/net. Links are
 * resolved inside the root, so a fixture tree reads like the machine it was modelled on. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "err.h"
#include "topo.h"

enum { MAX_LINK_HOPS = 40 };

typedef struct {
  char root[PATH_MAX]; /* "" for this machine, no trailing '/' */
  weft_topo_t *t;
} scan_t;

/* Follows rel (a path under root, "/sys/class/net/eth0/device") as the kernel would if root
 * were "/": an absolute link target starts again at root, ".." stops there. out gets the
 * result relative to root; -1 when a component is missing or links loop. */
static int resolve(const char *root, const char *rel, char *out, size_t cap) {
  char cur[PATH_MAX] = "", rest[PATH_MAX], full[2 * PATH_MAX], target[PATH_MAX];
  if (snprintf(rest, sizeof rest, "%s", rel) >= (int)sizeof rest) return -1;
  for (int hops = 0; rest[0];) {
    char *p = rest;
    while (*p == '/')
      p++;
    size_t len = strcspn(p, "/");
    if (!len) break;
    char comp[NAME_MAX + 1];
    if (len > NAME_MAX) return -1;
    memcpy(comp, p, len);
    comp[len] = 0;
    memmove(rest, p + len, strlen(p + len) + 1);
    if (strcmp(comp, ".") == 0) continue;
    if (strcmp(comp, "..") == 0) {
      char *slash = strrchr(cur, '/');
      if (slash) *slash = 0;
      continue;
    }
    size_t n = strlen(cur);
    if (n + 1 + len >= sizeof cur) return -1;
    snprintf(cur + n, sizeof cur - n, "/%s", comp);
    snprintf(full, sizeof full, "%s%s", root, cur);
    struct stat st;
    if (lstat(full, &st) != 0) return -1;
    if (!S_ISLNK(st.st_mode)) continue;
    if (++hops > MAX_LINK_HOPS) return -1;
    ssize_t tl = readlink(full, target, sizeof target - 1);
    if (tl <= 0) return -1;
    target[tl] = 0;
    cur[n] = 0; /* the link's directory: where a relative target starts */
    if (target[0] == '/') cur[0] = 0;
    char joined[2 * PATH_MAX];
    snprintf(joined, sizeof joined, "%s/%s", target, rest);
    if (strlen(joined) >= sizeof rest) return -1;
    memcpy(rest, joined, strlen(joined) + 1);
  }
  if (snprintf(out, cap, "%s", cur[0] ? cur : "/") >= (int)cap) return -1;
  return 0;
}

/* First line of root/rel/name into buf without its newline; -1 if unreadable. */
static int read_line(const scan_t *s, const char *rel, const char *name, char *buf, size_t cap) {
  char path[3 * PATH_MAX];
  if (snprintf(path, sizeof path, "%s%s/%s", s->root, rel, name) >= (int)sizeof path) return -1;
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  int ok = fgets(buf, (int)cap, f) != NULL;
  fclose(f);
  if (!ok) return -1;
  buf[strcspn(buf, "\n")] = 0;
  return 0;
}

static long read_long(const scan_t *s, const char *rel, const char *name, long dflt) {
  char buf[64], *end;
  if (read_line(s, rel, name, buf, sizeof buf) != 0) return dflt;
  errno = 0;
  long v = strtol(buf, &end, 0);
  return errno || end == buf ? dflt : v;
}

static weft_result_t scan_numa(scan_t *s) {
  char dir[2 * PATH_MAX];
  snprintf(dir, sizeof dir, "%s/sys/devices/system/node", s->root);
  DIR *d = opendir(dir);
  if (!d) return WEFT_SUCCESS; /* a kernel without NUMA: no nodes to name */
  struct dirent *e;
  weft_result_t rc = WEFT_SUCCESS;
  while ((e = readdir(d)) != NULL) {
    int id;
    char tail;
    if (sscanf(e->d_name, "node%d%c", &id, &tail) != 1 || id < 0) continue;
    if (s->t->nnuma >= WEFT_TOPO_MAX_NUMA)
      ERR_GOTO(rc, out, WEFT_ERR_UNSUPPORTED, "topology: more than %d NUMA nodes",
               WEFT_TOPO_MAX_NUMA);
    weft_topo_numa_t *nd = &s->t->numa[s->t->nnuma++];
    nd->id = id;
    char rel[PATH_MAX];
    snprintf(rel, sizeof rel, "/sys/devices/system/node/%s", e->d_name);
    if (read_line(s, rel, "cpulist", nd->cpulist, sizeof nd->cpulist) != 0) nd->cpulist[0] = 0;
  }
out:
  closedir(d);
  return rc;
}

/* dev's bus id, host bridge, bridges and NUMA node from its resolved directory */
static int place(const scan_t *s, const char *devdir, weft_topo_dev_t *dev) {
  if (weft_topo_parse_pci_path(devdir, dev) != 0) return -1;
  dev->numa = (int)read_long(s, devdir, "numa_node", -1);
  if (dev->numa < 0) dev->numa = -1;
  return 0;
}

static weft_result_t scan_gpus(scan_t *s) {
  char dir[2 * PATH_MAX];
  snprintf(dir, sizeof dir, "%s/sys/bus/pci/devices", s->root);
  DIR *d = opendir(dir);
  if (!d) return WEFT_SUCCESS; /* no PCI bus (some containers): no GPUs */
  struct dirent *e;
  weft_result_t rc = WEFT_SUCCESS;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char rel[PATH_MAX], real[PATH_MAX];
    snprintf(rel, sizeof rel, "/sys/bus/pci/devices/%s", e->d_name);
    if (resolve(s->root, rel, real, sizeof real) != 0) continue;
    long cls = read_long(s, real, "class", 0) >> 8, vendor = read_long(s, real, "vendor", 0);
    /* 3D controllers (headless H100s) and VGA ones (workstation cards); NVSwitches are
     * NVIDIA bridges (0x0680) and must not count */
    if (vendor != 0x10de || (cls != 0x0302 && cls != 0x0300)) continue;
    weft_topo_dev_t tmp = {.kind = WEFT_TOPO_GPU, .numa = -1};
    if (place(s, real, &tmp) != 0) continue;
    weft_topo_dev_t *g = weft_topo_add(s->t, WEFT_TOPO_GPU);
    if (!g) ERR_GOTO(rc, out, WEFT_ERR_UNSUPPORTED, "%s", weft_thread_error());
    *g = tmp;
  }
out:
  closedir(d);
  return rc;
}

static int ib_speed_mbps(const scan_t *s, const char *ibdir) {
  char ports[3 * PATH_MAX], rel[2 * PATH_MAX];
  snprintf(ports, sizeof ports, "%s%s/ports", s->root, ibdir);
  DIR *d = opendir(ports);
  if (!d) return 0;
  int best = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char rate[64];
    snprintf(rel, sizeof rel, "%s/ports/%s", ibdir, e->d_name);
    double gbps;
    /* "400 Gb/sec (4X NDR)" */
    if (read_line(s, rel, "rate", rate, sizeof rate) == 0 && sscanf(rate, "%lf", &gbps) == 1 &&
        gbps * 1000 > best)
      best = (int)(gbps * 1000);
  }
  closedir(d);
  return best;
}

static weft_topo_dev_t *nic_by_busid(weft_topo_t *t, const char *busid) {
  for (int i = 0; i < t->ndevs; i++)
    if (t->devs[i].kind == WEFT_TOPO_NIC && strcmp(t->devs[i].busid, busid) == 0)
      return &t->devs[i];
  return NULL;
}

/* class is "infiniband" or "net"; an RDMA device and its netdev share one PCI function and
 * become one NIC, named for the RDMA device (scanned first) */
static weft_result_t scan_nics(scan_t *s, const char *class) {
  char dir[2 * PATH_MAX];
  snprintf(dir, sizeof dir, "%s/sys/class/%s", s->root, class);
  DIR *d = opendir(dir);
  if (!d) return WEFT_SUCCESS;
  int rdma = strcmp(class, "infiniband") == 0;
  struct dirent *e;
  weft_result_t rc = WEFT_SUCCESS;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.' || strlen(e->d_name) >= WEFT_TOPO_NAME) continue;
    char rel[PATH_MAX], real[PATH_MAX], self[PATH_MAX];
    snprintf(rel, sizeof rel, "/sys/class/%s/%s/device", class, e->d_name);
    /* lo, bridges, veths: no device link, or one to something that is not PCI */
    if (resolve(s->root, rel, real, sizeof real) != 0) continue;
    weft_topo_dev_t tmp = {.kind = WEFT_TOPO_NIC, .numa = -1};
    if (place(s, real, &tmp) != 0) continue;
    snprintf(rel, sizeof rel, "/sys/class/%s/%s", class, e->d_name);
    if (resolve(s->root, rel, self, sizeof self) != 0) continue;
    weft_topo_dev_t *n = nic_by_busid(s->t, tmp.busid);
    if (!n) {
      n = weft_topo_add(s->t, WEFT_TOPO_NIC);
      if (!n) ERR_GOTO(rc, out, WEFT_ERR_UNSUPPORTED, "%s", weft_thread_error());
      *n = tmp;
    }
    if (rdma) {
      n->rdma = 1;
      snprintf(n->name, sizeof n->name, "%s", e->d_name);
      int sp = ib_speed_mbps(s, self);
      if (sp > 0) n->speed_mbps = sp;
    } else if (!n->netdev[0]) {
      snprintf(n->netdev, sizeof n->netdev, "%s", e->d_name);
      if (!n->name[0]) snprintf(n->name, sizeof n->name, "%s", e->d_name);
      long sp = read_long(s, self, "speed", -1); /* -1 while the link is down */
      if (!n->speed_mbps && sp > 0 && sp < 100000000) n->speed_mbps = (int)sp;
    }
  }
out:
  closedir(d);
  return rc;
}

weft_result_t weft_topo_from_sysfs(const char *root, weft_topo_t *t) {
  if (!t) return weft_set_error(WEFT_ERR_INVALID_ARG, "weft_topo_from_sysfs: t is NULL");
  scan_t *s = calloc(1, sizeof *s);
  if (!s) return weft_set_error(WEFT_ERR_NO_MEMORY, "topology: out of memory");
  weft_result_t rc = WEFT_SUCCESS;
  if (!root) root = "";
  size_t rl = strlen(root);
  while (rl > 0 && root[rl - 1] == '/')
    rl--;
  if (rl >= sizeof s->root)
    ERR_GOTO(rc, out, WEFT_ERR_INVALID_ARG, "topology: sysfs root too long: %s", root);
  memcpy(s->root, root, rl);
  s->root[rl] = 0;
  memset(t, 0, sizeof *t);
  t->source = "sysfs";
  s->t = t;
  char sys[PATH_MAX + 16];
  snprintf(sys, sizeof sys, "%s/sys/devices", s->root);
  struct stat st;
  if (stat(sys, &st) != 0 || !S_ISDIR(st.st_mode))
    ERR_GOTO(rc, out, WEFT_ERR_SYSTEM, "topology: %s is no sysfs directory", sys);
  CHECK_GOTO(scan_numa(s), rc, out);
  CHECK_GOTO(scan_gpus(s), rc, out);
  CHECK_GOTO(scan_nics(s, "infiniband"), rc, out);
  CHECK_GOTO(scan_nics(s, "net"), rc, out);
  weft_topo_finish(t);
  /* one-node machines write -1 into numa_node: the device is on the only node there is */
  if (t->nnuma == 1)
    for (int i = 0; i < t->ndevs; i++)
      if (t->devs[i].numa < 0) t->devs[i].numa = t->numa[0].id;
out:
  free(s);
  return rc;
}
