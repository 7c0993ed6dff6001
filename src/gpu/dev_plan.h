/* Planning a device launch (dev_plan.c): work items, blocks and channels for the operations
 * of one call or group. No CUDA here, so the unit tests run it anywhere. */
#ifndef WEFT_DEV_PLAN_H
#define WEFT_DEV_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "comm.h"
#include "dev.h"
#include "window_rules.h"

/* Operations in one device group; its launches hold WEFT_DEV_MAX_ITEMS each. */
enum { WEFT_DEV_MAX_GROUP = 1024 };

typedef struct {
  int rank, nranks;
  weft_dev_slots_t slots; /* the peers the kernels reach (slots.h) */
  int max_channels;       /* collective channels (WEFT_P2P_CHANNELS) */
  size_t block_bytes;     /* WEFT_P2P_BLOCK_BYTES */
  int split;              /* WEFT_P2P_SPLIT: steps of a round on blocks of their own */
  int p2p_sets;           /* WEFT_P2P_SETS (1, 2, 4, 8): a message gets 32 / p2p_sets channels */
  int max_blocks;         /* 0, or a shared GPU's budget (budget.h): the most blocks of a launch */
  uint64_t p2p_sent[WEFT_DEV_MAX_RANKS], p2p_recv[WEFT_DEV_MAX_RANKS]; /* per slot, so far */
} weft_dev_planner_t;

/* A group's refusals, checked before anything is placed so that a refused group changes
 * nothing (also where no kernel runs: a one-rank communicator refuses what others do);
 * ncoll: its collectives. */
weft_result_t weft_dev_plan_check(const weft_dev_planner_t *p, const weft_task_t *tasks, int ntasks,
                                  int *ncoll);

/* WEFT_SUCCESS where this rank's kernels reach what the task needs; past WEFT_DEV_MAX_RANKS
 * (ring neighbours alone, slots.h) WEFT_ERR_UNSUPPORTED for alltoall(v) and for a message to
 * a rank that is not a neighbour, with the reason. */
weft_result_t weft_dev_plan_reaches(const weft_dev_planner_t *p, const weft_task_t *t);

/* Bytes of sendbuf and recvbuf the task touches on this rank; 0 where one does not fit in
 * size_t (the API refuses such calls first: this keeps the device checks from trusting it). */
int weft_dev_extents(int rank, int nranks, const weft_task_t *t, size_t *in, size_t *out);
/* Bytes per peer block from which allgather and alltoall into windows take the copy
 * engines: the value of WEFT_CE_MIN_BYTES (0 or unset: never, the default), or for "auto"
 * 64 MiB where 2 ranks drive 2 GPUs, the one setup measured
 * (bench/results/2026-11-30-h200x2-ce.txt), and never on more ranks or ranks sharing a GPU;
 * -1 for anything else (the caller says why). Off by default because the copies cannot check,
 * as the kernels' entry flags do, that every rank passed the same window offset: on a
 * mismatch they would land at the wrong place. */
#define WEFT_DEV_CE_AUTO_BYTES ((uint64_t)64 << 20)
int64_t weft_dev_ce_min(const char *param, int nranks, int gpu_shared);
/* Payload per peer up to which the 128-byte kernel runs by default on 2 ranks, for copies
 * (allgather, alltoall) and for reductions (allreduce, reduce_scatter). Its rings, with one
 * step in flight, carry about 290 GB/s; the general kernel copies faster from 32 MiB per peer
 * (allgather of 64 MiB 113.6 us against 121.0) but reduces slower up to 64 MiB per peer
 * (allreduce of 64 MiB 230.1 against 235.0, of 128 MiB 455.8 against 425.1; reduce_scatter
 * of 128 MiB 219.2 against 231.8; bench/results/2026-11-30-h200x2-tuning-21.txt). */
