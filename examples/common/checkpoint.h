/* Checkpoints of the training examples: every rank writes its shard of each block
 * (parameters and AdamW's two moments) to PREFIX.rankR-of-N; a run with any rank count and
 * stage reads all N files back into full arrays and takes its own part. Tensor- and
 * expert-parallel runs write the whole model from one rank (ckpt_save_whole), in the same
 * blocks, so that every example loads every other's checkpoints of the same model. */
#ifndef WEFT_EXAMPLES_CHECKPOINT_H
#define WEFT_EXAMPLES_CHECKPOINT_H

#include <stddef.h>

#include "gpt.h"
#include "weft.h"

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

/* The blocks of m (a whole model) every checkpoint uses: each layer, the final norm, the
 * embeddings; b holds layers + 2. Returns their count. */
int ckpt_blocks(const gpt_t *m, ckpt_block_t *b);
/* The whole model's parameters and moments (arr: p, m, v, flat as m lays them out) as a
 * one-rank checkpoint, or back from any checkpoint of the same model. 0, or -1 with a
 * message. */
int ckpt_save_whole(const char *prefix, int step, const gpt_t *m, float *const arr[3]);
int ckpt_load_whole(const char *prefix, const gpt_t *m, float *const arr[3], int *step);
/* A split model's (gpt_init_tp, gpt_init_ep) whole checkpoint. Collective over group, the
 * ranks holding one replica's shards: they sum their pieces (the tensors every shard holds
 * counted once, from the rank passing whole) and the rank passing writer saves the sum.
 * 0, or -1 with a message (the same on every rank of the group but for writing). */
int ckpt_save_split(const char *prefix, int step, const gpt_t *part, float *const arr[3],
                    weft_comm_t group, int whole, int writer);
/* Any checkpoint of part's model (a whole one, or a data-parallel run's shards), cut to
 * part's shard. */
int ckpt_load_split(const char *prefix, const gpt_t *part, float *const arr[3], int *step);

#endif
