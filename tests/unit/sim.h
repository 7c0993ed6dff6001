/* In-process simulator for schedules: runs every rank's schedule with random interleaving,
 * random partial progress and tiny channels, then checks results against an oracle, that
 * every sendbuf is unchanged and that nothing was written outside the buffers. */
#ifndef WEFT_TEST_SIM_H
#define WEFT_TEST_SIM_H

#include <stdint.h>

#include "schedule.h"

typedef struct {
  weft_coll_t coll; /* WEFT_COLL_SEND: a group of sends and receives between random pairs */
  weft_algo_t algo;
  weft_dtype_t dtype;
  weft_op_t op;
  int nranks, root, in_place;
  uint64_t count; /* alltoallv and send: largest block; blocks draw 0..count from seed */
  uint64_t chunk;
  uint64_t channel_cap; /* elements a channel holds */
  uint32_t seed;
  weft_algo_fn gen; /* NULL: weft_algo_lookup(coll, algo); tests pass broken ones */
} sim_case_t;

/* 0 on success; otherwise prints what went wrong and returns -1. Unsupported pairs of
 * (coll, algo) for this nranks, and in place for alltoallv and send, return 1. */
int sim_run(const sim_case_t *c);
/* Runs counts {0, 1, 2, 7, 33, 1000} x in-place {0, 1} x chunk {1, 3, 64} x ranks 1..max,
 * in I32 with every reduction op in turn. */
int sim_sweep(weft_coll_t coll, weft_algo_t algo, int max_ranks);

#endif