#define WEFT_DEV_LL128_AUTO_BYTES        ((int64_t)16 << 20)
#define WEFT_DEV_LL128_AUTO_REDUCE_BYTES ((int64_t)64 << 20)
/* The same on 4 ranks on 4 H200s (bench/results/2026-11-30-h200x4.txt): against the small
 * low-latency kernel it won at 512 KiB per peer (allgather 14.6 us against 16.1, alltoall
 * 13.5 against 16.7, reduce_scatter 15.4 against 19.3) and for reductions at 2 and 8 MiB too
 * (reduce_scatter 48.6 against 54.5, 153.8 against 175.5); at 2 MiB per peer the general
 * kernel copied faster (allgather 39.1 against 43.8). 3 and 5 ranks are not measured. */
#define WEFT_DEV_LL128_AUTO4_BYTES        ((int64_t)1 << 20)
#define WEFT_DEV_LL128_AUTO4_REDUCE_BYTES ((int64_t)8 << 20)
/* The 128-byte low-latency kernel (ll128.cu): lines per channel, parity and source slot on
 * nranks ranks (its buffers hold the same bytes on any number of ranks: 18 MiB per rank),
 * the bytes they take in each rank's region with the receivers' credits, the lines of the
 * ring a slot becomes where an operation does not fit it (a whole number of steps, at least
 * two, so that a sender need not wait for the credit of every step; 0 where the slot is
 * shorter: 6 ranks and more), the most payload per peer that fits the buffers whole (8.4 MiB
 * on 2 ranks), and the most one launch carries (unbounded with a ring; 0 on 1 rank). */
uint32_t weft_dev_ll128_lines(int nranks);
uint64_t weft_dev_ll128_bytes(int nranks);
uint64_t weft_dev_ll128_ring(int nranks);
uint64_t weft_dev_ll128_fit(int nranks);
uint64_t weft_dev_ll128_capacity(int nranks);
/* WEFT_LL128_MAX_BYTES read: the payload per peer up to which the 128-byte kernel runs, past
 * the small one's limit, for copies or reductions: "auto" (or unset) the limits above on 2
 * and 4 ranks, the setups it was measured on, and 0 on other counts; 0 never; a byte count up to
 * the capacity, for both, on any number of ranks. -1 for anything else (the caller says why). */
int64_t weft_dev_ll128_max(const char *param, int nranks, int reduces);
/* Makes it, the planner's item for t, run on windows (window.c found them), and returns its
 * blocks. Allreduce runs two-shot there whatever the tuner chose: in place, one-shot would
 * overwrite what the peers read. Reductions keep one role (a second would have nothing to
 * do), on as many channels as their segment asks, up to most (1 to WEFT_DEV_DIRECT_CHANNELS,
 * else that). */
int weft_dev_place_direct(const weft_dev_planner_t *d, const weft_task_t *t, int64_t most,
                          weft_dev_item_t *it);
/* Channels of one send or receive (one message), and work items of one launch: with a block
 * budget (max_blocks), as many items as it holds blocks, up to WEFT_DEV_MAX_ITEMS, and an
 * equal part of it each; else the limits alone. */
int weft_dev_plan_p2p_channels(const weft_dev_planner_t *d);
int weft_dev_plan_items(const weft_dev_planner_t *d);
/* Fills L's items (and alltoallv table) and *nblocks for one launch of a call or group.
 * placed[i] (zeroed by the caller before the first launch) marks the tasks already given a
 * launch: the first takes every collective and the sends and receives that fit; *more says
 * that others wait for a following launch (more messages to one peer than WEFT_P2P_SETS,
 * or more items than a launch holds). With a block budget, a launch holds at most max_blocks
 * blocks, and collectives and sends or receives go in launches apart (the collectives first),
 * since a collective's channels must be the same on every rank, whatever messages each rank
 * adds to the group. A refused group changes nothing. */
weft_result_t weft_dev_plan(weft_dev_planner_t *p, const weft_task_t *tasks, int ntasks,
                            uint8_t *placed, weft_dev_launch_t *L, int *nblocks, int *more);

#endif
