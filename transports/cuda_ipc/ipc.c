/* CUDA IPC mapping of every rank's staging region. Regions are allocated once per
 * communicator and mapped once, so no operation pays for a handle exchange. Ranks in the
 * same process (one process driving several GPUs) use each other's pointers directly,
 * with peer access enabled, since CUDA refuses to open a handle in the process that made it.
 * Where some pair of one host cannot map each other, every rank falls back to host-staged
 * regions. Ranks on other hosts get mirrors either way (hoststage.c). */
#include "ipc_state.h"

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "err.h"
#include "topo.h"

typedef struct {
  cudaIpcMemHandle_t handle;
  uint64_t addr; /* the region in its own process */
  int32_t device;
  int32_t pid;
  int32_t force_host; /* WEFT_P2P_DISABLE set on this rank */
  char bus[32];       /* PCI bus id: which physical GPU (of its host) */
  uint64_t host;      /* its host's key (weft_topo_host_key) */
} card_t;

/* The region of a rank in this process, reachable from `device` (peer access on). */
static weft_result_t same_process(int device, const card_t *peer, int peer_dev, void **ptr) {
  if (peer_dev >= 0 && peer_dev != device) {
    cudaError_t e = cudaDeviceEnablePeerAccess(peer_dev, 0);
    if (e == cudaErrorPeerAccessAlreadyEnabled)
      cudaGetLastError(); /* enabled by another communicator: fine */
    else if (e != cudaSuccess)
      return weft_set_error(WEFT_ERR_SYSTEM, "cuda_ipc: enabling access from GPU %d to GPU %d: %s",
                            device, peer_dev, cudaGetErrorString(e));
  }
  *ptr = (void *)(uintptr_t)peer->addr;
  WEFT_INFO(WEFT_SUB_INIT, "cuda_ipc: GPU %d reaches the region on GPU %d in this process directly",
            device, peer_dev >= 0 ? peer_dev : device);
  return WEFT_SUCCESS;
}

#define CUDA_GOTO(call, rc, label, what)                                                           \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess)                                                                         \
      ERR_GOTO(rc, label, WEFT_ERR_SYSTEM, "%s: %s", what, cudaGetErrorString(e_));                \
  } while (0)

/* What this rank learns of its peers before anything is allocated: 1 where it can map every
 * peer's memory, | 2 where every peer is on another GPU over a link with native atomics
 * (NVLink, not PCIe). */
