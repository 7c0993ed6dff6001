/* The mapping's state, shared by ipc.c and hoststage.c only: the rest of the tree goes
 * through ipc.h. */
#ifndef WEFT_IPC_STATE_H
#define WEFT_IPC_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "bootstrap.h"
#include "ipc.h"

/* Arrays of WEFT_IPC_MAX_RANKS are indexed by slot: the peers this rank maps (ipc.h). */
struct weft_ipc {
  int device;
  int nslots, self;                      /* slots; this rank's */
  int32_t slot_rank[WEFT_IPC_MAX_RANKS]; /* slot -> rank of the communicator */
  int rank;                              /* this rank's number in the communicator */
  size_t bytes;                          /* of each region */
  char *mine;                            /* cudaMalloc'ed, zeroed (device regions) */
  char *region[WEFT_IPC_MAX_RANKS];      /* each slot's region as mapped here (device pointers) */
  char opened[WEFT_IPC_MAX_RANKS];       /* mapped through an IPC handle (closed at unmap) */
  int any_opened; /* some rank of the communicator opened one (the same on every rank) */
  int8_t local_dev[WEFT_IPC_MAX_RANKS]; /* GPU of a rank in this process, else -1 */
  int gpu_shared;                       /* some GPU holds several ranks (the same on every rank) */
  /* every pair of ranks sits on two GPUs whose link has native atomics (NVLink, not PCIe),
   * by every rank's account: there a warp's 128-byte store reaches the peer whole */
  int nvlink;
  /* host-staged: each rank's region is a shared-memory segment every process maps and
   * registers with CUDA */
  int host;
  char *seg[WEFT_IPC_MAX_RANKS];       /* host mappings */
  char registered[WEFT_IPC_MAX_RANKS]; /* cudaHostRegister'ed (unregistered at unmap) */
  char name[64];                       /* own segment's name while it is linked */
  char remote[WEFT_IPC_MAX_RANKS];     /* on another host: seg is this process's mirror */
  int linked;
  int spans; /* some rank is on another host */
  /* device regions with ranks on other hosts: the host memory the proxy fills with what they
   * send (this rank's region as they write it), its device address, and whether registered */
  char *inbox_seg, *inbox;
  char inbox_registered;
};

/* The host-staged half of the above (hoststage.c). */
weft_result_t weft_hoststage_map(weft_bootstrap_t *boot, size_t bytes, const int *local_rank,
                                 weft_ipc_t *out);
/* Device regions: mirrors of the remote ranks' regions, and the inbox (weft_ipc_inbox). */
weft_result_t weft_hoststage_remote(const int *local_rank, weft_ipc_t *out);
/* Undoes either (the device regions' IPC mappings are ipc.c's). */
void weft_hoststage_unmap(weft_ipc_t *p);

#endif
