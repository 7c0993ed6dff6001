/* Megatron-style tensor-parallel training of the example GPT on weft (CPU or GPU), times
 * data parallel. Groups of tp consecutive ranks each hold one shard of every layer
 * (gpt_init_tp) and meet inside the forward and the backward: allreduces, or with sequence
 * parallel reduce-scatters and allgathers, each allgather a ring whose next chunk arrives
 * while the current chunk's matrix product runs. The nranks / tp groups split the batch and
 * allreduce each layer's gradients while the backward goes on below it. */
#ifndef WEFT_EXAMPLES_TP_H
#define WEFT_EXAMPLES_TP_H

#include <stdio.h>

#include "gpt.h"
#include "run.h"
#include "weft.h"

typedef struct {
  run_mode_t mode;
  int tp;             /* ranks per model (divides nranks and the heads) */
  int sp;             /* sequence parallel (batch * seq a multiple of tp) */
  int steps, batch;   /* batch: sequences per model replica per step */
  gpt_config_t model; /* vocab is the data's (DATA_VOCAB) or more */
  adamw_t opt;
  unsigned long long seed;
  int overlap;         /* 1: ring allgathers under the products, gradients during the backward */
  int wrong_reduction; /* tests only: the shards' reductions keep each rank's own part */
  int gpu, bf16;       /* the CUDA back end, rank r on device r % devices, bf16: products in
                        bf16; else the CPU's */
  FILE *log;           /* rank 0's progress lines ("step N loss X ..."); NULL: none */
  const char *trace;   /* a Chrome-trace timeline of every rank's spans here; NULL: none */
  const char *save;    /* after the last step, the whole model's checkpoint here; NULL: none */
  const char *load;    /* before the first, any checkpoint of this model (checkpoint.h) */
} tp_opts_t;

/* Trains on comm (a host communicator; one rank is the single-process reference): losses[s]
 * is step s's mean loss over the global batch. 0, or -1 with a message on stderr. */
int tp_train(weft_comm_t comm, const tp_opts_t *o, float *losses, run_stats_t *stats);

#endif
