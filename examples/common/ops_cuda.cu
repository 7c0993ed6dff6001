/* The GPT's CUDA back end: cuBLAS for the matrix products (attention's included, per batch
 * element with the heads as a strided batch), one small kernel for each other operation, all
 * on the back end's own stream. Same shapes and sums as ops_cpu.c (ops.h); parameters'
 * gradients from many rows are summed with atomics, so the order of a sum varies from run to
 * run. Storage is f32; with bf16 the products read bf16 copies of their inputs (tensor cores,
 * f32 accumulation and results). */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

extern "C" {
#include "ops.h"
}
#include "ops_cuda.h"

namespace {

struct ctx_t {
  int device;
  cudaStream_t s;
  cudaEvent_t ev;
  cublasHandle_t h;
  float *scratch; /* attention's backward: one batch element's scores [NH][T][T] */
  size_t scratch_n;
  double *loss; /* the mean loss */
  int oom;      /* 1: an operation found no memory, 2: a norm too wide for shared memory; the next
                   finish fails */
  int bf16;     /* products on bf16 copies of their inputs */
  int smem;     /* bytes of shared memory a block may have (a norm's backward needs 8 C) */
  __nv_bfloat16 *half[4]; /* those copies, by slot */
  size_t half_n[4];
};

ctx_t *C_(void *c) { return static_cast<ctx_t *>(c); }

/* ---- kernels ---- */

__global__ void k_encoder_fwd(float *out, const int *tok, const float *wte, const float *wpe, int T,
                              int C, long n) {
  GRID_STRIDE(i, n) {
    long row = i / C;
    int c = (int)(i % C), t = (int)(row % T);
    out[i] = wte[(long)tok[row] * C + c] + wpe[(long)t * C + c];
  }
}

__global__ void k_encoder_bwd(float *dwte, float *dwpe, const float *dout, const int *tok, int T,
                              int C, long n) {
  GRID_STRIDE(i, n) {
    long row = i / C;
    int c = (int)(i % C), t = (int)(row % T);
    atomicAdd(&dwte[(long)tok[row] * C + c], dout[i]);
    atomicAdd(&dwpe[(long)t * C + c], dout[i]);
  }
}

/* one warp a row */
__global__ void k_layernorm_fwd(float *out, float *mean, float *rstd, const float *in,
                                const float *w, const float *b, int N, int C) {
  int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  const float *x = in + (long)row * C;
  float m = 0, v = 0;
  for (int i = lane; i < C; i += 32)
    m += x[i];
  m = warp_sum(m) / (float)C;
  for (int i = lane; i < C; i += 32)
    v += (x[i] - m) * (x[i] - m);
  float s = rsqrtf(warp_sum(v) / (float)C + 1e-5f);
  for (int i = lane; i < C; i += 32)
    out[(long)row * C + i] = (x[i] - m) * s * w[i] + b[i];
  if (lane == 0) mean[row] = m, rstd[row] = s;
}

/* a warp a row; the block's dw and db gathered in shared memory, then added once */
__global__ void k_layernorm_bwd(float *din, float *dw, float *db, const float *dout,
                                const float *in, const float *w, const float *mean,
                                const float *rstd, int N, int C) {
  extern __shared__ float sh[]; /* [2][C] */
  float *sdw = sh, *sdb = sh + C;
  for (int i = threadIdx.x; i < 2 * C; i += blockDim.x)
    sh[i] = 0;
  __syncthreads();
  int warps = blockDim.x / 32, lane = threadIdx.x % 32;
  for (int row = blockIdx.x * warps + threadIdx.x / 32; row < N; row += gridDim.x * warps) {
    const float *x = in + (long)row * C, *d = dout + (long)row * C;
    float *dx = din + (long)row * C, m = mean[row], s = rstd[row], dm = 0, dnm = 0;
    for (int i = lane; i < C; i += 32) {
      float norm = (x[i] - m) * s, dn = w[i] * d[i];
      dm += dn, dnm += dn * norm;
    }
    dm = warp_sum(dm) / (float)C, dnm = warp_sum(dnm) / (float)C;
    for (int i = lane; i < C; i += 32) {
      float norm = (x[i] - m) * s, dn = w[i] * d[i];
      atomicAdd(&sdb[i], d[i]);
      atomicAdd(&sdw[i], norm * d[i]);
      dx[i] += (dn - dm - norm * dnm) * s;
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < C; i += blockDim.x)
    atomicAdd(&dw[i], sdw[i]), atomicAdd(&db[i], sdb[i]);
}

__global__ void k_bias_fwd(float *out, const float *bias, int OC, long n) {
  GRID_STRIDE(i, n) out[i] += bias[i % OC];
}

/* blocks of 32 columns x 8 row lanes */
__global__ void k_bias_bwd(float *dbias, const float *dout, int N, int OC) {
  __shared__ float part[8][33];
  int o = blockIdx.x * 32 + threadIdx.x;
  float acc = 0;
  if (o < OC)
    for (int n = threadIdx.y; n < N; n += 8)
      acc += dout[(long)n * OC + o];
  part[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && o < OC) {
    for (int y = 1; y < 8; y++)
      acc += part[y][threadIdx.x];
    dbias[o] += acc;
  }
}

/* causal softmax of each row of scores [rows][T] in place; row r is query r % T */
__global__ void k_softmax_fwd(float *att, int T, long rows) {
  long row = (long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  if (row >= rows) return;
  float *a = att + row * T;
  int t = (int)(row % T);
  float most = -INFINITY, sum = 0;
  for (int u = lane; u <= t; u += 32)
    most = fmaxf(most, a[u]);
  most = warp_max(most);
  for (int u = lane; u <= t; u += 32)
    sum += expf(a[u] - most);
  sum = warp_sum(sum);
  for (int u = lane; u < T; u += 32)
    a[u] = u <= t ? expf(a[u] - most) / sum : 0.0f;
}

/* datt[r][u] = att * (datt - sum(att * datt)) * scale, in place */
__global__ void k_softmax_bwd(float *datt, const float *att, int T, float scale, long rows) {
  long row = (long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const float *a = att + row * T;
  float *d = datt + row * T, dot = 0;
  for (int u = lane; u < T; u += 32)
    dot += a[u] * d[u];
  dot = warp_sum(dot);
  for (int u = lane; u < T; u += 32)
    d[u] = a[u] * (d[u] - dot) * scale;
}

#define GELU_S 0.7978845608f

__global__ void k_gelu_fwd(float *out, const float *in, long n) {
  GRID_STRIDE(i, n) {
    float x = in[i];
    out[i] = 0.5f * x * (1.0f + tanhf(GELU_S * (x + 0.044715f * x * x * x)));
  }
}

__global__ void k_gelu_bwd(float *din, const float *in, const float *dout, long n) {
  GRID_STRIDE(i, n) {
    float x = in[i], th = tanhf(GELU_S * (x + 0.044715f * x * x * x));
    float dth = (1.0f - th * th) * GELU_S * (1.0f + 3.0f * 0.044715f * x * x);
    din[i] += dout[i] * (0.5f * (1.0f + th) + 0.5f * x * dth);
  }
}

__global__ void k_add(float *out, const float *a, const float *b, long n) {
  GRID_STRIDE(i, n) out[i] = a[i] + b[i];
}

__global__ void k_accumulate(float *dst, const float *src, long n) {
  GRID_STRIDE(i, n) dst[i] += src[i];
}

/* a warp a row */
__global__ void k_xent_fwd(float *losses, float *probs, const float *logits, const int *tgt, int N,
                           int V) {
  int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  const float *z = logits + (long)row * V;
  float *p = probs + (long)row * V, most = -INFINITY, sum = 0;
  for (int i = lane; i < V; i += 32)
    most = fmaxf(most, z[i]);
  most = warp_max(most);
  for (int i = lane; i < V; i += 32)
    sum += expf(z[i] - most);
  sum = warp_sum(sum);
  for (int i = lane; i < V; i += 32)
    p[i] = expf(z[i] - most) / sum;
  __syncwarp();
  if (lane == 0) losses[row] = -logf(p[tgt[row]]);
}

/* one block: the mean of losses[N], in double as the CPU's */
__global__ void k_mean(double *out, const float *losses, int N) {
  __shared__ double part[TPB];
  double acc = 0;
  for (int i = threadIdx.x; i < N; i += blockDim.x)
    acc += losses[i];
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    if ((int)threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = N ? part[0] / N : 0.0;
}

__global__ void k_xent_bwd(float *dlogits, const float *probs, const int *tgt, int V, float scale,
                           long n) {
  GRID_STRIDE(i, n) {
    long row = i / V;
    dlogits[i] += (probs[i] - ((int)(i % V) == tgt[row] ? 1.0f : 0.0f)) * scale;
  }
}

__global__ void k_to_bf16(__nv_bfloat16 *dst, const float *src, long n) {
  GRID_STRIDE(i, n) dst[i] = __float2bfloat16_rn(src[i]);
}

__global__ void k_adamw(float *p, const float *g, float *m, float *v, adamw_t o, float c1, float c2,
                        long n) {
  GRID_STRIDE(i, n) {
    m[i] = o.beta1 * m[i] + (1.0f - o.beta1) * g[i];
    v[i] = o.beta2 * v[i] + (1.0f - o.beta2) * g[i] * g[i];
    float mh = m[i] / c1, vh = v[i] / c2;
    p[i] -= o.lr * (mh / (sqrtf(vh) + o.eps) + o.weight_decay * p[i]);
  }
}

/* ---- memory and order ---- */

void *cu_alloc(void *c, size_t bytes) {
  void *p = NULL;
  if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) return (void)cudaGetLastError(), nullptr;
  if (cudaMemsetAsync(p, 0, bytes ? bytes : 1, C_(c)->s) != cudaSuccess) {
    cudaFree(p);
    return nullptr;
  }
  return p;
}

void cu_release(void *c, void *p) {
  if (!p) return;
  cudaStreamSynchronize(C_(c)->s);
  cudaFree(p);
}

void cu_zero(void *c, void *p, size_t bytes) {
  if (bytes) cudaMemsetAsync(p, 0, bytes, C_(c)->s);
}

void cu_copy(void *c, void *dst, const void *src, size_t bytes) {
  if (bytes && dst != src) cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, C_(c)->s);
}

int cu_finish(void *c) {
  cudaError_t e = cudaStreamSynchronize(C_(c)->s);
  if (e == cudaSuccess) e = cudaGetLastError();
  if (e == cudaSuccess && C_(c)->oom == 2) {
    fprintf(stderr,
            "gpt (cuda): the channels are too many for a norm's backward (%d bytes of "
            "shared memory a block here)\n",
            C_(c)->smem);
    return -1;
  }
  if (e == cudaSuccess && C_(c)->oom) e = cudaErrorMemoryAllocation;
  if (e == cudaSuccess) return 0;
  fprintf(stderr, "gpt (cuda): %s\n", cudaGetErrorString(e));
  return -1;
}

/* waits, so that the caller may reuse host at once */
void cu_put(void *c, void *dst, const void *host, size_t bytes) {
  if (!bytes) return;
  cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, C_(c)->s);
  cudaStreamSynchronize(C_(c)->s);
}

int cu_get(void *c, void *host, const void *src, size_t bytes) {
  if (bytes) cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, C_(c)->s);
  return cu_finish(c);
}

int cu_stream_open(void *c, void **stream) {
  (void)c;
  cudaStream_t s;
  if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) return -1;
  *stream = s;
  return 0;
}

