/* Planning a device launch (dev_plan.c): work items, blocks and channels for the operations
 * of one call or group. No CUDA here, so the unit tests run it anywhere. */
#ifndef WEFT_DEV_PLAN_H
#define WEFT_DEV_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "comm.h"
#include "dev.h"

/* Operations in one device group; its launches hold WEFT_DEV_MAX_ITEMS each. */
enum { WEFT_DEV_MAX_GROUP = 1024 };

typedef struct {
  int rank, nranks;
  int max_channels;   /* collective channels (WEFT_P2P_CHANNELS) */
  size_t block_bytes; /* WEFT_P2P_BLOCK_BYTES */
  int split;          /* WEFT_P2P_SPLIT: steps of a round on blocks of their own */
  int p2p_sets;       /* WEFT_P2P_SETS (1, 2, 4, 8): a message gets 32 / p2p_sets channels */
  uint64_t p2p_sent[WEFT_DEV_MAX_RANKS], p2p_recv[WEFT_DEV_MAX_RANKS]; /* messages so far */
} weft_dev_planner_t;

/* Bytes of sendbuf and recvbuf the task touches on this rank. */
void weft_dev_extents(int rank, int nranks, const weft_task_t *t, size_t *in, size_t *out);
/* Fills L's items (and alltoallv table) and *nblocks for one launch of a call or group.
 * placed[i] (zeroed by the caller before the first launch) marks the tasks already given a
 * launch: the first takes every collective and the sends and receives that fit; *more says
 * that others wait for a following launch (more messages to one peer than WEFT_P2P_SETS,
 * or more items than a launch holds). A refused group changes nothing. */
weft_result_t weft_dev_plan(weft_dev_planner_t *p, const weft_task_t *tasks, int ntasks,
                            uint8_t *placed, weft_dev_launch_t *L, int *nblocks, int *more);

#endif
