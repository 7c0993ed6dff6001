/* The CUDA back end's matrix products (ops.h's matmul_fwd and _bwd, and the products the
 * attention calls): cuBLAS, on inputs in the math's type (f32, or bf16 copies made here), f32
 * results; a forward product's bias added in cuBLASLt's epilogue (written first, and the
 * product added to it, where cuBLASLt declines); the biases' own kernels. */
#include <stdint.h>
#include <string.h>

#include "ops_cuda.h"

namespace {

/* out[n][o] += bias[o], or (fill) = bias[o], which a product then adds to */
__global__ void k_bias_fwd(float *out, const float *bias, int OC, long n, int fill) {
  GRID_STRIDE(i, n) out[i] = (fill ? 0.0f : out[i]) + bias[i % OC];
}

/* blocks of 32 columns x 8 row lanes, over BIAS_ROWS rows each: enough blocks to fill the GPU
 * when OC is a few hundred and N thousands */
const int BIAS_ROWS = 256;
__global__ void k_bias_bwd(float *dbias, const float *dout, int N, int OC) {
  __shared__ float part[8][33];
  int o = blockIdx.x * 32 + threadIdx.x, end = (blockIdx.y + 1) * BIAS_ROWS;
  float acc = 0;
  if (o < OC)
    for (int n = blockIdx.y * BIAS_ROWS + threadIdx.y; n < N && n < end; n += 8)
      acc += dout[(long)n * OC + o];
  part[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && o < OC) {
    for (int y = 1; y < 8; y++)
      acc += part[y][threadIdx.x];
    atomicAdd(&dbias[o], acc);
  }
}

/* four values a thread (16-byte loads, 8-byte stores) where both pointers allow it */
__global__ void k_to_bf16(__nv_bfloat16 *dst, const float *src, long n) {
  long n4 = ((uintptr_t)dst % 8 == 0 && (uintptr_t)src % 16 == 0) ? n / 4 : 0;
  GRID_STRIDE(i, n4) {
    float4 v = reinterpret_cast<const float4 *>(src)[i];
    __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
    uint2 u;
    memcpy(&u.x, &lo, 4), memcpy(&u.y, &hi, 4);
    reinterpret_cast<uint2 *>(dst)[i] = u;
  }
  GRID_STRIDE(i, n - 4 * n4) dst[4 * n4 + i] = __float2bfloat16_rn(src[4 * n4 + i]);
}

/* The largest power of two (at most 256) that divides p's address. */
uint32_t align_of(const void *p) {
  uintptr_t a = (uintptr_t)p & 255;
  return a ? (uint32_t)(a & (~a + 1)) : 256;
}

/* The bias product by cuBLASLt (column-major out^T[OC][N] = W^T . in^T + bias, the bias in
 * the epilogue): 0, or -1 where cuBLASLt declines (nothing was queued). The algorithm is asked
 * for once per shape and alignment of the pointers (the preference states them, so an
 * algorithm never assumes more) and kept, a refusal too. A bias below 16-byte alignment is
 * not offered: the preference cannot state it. */
int lt_bias(gpt_cuda_t *x, float *out, const void *W, const void *I, const float *bias, int N,
            int C, int OC) {
  uint32_t al[3] = {align_of(W), align_of(I), align_of(out)};
  if (!x->lt || align_of(bias) < 16) return -1;
  gpt_cuda_lt_algo_t *k = NULL;
  for (int i = 0; i < GPT_CUDA_LT_ALGOS && !k; i++) {
    gpt_cuda_lt_algo_t *e = &x->lt_algo[i];
    if (e->n == N && e->c == C && e->oc == OC && !memcmp(e->al, al, sizeof al)) k = e;
  }
  if (k && !k->ok) return -1;
  cudaDataType_t t = x->bf16 ? CUDA_R_16BF : CUDA_R_32F, bt = CUDA_R_32F;
  cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
  cublasLtMatmulDesc_t d = NULL;
  cublasLtMatrixLayout_t a = NULL, b = NULL, o = NULL;
  cublasLtMatmulPreference_t pref = NULL;
  float one = 1.0f, zero = 0.0f;
  int ok =
      cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS &&
      cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) == 0 &&
      cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb) == 0 &&
      cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi) == 0 &&
      cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias) ==
          0 &&
      cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt) == 0 &&
      cublasLtMatrixLayoutCreate(&a, t, C, OC, C) == 0 &&
      cublasLtMatrixLayoutCreate(&b, t, C, N, C) == 0 &&
      cublasLtMatrixLayoutCreate(&o, CUDA_R_32F, OC, N, OC) == 0;
  if (ok && !k) { /* the oldest entry makes room; a refusal is kept as well */
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    const cublasLtMatmulPreferenceAttributes_t min[3] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES};
    ok = cublasLtMatmulPreferenceCreate(&pref) == 0 &&
         cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                              &x->lt_ws_n, sizeof x->lt_ws_n) == 0 &&
         cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                              &al[2], sizeof al[2]) == 0;
    for (int i = 0; i < 3 && ok; i++)
      ok = cublasLtMatmulPreferenceSetAttribute(pref, min[i], &al[i], sizeof al[i]) == 0;
    ok = ok && cublasLtMatmulAlgoGetHeuristic(x->lt, d, a, b, o, o, pref, 1, &res, &found) == 0 &&
         found == 1;
    k = &x->lt_algo[x->lt_next++ % GPT_CUDA_LT_ALGOS];
    k->n = N, k->c = C, k->oc = OC, k->ok = ok;
    memcpy(k->al, al, sizeof al);
    if (ok) k->algo = res.algo;
  }
  ok = ok && cublasLtMatmul(x->lt, d, &one, W, a, I, b, &zero, out, o, out, o, &k->algo, x->lt_ws,
                            x->lt_ws_n, x->s) == CUBLAS_STATUS_SUCCESS;
  if (!ok && k) k->ok = 0; /* declined at the call: the shape takes the fallback from now on */
  if (pref) cublasLtMatmulPreferenceDestroy(pref);
  if (o) cublasLtMatrixLayoutDestroy(o);
  if (b) cublasLtMatrixLayoutDestroy(b);
  if (a) cublasLtMatrixLayoutDestroy(a);
  if (d) cublasLtMatmulDescDestroy(d);
  return ok ? 0 : -1;
}

} // namespace