void cu_stream_close(void *c, void *stream) {
  (void)c;
  if (stream) cudaStreamDestroy(static_cast<cudaStream_t>(stream));
}

int cu_stream_wait(void *c, void *stream) {
  (void)c;
  cudaError_t e = cudaStreamSynchronize(static_cast<cudaStream_t>(stream));
  if (e == cudaSuccess) return 0;
  fprintf(stderr, "gpt (cuda): %s\n", cudaGetErrorString(e));
  return -1;
}

void cu_fence(void *c, void *stream) {
  cudaEventRecord(C_(c)->ev, C_(c)->s);
  cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), C_(c)->ev, 0);
}

void cu_close(void *c) {
  ctx_t *x = C_(c);
  if (!x) return;
  cudaStreamSynchronize(x->s);
  cudaFree(x->scratch), cudaFree(x->loss);
  for (int i = 0; i < 4; i++)
    cudaFree(x->half[i]);
  cublasDestroy(x->h);
  cudaEventDestroy(x->ev);
  cudaStreamDestroy(x->s);
  delete x;
}

/* ---- the model's operations ---- */

void cu_encoder_fwd(void *c, float *out, const int *tokens, const float *wte, const float *wpe,
                    int B, int T, int C) {
  long n = (long)B * T * C;
  k_encoder_fwd<<<blocks(n), TPB, 0, C_(c)->s>>>(out, tokens, wte, wpe, T, C, n);
}

