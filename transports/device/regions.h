/* The staging regions of a device communicator, as the gpu engine sees them: every rank owns
 * one region, and its kernels write into the regions of the peers they reach. How a pair of
 * ranks reaches each other is a device transport's (dev_transport.h): p2p (the region on the
 * peer's GPU, mapped), host-staged (in shared host memory every GPU of the host maps) or
 * proxy (a mirror in this process's memory, carried over the network by src/proxy). No
 * transport moves bytes itself: the kernels read and write the regions. */
#ifndef WEFT_REGIONS_H
#define WEFT_REGIONS_H

#include <stddef.h>
#include <stdint.h>

#include "bootstrap.h"
#include "weft.h"

enum { WEFT_REGIONS_MAX_SLOTS = 8 };

typedef struct weft_regions weft_regions_t;

/* [off, off + bytes) of a region. */
typedef struct {
  uint64_t off, bytes;
} weft_span_t;

/* Collective over the communicator (nranks ranks; boot's). Learns where every rank and its GPU
 * are, then sets up the regions of the ranks in slot_rank[0..nslots) (this rank's slots,
 * itself at slot_rank[self]; at most WEFT_REGIONS_MAX_SLOTS), each pair by the first device
 * transport that reaches it. bytes[] sizes a region: [0] where every pair of one host is
 * joined by NVLink (weft_regions_nvlink), [1] on devices otherwise, [2] in host memory.
 * force_host (WEFT_P2P_DISABLE on any rank) stages every pair of one host through host
 * memory, as where some pair cannot map each other. local_rank[r] < 0: rank r is on another
 * host. Every call below takes a slot, not a rank. WEFT_ERR_UNSUPPORTED where no transport
 * reaches some pair, else the failing transport's error, alike on every rank where the
 * transport agrees on it. */
weft_result_t weft_regions_map(weft_bootstrap_t *boot, int nranks, const int32_t *slot_rank,
                               int nslots, int self, int device, const size_t bytes[3],
                               int force_host, const int *local_rank, weft_regions_t **out);
/* Pins, in this process's host memory for the ranks on other hosts, only what is used: in the
 * mirror of slot s (a remote rank's region) the spans[s][0..nspans[s]) this rank's kernels
 * write, and in the inbox (s == self) what remote ranks write; each list page-aligned, sorted
 * and disjoint (weft_dev_pinned_spans). The rest of those regions stays unpinned and
 * untouched. Where the GPU cannot use a pinned host address as its own, whole regions are
 * pinned instead. Call once the layout is final (host-staged sizing shrinks it after
 * weft_regions_map), before weft_regions_region or weft_regions_inbox of such slots is read.
 * Local: a rank's failure (WEFT_ERR_SYSTEM where pinning fails, with the bytes asked;
 * WEFT_ERR_INTERNAL for a span past the region) is for its caller to agree on. Nothing to do
 * on one host. */
weft_result_t weft_regions_pin(weft_regions_t *m, const weft_span_t *const *spans,
                               const int *nspans);
/* Unmaps and frees (NULL: nothing). */
void weft_regions_unmap(weft_regions_t *m);
/* Before the regions go. Ranks of this process may still run kernels that write to ours:
 * their GPUs are synchronized here, which keeps destroy local for one process driving
 * several GPUs. Returns 1, on every rank alike, where some rank opened a region of another
 * process over IPC: that mapping must be closed before its owner frees it, so every rank must
 * agree first (a barrier). Host memory outlives any one process's mapping and needs neither. */
int weft_regions_drain(weft_regions_t *m);

/* Slot s's region as mapped here (a device pointer), and the bytes of each region. */
void *weft_regions_region(const weft_regions_t *m, int s);
size_t weft_regions_bytes(const weft_regions_t *m);
/* Host memory pinned for the ranks on other hosts (weft_regions_pin), in bytes and in runs. */
size_t weft_regions_pinned(const weft_regions_t *m, int *runs);
/* This rank's region as slot s writes into it (a device pointer): its own region, or, for a
 * rank on another host with the local regions on the devices, the host memory the proxy
 * fills. */
void *weft_regions_inbox(const weft_regions_t *m, int s);
/* Host addresses of slot s's region where it lives in host memory (host-staged regions, the
 * mirror of a remote rank, this rank's inbox for remote ranks as s == self); else NULL. And
 * whether s is on another host (its region here is a mirror). */
char *weft_regions_host_region(const weft_regions_t *m, int s);
int weft_regions_remote(const weft_regions_t *m, int s);
/* The device transport that reaches slot s: "self", "p2p", "host-staged" or "proxy". */
const char *weft_regions_pair(const weft_regions_t *m, int s);
/* The regions of this host live in host shared memory (PCIe, not NVLink). */
int weft_regions_host_staged(const weft_regions_t *m);
/* Some rank is on another host: no kernel writes into its buffers. */
int weft_regions_spans_hosts(const weft_regions_t *m);
/* Every pair of ranks sits on two GPUs whose link has native atomics (NVLink, not PCIe), by
 * every rank's account: there a warp's 128-byte store reaches the peer whole. */
int weft_regions_nvlink(const weft_regions_t *m);
/* Some GPU holds several ranks (the same on every rank). */
int weft_regions_gpu_shared(const weft_regions_t *m);
/* The GPU of slot s when its rank runs in this process, else -1; this rank's GPU. */
int weft_regions_local_device(const weft_regions_t *m, int s);
int weft_regions_device(const weft_regions_t *m);

#endif
