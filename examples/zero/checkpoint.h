/* Checkpoints of the data-parallel example: every rank writes its shard of each block
 * (parameters and AdamW's two moments) to PREFIX.rankR-of-N; a run with any rank count and
 * stage reads all N files back into full arrays and takes its own part. */
#ifndef WEFT_EXAMPLES_CHECKPOINT_H
#define WEFT_EXAMPLES_CHECKPOINT_H

#include <stddef.h>

#include "gpt.h"

typedef struct {
  size_t first, size; /* the block in the flat parameter array */
} ckpt_block_t;

/* This rank's shards (shard = size rounded up over nranks, block by block, zero-padded) of
 * parameters p and moments m, v; step: the optimizer steps taken. 0, or -1 with a message. */
int ckpt_save(const char *prefix, int rank, int nranks, int step, const gpt_config_t *c, int nb,
              const ckpt_block_t *b, const float *p, const float *m, const float *v);
/* Every rank file of prefix into full (flat, every parameter) arrays p, m, v, and *step; the model
 * and its blocks must be the ones saved. 0, or -1 with a message. */
int ckpt_load(const char *prefix, const gpt_config_t *c, int nb, const ckpt_block_t *b, float *p,
              float *m, float *v, int *step);

#endif