void cu_encoder_bwd(void *c, float *dwte, float *dwpe, const float *dout, const int *tokens, int B,
                    int T, int C) {
  long n = (long)B * T * C;
  k_encoder_bwd<<<blocks(n), TPB, 0, C_(c)->s>>>(dwte, dwpe, dout, tokens, T, C, n);
}

void cu_layernorm_fwd(void *c, float *out, float *mean, float *rstd, const float *in,
                      const float *w, const float *b, int N, int C) {
  k_layernorm_fwd<<<(N + 7) / 8, TPB, 0, C_(c)->s>>>(out, mean, rstd, in, w, b, N, C);
}

void cu_layernorm_bwd(void *c, float *din, float *dw, float *db, const float *dout, const float *in,
                      const float *w, const float *mean, const float *rstd, int N, int C) {
  int g = (N + 7) / 8;
  g = g > 264 ? 264 : g < 1 ? 1 : g;
  if (2 * (size_t)C * sizeof(float) > (size_t)C_(c)->smem) { /* the next finish reports it */
    C_(c)->oom = 2;
    return;
  }
  k_layernorm_bwd<<<g, TPB, 2 * (size_t)C * sizeof(float), C_(c)->s>>>(din, dw, db, dout, in, w,
                                                                       mean, rstd, N, C);
}

