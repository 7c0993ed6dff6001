/* Which ranks share a host: each rank's identity (WEFT_HOSTID, else host name and boot id:
 * a container shares its host's boot id, a rebooted or cloned machine does not), and from
 * all of them the local ranks. The identities are allgathered by the communicator. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "param.h"
#include "topo.h"

void weft_topo_host_identity(char out[WEFT_HOSTID_BYTES]) {
  const char *forced = weft_param_get_str(WEFT_PARAM_HOSTID);
  memset(out, 0, WEFT_HOSTID_BYTES);
  if (forced[0]) {
    snprintf(out, WEFT_HOSTID_BYTES, "id:%.60s", forced);
    return;
  }
  char host[64] = "", boot[40] = "";
  gethostname(host, sizeof host - 1);
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (f) {
    if (!fgets(boot, sizeof boot, f)) boot[0] = 0;
    fclose(f);
  }
  boot[strcspn(boot, "\n")] = 0;
  snprintf(out, WEFT_HOSTID_BYTES, "%.26s/%.36s", host, boot);
}

int weft_topo_local_ranks(const char (*hosts)[WEFT_HOSTID_BYTES], int nranks, int me,
                          int *local_rank, int *host_of) {
  int nlocal = 0;
  for (int p = 0; p < nranks; p++) {
    local_rank[p] = memcmp(hosts[p], hosts[me], WEFT_HOSTID_BYTES) == 0 ? nlocal++ : -1;
    host_of[p] = p;
    for (int q = 0; q < p; q++)
      if (memcmp(hosts[p], hosts[q], WEFT_HOSTID_BYTES) == 0) {
        host_of[p] = host_of[q];
        break;
      }
  }
  return nlocal;
}

void weft_topo_host_label(const char id[WEFT_HOSTID_BYTES], char out[WEFT_HOST_LABEL_BYTES]) {
  if (!strncmp(id, "id:", 3))
    snprintf(out, WEFT_HOST_LABEL_BYTES, "%.*s", WEFT_HOST_LABEL_BYTES - 1, id + 3);
  else
    snprintf(out, WEFT_HOST_LABEL_BYTES, "%.*s", (int)strcspn(id, "/"), id);
}

uint64_t weft_topo_host_key(void) {
  char id[WEFT_HOSTID_BYTES];
  weft_topo_host_identity(id);
  uint64_t h = 1469598103934665603ull;
  for (int i = 0; i < WEFT_HOSTID_BYTES; i++)
    h = (h ^ (uint8_t)id[i]) * 1099511628211ull;
  return h;
}
