/* The p2p transport: peers on one host map each other's device memory (CUDA IPC handles
 * exchanged over the bootstrap ring). Unlike shm and tcp it moves no bytes itself: the
 * device executor's kernels read and write the mapped regions over NVLink. */
#ifndef WEFT_P2P_H
#define WEFT_P2P_H

#include <stddef.h>

#include "bootstrap.h"
#include "dev.h"
#include "weft.h"

typedef struct {
  int device;
  int nranks, rank;
  size_t bytes;                     /* of each region */
  char *mine;                       /* cudaMalloc'ed, zeroed */
  char *region[WEFT_DEV_MAX_RANKS]; /* every rank's region as mapped here */
  char opened[WEFT_DEV_MAX_RANKS];  /* mapped through an IPC handle (closed at unmap) */
  int gpu_shared;                   /* some GPU holds several ranks (the same on every rank) */
} weft_p2p_t;

/* Collective: allocates bytes on device (current device must be it), exchanges handles,
 * checks that every pair can reach each other, maps the peers' regions. */
weft_result_t weft_p2p_map(weft_bootstrap_t *boot, int rank, int nranks, int device, size_t bytes,
                           weft_p2p_t *out);
void weft_p2p_unmap(weft_p2p_t *p);

#endif
