/* The host-staged device transport, for GPUs of one host that cannot map each other (or
 * WEFT_P2P_DISABLE): each rank's region is a POSIX shared-memory segment that every process
 * of its host maps and registers with CUDA, so the same kernels read and write it, over PCIe
 * instead of NVLink. It takes the pairs of a host that p2p gave back: all of them. */
#include <string.h>
#include <sys/mman.h>

#include "dev_transport.h"
#include "err.h"
#include "shmseg.h"

#define HINT "lower WEFT_P2P_CHANNELS or WEFT_P2P_CHUNK_BYTES"

static int host_reaches(int same_host) { return same_host; }

static void host_teardown(weft_regions_t *m) {
  for (int s = 0; s < m->nslots; s++)
    weft_dev_free_host(&m->seg[s], m->bytes, &m->registered[s], &m->region[s]);
  if (m->linked) shm_unlink(m->name);
  m->linked = 0;
  m->host = 0;
}

static weft_result_t host_setup(weft_regions_t *m, const weft_dev_setup_t *in, uint8_t *take) {
  weft_result_t rc = WEFT_SUCCESS;
  int rank = m->rank, self = m->self;
  if (!take[self]) return WEFT_SUCCESS; /* p2p holds this host (on every rank alike) */
  m->host = 1;
  m->bytes = in->bytes[2];
  weft_shm_name(m->name, sizeof m->name, in->boot->magic, rank, "-dev");
  CHECK_GOTO(weft_shm_map(m->name, m->bytes, 1, HINT, &m->seg[self]), rc, fail);
  m->linked = 1;
  /* Every segment exists after this barrier; after the second, all are mapped and the names
   * can go, so a crash later leaves nothing in /dev/shm. */
  CHECK_GOTO(weft_bootstrap_barrier(in->boot), rc, fail);
  for (int s = 0; s < m->nslots; s++) {
    if (s == self || !take[s]) continue;
    char name[64];
    weft_shm_name(name, sizeof name, in->boot->magic, m->slot_rank[s], "-dev");
    CHECK_GOTO(weft_shm_map(name, m->bytes, 0, HINT, &m->seg[s]), rc, fail);
  }
  CHECK_GOTO(weft_bootstrap_barrier(in->boot), rc, fail);
  shm_unlink(m->name);
  m->linked = 0;
  for (int s = 0; s < m->nslots; s++)
    if (take[s])
      CHECK_GOTO(weft_dev_register_host(m->seg[s], m->bytes, "host-staged", m->slot_rank[s],
                                        &m->registered[s], &m->region[s]),
                 rc, fail);
  WEFT_INFO(WEFT_SUB_INIT, "rank %d: GPU %d stages through host memory (%zu bytes per rank)", rank,
            m->device, m->bytes);
  return WEFT_SUCCESS;
fail:
  host_teardown(m);
  return rc;
}

const weft_dev_transport_t weft_dev_host_staged = {
    .size = sizeof(weft_dev_transport_t),
    .name = "host-staged",
    .reaches = host_reaches,
    .setup = host_setup,
    .teardown = host_teardown,
};
