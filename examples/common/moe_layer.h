/* The example GPT's mixture-of-experts MLP (gpt.c runs it in models with experts): the gate,
 * top-k routing with an optional capacity, the sequence-wise balance loss, each local
 * expert's MLP over the rows it receives, and the weighted combine; the backward the same
 * way back. Rows travel through gpt_io_t's route, dispatch and combine hooks, or within the
 * process when the hooks are NULL. */
#ifndef WEFT_EXAMPLES_MOE_LAYER_H
#define WEFT_EXAMPLES_MOE_LAYER_H

#include "gpt.h"

/* A layer's batch goes through its experts in MOE_MICRO micro-batches of whole sequences
 * (one when B is odd), so that one's exchange can run while another's experts compute; the
 * hooks' key l * MOE_MICRO + u names micro-batch u's layout. */
enum { MOE_MICRO = 2 };

/* One layer's activations and scratch (gpt.c lays them out). Shapes: N tokens, E experts,
 * k = topk, R = m->max_rows rows (every micro-batch's, one after the other), H = 4 *
 * channels; counts, offsets and rows hold MOE_MICRO sets. */
typedef struct {
  const float *x;                /* [N][C] the norm's output: the gate's and experts' input */
  float *probs, *w, *f;          /* [N][E] gate probabilities, [N][k] chosen weights, [B][E] the
                                    share of each sequence's choices per expert (before drops) */
  float *rx, *rw, *rh, *rg, *ry; /* rows: input, gate weight, hidden, after GELU, output */
  int *ids, *rtok;               /* [N][k]; in-process routing: each row's token * k + slot */
  int64_t *counts, *offsets;     /* per local expert */
  long *rows;
} moe_act_t;

/* Backward scratch: [R][C] dy, dx, gr, [R][H] dh, dg, [R] rslot, [N][k] slots, [N][E] dp,
 * [N][C] y, yx. */
typedef struct {
  float *dy, *dx, *gr, *dh, *dg, *rslot, *slots, *dp, *y, *yx;
} moe_scratch_t;

/* out[N][C] = the layer's MLP of a->x; returns the balance loss (weighted, mean over the B
 * sequences). lw: the layer's parameters. */
float moe_forward(const gpt_t *m, const gpt_io_t *io, int l, moe_act_t *a, const float *lw,
                  float *out, int B);
/* Adds d/dx of the layer (dout: the gradient at out, already scaled) into dx, and to lg the
 * layer's gradients; scale: the loss' (for the balance loss' share). */
void moe_backward(const gpt_t *m, const gpt_io_t *io, int l, const moe_act_t *a,
                  const moe_scratch_t *s, const float *lw, float *lg, const float *dout, float *dx,
                  int B, float scale);

/* The hooks of layer l's forward (backward = 0) or backward, in order, with no math, on the
 * routing in a->ids (for timing communication alone). */
void moe_replay(const gpt_t *m, const gpt_io_t *io, int l, const moe_act_t *a,
                const moe_scratch_t *s, int B, int backward);

#endif
