/* Planning a device launch (dev_plan.c): work items, blocks and channels for the operations
 * of one call or group. No CUDA here, so the unit tests run it anywhere. */
#ifndef WEFT_DEV_PLAN_H
#define WEFT_DEV_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "comm.h"
#include "dev.h"

typedef struct {
  int rank, nranks;
  int max_channels;   /* collective channels (WEFT_P2P_CHANNELS) */
  size_t block_bytes; /* WEFT_P2P_BLOCK_BYTES */
  int split;          /* WEFT_P2P_SPLIT: steps of a round on blocks of their own */
  uint64_t p2p_sent[WEFT_DEV_MAX_RANKS], p2p_recv[WEFT_DEV_MAX_RANKS]; /* messages so far */
} weft_dev_planner_t;

/* Bytes of sendbuf and recvbuf the task touches on this rank. */
void weft_dev_extents(int rank, int nranks, const weft_task_t *t, size_t *in, size_t *out);
/* Fills L's items (and alltoallv table) and *nblocks; on error nothing has changed, the
 * message counts included. */
weft_result_t weft_dev_plan(weft_dev_planner_t *p, const weft_task_t *tasks, int ntasks,
                            weft_dev_launch_t *L, int *nblocks);

#endif
