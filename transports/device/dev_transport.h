/* The device transports' interface: how a rank's kernels reach a peer's staging region. Each
 * fills one weft_dev_transport_t with designated initializers, in a folder of its own, and
 * takes a line in weft_dev_transports (regions.c), which offers every pair of ranks to the
 * transports in turn. Seen by regions.c and the transports only: the tree goes through
 * regions.h. */
#ifndef WEFT_DEV_TRANSPORT_H
#define WEFT_DEV_TRANSPORT_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "bootstrap.h"
#include "regions.h"

/* What every rank says of itself at init (gathered into one array, indexed by rank). */
typedef struct {
  cudaIpcMemHandle_t handle; /* p2p: its region's */
  uint64_t addr;             /* p2p: the region in its own process */
  int32_t device;
  int32_t pid;
  int32_t force_host; /* WEFT_P2P_DISABLE set on this rank */
  char bus[32];       /* PCI bus id: which physical GPU (of its host) */
  uint64_t host;      /* its host's key (weft_topo_host_key) */
} weft_dev_card_t;

/* What a transport's setup gets. */
typedef struct {
  weft_bootstrap_t *boot;
  int nranks;
  const int *local_rank;  /* < 0: that rank is on another host */
  weft_dev_card_t *cards; /* every rank's; p2p fills its handles in and gathers them again */
  size_t bytes[3];        /* regions.h: weft_regions_map */
  int32_t *words;         /* nranks of scratch, for agreements (weft_dev_all_have) */
} weft_dev_setup_t;

typedef struct weft_dev_transport {
  size_t size;
  const char *name; /* weft_regions_pair's word for the pairs it serves */
  /* Whether it may serve a pair of ranks: on one host, or on two. */
  int (*reaches)(int same_host);
  /* Collective: every rank calls it, in list order, whether or not it has a slot to take, and
   * must reach the same outcome. take[s] = 1 offers slot s (this rank's own, take[self],
   * where it may hold this rank's region). It sets up what those slots need; where it cannot
   * serve them on some rank, it undoes its part and clears take[] on every rank alike, and
   * the next transport in the list is asked. An error fails the communicator. */
  weft_result_t (*setup)(weft_regions_t *m, const weft_dev_setup_t *in, uint8_t *take);
  /* Undoes whatever setup made (also after a failed or partial setup); idempotent. */
  void (*teardown)(weft_regions_t *m);
  /* Optional: weft_regions_pin's part for this transport. */
  weft_result_t (*pin)(weft_regions_t *m, const weft_span_t *const *spans, const int *nspans);
  /* Optional: weft_regions_drain's part for this transport. */
  int (*drain)(weft_regions_t *m);
} weft_dev_transport_t;

/* Arrays of WEFT_REGIONS_MAX_SLOTS are indexed by slot: the peers this rank reaches. */
struct weft_regions {
  int device;
  int nslots, self;                          /* slots; this rank's */
  int32_t slot_rank[WEFT_REGIONS_MAX_SLOTS]; /* slot -> rank of the communicator */
  int rank;                                  /* this rank's number in the communicator */
  size_t bytes;                              /* of each region */
  const weft_dev_transport_t *via[WEFT_REGIONS_MAX_SLOTS]; /* the transport of each slot */
  char *region[WEFT_REGIONS_MAX_SLOTS]; /* each slot's region as mapped here (device pointers) */
  int gpu_shared;                       /* some GPU holds several ranks (the same on every rank) */
  int spans;                            /* some rank is on another host */
  /* every pair of ranks sits on two GPUs whose link has native atomics (NVLink, not PCIe),
   * by every rank's account */
  int nvlink;
  /* p2p: this rank's region on its device, how each peer's was mapped */
  char *mine;                          /* cudaMalloc'ed, zeroed */
  char opened[WEFT_REGIONS_MAX_SLOTS]; /* mapped through an IPC handle (closed at unmap) */
  int any_opened; /* some rank of the communicator opened one (the same on every rank) */
  int8_t local_dev[WEFT_REGIONS_MAX_SLOTS]; /* GPU of a rank in this process, else -1 */
  /* host-staged: each rank's region is a shared-memory segment every process maps and
   * registers with CUDA */
  int host;
  char *seg[WEFT_REGIONS_MAX_SLOTS];       /* host mappings */
  char registered[WEFT_REGIONS_MAX_SLOTS]; /* cudaHostRegister'ed (unregistered at unmap) */
  char name[64];                           /* own segment's name while it is linked */
  int linked;
  /* proxy: a mirror of each remote rank's region, private to this process; with the local
   * regions on the devices, the inbox: host memory the proxy fills with what remote ranks
   * send (this rank's region as they write it), its device address; and the runs of both
   * pinned (weft_regions_pin), to unpin at teardown */
  char *mirror[WEFT_REGIONS_MAX_SLOTS];
  char *inbox_seg, *inbox;
  char **pins;
  int npins, pins_cap;
  size_t pinned_bytes;
};

/* Agreement: *yes where every rank's word (mine, gathered into in->words) has bit 0 set,
 * *first_bad the first rank whose has not (-1: none). */
weft_result_t weft_dev_all_have(const weft_dev_setup_t *in, int rank, int32_t mine, int *yes,
                                int *first_bad);
/* Pins seg (bytes) for every GPU of this process and gives its device address; *registered
 * set once the pinning took (for teardown). Named for errors by what and rank r. */
weft_result_t weft_dev_register_host(char *seg, size_t bytes, const char *what, int r,
                                     char *registered, char **dev);
/* Undoes that and the mapping of *seg (bytes; NULL: nothing), *dev (its device address, if
 * any) cleared. */
void weft_dev_free_host(char **seg, size_t bytes, char *registered, char **dev);

#endif
