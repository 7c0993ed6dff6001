/* The device transports of this build and the choice of one per pair of ranks. Adding one is
 * its folder, its weft_dev_transport_t, and a line in the list below: every pair is offered
 * to the transports in list order, each taking what it reaches and can serve. The regions
 * are set up once per communicator, so no operation pays for a handle exchange. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "dev_transport.h"
#include "err.h"
#include "topo.h"

extern const weft_dev_transport_t weft_dev_p2p, weft_dev_host_staged, weft_dev_proxy;
/* p2p first: where it cannot map every pair of a host, host-staged takes them all; ranks on
 * other hosts go through the proxy's mirrors, sized as the local regions are */
static const weft_dev_transport_t *const weft_dev_transports[] = {
    &weft_dev_p2p, &weft_dev_host_staged, &weft_dev_proxy};
enum { NTRANSPORTS = sizeof weft_dev_transports / sizeof weft_dev_transports[0] };

weft_result_t weft_dev_all_have(const weft_dev_setup_t *in, int rank, int32_t mine, int *yes,
                                int *first_bad) {
  in->words[rank] = mine;
  CHECK(weft_bootstrap_allgather(in->boot, in->words, sizeof *in->words));
  *yes = 1;
  *first_bad = -1;
  for (int p = 0; p < in->nranks; p++)
    if (!(in->words[p] & 1)) {
      *yes = 0;
      if (*first_bad < 0) *first_bad = p;
    }
  return WEFT_SUCCESS;
}

weft_result_t weft_dev_register_host(char *seg, size_t bytes, const char *what, int r,
                                     char *registered, char **dev) {
  /* portable: one process may drive several GPUs, each of which must reach every region */
  cudaError_t e = cudaHostRegister(seg, bytes, cudaHostRegisterMapped | cudaHostRegisterPortable);
  if (e != cudaSuccess)
    return weft_set_error(WEFT_ERR_SYSTEM, "%s: registering rank %d's region: %s", what, r,
                          cudaGetErrorString(e));
  *registered = 1;
  e = cudaHostGetDevicePointer((void **)dev, seg, 0);
  if (e != cudaSuccess)
    return weft_set_error(WEFT_ERR_SYSTEM, "%s: device address of rank %d's region: %s", what, r,
                          cudaGetErrorString(e));
  return WEFT_SUCCESS;
}

void weft_dev_free_host(char **seg, size_t bytes, char *registered, char **dev) {
  if (*registered) cudaHostUnregister(*seg);
  if (*seg) {
    munmap(*seg, bytes);
    if (dev) *dev = NULL;
  }
  *seg = NULL;
  *registered = 0;
}

/* Where every rank is: its GPU (by PCI bus id), process and host. */
static weft_result_t describe(weft_regions_t *m, const weft_dev_setup_t *in, int force_host) {
  weft_dev_card_t *me = &in->cards[m->rank];
  me->force_host = force_host != 0;
  me->device = m->device;
  me->pid = (int32_t)getpid();
  me->host = weft_topo_host_key();
  cudaError_t e = cudaDeviceGetPCIBusId(me->bus, sizeof me->bus, m->device);
  if (e != cudaSuccess)
    return weft_set_error(WEFT_ERR_SYSTEM, "device regions: cudaDeviceGetPCIBusId: %s",
                          cudaGetErrorString(e));
  CHECK(weft_bootstrap_allgather(in->boot, in->cards, sizeof *in->cards));
  for (int p = 0; p < in->nranks; p++) { /* the same on every rank */
    m->spans |= in->local_rank[p] < 0;
    for (int q = p + 1; q < in->nranks && !m->gpu_shared; q++)
      m->gpu_shared |=
          in->cards[p].host == in->cards[q].host && strcmp(in->cards[p].bus, in->cards[q].bus) == 0;
  }
  return WEFT_SUCCESS;
}

/* Offers the slots no transport has taken yet to each transport in turn. */
static weft_result_t choose(weft_regions_t *m, const weft_dev_setup_t *in) {
  for (int t = 0; t < NTRANSPORTS; t++) {
    const weft_dev_transport_t *tr = weft_dev_transports[t];
    uint8_t take[WEFT_REGIONS_MAX_SLOTS] = {0};
    for (int s = 0; s < m->nslots; s++)
      take[s] = !m->via[s] && tr->reaches(in->local_rank[m->slot_rank[s]] >= 0);
    CHECK(tr->setup(m, in, take));
    for (int s = 0; s < m->nslots; s++)
      if (take[s]) m->via[s] = tr;
  }
  for (int s = 0; s < m->nslots; s++)
    if (!m->via[s])
      return weft_set_error(WEFT_ERR_UNSUPPORTED,
                            "device regions: rank %d: no device transport reaches rank %d", m->rank,
                            m->slot_rank[s]);
  return WEFT_SUCCESS;
}