void cu_bias_fwd(void *c, float *out, const float *bias, int N, int OC) {
  long n = (long)N * OC;
  k_bias_fwd<<<blocks(n), TPB, 0, C_(c)->s>>>(out, bias, OC, n);
}

void cu_bias_bwd(void *c, float *dbias, const float *dout, int N, int OC) {
  k_bias_bwd<<<(OC + 31) / 32, dim3(32, 8), 0, C_(c)->s>>>(dbias, dout, N, OC);
}

/* A product's input in the math's type: src itself (f32), or its copy into bf16 slot `slot`
 * (n floats). NULL when there is no memory for the copy (x->oom set: finish reports it). */
const void *in_type(ctx_t *x, int slot, const float *src, size_t n) {
  if (!x->bf16) return src;
  if (n > x->half_n[slot]) {
    cudaStreamSynchronize(x->s);
    cudaFree(x->half[slot]);
    x->half_n[slot] = 0;
    if (cudaMalloc(&x->half[slot], n * sizeof(__nv_bfloat16)) != cudaSuccess) {
      x->half[slot] = NULL, x->oom = 1;
      return NULL;
    }
    x->half_n[slot] = n;
  }
  if (n) k_to_bf16<<<blocks((long)n), TPB, 0, x->s>>>(x->half[slot], src, (long)n);
  return x->half[slot];
}

/* Element off of an in_type operand. */
const void *at(const ctx_t *x, const void *p, long off) {
  if (!p) return NULL; /* a copy that found no memory: gemm skips it */
  return static_cast<const char *>(p) + off * (x->bf16 ? 2 : 4);
}

/* cuBLAS's column-major C = alpha * op(A) . op(B) + beta * C, batch times at the strides; the
 * inputs in_type operands, C f32. */
