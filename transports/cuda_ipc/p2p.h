/* The p2p transport: peers on one host map each other's device memory (CUDA IPC handles
 * exchanged over the bootstrap ring), or, where some pair cannot, every region lives in
 * host shared memory that all GPUs map (host-staged). Unlike shm and tcp it moves no bytes
 * itself: the device executor's kernels read and write the mapped regions. */
#ifndef WEFT_P2P_H
#define WEFT_P2P_H

#include <stddef.h>

#include "bootstrap.h"
#include "dev.h"
#include "weft.h"

typedef struct {
  int device;
  int nranks, rank;
  size_t bytes;                         /* of each region */
  char *mine;                           /* cudaMalloc'ed, zeroed (device regions) */
  char *region[WEFT_DEV_MAX_RANKS];     /* every rank's region as mapped here (device pointers) */
  char opened[WEFT_DEV_MAX_RANKS];      /* mapped through an IPC handle (closed at unmap) */
  int8_t local_dev[WEFT_DEV_MAX_RANKS]; /* GPU of a rank in this process, else -1 */
  int gpu_shared;                       /* some GPU holds several ranks (the same on every rank) */
  /* every pair of ranks sits on two GPUs whose link has native atomics (NVLink, not PCIe),
   * by every rank's account: there a warp's 128-byte store reaches the peer whole */
  int nvlink;
  /* host-staged: each rank's region is a shared-memory segment every process maps and
   * registers with CUDA */
  int host;
  char *seg[WEFT_DEV_MAX_RANKS];       /* host mappings */
  char registered[WEFT_DEV_MAX_RANKS]; /* cudaHostRegister'ed (unregistered at unmap) */
  char name[64];                       /* own segment's name while it is linked */
  int linked;
} weft_p2p_t;

/* Collective. Learns the links between the ranks' GPUs, allocates a region on device (the
 * current device) of bytes[0] where every pair is joined by NVLink (out->nvlink), else of
 * bytes[1], exchanges handles and maps every peer's region over peer-to-peer access. Where
 * some pair cannot map each other (no peer access, an IPC handle that does not open), or
 * force_host is set on any rank, every rank instead maps host-staged regions of bytes[2];
 * out->host says which. */
weft_result_t weft_p2p_map(weft_bootstrap_t *boot, int rank, int nranks, int device,
                           const size_t bytes[3], int force_host, weft_p2p_t *out);
void weft_p2p_unmap(weft_p2p_t *p);
/* Before the regions go. Ranks of this process may still run kernels that write to ours:
 * their GPUs are synchronized here, which keeps destroy local for one process driving
 * several GPUs. Returns 1 where a rank of another process opened our region over IPC: that
 * mapping must be closed before we free it, so every rank must agree first (a barrier).
 * Host-staged segments outlive any one process's mapping and need neither. */
int weft_p2p_drain(weft_p2p_t *p);

/* The host-staged half of the above (hoststage.c). */
weft_result_t weft_hoststage_map(weft_bootstrap_t *boot, int rank, int nranks, size_t bytes,
                                 weft_p2p_t *out);
void weft_hoststage_unmap(weft_p2p_t *p);

#endif
