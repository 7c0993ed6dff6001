/* CUDA IPC mapping of every rank's staging region. Regions are allocated once per
 * communicator and mapped once, so no operation pays for a handle exchange. Ranks in the
 * same process (one process driving several GPUs) use each other's pointers directly,
 * with peer access enabled, since CUDA refuses to open a handle in the process that made it. */
#include "p2p.h"

#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "err.h"

typedef struct {
  cudaIpcMemHandle_t handle;
  uint64_t addr; /* the region in its own process */
  int32_t device;
  int32_t pid;
  char bus[32]; /* PCI bus id: which physical GPU */
} card_t;

/* The region of a rank in this process, reachable from `device` (peer access on). */
static weft_result_t same_process(int device, const card_t *peer, int peer_dev, void **ptr) {
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

#define CUDA_GOTO(call, rc, label, what)                                                           \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess)                                                                         \
      ERR_GOTO(rc, label, WEFT_ERR_SYSTEM, "%s: %s", what, cudaGetErrorString(e_));                \
  } while (0)

weft_result_t weft_p2p_map(weft_bootstrap_t *boot, int rank, int nranks, int device, size_t bytes,
                           weft_p2p_t *out) {
  weft_result_t rc = WEFT_SUCCESS;
  card_t *cards = NULL;
  memset(out, 0, sizeof *out);
  out->device = device;
  out->rank = rank;
  out->nranks = nranks;
  out->bytes = bytes;
  if (nranks > WEFT_DEV_MAX_RANKS)
    return weft_set_error(WEFT_ERR_UNSUPPORTED,
                          "device communicators have at most %d ranks (one host) for now; %d asked",
                          WEFT_DEV_MAX_RANKS, nranks);
  cards = calloc((size_t)nranks, sizeof *cards);
  if (!cards) return weft_set_error(WEFT_ERR_NO_MEMORY, "p2p: out of memory");
  CUDA_GOTO(cudaMalloc((void **)&out->mine, bytes), rc, fail,
            "p2p: cudaMalloc of the staging region");
  CUDA_GOTO(cudaMemset(out->mine, 0, bytes), rc, fail, "p2p: cudaMemset");
  CUDA_GOTO(cudaDeviceSynchronize(), rc, fail, "p2p: cudaDeviceSynchronize");
  CUDA_GOTO(cudaIpcGetMemHandle(&cards[rank].handle, out->mine), rc, fail,
            "p2p: cudaIpcGetMemHandle");
  cards[rank].device = device;
  cards[rank].pid = (int32_t)getpid();
  cards[rank].addr = (uint64_t)(uintptr_t)out->mine;
  CUDA_GOTO(cudaDeviceGetPCIBusId(cards[rank].bus, sizeof cards[rank].bus, device), rc, fail,
            "p2p: cudaDeviceGetPCIBusId");
  CHECK_GOTO(weft_bootstrap_allgather(boot, cards, sizeof *cards), rc, fail);
  for (int p = 0; p < nranks; p++)
    for (int q = p + 1; q < nranks; q++)
      out->gpu_shared |= strcmp(cards[p].bus, cards[q].bus) == 0;
  for (int p = 0; p < nranks; p++) {
    if (p == rank) {
      out->region[p] = out->mine;
      continue;
    }
    int peer_dev = -1;
    if (strcmp(cards[p].bus, cards[rank].bus) != 0) {
      int ok = 0;
      /* the peer's GPU as this process numbers it */
      if (cudaDeviceGetByPCIBusId(&peer_dev, cards[p].bus) != cudaSuccess ||
          cudaDeviceCanAccessPeer(&ok, device, peer_dev) != cudaSuccess || !ok)
        ERR_GOTO(rc, fail, WEFT_ERR_UNSUPPORTED,
                 "p2p: GPU %s (rank %d) cannot map the memory of GPU %s (rank %d); a "
                 "host-staged path is not implemented yet",
                 cards[rank].bus, rank, cards[p].bus, p);
    }
    void *ptr = NULL;
    cudaError_t e = cudaIpcOpenMemHandle(&ptr, cards[p].handle, cudaIpcMemLazyEnablePeerAccess);
    if (e != cudaSuccess && cards[p].pid == cards[rank].pid) {
      /* most likely our own process (a pid alone could repeat across containers) */
      cudaGetLastError();
      CHECK_GOTO(same_process(device, &cards[p], peer_dev, &ptr), rc, fail);
    } else if (e != cudaSuccess) {
      ERR_GOTO(rc, fail, WEFT_ERR_SYSTEM, "p2p: mapping rank %d's region (pid %d): %s", p,
               cards[p].pid, cudaGetErrorString(e));
    } else {
      out->opened[p] = 1;
    }
    out->region[p] = ptr;
  }
  free(cards);
  return WEFT_SUCCESS;
fail:
  free(cards);
  weft_p2p_unmap(out);
  return rc;
}

void weft_p2p_unmap(weft_p2p_t *p) {
  for (int r = 0; r < p->nranks && r < WEFT_DEV_MAX_RANKS; r++)
    if (p->region[r] && p->opened[r]) cudaIpcCloseMemHandle(p->region[r]);
  if (p->mine) cudaFree(p->mine);
  memset(p->region, 0, sizeof p->region);
  memset(p->opened, 0, sizeof p->opened);
  p->mine = NULL;
}
