/* Expert-parallel training of the example GPT's mixture-of-experts model on weft, on the CPU
 * (host buffers) or the GPU (device buffers and communicators). Every rank holds experts / nranks
 * of each layer's experts and trains on its own share of the batch: the rest of the model
 * (attention, norms, gates, embeddings) is data parallel, its gradients allreduced as the backward
 * finishes each block. Each MoE layer sends its tokens to their experts' ranks and back with
 * weft_moe_layout, weft_moe_dispatch and weft_moe_combine, the combine's backward a dispatch and
 * the dispatch's a combine. */
#ifndef WEFT_EXAMPLES_EP_H
#define WEFT_EXAMPLES_EP_H

#include <stdio.h>

#include "gpt.h"
#include "run.h"
#include "weft.h"

typedef struct {
  run_mode_t mode;    /* compute only: each rank's choices go to its own experts instead */
  int steps, batch;   /* batch: sequences per rank per step */
  gpt_config_t model; /* experts a multiple of the ranks, topk at most channels */
  adamw_t opt;
  unsigned long long seed;
  int gpu, bf16; /* the CUDA back end, rank r on device r % devices, bf16: products in bf16;
                    else the CPU's */
  int overlap;   /* 1: exchanges in halves (experts compute while the next micro-batch's tokens
                    travel), each block's gradients reduced while the backward goes on */
  int wrong_reduction; /* tests only: leave the data-parallel gradients unreduced */
  FILE *log;           /* rank 0's progress lines ("step N loss X ..."); NULL: none */
  const char *trace;   /* a Chrome-trace timeline of every rank's spans here; NULL: none */
  const char *save;    /* after the last step, the whole model's checkpoint here; NULL: none */
  const char *load;    /* before the first, any checkpoint of this model (checkpoint.h) */
} ep_opts_t;

/* Trains on comm (a host communicator; with gpu set, device communicators are split from it;
 * one rank is the single-process reference): losses[s]
 * is step s's mean loss over the global batch, the balance loss included. 0, or -1 with a
 * message on stderr. */
int ep_train(weft_comm_t comm, const ep_opts_t *o, float *losses, run_stats_t *stats);

#endif