void gpt_cuda_bias_fwd(void *c, float *out, const float *bias, int N, int OC) {
  long n = (long)N * OC;
  LAUNCH(c, k_bias_fwd, blocks(n), TPB, 0, out, bias, OC, n, 0);
}

void gpt_cuda_bias_bwd(void *c, float *dbias, const float *dout, int N, int OC) {
  dim3 grid((OC + 31) / 32, (N + BIAS_ROWS - 1) / BIAS_ROWS);
  if (N > 0) LAUNCH(c, k_bias_bwd, grid, dim3(32, 8), 0, dbias, dout, N, OC);
}

/* row-major out[N][OC] = in[N][C] . w[OC][C]^T, as cuBLAS's column-major out^T = w . in^T */
void gpt_cuda_matmul_fwd(void *c, float *out, const float *in, const float *w, const float *bias,
                         int N, int C, int OC) {
  gpt_cuda_t *x = C_(c);
  long n = (long)N * OC;
  const void *W = gpt_cuda_in(x, 0, w, (size_t)OC * C), *I = gpt_cuda_in(x, 1, in, (size_t)N * C);
  if (bias && n && W && I && lt_bias(x, out, W, I, bias, N, C, OC) == 0) return;
  if (bias && n) LAUNCH(c, k_bias_fwd, blocks(n), TPB, 0, out, bias, OC, n, 1);
  gpt_cuda_gemm(x, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, 1.0f, W, C, 0, I, C, 0, bias ? 1.0f : 0.0f,
                out, OC, 0, 1);
}

void gpt_cuda_matmul_bwd(void *c, float *din, float *dw, float *dbias, const float *dout,
                         const float *in, const float *w, int N, int C, int OC) {
  gpt_cuda_t *x = C_(c);
  const void *W = gpt_cuda_in(x, 0, w, (size_t)OC * C),
             *D = gpt_cuda_in(x, 1, dout, (size_t)N * OC);
  const void *I = gpt_cuda_in(x, 2, in, (size_t)N * C);
  /* din[N][C] += dout[N][OC] . w[OC][C]; dw[OC][C] += dout^T . in */
  gpt_cuda_gemm(x, CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, 1.0f, W, C, 0, D, OC, 0, 1.0f, din, C, 0, 1);
  gpt_cuda_gemm(x, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, 1.0f, I, C, 0, D, OC, 0, 1.0f, dw, C, 0, 1);
  if (dbias) gpt_cuda_bias_bwd(c, dbias, dout, N, OC);
}

__nv_bfloat16 *gpt_cuda_half(gpt_cuda_t *x, int slot, size_t n) {
  return static_cast<__nv_bfloat16 *>(gpt_cuda_grow(x, reinterpret_cast<void **>(&x->half[slot]),
                                                    &x->half_bytes[slot],
                                                    n * sizeof(__nv_bfloat16)));
}

const void *gpt_cuda_in(gpt_cuda_t *x, int slot, const float *src, size_t n) {
  if (!x->bf16) return src;
  __nv_bfloat16 *h = gpt_cuda_half(x, slot, n);
  if (h && n) LAUNCH(x, k_to_bf16, blocks(((long)n + 3) / 4), TPB, 0, h, src, (long)n);
  return h;
}

const void *gpt_cuda_at(const gpt_cuda_t *x, const void *p, long off) {
  if (!p) return NULL;
  return static_cast<const char *>(p) + off * (x->bf16 ? 2 : 4);
}

void gpt_cuda_gemm(gpt_cuda_t *x, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                   float alpha, const void *A, int lda, long long sa, const void *B, int ldb,
                   long long sb, float beta, float *C, int ldc, long long sc, int batch) {
  if (!A || !B) return; /* no memory for a copy: x->oom is set */
  cublasStatus_t st;
  if (x->bf16)
    st = cublasGemmStridedBatchedEx(x->h, ta, tb, m, n, k, &alpha, A, CUDA_R_16BF, lda, sa, B,
                                    CUDA_R_16BF, ldb, sb, &beta, C, CUDA_R_32F, ldc, sc, batch,
                                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  else if (batch == 1)
    st = cublasSgemm(x->h, ta, tb, m, n, k, &alpha, static_cast<const float *>(A), lda,
                     static_cast<const float *>(B), ldb, &beta, C, ldc);
  else
    st = cublasSgemmStridedBatched(x->h, ta, tb, m, n, k, &alpha, static_cast<const float *>(A),
                                   lda, sa, static_cast<const float *>(B), ldb, sb, &beta, C, ldc,
                                   sc, batch);
  if (st != CUBLAS_STATUS_SUCCESS && x->blas == CUBLAS_STATUS_SUCCESS) x->blas = st;
}
