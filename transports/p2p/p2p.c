/* The p2p device transport: the ranks of one host map each other's staging regions on their
 * GPUs, over CUDA IPC handles exchanged on the bootstrap ring, or, within one process, the
 * pointers themselves (CUDA refuses to open a handle in the process that made it). All ranks
 * choose alike: where some pair of a host cannot map each other, it serves no pair and
 * host-staged regions take them all. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dev_transport.h"
#include "err.h"

#define CUDA_GOTO(call, rc, label, what)                                                           \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess)                                                                         \
      ERR_GOTO(rc, label, WEFT_ERR_SYSTEM, "%s: %s", what, cudaGetErrorString(e_));                \
  } while (0)

static int p2p_reaches(int same_host) { return same_host; }

/* The region of a rank in this process, reachable from `device` (peer access on). */
static weft_result_t same_process(int device, const weft_dev_card_t *peer, int peer_dev,
                                  void **ptr) {
  if (peer_dev >= 0 && peer_dev != device) {
    cudaError_t e = cudaDeviceEnablePeerAccess(peer_dev, 0);
    if (e == cudaErrorPeerAccessAlreadyEnabled)
      cudaGetLastError(); /* enabled by another communicator: fine */
    else if (e != cudaSuccess)
      return weft_set_error(WEFT_ERR_SYSTEM, "p2p: enabling access from GPU %d to GPU %d: %s",
                            device, peer_dev, cudaGetErrorString(e));
  }
  *ptr = (void *)(uintptr_t)peer->addr;
  WEFT_INFO(WEFT_SUB_INIT, "p2p: GPU %d reaches the region on GPU %d in this process directly",
            device, peer_dev >= 0 ? peer_dev : device);
  return WEFT_SUCCESS;
}

/* What this rank learns of the peers offered before anything is allocated: 1 where it can
 * map every one's memory, | 2 where every one is on another GPU over a link with native
 * atomics (NVLink, not PCIe). A rank alone on its host, or with peers on other hosts, has no
 * NVLink to them. */
static int32_t reach_peers(const weft_regions_t *m, const weft_dev_setup_t *in, const uint8_t *take,
                           int8_t *peer_dev) {
  const weft_dev_card_t *cards = in->cards;
  int rank = m->rank, device = m->device, linked = !m->spans;
  for (int s = 0; s < m->nslots; s++) {
    int p = m->slot_rank[s];
    peer_dev[s] = -1;
    if (p == rank || !take[s]) continue;
    if (strcmp(cards[p].bus, cards[rank].bus) == 0) { /* one GPU: mapped, but no link */
      linked = 0;
      continue;
    }
    int ok = 0, dev = -1, atomics = 0;
    /* the peer's GPU as this process numbers it */
    if (cudaDeviceGetByPCIBusId(&dev, cards[p].bus) != cudaSuccess ||
        cudaDeviceCanAccessPeer(&ok, device, dev) != cudaSuccess || !ok) {
      cudaGetLastError();
      WEFT_INFO(WEFT_SUB_INIT, "p2p: GPU %s (rank %d) cannot map the memory of GPU %s (rank %d)",
                cards[rank].bus, rank, cards[p].bus, p);
      return 0;
    }
    peer_dev[s] = (int8_t)dev;
    if (cudaDeviceGetP2PAttribute(&atomics, cudaDevP2PAttrNativeAtomicSupported, device, dev) !=
        cudaSuccess) {
      cudaGetLastError();
      atomics = 0;
    }
    if (!atomics) linked = 0;
  }
  return 1 | (linked ? 2 : 0);
}

/* Maps every offered peer's region; 0 (with the reason logged) where some handle does not
 * open, so that the host can stage through host memory. */
static int map_peers(weft_regions_t *m, const weft_dev_setup_t *in, const uint8_t *take,
                     const int8_t *peer_dev) {
  const weft_dev_card_t *cards = in->cards;
  int rank = m->rank, device = m->device;
  for (int s = 0; s < m->nslots; s++) {
    int p = m->slot_rank[s];
    if (p == rank) {
      m->region[s] = m->mine;
      continue;
    }
    if (!take[s]) continue;
    void *ptr = NULL;
    cudaError_t e = cudaIpcOpenMemHandle(&ptr, cards[p].handle, cudaIpcMemLazyEnablePeerAccess);
    if (e != cudaSuccess && cards[p].pid == cards[rank].pid) {
      /* most likely our own process (a pid alone could repeat across containers) */
      cudaGetLastError();
      if (same_process(device, &cards[p], peer_dev[s], &ptr) != WEFT_SUCCESS) {
        WEFT_INFO(WEFT_SUB_INIT, "%s", weft_thread_error());
        return 0;
      }
      m->local_dev[s] = (int8_t)(peer_dev[s] >= 0 ? peer_dev[s] : device);
    } else if (e != cudaSuccess) {
      cudaGetLastError();
      WEFT_INFO(WEFT_SUB_INIT, "p2p: rank %d cannot map rank %d's region (pid %d): %s", rank, p,
                cards[p].pid, cudaGetErrorString(e));
      return 0;
    } else {
      m->opened[s] = 1;
    }
    m->region[s] = ptr;
  }
  return 1;
}

