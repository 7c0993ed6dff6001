/* Data-parallel training of the example GPT on weft (CPU or GPU buffers): stage 0 is plain DDP
 * (gradients allreduced), stage 1 ZeRO-1 (gradients reduce-scattered, optimizer state and
 * update sharded, parameters allgathered), stage 2 also keeps only its shard of the
 * gradients (each layer's full gradients live in one of two working slots until reduced),
 * stage 3 also shards the parameters (each layer gathered when a pass needs it, the next one
 * prefetched, two layers held at most). Each layer's gradients are reduced on a weft host
 * stream as soon as its backward is done, overlapping the rest of the backward. */
#ifndef WEFT_EXAMPLES_ZERO_H
#define WEFT_EXAMPLES_ZERO_H

#include <stdio.h>

#include "gpt.h"
#include "run.h"
#include "weft.h"

typedef struct {
  run_mode_t mode;
  int stage;          /* 0 (DDP), 1, 2 or 3 (ZeRO-1/2/3) */
  int steps, batch;   /* batch: sequences per rank per step */
  gpt_config_t model; /* vocab is the data's (DATA_VOCAB) or more */
  adamw_t opt;
  unsigned long long seed;
  int overlap;         /* 1: start each layer's reduction when its backward is done */
  int wrong_reduction; /* tests only: skip the gradient reduction (parity must then fail) */
  float *first_grads;  /* tests only: the first step's reduced gradients as the update reads
                          them, into this host array of the model's nparams floats at their
                          flat offsets: every one at stage 0, this rank's shard of each block
                          at stages 1-3 (the rest left alone); NULL: none */
  int gpu, bf16;       /* the CUDA back end, rank r on device r % devices, bf16: products in
                        bf16; else the CPU's */
  FILE *log;           /* rank 0's progress lines ("step N loss X ..."); NULL: none */
  const char *save;    /* after the last step, a checkpoint here (checkpoint.h); NULL: none */
  const char *load;    /* before the first, the checkpoint here (any rank count and stage) */
  const char *trace;   /* a Chrome-trace timeline of every rank's spans here; NULL: none */
} zero_opts_t;

/* Trains on comm (a host communicator; with gpu set, device communicators are split from it;
 * one rank is the single-process reference): losses[s]
 * is step s's mean loss over the global batch (every rank's). 0, or -1 with a message on
 * stderr. */
int zero_train(weft_comm_t comm, const zero_opts_t *o, float *losses, run_stats_t *stats);

#endif