weft_result_t weft_regions_map(weft_bootstrap_t *boot, int nranks, const int32_t *slot_rank,
                               int nslots, int self, int device, const size_t bytes[3],
                               int force_host, const int *local_rank, weft_regions_t **res) {
  weft_result_t rc = WEFT_SUCCESS;
  *res = NULL;
  if (nslots < 1 || nslots > WEFT_REGIONS_MAX_SLOTS || self < 0 || self >= nslots)
    return weft_set_error(WEFT_ERR_INVALID_ARG, "device regions: %d slots (self %d)", nslots, self);
  weft_regions_t *m = calloc(1, sizeof *m);
  weft_dev_setup_t in = {.boot = boot, .nranks = nranks, .local_rank = local_rank};
  memcpy(in.bytes, bytes, sizeof in.bytes);
  in.cards = calloc((size_t)nranks, sizeof *in.cards);
  in.words = calloc((size_t)nranks, sizeof *in.words);
  if (!m || !in.cards || !in.words)
    ERR_GOTO(rc, fail, WEFT_ERR_NO_MEMORY, "device regions: out of memory");
  m->device = device;
  m->nslots = nslots;
  m->self = self;
  m->rank = slot_rank[self];
  memcpy(m->slot_rank, slot_rank, sizeof *slot_rank * (size_t)nslots);
  memset(m->local_dev, -1, sizeof m->local_dev);
  CHECK_GOTO(describe(m, &in, force_host), rc, fail);
  CHECK_GOTO(choose(m, &in), rc, fail);
  free(in.cards);
  free(in.words);
  *res = m;
  return WEFT_SUCCESS;
fail:
  free(in.cards);
  free(in.words);
  weft_regions_unmap(m);
  return rc;
}

weft_result_t weft_regions_pin(weft_regions_t *m, const weft_span_t *const *spans,
                               const int *nspans) {
  for (int t = 0; t < NTRANSPORTS; t++)
    if (weft_dev_transports[t]->pin) CHECK(weft_dev_transports[t]->pin(m, spans, nspans));
  return WEFT_SUCCESS;
}

void weft_regions_unmap(weft_regions_t *m) {
  if (!m) return;
  for (int t = NTRANSPORTS - 1; t >= 0; t--) /* the mirrors before the regions they copy */
    weft_dev_transports[t]->teardown(m);
  free(m);
}

int weft_regions_drain(weft_regions_t *m) {
  int any = 0;
  for (int t = 0; t < NTRANSPORTS; t++)
    if (weft_dev_transports[t]->drain) any |= weft_dev_transports[t]->drain(m);
  return any;
}

void *weft_regions_region(const weft_regions_t *m, int s) { return m->region[s]; }
void *weft_regions_inbox(const weft_regions_t *m, int s) {
  return m->via[s] == &weft_dev_proxy && !m->host ? m->inbox : m->region[m->self];
}
size_t weft_regions_bytes(const weft_regions_t *m) { return m->bytes; }
size_t weft_regions_pinned(const weft_regions_t *m, int *runs) {
  *runs = m->npins;
  return m->pinned_bytes;
}
int weft_regions_host_staged(const weft_regions_t *m) { return m->host; }
int weft_regions_spans_hosts(const weft_regions_t *m) { return m->spans; }
char *weft_regions_host_region(const weft_regions_t *m, int s) {
  if (m->via[s] == &weft_dev_proxy) return m->mirror[s];
  if (m->host) return m->seg[s];
  return s == m->self ? m->inbox_seg : NULL;
}
int weft_regions_remote(const weft_regions_t *m, int s) { return m->via[s] == &weft_dev_proxy; }
const char *weft_regions_pair(const weft_regions_t *m, int s) {
  return s == m->self ? "self" : m->via[s] ? m->via[s]->name : "none";
}
int weft_regions_nvlink(const weft_regions_t *m) { return m->nvlink; }
int weft_regions_gpu_shared(const weft_regions_t *m) { return m->gpu_shared; }
int weft_regions_local_device(const weft_regions_t *m, int s) { return m->local_dev[s]; }
int weft_regions_device(const weft_regions_t *m) { return m->device; }