static void p2p_teardown(weft_regions_t *m) {
  for (int s = 0; s < m->nslots; s++) {
    if (m->region[s] && m->opened[s]) cudaIpcCloseMemHandle(m->region[s]);
    if (m->opened[s] || m->region[s] == m->mine || m->local_dev[s] >= 0) m->region[s] = NULL;
    m->opened[s] = 0;
    m->local_dev[s] = -1;
  }
  if (m->mine) cudaFree(m->mine);
  m->any_opened = 0;
  m->mine = NULL;
  m->nvlink = 0;
}

/* Gives every offered slot back, on every rank alike (the caller agreed already). */
static weft_result_t decline(weft_regions_t *m, uint8_t *take, int forced, int first_bad) {
  p2p_teardown(m);
  memset(take, 0, WEFT_REGIONS_MAX_SLOTS);
  if (!forced && m->rank == 0)
    WEFT_WARN(WEFT_SUB_INIT,
              "p2p: rank %d's GPU cannot map every peer's memory (WEFT_DEBUG=INFO says why); "
              "every rank stages through host memory, which is slower than NVLink",
              first_bad);
  return WEFT_SUCCESS;
}

static weft_result_t p2p_setup(weft_regions_t *m, const weft_dev_setup_t *in, uint8_t *take) {
  weft_result_t rc = WEFT_SUCCESS;
  weft_dev_card_t *cards = in->cards;
  int rank = m->rank, forced = 0, reach = 0, mapped = 0, first_bad = -1;
  int8_t peer_dev[WEFT_REGIONS_MAX_SLOTS];
  for (int p = 0; p < in->nranks; p++) /* the same on every rank */
    forced |= cards[p].force_host;
  /* The links are known before the region is allocated, so that it holds only what runs over
   * them (the 128-byte kernel's buffers need NVLink). */
  int32_t mine = forced ? 0 : reach_peers(m, in, take, peer_dev);
  CHECK(weft_dev_all_have(in, rank, mine, &reach, &first_bad));
  if (!reach) return decline(m, take, forced, first_bad);
  m->nvlink = 1;
  for (int p = 0; p < in->nranks; p++)
    if (!(in->words[p] & 2)) m->nvlink = 0;
  m->bytes = in->bytes[m->nvlink ? 0 : 1];
  CUDA_GOTO(cudaMalloc((void **)&m->mine, m->bytes), rc, fail,
            "p2p: cudaMalloc of the staging region");
  CUDA_GOTO(cudaMemset(m->mine, 0, m->bytes), rc, fail, "p2p: cudaMemset");
  CUDA_GOTO(cudaDeviceSynchronize(), rc, fail, "p2p: cudaDeviceSynchronize");
  CUDA_GOTO(cudaIpcGetMemHandle(&cards[rank].handle, m->mine), rc, fail,
            "p2p: cudaIpcGetMemHandle");
  cards[rank].addr = (uint64_t)(uintptr_t)m->mine;
  CHECK_GOTO(weft_bootstrap_allgather(in->boot, cards, sizeof *cards), rc, fail);
  /* bit 2: some handle was opened here; the destroy's barrier is taken where any rank did */
  int32_t got = map_peers(m, in, take, peer_dev);
  for (int s = 0; s < m->nslots; s++)
    got |= m->opened[s] ? 4 : 0;
  CHECK_GOTO(weft_dev_all_have(in, rank, got, &mapped, &first_bad), rc, fail);
  if (!mapped) return decline(m, take, forced, first_bad);
  for (int p = 0; p < in->nranks; p++)
    m->any_opened |= (in->words[p] & 4) != 0;
  return WEFT_SUCCESS;
fail:
  p2p_teardown(m);
  return rc;
}

/* Ranks of this process may still run kernels that write to our region: their GPUs are
 * synchronized here; regions of other processes opened over IPC need the caller's barrier. */
static int p2p_drain(weft_regions_t *m) {
  if (!m->mine) return 0;
  int saved = -1;
  cudaGetDevice(&saved);
  for (int s = 0; s < m->nslots; s++) {
    if (s != m->self && m->local_dev[s] >= 0 && cudaSetDevice(m->local_dev[s]) == cudaSuccess)
      cudaDeviceSynchronize();
  }
  if (saved >= 0) cudaSetDevice(saved);
  return m->any_opened;
}

const weft_dev_transport_t weft_dev_p2p = {
    .size = sizeof(weft_dev_transport_t),
    .name = "p2p",
    .reaches = p2p_reaches,
    .setup = p2p_setup,
    .teardown = p2p_teardown,
    .drain = p2p_drain,
};