void gemm(ctx_t *x, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
          const void *A, int lda, long long sa, const void *B, int ldb, long long sb, float beta,
          float *C, int ldc, long long sc, int batch) {
  if (!A || !B) return; /* no memory for a copy: x->oom is set */
  if (x->bf16)
    cublasGemmStridedBatchedEx(x->h, ta, tb, m, n, k, &alpha, A, CUDA_R_16BF, lda, sa, B,
                               CUDA_R_16BF, ldb, sb, &beta, C, CUDA_R_32F, ldc, sc, batch,
                               CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  else if (batch == 1)
    cublasSgemm(x->h, ta, tb, m, n, k, &alpha, static_cast<const float *>(A), lda,
                static_cast<const float *>(B), ldb, &beta, C, ldc);
  else
    cublasSgemmStridedBatched(x->h, ta, tb, m, n, k, &alpha, static_cast<const float *>(A), lda, sa,
                              static_cast<const float *>(B), ldb, sb, &beta, C, ldc, sc, batch);
}

/* row-major out[N][OC] = in[N][C] . w[OC][C]^T, as cuBLAS's column-major out^T = w . in^T */
void cu_matmul_fwd(void *c, float *out, const float *in, const float *w, const float *bias, int N,
                   int C, int OC) {
  ctx_t *x = C_(c);
  const void *W = in_type(x, 0, w, (size_t)OC * C), *I = in_type(x, 1, in, (size_t)N * C);
  gemm(x, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, 1.0f, W, C, 0, I, C, 0, 0.0f, out, OC, 0, 1);
  if (bias) cu_bias_fwd(c, out, bias, N, OC);
}

void cu_matmul_bwd(void *c, float *din, float *dw, float *dbias, const float *dout, const float *in,
                   const float *w, int N, int C, int OC) {
  ctx_t *x = C_(c);
  const void *W = in_type(x, 0, w, (size_t)OC * C), *D = in_type(x, 1, dout, (size_t)N * OC);
  const void *I = in_type(x, 2, in, (size_t)N * C);
  /* din[N][C] += dout[N][OC] . w[OC][C]; dw[OC][C] += dout^T . in */
  gemm(x, CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, 1.0f, W, C, 0, D, OC, 0, 1.0f, din, C, 0, 1);
  gemm(x, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, 1.0f, I, C, 0, D, OC, 0, 1.0f, dw, C, 0, 1);
  if (dbias) cu_bias_bwd(c, dbias, dout, N, OC);
}

/* Batched over the heads of one batch element: row-major S[t][u] = alpha * X[t] . Y[u] for
 * X, Y [T][hs] with row stride ld (S [NH][T][T], beta: S's share kept). */
void scores(ctx_t *x, float *S, const void *X, int ldx, const void *Y, int ldy, int T, int hs,
            int NH, float alpha, float beta) {
  gemm(x, CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, alpha, Y, ldy, hs, X, ldx, hs, beta, S, T,
       (long long)T * T, NH);
}

/* row-major Z[T][hs] (row stride ldz) = beta * Z + P[T][T] . Y[T][hs], or with transpose
 * set P^T . Y; batched over the heads */
void apply(ctx_t *x, float *Z, int ldz, const void *P, const void *Y, int ldy, int T, int hs,
           int NH, int transpose, float beta) {
  gemm(x, CUBLAS_OP_N, transpose ? CUBLAS_OP_T : CUBLAS_OP_N, hs, T, T, 1.0f, Y, ldy, hs, P, T,
       (long long)T * T, beta, Z, ldz, hs, NH);
}

void cu_attention_fwd(void *c, float *out, float *att, const float *qkv, int B, int T, int C,
                      int NH) {
  ctx_t *x = C_(c);
  int hs = C / NH;
  long q3 = (long)T * 3 * C, tt = (long)NH * T * T;
  float scale = 1.0f / sqrtf((float)hs);
  const void *Q = in_type(x, 0, qkv, (size_t)B * q3);
  for (int b = 0; b < B; b++)
    scores(x, att + b * tt, at(x, Q, b * q3), 3 * C, at(x, Q, b * q3 + C), 3 * C, T, hs, NH, scale,
           0.0f);
  long rows = (long)B * NH * T;
  k_softmax_fwd<<<(int)((rows + 7) / 8), TPB, 0, x->s>>>(att, T, rows);
  const void *P = in_type(x, 1, att, (size_t)B * tt);
  for (int b = 0; b < B; b++)
    apply(x, out + (long)b * T * C, C, at(x, P, b * tt), at(x, Q, b * q3 + 2 * C), 3 * C, T, hs, NH,
          0, 0.0f);
}

void cu_attention_bwd(void *c, float *dqkv, const float *dout, const float *qkv, const float *att,
                      int B, int T, int C, int NH, float *datt) {
  (void)datt;
  ctx_t *x = C_(c);
  int hs = C / NH;
  long q3 = (long)T * 3 * C, tt = (long)NH * T * T, tc = (long)T * C;
  float scale = 1.0f / sqrtf((float)hs);
  if ((size_t)tt > x->scratch_n) {
    cudaStreamSynchronize(x->s);
    cudaFree(x->scratch);
    x->scratch_n = 0;
    if (cudaMalloc(&x->scratch, (size_t)tt * sizeof(float)) != cudaSuccess) {
      x->scratch = NULL, x->oom = 1; /* the next finish reports it */
      return;
    }
    x->scratch_n = (size_t)tt;
  }
  const void *Q = in_type(x, 0, qkv, (size_t)B * q3), *P = in_type(x, 1, att, (size_t)B * tt);
  const void *DY = in_type(x, 2, dout, (size_t)B * tc);
  for (int b = 0; b < B; b++) {
    const void *q = at(x, Q, b * q3), *k = at(x, Q, b * q3 + C), *v = at(x, Q, b * q3 + 2 * C);
    const void *dy = at(x, DY, b * tc), *p = at(x, P, b * tt);
    float *dq = dqkv + b * q3, *ds = x->scratch;
    scores(x, ds, dy, C, v, 3 * C, T, hs, NH, 1.0f, 0.0f);     /* dP = dY . V^T */
    apply(x, dq + 2 * C, 3 * C, p, dy, C, T, hs, NH, 1, 1.0f); /* dV += P^T . dY */
    k_softmax_bwd<<<(int)((NH * (long)T + 7) / 8), TPB, 0, x->s>>>(ds, att + b * tt, T, scale,
                                                                   (long)NH * T);
    const void *DS = in_type(x, 3, ds, (size_t)tt);
    apply(x, dq, 3 * C, DS, k, 3 * C, T, hs, NH, 0, 1.0f);     /* dQ += dS . K */
    apply(x, dq + C, 3 * C, DS, q, 3 * C, T, hs, NH, 1, 1.0f); /* dK += dS^T . Q */
  }
}

void cu_gelu_fwd(void *c, float *out, const float *in, int n) {
  k_gelu_fwd<<<blocks(n), TPB, 0, C_(c)->s>>>(out, in, n);
}

void cu_gelu_bwd(void *c, float *din, const float *in, const float *dout, int n) {
  k_gelu_bwd<<<blocks(n), TPB, 0, C_(c)->s>>>(din, in, dout, n);
}

void cu_add(void *c, float *out, const float *a, const float *b, int n) {
  k_add<<<blocks(n), TPB, 0, C_(c)->s>>>(out, a, b, n);
}

void cu_accumulate(void *c, float *dst, const float *src, int n) {
  k_accumulate<<<blocks(n), TPB, 0, C_(c)->s>>>(dst, src, n);
}

float cu_xent_fwd(void *c, float *losses, float *probs, const float *logits, const int *targets,
                  int N, int V) {
  ctx_t *x = C_(c);
  double mean = 0;
  k_xent_fwd<<<(N + 7) / 8, TPB, 0, x->s>>>(losses, probs, logits, targets, N, V);
  k_mean<<<1, TPB, 0, x->s>>>(x->loss, losses, N);
  if (cu_get(c, &mean, x->loss, sizeof mean)) return NAN;
  return (float)mean;
}

void cu_xent_bwd(void *c, float *dlogits, const float *probs, const int *targets, int N, int V,
                 float scale) {
  long n = (long)N * V;
  k_xent_bwd<<<blocks(n), TPB, 0, C_(c)->s>>>(dlogits, probs, targets, V, scale, n);
}

void cu_adamw(void *c, const adamw_t *o, int step, float *params, const float *grads, float *m,
              float *v, size_t n) {
  float c1 = 1.0f - powf(o->beta1, (float)step), c2 = 1.0f - powf(o->beta2, (float)step);
  if (n) k_adamw<<<blocks((long)n), TPB, 0, C_(c)->s>>>(params, grads, m, v, *o, c1, c2, (long)n);
}

const gpt_ops_vt_t cuda_vt = {.name = "cuda",
                              .alloc = cu_alloc,
                              .release = cu_release,
                              .zero = cu_zero,
                              .copy = cu_copy,
                              .put = cu_put,
                              .get = cu_get,
                              .finish = cu_finish,
                              .close = cu_close,
                              .stream_open = cu_stream_open,
                              .stream_close = cu_stream_close,
                              .stream_wait = cu_stream_wait,
                              .fence = cu_fence,
                              .encoder_fwd = cu_encoder_fwd,
                              .encoder_bwd = cu_encoder_bwd,
                              .layernorm_fwd = cu_layernorm_fwd,
                              .layernorm_bwd = cu_layernorm_bwd,
                              .matmul_fwd = cu_matmul_fwd,
                              .bias_fwd = cu_bias_fwd,
                              .bias_bwd = cu_bias_bwd,
                              .matmul_bwd = cu_matmul_bwd,
                              .attention_fwd = cu_attention_fwd,
                              .attention_bwd = cu_attention_bwd,
                              .gelu_fwd = cu_gelu_fwd,
                              .gelu_bwd = cu_gelu_bwd,
                              .add = cu_add,
                              .accumulate = cu_accumulate,
                              .xent_fwd = cu_xent_fwd,
                              .xent_bwd = cu_xent_bwd,
                              .adamw = cu_adamw};

} // namespace

