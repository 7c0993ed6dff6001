/* What the CUDA back end's files share (C++, internal to examples/common): the context (its
 * stream, cuBLAS handles, scratch and bf16 copies), launch shapes and warp reductions, the
 * products and their inputs in the math's type (products_cuda.cu), the attention's operations
 * (attention_cuda.cu) and the mixture of experts' vtable (moe_ops_cuda.cu). */
#ifndef WEFT_EXAMPLES_OPS_CUDA_H
#define WEFT_EXAMPLES_OPS_CUDA_H

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "moe_ops.h"
}

/* A forward product's shape and the cuBLASLt algorithm found for it (products_cuda.cu). */
enum { GPT_CUDA_LT_ALGOS = 16 };
struct gpt_cuda_lt_algo_t {
  int n, c, oc;
  uint32_t al[3]; /* the alignment of the weights, the input and the output */
  int ok;         /* 0: cuBLASLt declined it */
  cublasLtMatmulAlgo_t algo;
};

struct gpt_cuda_t {
  int device;
  cudaStream_t s;
  cudaEvent_t ev;
  cublasHandle_t h;
  float *scratch; /* attention's: one batch element's scores [NH][T][T], or the fused
                     backward's row terms [B][NH][T] */
  size_t scratch_bytes;
  double *loss; /* the mean loss, or another sum the host waits for */
  int oom;      /* 1: an operation found no memory, 2: a norm too wide for shared memory; the next
                   finish fails */
  cudaError_t launch;     /* the first failed launch or copy: every later finish fails */
  cublasStatus_t blas;    /* the first failed product: likewise */
  int bf16;               /* products on bf16 copies of their inputs */
  int smem;               /* bytes of shared memory a block may have (a norm's backward: 8 C) */
  __nv_bfloat16 *half[4]; /* those copies, by slot */
  size_t half_bytes[4];
  cublasLtHandle_t lt; /* the products with a bias (NULL: cuBLAS, the bias written first) */
  void *lt_ws;
  size_t lt_ws_n;
  gpt_cuda_lt_algo_t lt_algo[GPT_CUDA_LT_ALGOS];
  unsigned lt_next;
  unsigned fused_ready; /* bit hs / 16: the fused attention's kernels of head size hs may run */
};

static inline gpt_cuda_t *C_(void *c) { return static_cast<gpt_cuda_t *>(c); }

/* Threads a block, and blocks for n elements (at least 1, at most 65535: kernels stride). */
const int TPB = 256;
static inline int blocks(long n) {
  long b = (n + TPB - 1) / TPB;
  return (int)(b < 1 ? 1 : b > 65535 ? 65535 : b);
}

#define GRID_STRIDE(i, n)                                                                          \
  for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < (long)(n);                        \
       i += (long)gridDim.x * blockDim.x)

/* Kernel k on the context's stream, its launch checked at once: weft's own calls clear CUDA's
 * last error, so a failed launch is kept for the next finish to report. */
#define LAUNCH(ctx, k, grid, block, smem, ...)                                                     \
  do {                                                                                             \
    k<<<(grid), (block), (smem), gpt_cuda_stream(ctx)>>>(__VA_ARGS__);                             \
    gpt_cuda_launched(ctx);                                                                        \
  } while (0)

static __device__ inline float warp_sum(float v) {
  for (int o = 16; o > 0; o /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

static __device__ inline float warp_max(float v) {
  for (int o = 16; o > 0; o /= 2)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

cudaStream_t gpt_cuda_stream(void *ctx);
double *gpt_cuda_scalar(void *ctx);
/* Keeps CUDA's last error, if any, as the context's failure (every later finish reports
 * it: a run's state is not to be trusted after one). */
void gpt_cuda_launched(void *ctx);
/* Waits for the stream: 0, or -1 with the error on stderr (what any failed operation left). */
int gpt_cuda_finish(void *ctx);

/* *buf (of *have bytes) grown to at least bytes, its contents dropped once the stream is
 * done with them; NULL (x->oom set) when there is no memory. */
void *gpt_cuda_grow(gpt_cuda_t *x, void **buf, size_t *have, size_t bytes);
/* The attention's f32 scratch of at least n floats, or NULL (x->oom set). */
float *gpt_cuda_scratch(gpt_cuda_t *x, size_t n);
/* bf16 slot `slot` of at least n values (grown as needed), or NULL (x->oom set). */
__nv_bfloat16 *gpt_cuda_half(gpt_cuda_t *x, int slot, size_t n);
/* A product's input in the math's type: src itself (f32), or its copy into bf16 slot `slot`
 * (n floats); NULL when there is no memory for the copy. */
const void *gpt_cuda_in(gpt_cuda_t *x, int slot, const float *src, size_t n);
/* Element off of such an operand (NULL stays NULL). */
const void *gpt_cuda_at(const gpt_cuda_t *x, const void *p, long off);
/* cuBLAS's column-major C = alpha * op(A) . op(B) + beta * C, batch times at the strides; the
 * inputs in the math's type, C f32; a NULL input (a copy without memory) skips it. */
void gpt_cuda_gemm(gpt_cuda_t *x, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                   float alpha, const void *A, int lda, long long sa, const void *B, int ldb,
                   long long sb, float beta, float *C, int ldc, long long sc, int batch);

void gpt_cuda_matmul_fwd(void *c, float *out, const float *in, const float *w, const float *bias,
                         int N, int C, int OC);
void gpt_cuda_matmul_bwd(void *c, float *din, float *dw, float *dbias, const float *dout,
                         const float *in, const float *w, int N, int C, int OC);
void gpt_cuda_bias_fwd(void *c, float *out, const float *bias, int N, int OC);
void gpt_cuda_bias_bwd(void *c, float *dbias, const float *dout, int N, int OC);
void gpt_cuda_attention_fwd(void *c, float *out, float *att, const float *qkv, int B, int T, int C,
                            int NH);
size_t gpt_cuda_attention_keep(void *c, int B, int T, int C, int NH);
void gpt_cuda_attention_bwd(void *c, float *dqkv, const float *dout, const float *qkv,
                            const float *out, const float *att, int B, int T, int C, int NH,
                            float *datt);

/* The fused attention (attention_fused_cuda.cu): whether it serves a shape (0, else -1), and
 * its passes: 0 when they ran (att keeps each query row's log-sum-exp), -1 (nothing queued)
 * where it does not serve the shape. */
int gpt_cuda_fused_serves(gpt_cuda_t *x, int C, int NH);
int gpt_cuda_fused_fwd(gpt_cuda_t *x, float *out, float *att, const float *qkv, int B, int T, int C,
                       int NH);
int gpt_cuda_fused_bwd(gpt_cuda_t *x, float *dqkv, const float *dout, const float *qkv,
                       const float *out, const float *att, int B, int T, int C, int NH);

extern const moe_ops_vt_t moe_ops_cuda;

#endif
