/* What the training examples share around the model: a run's mode (the full run, or the two
 * halves an overlap efficiency is computed from), its statistics, and the helpers every
 * trainer needs to keep its ranks in step. */
#ifndef WEFT_EXAMPLES_RUN_H
#define WEFT_EXAMPLES_RUN_H

#include <stddef.h>
#include <stdio.h>

#include "ops.h"
#include "trace.h"
#include "weft.h"

/* Everything, the same math with no communication, or the same communication with no math. */
typedef enum { RUN_FULL, RUN_COMPUTE_ONLY, RUN_COMM_ONLY } run_mode_t;

typedef struct {
  double step_s;      /* mean wall time of a step */
  double comm_wait_s; /* mean time a step waited for communication */
  size_t state_bytes; /* this rank's parameters + gradients + optimizer state */
} run_stats_t;

double run_now_s(void); /* CLOCK_MONOTONIC in seconds */
/* Collective: whether any rank's `bad` is set, so that all of them go on or none does (a rank
 * that stopped alone would leave its peers waiting in the next collective). 1 when the
 * vote itself fails. */
int run_any_rank(weft_comm_t comm, int bad);
/* A run's clock: the steps' wall time and waiting so far, but for the run's first step (its
 * cost is the start: CUDA's and cuBLAS's, the first allocations), counted only when it is
 * the run's one step. */
typedef struct {
  double all, wait, first_all, first_wait;
  int steps;
} run_clock_t;

/* A step of dt seconds that waited `waited` on the clock. */
void run_clock_add(run_clock_t *clock, double dt, double waited);
/* The end of step `step` (counted from 1) that began at t0 and waited `waited` seconds: the
 * mean of the replicas' losses into *mean (allreduced over dc, or with dc NULL this rank's
 * standing for all), the clock advanced, and with log set the progress line for `tokens`
 * tokens. 0, or -1 when the allreduce failed. */
int run_step_end(weft_comm_t dc, int replicas, float loss, float *mean, run_clock_t *clock,
                 double t0, double waited, FILE *log, int step, double tokens);
/* The run's statistics from its clock (the means of the steps after the first) and its
 * state's floats. */
void run_stats_fill(run_stats_t *stats, const run_clock_t *clock, size_t state_floats);

/* A run's back end: the CPU's, or with gpu CUDA on device rank % devices (ranks sharing the
 * devices there are; bf16: the products in bf16), *dev then set for the device communicators
 * on its buffers. 0, or -1 with a message that names the example. */
int run_backend(const char *name, int rank, int gpu, int bf16, gpt_ops_t *ops, weft_config_t *dev);

/* Waits for a stream of ops' (ops.h), adding the time to *waited and to tr as a wait span
 * named what, whose end settles trace row `row`'s operations; then asks c whether its
 * kernels failed (a device communicator's report there, not to the stream). 0, or -1: the
 * caller says what failed. */
int run_wait(const gpt_ops_t *ops, void *stream, weft_comm_t c, trace_t *tr, int row,
             const char *what, double *waited);

/* floats zeroed floats (at least one), setting *bad when out of memory. */
void *run_alloc(size_t floats, int *bad);

#endif
