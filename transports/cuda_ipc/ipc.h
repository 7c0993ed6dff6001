/* The cuda_ipc transport: the ranks of a device communicator on one host map each other's
 * staging regions (CUDA IPC handles exchanged over the bootstrap ring, or the pointers
 * themselves within one process), or, where some pair cannot, every region lives in host
 * shared memory that all GPUs map (host-staged). A rank on another host gets a mirror in host
 * memory that the proxy (src/proxy/region.h) keeps. Unlike shm and tcp it moves no bytes
 * itself: the gpu engine's kernels read and write the mapped regions. */
#ifndef WEFT_IPC_H
#define WEFT_IPC_H

#include <stddef.h>
#include <stdint.h>

#include "bootstrap.h"
#include "weft.h"

enum { WEFT_IPC_MAX_RANKS = 8 };

typedef struct weft_ipc weft_ipc_t;

/* Collective over the communicator (nranks ranks; boot's). Learns the links between the
 * ranks' GPUs, allocates a region on device (the current device) of bytes[0] where every pair
 * is joined by NVLink (weft_ipc_nvlink), else of bytes[1], exchanges handles and maps the
 * regions of the ranks in slot_rank[0..nslots) (this rank's slots, itself at slot_rank[self];
 * at most WEFT_IPC_MAX_RANKS) over peer-to-peer access. Where some pair cannot map each other
 * (no peer access, an IPC handle that does not open), or force_host is set on any rank, every
 * rank instead maps host-staged regions of bytes[2] (weft_ipc_host_staged). Every other call
 * takes a slot, not a rank. */
weft_result_t weft_ipc_map(weft_bootstrap_t *boot, int nranks, const int32_t *slot_rank, int nslots,
                           int self, int device, const size_t bytes[3], int force_host,
                           const int *local_rank, weft_ipc_t **out);
/* local_rank[r] < 0: rank r is on another host. This rank's region of r is then a mirror in
 * host memory only this process maps (weft_ipc_remote), and what r sends lands in this rank's
 * inbox for r (weft_ipc_inbox): the proxy carries both ways. */
/* Unmaps and frees (NULL: nothing). */
void weft_ipc_unmap(weft_ipc_t *p);
/* Before the regions go. Ranks of this process may still run kernels that write to ours:
 * their GPUs are synchronized here, which keeps destroy local for one process driving
 * several GPUs. Returns 1, on every rank alike, where some rank opened a region of another
 * process over IPC: that mapping must be closed before its owner frees it, so every rank must
 * agree first (a barrier). Host-staged segments outlive any one process's mapping and need
 * neither. */
int weft_ipc_drain(weft_ipc_t *p);

/* Slot r's region as mapped here (a device pointer), and the bytes of each region. */
void *weft_ipc_region(const weft_ipc_t *p, int r);
size_t weft_ipc_bytes(const weft_ipc_t *p);
/* This rank's region as rank r writes into it (a device pointer): its own region, or, for r
 * on another host with the local regions on the devices, the host memory the proxy fills. */
void *weft_ipc_inbox(const weft_ipc_t *p, int r);
/* Host addresses of rank r's region where it lives in host memory (host-staged regions, the
 * mirror of a remote r, this rank's inbox for remote ranks as r == rank); else NULL. And
 * whether r is on another host (its region here is a mirror). */
char *weft_ipc_host_region(const weft_ipc_t *p, int r);
int weft_ipc_remote(const weft_ipc_t *p, int r);
/* How this rank reaches r: "self", "p2p" (the region on r's GPU, mapped), "host-staged"
 * (shared memory of this host) or "proxy" (a mirror, carried over the network). */
const char *weft_ipc_pair(const weft_ipc_t *p, int r);
/* The regions of this host live in host shared memory (PCIe, not NVLink). */
int weft_ipc_host_staged(const weft_ipc_t *p);
/* Some rank is on another host: no kernel writes into its buffers. */
int weft_ipc_spans_hosts(const weft_ipc_t *p);
/* Every pair of ranks sits on two GPUs whose link has native atomics (NVLink, not PCIe), by
 * every rank's account: there a warp's 128-byte store reaches the peer whole. */
int weft_ipc_nvlink(const weft_ipc_t *p);
/* Some GPU holds several ranks (the same on every rank). */
int weft_ipc_gpu_shared(const weft_ipc_t *p);
/* The GPU of rank r when it runs in this process, else -1; this rank's GPU. */
int weft_ipc_local_device(const weft_ipc_t *p, int r);
int weft_ipc_device(const weft_ipc_t *p);

#endif
