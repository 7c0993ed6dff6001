/* Which ranks share a host: each rank's identity (WEFT_HOSTID, else host name and boot id),
 * and from all of them the local ranks, and the ranks of one machine (fake hosts share its
 * cores). The identities are allgathered by the communicator. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "param.h"
#include "topo.h"

enum { NAME_MAX_CHARS = 43, MACHINE_AT = 47, MACHINE_CHARS = 16 };

static uint64_t fnv(const char *p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++)
    h = (h ^ (uint8_t)p[i]) * 1099511628211ull;
  return h;
}

/* "<hostname>/<boot id>": a container shares its host's boot id, a rebooted or cloned machine
 * does not */
static void machine_identity(char out[WEFT_HOSTID_BYTES]) {
  char host[64] = "", boot[40] = "";
  memset(out, 0, WEFT_HOSTID_BYTES);
  gethostname(host, sizeof host - 1);
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (f) {
    if (!fgets(boot, sizeof boot, f)) boot[0] = 0;
    fclose(f);
  }
  boot[strcspn(boot, "\n")] = 0;
  snprintf(out, WEFT_HOSTID_BYTES, "%.26s/%.36s", host, boot);
}

void weft_topo_host_identity(char out[WEFT_HOSTID_BYTES]) {
  const char *forced = weft_param_get_str(WEFT_PARAM_HOSTID);
  char machine[WEFT_HOSTID_BYTES];
  machine_identity(machine);
  if (!forced[0]) {
    memcpy(out, machine, WEFT_HOSTID_BYTES);
    return;
  }
  memset(out, 0, WEFT_HOSTID_BYTES);
  snprintf(out, MACHINE_AT, "id:%.*s", NAME_MAX_CHARS, forced);
  char key[MACHINE_CHARS + 1];
  snprintf(key, sizeof key, "%016llx", (unsigned long long)fnv(machine, WEFT_HOSTID_BYTES));
  memcpy(out + MACHINE_AT, key, MACHINE_CHARS);
}

/* The machine's key of an identity, as 16 hex digits. */
static void machine_key(const char id[WEFT_HOSTID_BYTES], char key[MACHINE_CHARS + 1]) {
  if (!strncmp(id, "id:", 3))
    snprintf(key, MACHINE_CHARS + 1, "%.*s", MACHINE_CHARS, id + MACHINE_AT);
  else
    snprintf(key, MACHINE_CHARS + 1, "%016llx", (unsigned long long)fnv(id, WEFT_HOSTID_BYTES));
}

int weft_topo_machine_ranks(const char (*hosts)[WEFT_HOSTID_BYTES], int nranks, int me) {
  char mine[MACHINE_CHARS + 1], theirs[MACHINE_CHARS + 1];
  machine_key(hosts[me], mine);
  int n = 0;
  for (int p = 0; p < nranks; p++) {
    machine_key(hosts[p], theirs);
    n += !strcmp(mine, theirs);
  }
  return n;
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
  return fnv(id, WEFT_HOSTID_BYTES);
}
