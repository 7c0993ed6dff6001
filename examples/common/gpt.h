/* A small GPT-style decoder for weft's training examples: token and position embeddings,
 * pre-norm blocks of causal self-attention and a GELU MLP, a tied output head and
 * cross-entropy; forward, backward and AdamW in f32 (CPU back end: ops_cpu.c). Parameters
 * live in one flat array, each layer's tensors together, so that a data-parallel run can
 * shard, reduce and gather them as plain ranges; a tensor-parallel model holds one shard of
 * each layer's matrices (Megatron's split), an expert-parallel one a share of the experts
 * of a mixture-of-experts model, and each reaches its peers through hooks. */
#ifndef WEFT_EXAMPLES_GPT_H
#define WEFT_EXAMPLES_GPT_H

#include <stddef.h>
#include <stdint.h>

#include "ops.h"

typedef struct {
  int vocab, seq, channels, layers, heads;
  /* Mixture of experts (experts > 0): each layer's MLP is `experts` MLPs of the same shape;
   * a gate sends every token to the topk experts of highest probability, weighting each
   * one's output by it. capacity > 0: a sequence sends at most ceil(capacity * seq * topk /
   * experts) of its tokens to one expert (later choices dropped; 0: dropless). aux: the
   * weight of the sequence-wise load-balancing loss added to the cross-entropy. */
  int experts, topk;
  float capacity, aux;
} gpt_config_t;

/* A layer's tensors in order, and the model's: [wte, wpe] [layer 0] ... [lnf]. */
enum {
  P_LN1W,
  P_LN1B,
  P_QKVW,
  P_QKVB,
  P_ATTW,
  P_ATTB,
  P_LN2W,
  P_LN2B,
  P_GATEW, /* [experts][channels]; none in a dense model */
  P_FCW,   /* FCW to PROJB: one MLP's, or every local expert's in turn (expert-major) */
  P_FCB,
  P_PROJW,
  P_PROJB,
  P_NLAYER
};

typedef struct {
  gpt_config_t c;
  int tp, tp_rank;   /* tensor-parallel shards of each layer, and this model's (1, 0: whole) */
  int sp;            /* sequence parallel: norms and residuals on this rank's N / tp rows */
  int ep, ep_rank;   /* expert-parallel shards (the experts split evenly), and this one */
  int local_experts; /* experts / ep (0: a dense model) */
  size_t shared;     /* floats at the start of each layer held whole by every expert shard */
  size_t max_rows;   /* the most token rows this shard's experts receive in one layer */
  int *ids, *rtok;   /* MoE: each layer's top-k ids; in-process routing's row map (back end's) */
  int *route_host;   /* MoE: host scratch of in-process routing (every layer's ids, then a map) */
  int64_t *counts, *offsets; /* MoE: each layer's rows per local expert, first rows */
  long *rows;                /* MoE: each layer's rows received (per micro-batch: moe_layer.h) */
  size_t nparams;
  size_t layer_size;    /* floats in one layer */
  size_t layer_first;   /* offset of layer 0 (after wte and wpe) */
  size_t lnf;           /* offset of the final norm's weight (its bias follows) */
  int batch;            /* the activations' batch (gpt_forward's B is at most this) */
  const gpt_ops_t *ops; /* the back end: act, tok and tgt are its memory */
  float *act;           /* activations of the last forward, in one block */
  size_t nact;
  int *tok, *tgt; /* the last forward's tokens and targets ([batch][seq]) */
} gpt_t;

/* Sizes and offsets for c; activations for batches up to batch. 0, or -1 (bad config,
 * out of memory). */
int gpt_init(gpt_t *m, const gpt_config_t *c, int batch);
/* Shard tp_rank of tp of the model: each layer keeps heads / tp of the attention heads (its
 * rows of the QKV matrix and bias, its columns of the attention's output projection) and
 * 4 * channels / tp of the MLP's hidden units (rows of the first matrix and bias, columns of
 * the second); norms, the output projections' biases, embeddings and the final norm are
 * whole on every shard. sp: sequence parallel (every forward's B * seq a multiple of tp). */
int gpt_init_tp(gpt_t *m, const gpt_config_t *c, int batch, int tp, int tp_rank, int sp);
/* gpt_init_tp on a back end (gpt_init and gpt_init_tp: gpt_ops_cpu; ops must outlive m): the
 * parameters and gradients the hooks return, and every activation, are its memory. */
int gpt_init_on(gpt_t *m, const gpt_ops_t *ops, const gpt_config_t *c, int batch, int tp,
                int tp_rank, int sp);
/* Shard ep_rank of ep of a mixture-of-experts model: experts / ep of each layer's experts
 * (ep_rank's run of them); the rest of the model whole. */
int gpt_init_ep(gpt_t *m, const gpt_config_t *c, int batch, int ep, int ep_rank);
int gpt_init_ep_on(gpt_t *m, const gpt_ops_t *ops, const gpt_config_t *c, int batch, int ep,
                   int ep_rank); /* gpt_init_ep on a back end */