extern "C" int gpt_ops_cuda_open(gpt_ops_t *ops, int device, int bf16, char *why, size_t size) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || device < 0 || device >= n) {
    snprintf(why, size, "no CUDA device %d (%s)", device,
             e != cudaSuccess ? cudaGetErrorString(e) : "fewer devices");
    return -1;
  }
  ctx_t *x = new ctx_t();
  x->device = device, x->bf16 = bf16;
  const char *step = "cudaSetDevice";
  if ((e = cudaSetDevice(device)) != cudaSuccess) goto fail;
  step = "cudaStreamCreate";
  if ((e = cudaStreamCreateWithFlags(&x->s, cudaStreamNonBlocking)) != cudaSuccess) goto fail;
  step = "cudaEventCreate";
  if ((e = cudaEventCreateWithFlags(&x->ev, cudaEventDisableTiming)) != cudaSuccess) goto fail;
  step = "cudaMalloc";
  if ((e = cudaMalloc(&x->loss, sizeof(double))) != cudaSuccess) goto fail;
  /* a norm's backward keeps two rows of C floats in shared memory: as much as the GPU allows
   * a block (227 KiB on an H100: 29k channels) */
  step = "cudaDeviceGetAttribute";
  if ((e = cudaDeviceGetAttribute(&x->smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device)) !=
      cudaSuccess)
    goto fail;
  step = "cudaFuncSetAttribute";
  if ((e = cudaFuncSetAttribute(k_layernorm_bwd, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                x->smem)) != cudaSuccess)
    goto fail;
  if (cublasCreate(&x->h) != CUBLAS_STATUS_SUCCESS) x->h = NULL;
  if (!x->h || cublasSetStream(x->h, x->s) != CUBLAS_STATUS_SUCCESS) {
    snprintf(why, size, "cuBLAS could not start on device %d", device);
    cu_close(x);
    return -1;
  }
  *ops = gpt_ops_t{&cuda_vt, x, &moe_ops_cuda};
  return 0;
fail:
  snprintf(why, size, "%s on device %d: %s", step, device, cudaGetErrorString(e));
  if (x->ev) cudaEventDestroy(x->ev);
  if (x->s) cudaStreamDestroy(x->s);
  cudaFree(x->loss);
  delete x;
  return -1;
}

cudaStream_t gpt_cuda_stream(void *ctx) { return C_(ctx)->s; }
double *gpt_cuda_scalar(void *ctx) { return C_(ctx)->loss; }
int gpt_cuda_finish(void *ctx) { return cu_finish(ctx); }

extern "C" int gpt_cuda_devices(void) {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}
