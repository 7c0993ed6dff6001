/* A schedule is one rank's part of a collective as ordered steps. Steps to (or from) the
 * same peer are matched in order on both sides, so channels need no tags; a step starts
 * once its dependencies (earlier steps of the same rank) have finished. Generators are pure
 * functions: no I/O, no globals, so they can be simulated for any number of ranks. */
#ifndef WEFT_SCHEDULE_H
#define WEFT_SCHEDULE_H

#include <stddef.h>
#include <stdint.h>

#include "weft.h"

typedef enum {
  WEFT_STEP_SEND,        /* send buf[off, +count) to peer */
  WEFT_STEP_RECV,        /* receive count elements from peer into buf[off] */
  WEFT_STEP_RECV_REDUCE, /* buf[off+i] = src_buf[src_off+i] op incoming[i] */
  WEFT_STEP_COPY,        /* buf[off+i] = src_buf[src_off+i], local */
  WEFT_STEP_REDUCE       /* buf[off+i] = buf[off+i] op src_buf[src_off+i], local */
} weft_step_kind_t;

typedef enum { WEFT_BUF_SEND = 0, WEFT_BUF_RECV, WEFT_BUF_SCRATCH, WEFT_BUF_COUNT } weft_buf_t;

typedef struct {
  uint8_t kind;
  uint8_t buf;
  uint8_t src_buf;
  uint8_t pad_;
  int32_t peer;
  uint64_t off, src_off, count; /* in elements */
  int32_t dep[2];               /* step indices, -1: none */
} weft_step_t;

typedef enum {
  WEFT_COLL_ALLREDUCE = 0,
  WEFT_COLL_REDUCE_SCATTER,
  WEFT_COLL_ALLGATHER,
  WEFT_COLL_BROADCAST,
  WEFT_COLL_REDUCE,
  WEFT_COLL_ALLTOALL,
  WEFT_COLL_ALLTOALLV,
  WEFT_COLL_SEND,
  WEFT_COLL_RECV,
  WEFT_COLL_COUNT
} weft_coll_t;

typedef enum {
  WEFT_ALGO_AUTO = 0,
  WEFT_ALGO_RING,
  WEFT_ALGO_RHD,      /* recursive halving-doubling (recursive doubling for allgather) */
  WEFT_ALGO_TREE,     /* double binary tree */
  WEFT_ALGO_DIRECT,   /* every rank exchanges with every rank at once */
  WEFT_ALGO_PAIRWISE, /* all-to-all in nranks-1 rounds of shifted pairs */
  WEFT_ALGO_CHAIN,    /* pipelined chain for broadcast and reduce */
  WEFT_ALGO_ONESHOT,  /* device allreduce: every rank reduces the whole buffer */
  WEFT_ALGO_TWOSHOT,  /* device allreduce: reduce-scatter then all-gather through peers */
  WEFT_ALGO_COUNT
} weft_algo_t;

/* What a generator needs to know; counts follow the public API's conventions. */
typedef struct {
  weft_coll_t coll;
  int nranks, rank, root; /* root: broadcast/reduce root, send/recv peer */
  uint64_t count;
  uint64_t chunk; /* pipeline chunk in elements, > 0 */
  int in_place;   /* send and recv buffers are the same memory (collective's layout) */
  /* alltoallv only, nranks entries each, in elements: */
  const size_t *sendcounts, *sdispls, *recvcounts, *rdispls;
} weft_coll_args_t;

typedef struct {
  weft_step_t *steps;
  size_t nsteps, cap;
  uint64_t scratch_count; /* elements of scratch the executor must provide */
} weft_sched_t;

void weft_sched_init(weft_sched_t *s);
void weft_sched_free(weft_sched_t *s);
/* Appends a step; returns its index, or -1 when out of memory (the schedule then refuses
 * every later add, and weft_sched_status reports it). count == 0 adds nothing: -1. */
int32_t weft_sched_add(weft_sched_t *s, weft_step_kind_t kind, int peer, weft_buf_t buf,
                       uint64_t off, weft_buf_t src_buf, uint64_t src_off, uint64_t count,
                       int32_t dep0, int32_t dep1);
weft_result_t weft_sched_status(const weft_sched_t *s);

/* Splits count into parts as even as possible: part i starts at *off and has *len. */
void weft_split(uint64_t count, int parts, int i, uint64_t *off, uint64_t *len);

/* The block this rank sends to `to` and receives from `from`, in elements (alltoall or
 * alltoallv). */
typedef struct {
  uint64_t send_off, send_count, recv_off, recv_count;
} weft_a2a_block_t;
weft_a2a_block_t weft_a2a_block(const weft_coll_args_t *a, int to, int from);

/* In-place all-to-all: copies the whole input to scratch (sends then read the copy);
 * returns that step, or -1 when not in place. */
int32_t weft_alltoall_snapshot(const weft_coll_args_t *a, weft_sched_t *s);

typedef weft_result_t (*weft_algo_fn)(const weft_coll_args_t *a, weft_sched_t *s);

/* The generator for (coll, algo), or NULL when that pair does not exist. */
weft_algo_fn weft_algo_lookup(weft_coll_t coll, weft_algo_t algo);
const char *weft_algo_name(weft_algo_t algo);
const char *weft_coll_name(weft_coll_t coll);
int weft_coll_reduces(weft_coll_t coll);       /* takes a reduction op */
int weft_coll_rooted(weft_coll_t coll);        /* takes a root */
weft_algo_t weft_algo_parse(const char *name); /* WEFT_ALGO_COUNT when unknown */

/* Generators (one file each in algos/). */
weft_result_t weft_ring(const weft_coll_args_t *a, weft_sched_t *s);
weft_result_t weft_rhd(const weft_coll_args_t *a, weft_sched_t *s);
weft_result_t weft_tree(const weft_coll_args_t *a, weft_sched_t *s);
weft_result_t weft_direct(const weft_coll_args_t *a, weft_sched_t *s);
weft_result_t weft_pairwise(const weft_coll_args_t *a, weft_sched_t *s);
weft_result_t weft_chain(const weft_coll_args_t *a, weft_sched_t *s);
weft_result_t weft_p2p(const weft_coll_args_t *a, weft_sched_t *s);

#endif
