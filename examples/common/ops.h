/* The GPT's back ends: memory and the operations, forward and backward, behind one vtable,
 * so that the passes (gpt_pass.c) and the trainers are one code path over the CPU (ops_cpu.c,
 * f32 loops) and CUDA (ops_cuda.cu, f32 with cuBLAS). Shapes: N rows (batch x sequence) of C
 * channels; backward functions add into their gradient outputs. Pointers are the back end's
 * memory (alloc's) unless named host. */
#ifndef WEFT_EXAMPLES_OPS_H
#define WEFT_EXAMPLES_OPS_H

#include <stddef.h>

#include "moe_ops.h"

typedef struct {
  float lr, beta1, beta2, eps, weight_decay;
} adamw_t;

typedef struct {
  const char *name; /* "cpu", "cuda" */
  /* ---- memory and order ---- */
  void *(*alloc)(void *ctx, size_t bytes); /* zeroed; NULL when out of memory */
  void (*release)(void *ctx, void *p);     /* NULL is fine */
  void (*zero)(void *ctx, void *p, size_t bytes);
  void (*copy)(void *ctx, void *dst, const void *src, size_t bytes);
  void (*put)(void *ctx, void *dst, const void *host, size_t bytes); /* host may be reused */
  int (*get)(void *ctx, void *host, const void *src, size_t bytes);  /* waits: 0 or -1 */
  int (*finish)(void *ctx); /* waits for every queued operation: 0, or -1 with a message */
  void (*close)(void *ctx); /* frees the state; NULL: none */
  /* Streams for weft's operations on this back end's buffers (a weft host stream, or a
   * cudaStream_t as weft_stream_t): made, waited for (0 or -1), and fenced: work queued on
   * it from now on starts after every operation queued so far. */
  int (*stream_open)(void *ctx, void **stream);
  void (*stream_close)(void *ctx, void *stream);
  int (*stream_wait)(void *ctx, void *stream);
  void (*fence)(void *ctx, void *stream);
  /* A mark: a point on stream after the work queued on it so far (*mark made at its first
   * record, moved by the next), so that the host can wait for one exchange while later ones
   * stay queued (0, or -1 with a message); freed by mark_close (NULL is fine). The CPU's
   * streams order nothing of the math: its marks are NULL and its waits return at once. */
  int (*mark)(void *ctx, void *stream, void **mark);
  int (*mark_wait)(void *ctx, void *mark);
  void (*mark_close)(void *ctx, void *mark);
  /* ---- the model's operations ---- */
  void (*encoder_fwd)(void *ctx, float *out, const int *tokens, const float *wte, const float *wpe,
                      int B, int T, int C);
  void (*encoder_bwd)(void *ctx, float *dwte, float *dwpe, const float *dout, const int *tokens,
                      int B, int T, int C);
  void (*layernorm_fwd)(void *ctx, float *out, float *mean, float *rstd, const float *in,
                        const float *w, const float *b, int N, int C);
  void (*layernorm_bwd)(void *ctx, float *din, float *dw, float *db, const float *dout,
                        const float *in, const float *w, const float *mean, const float *rstd,
                        int N, int C);
  /* out[N][OC] = in[N][C] . w[OC][C]^T + bias (bias may be NULL) */
  void (*matmul_fwd)(void *ctx, float *out, const float *in, const float *w, const float *bias,
                     int N, int C, int OC);
  /* out[N][OC] += bias; dbias += the column sums of dout */
  void (*bias_fwd)(void *ctx, float *out, const float *bias, int N, int OC);
  void (*bias_bwd)(void *ctx, float *dbias, const float *dout, int N, int OC);
  void (*matmul_bwd)(void *ctx, float *din, float *dw, float *dbias, const float *dout,
                     const float *in, const float *w, int N, int C, int OC);
  /* qkv [B][T][3C] -> out [B][T][C]; att (attention_keep floats) keeps what the backward
   * needs, in the back end's form: the softmax [B][NH][T][T] (CUDA with bf16 products: each
   * query row's log-sum-exp [B][NH][T], where the head size suits the fused kernels; else
   * the softmax as bf16, in the first half) */
  void (*attention_fwd)(void *ctx, float *out, float *att, const float *qkv, int B, int T, int C,
                        int NH);
  /* out: the forward's; datt: scratch of T floats (the CPU's; CUDA keeps its own) */
  void (*attention_bwd)(void *ctx, float *dqkv, const float *dout, const float *qkv,
                        const float *out, const float *att, int B, int T, int C, int NH,
                        float *datt);
  /* the floats att holds for that shape */
  size_t (*attention_keep)(void *ctx, int B, int T, int C, int NH);
  void (*gelu_fwd)(void *ctx, float *out, const float *in, int n);
  void (*gelu_bwd)(void *ctx, float *din, const float *in, const float *dout, int n);
  void (*add)(void *ctx, float *out, const float *a, const float *b, int n);
  void (*accumulate)(void *ctx, float *dst, const float *src, int n); /* dst += src */
  /* losses[N] and probs[N][V] from logits; returns the mean loss (waits for it) */
  float (*xent_fwd)(void *ctx, float *losses, float *probs, const float *logits, const int *targets,
                    int N, int V);
  /* dlogits += (probs - onehot(target)) * scale */
  void (*xent_bwd)(void *ctx, float *dlogits, const float *probs, const int *targets, int N, int V,
                   float scale);
  /* AdamW over n parameters; step counts from 1 */
  void (*adamw)(void *ctx, const adamw_t *o, int step, float *params, const float *grads, float *m,
                float *v, size_t n);
} gpt_ops_vt_t;

/* A back end: its vtables (the model's, the mixture of experts') and its state (the CPU's is
 * NULL). */
typedef struct {
  const gpt_ops_vt_t *vt;
  void *ctx;
  const moe_ops_vt_t *moe;
} gpt_ops_t;

extern const gpt_ops_t gpt_ops_cpu;

/* CUDA on device (its own stream and cuBLAS handle), the products in f32, or with bf16 on
 * bf16 copies of their inputs (tensor cores; f32 sums, results and storage): 0, or -1 with
 * the reason in why (no device, or built without CUDA). */
int gpt_ops_cuda_open(gpt_ops_t *ops, int device, int bf16, char *why, size_t size);
void gpt_ops_close(gpt_ops_t *ops); /* the CPU's: nothing */
int gpt_cuda_devices(void);         /* CUDA devices seen (0 without CUDA) */

/* Calls operation f of the back end m->ops (inside functions with a gpt_t *m). */
#define OP(f, ...) m->ops->vt->f(m->ops->ctx, __VA_ARGS__)
/* The same for the mixture of experts' operations (moe_ops.h). */
#define MOP(f, ...) m->ops->moe->f(m->ops->ctx, __VA_ARGS__)

/* AdamW on host arrays (the CPU back end's adamw). */
void adamw_step(const adamw_t *o, int step, float *params, const float *grads, float *m, float *v,
                size_t n);

#endif
