/* Pinning a thread to the CPUs of one NUMA node, read from sysfs's nodeN/cpulist (under the
 * same root as the rest of the topology, so the parsing is tested on fixtures). Used for the
 * proxy thread that serves a GPU's NIC: its buffers and the NIC's queues live on that node. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "topo.h"

static int parse_cpu(const char **p, long *v) {
  char *end;
  if (**p < '0' || **p > '9') return -1;
  errno = 0;
  *v = strtol(*p, &end, 10);
  if (errno || *v >= CPU_SETSIZE) return -1;
  *p = end;
  return 0;
}

weft_result_t weft_topo_parse_cpulist(const char *text, cpu_set_t *set) {
  if (!text || !set) return weft_set_error(WEFT_ERR_INVALID_ARG, "cpulist: NULL argument");
  CPU_ZERO(set);
  const char *p = text;
  while (*p == ' ')
    p++;
  if (!*p || *p == '\n')
    return weft_set_error(WEFT_ERR_INVALID_ARG, "cpulist \"%s\" names no CPU", text);
  for (;;) {
    long lo, hi;
    if (parse_cpu(&p, &lo) != 0) break;
    hi = lo;
    if (*p == '-') {
      p++;
      if (parse_cpu(&p, &hi) != 0 || hi < lo) break;
    }
    for (long c = lo; c <= hi; c++)
      CPU_SET((int)c, set);
    if (*p == ',') {
      p++;
      continue;
    }
    if (*p == 0 || *p == '\n') return WEFT_SUCCESS;
    break;
  }
  CPU_ZERO(set);
  return weft_set_error(WEFT_ERR_INVALID_ARG,
                        "cpulist \"%s\": bad text at offset %d (or a CPU past %d)", text,
                        (int)(p - text), CPU_SETSIZE - 1);
}

weft_result_t weft_topo_numa_cpus(const char *root, int numa, cpu_set_t *set) {
  char path[PATH_MAX], line[4096];
  if (numa < 0)
    return weft_set_error(WEFT_ERR_INVALID_ARG, "NUMA node %d: no CPUs to pin to", numa);
  snprintf(path, sizeof path, "%s/sys/devices/system/node/node%d/cpulist", root ? root : "", numa);
  FILE *f = fopen(path, "r");
  if (!f)
    return weft_set_error(WEFT_ERR_SYSTEM, "NUMA node %d: %s: %s", numa, path, strerror(errno));
  int ok = fgets(line, sizeof line, f) != NULL;
  fclose(f);
  if (!ok) return weft_set_error(WEFT_ERR_SYSTEM, "NUMA node %d: %s is empty", numa, path);
  /* memory-only nodes (CXL, HBM) have an empty cpulist */
  CHECK(weft_topo_parse_cpulist(line, set));
  return WEFT_SUCCESS;
}

weft_result_t weft_topo_pin_thread(pthread_t thread, const char *root, int numa) {
  cpu_set_t set, now;
  CHECK(weft_topo_numa_cpus(root, numa, &set));
  /* within what the launcher gave (taskset, MPI or Slurm binding): never onto other ranks'
   * cores */
  int err = pthread_getaffinity_np(thread, sizeof now, &now);
  if (err) return weft_set_error(WEFT_ERR_SYSTEM, "reading a thread's CPUs: %s", strerror(err));
  CPU_AND(&set, &set, &now);
  if (CPU_COUNT(&set) == 0)
    return weft_set_error(WEFT_ERR_SYSTEM,
                          "NUMA node %d has none of the %d CPUs this thread may run on", numa,
                          CPU_COUNT(&now));
  err = pthread_setaffinity_np(thread, sizeof set, &set);
  if (err)
    return weft_set_error(WEFT_ERR_SYSTEM, "pinning a thread to NUMA node %d (%d CPUs): %s", numa,
                          CPU_COUNT(&set), strerror(err));
  return WEFT_SUCCESS;
}