/* part's parameters (a gpt_init_tp or gpt_init_ep shard) from full's (the whole model's). */
void gpt_shard(const gpt_t *full, const gpt_t *part, const float *fp, float *pp);
/* The reverse: part's pieces of fp written from pp, the rest of fp untouched; whole: also
 * the tensors every shard holds (norms, biases, gates, embeddings), else only those split. */
void gpt_unshard(const gpt_t *full, const gpt_t *part, const float *pp, float *fp, int whole);
/* The whole model's initial weights (gpt_init_params) cut to part's shard: 0, or -1 when out
 * of memory. */
int gpt_init_shard_params(const gpt_t *part, unsigned long long seed, float *pp);
/* Whether a layer tensor is whole on every shard but, with sp, gets only this rank's rows'
 * gradient (the norms, the output projections' biases): the group must sum it. */
int gpt_tp_summed(int p);
void gpt_free(gpt_t *m);
/* Offset of tensor p of layer l in the flat array. */
size_t gpt_param(const gpt_t *m, int l, int p);
/* Deterministic initial weights (GPT-2's: normal 0.02, projections scaled by layers). */
void gpt_init_params(const gpt_t *m, float *params, unsigned long long seed);

/* Where the passes find parameters and gradients, a block at a time: layer l (0..layers-1,
 * layer_size floats, tensors at gpt_param(m, l, p) - gpt_param(m, l, 0)), GPT_EMBED (the
 * token and position embeddings, layer_first floats) and GPT_FINAL (the final norm's weight
 * and bias, 2 * channels). A pass asks for a block once, when it starts using it, so that a
 * sharded run can gather it then (and prefetch the next). done, if set, is told each block
 * whose gradients are final: GPT_FINAL first, then the layers from the last, then GPT_EMBED
 * (the tied head adds to it at the start of the backward, the embedding at the end). */
enum { GPT_EMBED = -1, GPT_FINAL = -2 };
typedef struct {
  const float *(*params)(void *arg, int block);
  float *(*grads)(void *arg, int block);
  void (*done)(void *arg, int block);
  /* Tensor parallel (tp > 1) only. reduce: the sum over the group of every rank's partial
   * into out (n floats): with sp this rank's rows of it (partial holds tp * n: a
   * reduce-scatter), else all of it (an allreduce). gather: starts collecting every rank's
   * shard (n floats) into full ([tp][n], this rank's included); gather_next then returns the
   * index of a shard present in full, each once, this rank's first, so that work on one can
   * run while the next arrives. */
  void (*reduce)(void *arg, const float *partial, float *out, size_t n);
  void (*gather)(void *arg, const float *shard, float *full, size_t n);
  int (*gather_next)(void *arg);
  /* Mixture of experts (route, dispatch and combine NULL: routed within the process, each
   * choice to local expert id % local_experts: all of them in an unsplit model). key names a
   * layout: route makes it from this rank's ids ([N][topk], -1: dropped) and returns the
   * rows received (-1: failed) with each local expert's count and first row. dispatch: each
   * token's row of x ([N][channels]) into its rows, with w ([N][topk], NULL: none) into rw
   * (one a row); combine: y[t] = the sum over token t's rows of rw[r] * rows[r] (rw NULL: 1).
   * With wait set they may return at once: wait(key) returns when key's are done. */
  long (*route)(void *arg, int key, const int *ids, int N, int64_t *counts, int64_t *offsets);
  void (*dispatch)(void *arg, int key, const float *x, const float *w, float *rows, float *rw);
  void (*combine)(void *arg, int key, const float *rows, const float *rw, float *y);
  void (*wait)(void *arg, int key);
  void *arg;
} gpt_io_t;

/* The blocks in storage order, i = 0 .. layers + 1: every layer, GPT_FINAL, GPT_EMBED; and a
 * block's first float in the flat array and its floats. */
int gpt_block_at(const gpt_t *m, int i);
size_t gpt_block_first(const gpt_t *m, int block);
size_t gpt_block_size(const gpt_t *m, int block);

/* The plain case: every block inside flat [nparams] arrays (grads may be NULL for a
 * forward). */
typedef struct {
  const gpt_t *m;
  const float *params;
  float *grads;
} gpt_flat_t;
gpt_io_t gpt_flat_io(gpt_flat_t *flat);

/* Mean cross-entropy of the next-token targets over B x T tokens (plus, with experts, the
 * balance loss); keeps the activations for gpt_backward. tokens and targets are host [B][T] in
 * [0, vocab). */
float gpt_forward(gpt_t *m, const gpt_io_t *io, const int *tokens, const int *targets, int B);
/* Adds d(mean loss)/d(params) * scale to the gradient blocks (the last forward's batch). */
void gpt_backward(gpt_t *m, const gpt_io_t *io, int B, float scale);

/* The hooks of a forward (backward = 0) or a backward of B sequences, in their order, with
 * no math: for timing a run's communication alone. */
void gpt_io_replay(const gpt_t *m, const gpt_io_t *io, int B, int backward);

#endif