static int32_t reach_peers(const card_t *cards, const weft_ipc_t *out, const int *local_rank,
                           int8_t *peer_dev) {
  int rank = out->rank, device = out->device, linked = 1;
  for (int s = 0; s < out->nslots; s++) {
    int p = out->slot_rank[s];
    peer_dev[s] = -1;
    if (p == rank) continue;
    if (local_rank[p] < 0) { /* the proxy's: a mirror, in host memory */
      linked = 0;
      continue;
    }
    if (strcmp(cards[p].bus, cards[rank].bus) == 0) {
      linked = 0;
      continue;
    }
    int ok = 0, dev = -1, atomics = 0;
    /* the peer's GPU as this process numbers it */
    if (cudaDeviceGetByPCIBusId(&dev, cards[p].bus) != cudaSuccess ||
        cudaDeviceCanAccessPeer(&ok, device, dev) != cudaSuccess || !ok) {
      cudaGetLastError();
      WEFT_INFO(WEFT_SUB_INIT,
                "cuda_ipc: GPU %s (rank %d) cannot map the memory of GPU %s (rank %d)",
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

/* Maps every peer's region; 0 (with the reason logged) where some handle does not open, so
 * that the communicator can stage through host memory. */
static int map_peers(const card_t *cards, const int8_t *peer_dev, const int *local_rank,
                     weft_ipc_t *out) {
  int rank = out->rank, device = out->device;
  for (int s = 0; s < out->nslots; s++) {
    int p = out->slot_rank[s];
    if (p == rank) {
      out->region[s] = out->mine;
      continue;
    }
    if (local_rank[p] < 0) continue;
    void *ptr = NULL;
    cudaError_t e = cudaIpcOpenMemHandle(&ptr, cards[p].handle, cudaIpcMemLazyEnablePeerAccess);
    if (e != cudaSuccess && cards[p].pid == cards[rank].pid) {
      /* most likely our own process (a pid alone could repeat across containers) */
      cudaGetLastError();
      if (same_process(device, &cards[p], peer_dev[s], &ptr) != WEFT_SUCCESS) {
        WEFT_INFO(WEFT_SUB_INIT, "%s", weft_thread_error());
        return 0;
      }
      out->local_dev[s] = (int8_t)(peer_dev[s] >= 0 ? peer_dev[s] : device);
    } else if (e != cudaSuccess) {
      cudaGetLastError();
      WEFT_INFO(WEFT_SUB_INIT, "cuda_ipc: rank %d cannot map rank %d's region (pid %d): %s", rank,
                p, cards[p].pid, cudaGetErrorString(e));
      return 0;
    } else {
      out->opened[s] = 1;
    }
    out->region[s] = ptr;
  }
  return 1;
}

/* *yes: every rank's word, gathered into words, has bit 0 set; *first_bad the first that
 * has not. */
static weft_result_t all_have(weft_bootstrap_t *boot, int32_t *words, int rank, int nranks,
                              int32_t mine, int *yes, int *first_bad) {
  words[rank] = mine;
  CHECK(weft_bootstrap_allgather(boot, words, sizeof *words));
  *yes = 1;
  *first_bad = -1;
  for (int p = 0; p < nranks; p++)
    if (!(words[p] & 1)) {
      *yes = 0;
      if (*first_bad < 0) *first_bad = p;
    }
  return WEFT_SUCCESS;
}

/* Peer-mapped device regions, the IPC handles and allocation undone. */
static void unmap_device(weft_ipc_t *p) {
  for (int s = 0; s < p->nslots; s++)
    if (p->region[s] && p->opened[s]) cudaIpcCloseMemHandle(p->region[s]);
  if (p->mine) cudaFree(p->mine);
  memset(p->region, 0, sizeof p->region);
  memset(p->opened, 0, sizeof p->opened);
  p->any_opened = 0;
  p->mine = NULL;
}

weft_result_t weft_ipc_map(weft_bootstrap_t *boot, int nranks, const int32_t *slot_rank, int nslots,
                           int self, int device, const size_t bytes[3], int force_host,
                           const int *local_rank, weft_ipc_t **res) {
  weft_result_t rc = WEFT_SUCCESS;
  card_t *cards = NULL;
  int32_t *words = NULL;
  int8_t peer_dev[WEFT_IPC_MAX_RANKS];
  *res = NULL;
  if (nslots < 1 || nslots > WEFT_IPC_MAX_RANKS || self < 0 || self >= nslots)
    return weft_set_error(WEFT_ERR_INVALID_ARG, "cuda_ipc: %d slots (self %d)", nslots, self);
  weft_ipc_t *out = calloc(1, sizeof *out);
  if (!out) return weft_set_error(WEFT_ERR_NO_MEMORY, "cuda_ipc: out of memory");
  out->device = device;
  out->nslots = nslots;
  out->self = self;
  out->rank = slot_rank[self];
  memcpy(out->slot_rank, slot_rank, sizeof *slot_rank * (size_t)nslots);
  int rank = out->rank;
  memset(out->local_dev, -1, sizeof out->local_dev);
  cards = calloc((size_t)nranks, sizeof *cards);
  words = calloc((size_t)nranks, sizeof *words);
  if (!cards || !words) ERR_GOTO(rc, fail, WEFT_ERR_NO_MEMORY, "cuda_ipc: out of memory");
  cards[rank].force_host = force_host != 0;
  cards[rank].device = device;
  cards[rank].pid = (int32_t)getpid();
  cards[rank].host = weft_topo_host_key();
  CUDA_GOTO(cudaDeviceGetPCIBusId(cards[rank].bus, sizeof cards[rank].bus, device), rc, fail,
            "cuda_ipc: cudaDeviceGetPCIBusId");
  CHECK_GOTO(weft_bootstrap_allgather(boot, cards, sizeof *cards), rc, fail);
  int forced = 0;
  for (int p = 0; p < nranks; p++) { /* the same on every rank */
    forced |= cards[p].force_host;
    out->spans |= local_rank[p] < 0;
    for (int q = p + 1; q < nranks && !out->gpu_shared; q++)
      out->gpu_shared |= cards[p].host == cards[q].host && strcmp(cards[p].bus, cards[q].bus) == 0;
  }
  /* All ranks must choose alike: one pair of a host that cannot map each other stages
   * everyone. The links are known before the region is allocated, so that it holds only what
   * runs over them (the 128-byte kernel's buffers need NVLink). */
  int reach = 0, first_bad = -1;
  int32_t mine = forced ? 0 : reach_peers(cards, out, local_rank, peer_dev);
  CHECK_GOTO(all_have(boot, words, rank, nranks, mine, &reach, &first_bad), rc, fail);
  out->nvlink = reach;
  for (int p = 0; p < nranks; p++)
    if (!(words[p] & 2)) out->nvlink = 0;
  int mapped = 0;
  if (reach) {
    out->bytes = bytes[out->nvlink ? 0 : 1];
    CUDA_GOTO(cudaMalloc((void **)&out->mine, out->bytes), rc, fail,
              "cuda_ipc: cudaMalloc of the staging region");
    CUDA_GOTO(cudaMemset(out->mine, 0, out->bytes), rc, fail, "cuda_ipc: cudaMemset");
    CUDA_GOTO(cudaDeviceSynchronize(), rc, fail, "cuda_ipc: cudaDeviceSynchronize");
    CUDA_GOTO(cudaIpcGetMemHandle(&cards[rank].handle, out->mine), rc, fail,
              "cuda_ipc: cudaIpcGetMemHandle");
    cards[rank].addr = (uint64_t)(uintptr_t)out->mine;
    CHECK_GOTO(weft_bootstrap_allgather(boot, cards, sizeof *cards), rc, fail);
    /* bit 2: some handle was opened here; the destroy's barrier is taken where any rank did */
    int32_t got = map_peers(cards, peer_dev, local_rank, out);
    for (int s = 0; s < out->nslots; s++)
      got |= out->opened[s] ? 4 : 0;
    CHECK_GOTO(all_have(boot, words, rank, nranks, got, &mapped, &first_bad), rc, fail);
    for (int p = 0; p < nranks; p++)
      out->any_opened |= (words[p] & 4) != 0;
  }
  if (mapped && out->spans) { /* pinned memory for the mirrors may run out on one rank only */
    char why[512] = "";
    weft_result_t mrc = weft_hoststage_remote(local_rank, out);
    if (mrc != WEFT_SUCCESS) snprintf(why, sizeof why, "%s", weft_thread_error());
    int all = 0;
    CHECK_GOTO(all_have(boot, words, rank, nranks, mrc == WEFT_SUCCESS, &all, &first_bad), rc,
               fail);
    if (!all)
      ERR_GOTO(rc, fail, mrc != WEFT_SUCCESS ? mrc : WEFT_ERR_SYSTEM,
               "cuda_ipc: rank %d could not set up the host memory for ranks on other hosts%s%s",
               first_bad, why[0] ? ": " : "", why);
  }
  if (!mapped) {
    unmap_device(out);
    out->nvlink = 0;
    memset(out->local_dev, -1, sizeof out->local_dev);
    if (!forced && rank == 0)
      WEFT_WARN(
          WEFT_SUB_INIT,
          "cuda_ipc: rank %d's GPU cannot map every peer's memory (WEFT_DEBUG=INFO says why); "
          "every rank stages through host memory, which is slower than NVLink",
          first_bad);
    CHECK_GOTO(weft_hoststage_map(boot, bytes[2], local_rank, out), rc, fail);
  }
  free(cards);
  free(words);
  *res = out;
  return WEFT_SUCCESS;
fail:
  free(cards);
  free(words);
  weft_ipc_unmap(out);
  return rc;
}

void weft_ipc_unmap(weft_ipc_t *p) {
  if (!p) return;
  if (!p->host) unmap_device(p); /* its IPC mappings; the mirrors go with the segments */
  weft_hoststage_unmap(p);
  free(p);
}

void *weft_ipc_region(const weft_ipc_t *p, int r) { return p->region[r]; }
void *weft_ipc_inbox(const weft_ipc_t *p, int r) {
  return p->remote[r] && !p->host ? p->inbox : p->region[p->self];
}
size_t weft_ipc_bytes(const weft_ipc_t *p) { return p->bytes; }
int weft_ipc_host_staged(const weft_ipc_t *p) { return p->host; }
int weft_ipc_spans_hosts(const weft_ipc_t *p) { return p->spans; }
char *weft_ipc_host_region(const weft_ipc_t *p, int r) {
  if (p->host || p->remote[r]) return p->seg[r];
  return r == p->self ? p->inbox_seg : NULL;
}
int weft_ipc_remote(const weft_ipc_t *p, int r) { return p->remote[r]; }
const char *weft_ipc_pair(const weft_ipc_t *p, int r) {
  return r == p->self ? "self" : p->remote[r] ? "proxy" : p->host ? "host-staged" : "p2p";
}
int weft_ipc_nvlink(const weft_ipc_t *p) { return p->nvlink; }
int weft_ipc_gpu_shared(const weft_ipc_t *p) { return p->gpu_shared; }
int weft_ipc_local_device(const weft_ipc_t *p, int r) { return p->local_dev[r]; }
int weft_ipc_device(const weft_ipc_t *p) { return p->device; }

int weft_ipc_drain(weft_ipc_t *p) {
  if (p->host) return 0;
  int saved = -1;
  cudaGetDevice(&saved);
  for (int r = 0; r < p->nslots; r++) {
    if (r != p->self && p->local_dev[r] >= 0 && cudaSetDevice(p->local_dev[r]) == cudaSuccess)
      cudaDeviceSynchronize();
  }
  if (saved >= 0) cudaSetDevice(saved);
  return p->any_opened;
}
