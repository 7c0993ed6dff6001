/* The proxy device transport, for ranks on other hosts: this rank's kernels write into a
 * mirror of such a rank's region, in this process's pinned memory, and read what it sends
 * from the inbox (host memory too, or the host-staged region itself). The region proxy
 * (src/proxy/region.h), started by the gpu engine, carries both ways over the network. */
#include <stdio.h>
#include <sys/mman.h>

#include "dev_transport.h"
#include "err.h"

#define HINT "lower WEFT_P2P_CHANNELS or WEFT_P2P_CHUNK_BYTES"

static int proxy_reaches(int same_host) { return !same_host; }

/* Zeroed, like a fresh segment; never another process's. */
static weft_result_t private_seg(size_t bytes, const char *what, int r, char **seg) {
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return weft_set_error(WEFT_ERR_NO_MEMORY, "proxy: no memory for %s rank %d (%zu bytes); " HINT,
                          what, r, bytes);
  *seg = p;
  return WEFT_SUCCESS;
}

static weft_result_t mirrors(weft_regions_t *m, const uint8_t *take) {
  for (int s = 0; s < m->nslots; s++) {
    if (!take[s]) continue;
    CHECK(private_seg(m->bytes, "a mirror of the region of", m->slot_rank[s], &m->mirror[s]));
    CHECK(weft_dev_register_host(m->mirror[s], m->bytes, "proxy", m->slot_rank[s],
                                 &m->mirror_registered[s], &m->region[s]));
  }
  if (m->host) return WEFT_SUCCESS; /* remote ranks write into the host-staged region itself */
  CHECK(private_seg(m->bytes, "what comes from other hosts to", m->rank, &m->inbox_seg));
  return weft_dev_register_host(m->inbox_seg, m->bytes, "proxy", m->rank, &m->inbox_registered,
                                &m->inbox);
}

static void proxy_teardown(weft_regions_t *m) {
  for (int s = 0; s < m->nslots; s++)
    weft_dev_free_host(&m->mirror[s], m->bytes, &m->mirror_registered[s], &m->region[s]);
  weft_dev_free_host(&m->inbox_seg, m->bytes, &m->inbox_registered, &m->inbox);
}

static weft_result_t proxy_setup(weft_regions_t *m, const weft_dev_setup_t *in, uint8_t *take) {
  if (!m->spans) return WEFT_SUCCESS; /* one host (the same on every rank) */
  /* pinned memory may run out on one rank only: all agree before any proxy starts */
  char why[512] = "";
  weft_result_t mrc = mirrors(m, take);
  if (mrc != WEFT_SUCCESS) snprintf(why, sizeof why, "%s", weft_thread_error());
  int all = 0, first_bad = -1;
  CHECK(weft_dev_all_have(in, m->rank, mrc == WEFT_SUCCESS, &all, &first_bad));
  if (!all)
    return weft_set_error(mrc != WEFT_SUCCESS ? mrc : WEFT_ERR_SYSTEM,
                          "proxy: rank %d could not set up the host memory for ranks on other "
                          "hosts%s%s",
                          first_bad, why[0] ? ": " : "", why);
  return WEFT_SUCCESS;
}

const weft_dev_transport_t weft_dev_proxy = {
    .size = sizeof(weft_dev_transport_t),
    .name = "proxy",
    .reaches = proxy_reaches,
    .setup = proxy_setup,
    .teardown = proxy_teardown,
};
