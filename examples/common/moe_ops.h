/* The mixture of experts' own operations (moe_layer.c), behind a vtable of each back end
 * (gpt_ops_t's moe) beside the model's: the gate's softmax, top-k and balance loss, the
 * rows' backward and the in-process routing's gather and scatter. CPU: moe_ops_cpu.c; CUDA:
 * moe_ops_cuda.cu. Pointers are the back end's memory. */
#ifndef WEFT_EXAMPLES_MOE_OPS_H
#define WEFT_EXAMPLES_MOE_OPS_H

typedef struct {
  /* p[N][E]: each row replaced by its softmax */
  void (*softmax)(void *ctx, float *p, int N, int E);
  /* Each token's top k of probs[N][E] (N = B * T; ties to the lower id) into ids and w (its
   * probability), then, with cap > 0, each sequence's choices of an expert past cap dropped in
   * token order (id -1, weight 0); f[B][E]: the share of a sequence's T * k choices that went
   * to each expert before the drops. */
  void (*gate)(void *ctx, int *ids, float *w, float *f, const float *probs, int B, int T, int E,
               int k, float cap);
  /* The sum over sequences b and experts e of f[b][e] * the sum of probs[b][t][e] over the
   * sequence's tokens (waits for it). */
  double (*balance)(void *ctx, const float *f, const float *probs, int B, int T, int E);
  /* The gate's backward: dp[N][E] = d/d(logits) through the softmax, from bal * f (the balance
   * loss' gradient per probability) plus, on each kept choice, its weight's gradient, which
   * y[N][C] holds at column j of the token's row for choice j. */
  void (*gate_bwd)(void *ctx, float *dp, const float *probs, const float *f, const int *ids,
                   const float *y, int N, int T, int E, int k, int C, float bal);
  /* For each of R rows of C: gr's row zero but for column slot[r], set to dy[r] . ry[r] (the
   * row's gate weight's gradient); then dy[r] *= rw[r]. */
  void (*rows_bwd)(void *ctx, float *gr, float *dy, const float *ry, const float *rw,
                   const float *slot, long R, int C);
  /* In-process routing, rtok[r] = token * k + choice: rows[r] = x[token], and with w set
   * rw[r] = w[rtok[r]]. */
  void (*gather)(void *ctx, float *rows, float *rw, const float *x, const float *w, const int *rtok,
                 long R, int C, int k);
  /* y[N][C] = for each token the sum over its rows of rw[r] * rows[r] (rw NULL: 1). */
  void (*scatter)(void *ctx, float *y, const float *rows, const float *rw, const int *rtok, long R,
                  int C, int k, int N);
} moe_ops_vt_t;

extern const moe_ops_vt_t moe_ops_cpu;

#endif
