/* Topology from hwloc (builds with -Dhwloc and libhwloc found): this machine's, or an XML file
 * that lstopo wrote on another one, which is how tests read recorded servers. Fills the same
 * model as sysfs.c: GPUs by PCI class, NICs by their OpenFabrics and network OS devices. */
#include <errno.h>
#include <hwloc.h>
#include <stdio.h>
#include <string.h>

#include "err.h"
#include "topo.h"

#if HWLOC_API_VERSION >= 0x00030000
#define OSDEV_IS(o, t) (((o)->attr->osdev.types & (t)) != 0)
#else
#define OSDEV_IS(o, t) ((o)->attr->osdev.type == (t))
#endif

int weft_topo_have_hwloc(void) { return 1; }

/* host bridge, bridges and NUMA node of a PCI object */
static void place(hwloc_topology_t topo, hwloc_obj_t obj, weft_topo_dev_t *d) {
  struct hwloc_pcidev_attr_s *pa = &obj->attr->pcidev;
  snprintf(d->busid, sizeof d->busid, "%04x:%02x:%02x.%01x", (unsigned)pa->domain, pa->bus, pa->dev,
           pa->func);
  char up[WEFT_TOPO_DEPTH + 8][WEFT_TOPO_BUSID];
  int n = 0;
  for (hwloc_obj_t p = obj->parent; p && p->type == HWLOC_OBJ_BRIDGE; p = p->parent) {
    struct hwloc_bridge_attr_s *ba = &p->attr->bridge;
    if (ba->upstream_type == HWLOC_OBJ_BRIDGE_PCI) {
      if (n < (int)(sizeof up / sizeof up[0]))
        snprintf(up[n++], WEFT_TOPO_BUSID, "%04x:%02x:%02x.%01x", (unsigned)ba->upstream.pci.domain,
                 ba->upstream.pci.bus, ba->upstream.pci.dev, ba->upstream.pci.func);
    } else {
      /* named as sysfs names it: domain and root bus */
      snprintf(d->host, sizeof d->host, "pci%04x:%02x", (unsigned)ba->downstream.pci.domain,
               ba->downstream.pci.secondary_bus);
    }
  }
  /* up[] runs from the device upwards; keep the bridges nearest the root */
  d->depth = n < WEFT_TOPO_DEPTH ? n : WEFT_TOPO_DEPTH;
  for (int i = 0; i < d->depth; i++)
    memcpy(d->path[i], up[n - 1 - i], WEFT_TOPO_BUSID);
  hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(topo, obj);
  d->numa = anc && anc->nodeset && hwloc_bitmap_weight(anc->nodeset) == 1
                ? hwloc_bitmap_first(anc->nodeset)
                : -1;
}

static weft_result_t add_pci(weft_topo_t *t, hwloc_topology_t topo, hwloc_obj_t obj) {
  struct hwloc_pcidev_attr_s *pa = &obj->attr->pcidev;
  if (pa->vendor_id == 0x10de && (pa->class_id == 0x0302 || pa->class_id == 0x0300)) {
    weft_topo_dev_t *g = weft_topo_add(t, WEFT_TOPO_GPU);
    if (!g) return WEFT_ERR_UNSUPPORTED;
    place(topo, obj, g);
    return WEFT_SUCCESS;
  }
  weft_topo_dev_t nic = {.kind = WEFT_TOPO_NIC, .numa = -1};
  int seen = 0;
  for (hwloc_obj_t os = obj->io_first_child; os; os = os->next_sibling) {
    if (os->type != HWLOC_OBJ_OS_DEVICE || !os->name) continue;
    if (OSDEV_IS(os, HWLOC_OBJ_OSDEV_OPENFABRICS)) {
      nic.rdma = 1;
      snprintf(nic.name, sizeof nic.name, "%s", os->name);
      seen = 1;
    } else if (OSDEV_IS(os, HWLOC_OBJ_OSDEV_NETWORK) && !nic.netdev[0]) {
      snprintf(nic.netdev, sizeof nic.netdev, "%s", os->name);
      seen = 1;
    }
  }
  if (!seen) return WEFT_SUCCESS;
  if (!nic.name[0]) memcpy(nic.name, nic.netdev, sizeof nic.name);
  weft_topo_dev_t *n = weft_topo_add(t, WEFT_TOPO_NIC);
  if (!n) return WEFT_ERR_UNSUPPORTED;
  *n = nic;
  place(topo, obj, n);
  return WEFT_SUCCESS;
}

weft_result_t weft_topo_from_hwloc(const char *xml, weft_topo_t *t) {
  if (!t) return weft_set_error(WEFT_ERR_INVALID_ARG, "weft_topo_from_hwloc: t is NULL");
  memset(t, 0, sizeof *t);
  t->source = "hwloc";
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) != 0)
    return weft_set_error(WEFT_ERR_NO_MEMORY, "hwloc: topology init failed");
  weft_result_t rc = WEFT_SUCCESS;
  hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_ALL);
  if (xml && hwloc_topology_set_xml(topo, xml) != 0)
    ERR_GOTO(rc, out, WEFT_ERR_SYSTEM, "hwloc: cannot read %s: %s", xml, strerror(errno));
  if (hwloc_topology_load(topo) != 0)
    ERR_GOTO(rc, out, WEFT_ERR_SYSTEM, "hwloc: loading %s failed: %s", xml ? xml : "the topology",
             strerror(errno));
  for (hwloc_obj_t o = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, NULL); o;
       o = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, o)) {
    if (t->nnuma >= WEFT_TOPO_MAX_NUMA)
      ERR_GOTO(rc, out, WEFT_ERR_UNSUPPORTED, "topology: more than %d NUMA nodes",
               WEFT_TOPO_MAX_NUMA);
    weft_topo_numa_t *nd = &t->numa[t->nnuma++];
    nd->id = (int)o->os_index;
    if (o->cpuset) hwloc_bitmap_list_snprintf(nd->cpulist, sizeof nd->cpulist, o->cpuset);
  }
  for (hwloc_obj_t o = hwloc_get_next_pcidev(topo, NULL); o; o = hwloc_get_next_pcidev(topo, o))
    CHECK_GOTO(add_pci(t, topo, o), rc, out);
  weft_topo_finish(t);
out:
  hwloc_topology_destroy(topo);
  return rc;
}
