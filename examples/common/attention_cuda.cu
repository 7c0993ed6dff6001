/* Causal self-attention on CUDA (ops.h's attention_fwd and _bwd): the scores and the products
 * by cuBLAS, per batch element with the heads as a strided batch, the softmax and its backward
 * a warp a row. With bf16 products, att keeps the softmax as bf16 (the form the products read)
 * in the first half of its floats, and the scores and their gradient pass through f32 scratch
 * one batch element at a time: no f32 copy of a [T][T] matrix is converted after the fact. */
#include <math.h>

#include "ops_cuda.h"

namespace {

__device__ inline float ld(const float *p) { return *p; }
__device__ inline float ld(const __nv_bfloat16 *p) { return __bfloat162float(*p); }
__device__ inline void st(float *p, float v) { *p = v; }
__device__ inline void st(__nv_bfloat16 *p, float v) { *p = __float2bfloat16_rn(v); }

/* out = the causal softmax of each row of s [rows][T] (out may be s); row r is query r % T */
template <typename O> __global__ void k_softmax_fwd(O *out, const float *s, int T, long rows) {
  long row = (long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const float *a = s + row * T;
  O *o = out + row * T;
  int t = (int)(row % T);
  float most = -INFINITY, sum = 0;
  for (int u = lane; u <= t; u += 32)
    most = fmaxf(most, a[u]);
  most = warp_max(most);
  for (int u = lane; u <= t; u += 32)
    sum += expf(a[u] - most);
  sum = warp_sum(sum);
  for (int u = lane; u < T; u += 32)
    st(o + u, u <= t ? expf(a[u] - most) / sum : 0.0f);
}

/* ds = att * (d - sum(att * d)) * scale (ds may be d); past the diagonal att is 0, so ds is */
template <typename P, typename O>
__global__ void k_softmax_bwd(O *ds, const float *d, const P *att, int T, float scale, long rows) {
  long row = (long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const P *a = att + row * T;
  const float *g = d + row * T;
  O *o = ds + row * T;
  int t = (int)(row % T);
  float dot = 0;
  for (int u = lane; u <= t; u += 32)
    dot += ld(a + u) * g[u];
  dot = warp_sum(dot);
  for (int u = lane; u < T; u += 32)
    st(o + u, u <= t ? ld(a + u) * (g[u] - dot) * scale : 0.0f);
}

/* the backward's two forms, named: a launch's kernel is one macro argument */
const auto k_half_bwd = k_softmax_bwd<__nv_bfloat16, __nv_bfloat16>;
const auto k_float_bwd = k_softmax_bwd<float, float>;

/* Batched over the heads of one batch element: row-major S[t][u] = alpha * X[t] . Y[u] for
 * X, Y [T][hs] with row stride ld (S [NH][T][T] f32). */
void scores(gpt_cuda_t *x, float *S, const void *X, int ldx, const void *Y, int ldy, int T, int hs,
            int NH, float alpha) {
  gpt_cuda_gemm(x, CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, alpha, Y, ldy, hs, X, ldx, hs, 0.0f, S, T,
                (long long)T * T, NH);
}

/* row-major Z[T][hs] (row stride ldz) = beta * Z + P[T][T] . Y[T][hs], or with transpose
 * set P^T . Y; batched over the heads */
void apply(gpt_cuda_t *x, float *Z, int ldz, const void *P, const void *Y, int ldy, int T, int hs,
           int NH, int transpose, float beta) {
  gpt_cuda_gemm(x, CUBLAS_OP_N, transpose ? CUBLAS_OP_T : CUBLAS_OP_N, hs, T, T, 1.0f, Y, ldy, hs,
                P, T, (long long)T * T, beta, Z, ldz, hs, NH);
}

int rows_blocks(long rows) { return (int)((rows + 7) / 8); } /* a warp a row */

} // namespace

void gpt_cuda_attention_fwd(void *c, float *out, float *att, const float *qkv, int B, int T, int C,
                            int NH) {
  gpt_cuda_t *x = C_(c);
  if (gpt_cuda_fused_fwd(x, out, att, qkv, B, T, C, NH) == 0) return;
  int hs = C / NH;
  long q3 = (long)T * 3 * C, tt = (long)NH * T * T, rows = (long)NH * T;
  float scale = 1.0f / sqrtf((float)hs);
  const void *Q = gpt_cuda_in(x, 0, qkv, (size_t)B * q3);
  float *S = x->bf16 ? gpt_cuda_scratch(x, (size_t)tt) : NULL;
  if (x->bf16 && !S) return;
  for (int b = 0; b < B; b++) {
    const void *q = gpt_cuda_at(x, Q, b * q3), *k = gpt_cuda_at(x, Q, b * q3 + C);
    float *s = x->bf16 ? S : att + b * tt;
    scores(x, s, q, 3 * C, k, 3 * C, T, hs, NH, scale);
    if (x->bf16)
      LAUNCH(c, k_softmax_fwd<__nv_bfloat16>, rows_blocks(rows), TPB, 0,
             (__nv_bfloat16 *)att + b * tt, s, T, rows);
    else
      LAUNCH(c, k_softmax_fwd<float>, rows_blocks(rows), TPB, 0, s, s, T, rows);
    apply(x, out + (long)b * T * C, C, gpt_cuda_at(x, att, b * tt),
          gpt_cuda_at(x, Q, b * q3 + 2 * C), 3 * C, T, hs, NH, 0, 0.0f);
  }
}

size_t gpt_cuda_attention_keep(void *c, int B, int T, int C, int NH) {
  size_t rows = (size_t)B * NH * T;
  return gpt_cuda_fused_serves(C_(c), C, NH) == 0 ? rows : rows * T;
}

void gpt_cuda_attention_bwd(void *c, float *dqkv, const float *dout, const float *qkv,
                            const float *out, const float *att, int B, int T, int C, int NH,
                            float *datt) {
  (void)datt;
  gpt_cuda_t *x = C_(c);
  if (gpt_cuda_fused_bwd(x, dqkv, dout, qkv, out, att, B, T, C, NH) == 0) return;
  int hs = C / NH;
  long q3 = (long)T * 3 * C, tt = (long)NH * T * T, tc = (long)T * C, rows = (long)NH * T;
  float scale = 1.0f / sqrtf((float)hs);
  float *ds = gpt_cuda_scratch(x, (size_t)tt);
  __nv_bfloat16 *dsh = x->bf16 ? gpt_cuda_half(x, 3, (size_t)tt) : NULL;
  if (!ds || (x->bf16 && !dsh)) return;
  const void *Q = gpt_cuda_in(x, 0, qkv, (size_t)B * q3),
             *DY = gpt_cuda_in(x, 2, dout, (size_t)B * tc);
  const void *DS = x->bf16 ? (const void *)dsh : ds;
  for (int b = 0; b < B; b++) {
    const void *q = gpt_cuda_at(x, Q, b * q3), *k = gpt_cuda_at(x, Q, b * q3 + C);
    const void *v = gpt_cuda_at(x, Q, b * q3 + 2 * C), *dy = gpt_cuda_at(x, DY, b * tc);
    const void *p = gpt_cuda_at(x, att, b * tt);
    float *dq = dqkv + b * q3;
    scores(x, ds, dy, C, v, 3 * C, T, hs, NH, 1.0f);           /* dP = dY . V^T */
    apply(x, dq + 2 * C, 3 * C, p, dy, C, T, hs, NH, 1, 1.0f); /* dV += P^T . dY */
    if (x->bf16)
      LAUNCH(c, k_half_bwd, rows_blocks(rows), TPB, 0, dsh, ds, (const __nv_bfloat16 *)p, T, scale,
             rows);
    else
      LAUNCH(c, k_float_bwd, rows_blocks(rows), TPB, 0, ds, ds, (const float *)p, T, scale, rows);
    apply(x, dq, 3 * C, DS, k, 3 * C, T, hs, NH, 0, 1.0f);     /* dQ += dS . K */
    apply(x, dq + C, 3 * C, DS, q, 3 * C, T, hs, NH, 1, 1.0f); /* dK += dS^T . Q */
  }
}
