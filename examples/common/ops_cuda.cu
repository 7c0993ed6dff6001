/* The GPT's CUDA back end: memory, order and one small kernel for each operation but the
 * products (products_cuda.cu) and the attention (attention_cuda.cu), all on the back end's own
 * stream. Same shapes and sums as ops_cpu.c (ops.h); parameters' gradients from many rows are
 * summed with atomics, so the order of a sum varies from run to run. Storage is f32; with bf16
 * the products read bf16 copies of their inputs (tensor cores, f32 accumulation and results). */
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

/* a warp a row; the block's dw and db gathered in shared memory, then added once. CPL > 0
 * (C <= 32 CPL): each lane keeps its columns (lane, lane + 32, ...) of w and of a row, and its
 * sums of dw and db, in registers, reading each row once; 0: any C, a row read twice and
 * summed by shared-memory atomics */
template <int CPL>
__global__ void k_layernorm_bwd(float *din, float *dw, float *db, const float *dout,
                                const float *in, const float *w, const float *mean,
                                const float *rstd, int N, int C) {
  extern __shared__ float sh[]; /* [2][C] */
  float *sdw = sh, *sdb = sh + C;
  for (int i = threadIdx.x; i < 2 * C; i += blockDim.x)
    sh[i] = 0;
  __syncthreads();
  int warps = blockDim.x / 32, lane = threadIdx.x % 32;
  const int K = CPL > 0 ? CPL : 1;
  float wv[K], pw[K], pb[K];
  for (int j = 0; j < K; j++)
    wv[j] = CPL && lane + 32 * j < C ? w[lane + 32 * j] : 0.0f, pw[j] = pb[j] = 0;
  for (int row = blockIdx.x * warps + threadIdx.x / 32; row < N; row += gridDim.x * warps) {
    const float *x = in + (long)row * C, *d = dout + (long)row * C;
    float *dx = din + (long)row * C, m = mean[row], s = rstd[row], dm = 0, dnm = 0;
    if constexpr (CPL > 0) {
      float nv[K], dv[K];
      for (int j = 0; j < K; j++) {
        int i = lane + 32 * j;
        nv[j] = i < C ? (x[i] - m) * s : 0.0f, dv[j] = i < C ? d[i] : 0.0f;
        dm += wv[j] * dv[j], dnm += wv[j] * dv[j] * nv[j];
      }
      dm = warp_sum(dm) / (float)C, dnm = warp_sum(dnm) / (float)C;
      for (int j = 0; j < K; j++) {
        int i = lane + 32 * j;
        pb[j] += dv[j], pw[j] += nv[j] * dv[j];
        if (i < C) dx[i] += (wv[j] * dv[j] - dm - nv[j] * dnm) * s;
      }
    } else {
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
  }
  for (int j = 0; CPL && j < K && lane + 32 * j < C; j++)
    atomicAdd(&sdw[lane + 32 * j], pw[j]), atomicAdd(&sdb[lane + 32 * j], pb[j]);
  __syncthreads();
  for (int i = threadIdx.x; i < C; i += blockDim.x)
    atomicAdd(&dw[i], sdw[i]), atomicAdd(&db[i], sdb[i]);
}

/* the norm's backward kernels by columns a lane (a launch's kernel is one macro argument) */
const auto k_norm_bwd_any = k_layernorm_bwd<0>;
const auto k_norm_bwd_4 = k_layernorm_bwd<4>;
const auto k_norm_bwd_8 = k_layernorm_bwd<8>;
const auto k_norm_bwd_16 = k_layernorm_bwd<16>;
const auto k_norm_bwd_24 = k_layernorm_bwd<24>;
const auto k_norm_bwd_32 = k_layernorm_bwd<32>;

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
    cudaGetLastError(); /* the caller is told: NULL */
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
  if (bytes) cudaMemsetAsync(p, 0, bytes, C_(c)->s), gpt_cuda_launched(c);
}

void cu_copy(void *c, void *dst, const void *src, size_t bytes) {
  if (bytes && dst != src)
    cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, C_(c)->s), gpt_cuda_launched(c);
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
  if (e == cudaSuccess) e = C_(c)->launch;
  if (e == cudaSuccess && C_(c)->blas != CUBLAS_STATUS_SUCCESS) {
    fprintf(stderr, "gpt (cuda): a matrix product failed: %s\n",
            cublasGetStatusString(C_(c)->blas));
    return -1;
  }
  if (e == cudaSuccess) return 0;
  fprintf(stderr, "gpt (cuda): %s\n", cudaGetErrorString(e));
  return -1;
}

/* waits, so that the caller may reuse host at once */
void cu_put(void *c, void *dst, const void *host, size_t bytes) {
  if (!bytes) return;
  cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, C_(c)->s);
  gpt_cuda_launched(c);
  cudaStreamSynchronize(C_(c)->s);
}

int cu_get(void *c, void *host, const void *src, size_t bytes) {
  if (bytes)
    cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, C_(c)->s), gpt_cuda_launched(c);
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

int cu_mark(void *c, void *stream, void **mark) {
  (void)c;
  cudaEvent_t e = static_cast<cudaEvent_t>(*mark);
  if (!e && cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) {
    fprintf(stderr, "gpt (cuda): no event: %s\n", cudaGetErrorString(cudaGetLastError()));
    return -1;
  }
  *mark = e;
  if (cudaEventRecord(e, static_cast<cudaStream_t>(stream)) == cudaSuccess) return 0;
  fprintf(stderr, "gpt (cuda): %s\n", cudaGetErrorString(cudaGetLastError()));
  return -1;
}

int cu_mark_wait(void *c, void *mark) {
  (void)c;
  cudaError_t e = mark ? cudaEventSynchronize(static_cast<cudaEvent_t>(mark)) : cudaSuccess;
  if (e == cudaSuccess) return 0;
  fprintf(stderr, "gpt (cuda): %s\n", cudaGetErrorString(e));
  return -1;
}

void cu_mark_close(void *c, void *mark) {
  (void)c;
  if (mark) cudaEventDestroy(static_cast<cudaEvent_t>(mark));
}

void cu_close(void *c) {
  gpt_cuda_t *x = C_(c);
  if (!x) return;
  cudaStreamSynchronize(x->s);
  cudaFree(x->scratch), cudaFree(x->loss);
  for (int i = 0; i < 4; i++)
    cudaFree(x->half[i]);
  cublasDestroy(x->h);
  if (x->lt) cublasLtDestroy(x->lt);
  cudaFree(x->lt_ws);
  cudaEventDestroy(x->ev);
  cudaStreamDestroy(x->s);
  delete x;
}

/* ---- the model's operations ---- */

void cu_encoder_fwd(void *c, float *out, const int *tokens, const float *wte, const float *wpe,
                    int B, int T, int C) {
  long n = (long)B * T * C;
  LAUNCH(c, k_encoder_fwd, blocks(n), TPB, 0, out, tokens, wte, wpe, T, C, n);
}

void cu_encoder_bwd(void *c, float *dwte, float *dwpe, const float *dout, const int *tokens, int B,
                    int T, int C) {
  long n = (long)B * T * C;
  LAUNCH(c, k_encoder_bwd, blocks(n), TPB, 0, dwte, dwpe, dout, tokens, T, C, n);
}

void cu_layernorm_fwd(void *c, float *out, float *mean, float *rstd, const float *in,
                      const float *w, const float *b, int N, int C) {
  LAUNCH(c, k_layernorm_fwd, (N + 7) / 8, TPB, 0, out, mean, rstd, in, w, b, N, C);
}

void cu_layernorm_bwd(void *c, float *din, float *dw, float *db, const float *dout, const float *in,
                      const float *w, const float *mean, const float *rstd, int N, int C) {
  int g = (N + 7) / 8, cpl = (C + 31) / 32;
  g = g > 264 ? 264 : g < 1 ? 1 : g;
  size_t sm = 2 * (size_t)C * sizeof(float);
  if (sm > (size_t)C_(c)->smem) { /* the next finish reports it */
    C_(c)->oom = 2;
    return;
  }
#define NORM_BWD(k) LAUNCH(c, k, g, TPB, sm, din, dw, db, dout, in, w, mean, rstd, N, C)
  if (cpl <= 4)
    NORM_BWD(k_norm_bwd_4);
  else if (cpl <= 8)
    NORM_BWD(k_norm_bwd_8);
  else if (cpl <= 16)
    NORM_BWD(k_norm_bwd_16);
  else if (cpl <= 24)
    NORM_BWD(k_norm_bwd_24);
  else if (cpl <= 32)
    NORM_BWD(k_norm_bwd_32);
  else
    NORM_BWD(k_norm_bwd_any);
#undef NORM_BWD
}

void cu_gelu_fwd(void *c, float *out, const float *in, int n) {
  LAUNCH(c, k_gelu_fwd, blocks(n), TPB, 0, out, in, n);
}

void cu_gelu_bwd(void *c, float *din, const float *in, const float *dout, int n) {
  LAUNCH(c, k_gelu_bwd, blocks(n), TPB, 0, din, in, dout, n);
}

void cu_add(void *c, float *out, const float *a, const float *b, int n) {
  LAUNCH(c, k_add, blocks(n), TPB, 0, out, a, b, n);
}

void cu_accumulate(void *c, float *dst, const float *src, int n) {
  LAUNCH(c, k_accumulate, blocks(n), TPB, 0, dst, src, n);
}

float cu_xent_fwd(void *c, float *losses, float *probs, const float *logits, const int *targets,
                  int N, int V) {
  gpt_cuda_t *x = C_(c);
  double mean = 0;
  LAUNCH(x, k_xent_fwd, (N + 7) / 8, TPB, 0, losses, probs, logits, targets, N, V);
  LAUNCH(x, k_mean, 1, TPB, 0, x->loss, losses, N);
  if (cu_get(c, &mean, x->loss, sizeof mean)) return NAN;
  return (float)mean;
}

void cu_xent_bwd(void *c, float *dlogits, const float *probs, const int *targets, int N, int V,
                 float scale) {
  long n = (long)N * V;
  LAUNCH(c, k_xent_bwd, blocks(n), TPB, 0, dlogits, probs, targets, V, scale, n);
}

void cu_adamw(void *c, const adamw_t *o, int step, float *params, const float *grads, float *m,
              float *v, size_t n) {
  float c1 = 1.0f - powf(o->beta1, (float)step), c2 = 1.0f - powf(o->beta2, (float)step);
  if (n) LAUNCH(c, k_adamw, blocks((long)n), TPB, 0, params, grads, m, v, *o, c1, c2, (long)n);
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
                              .mark = cu_mark,
                              .mark_wait = cu_mark_wait,
                              .mark_close = cu_mark_close,
                              .encoder_fwd = cu_encoder_fwd,
                              .encoder_bwd = cu_encoder_bwd,
                              .layernorm_fwd = cu_layernorm_fwd,
                              .layernorm_bwd = cu_layernorm_bwd,
                              .matmul_fwd = gpt_cuda_matmul_fwd,
                              .bias_fwd = gpt_cuda_bias_fwd,
                              .bias_bwd = gpt_cuda_bias_bwd,
                              .matmul_bwd = gpt_cuda_matmul_bwd,
                              .attention_fwd = gpt_cuda_attention_fwd,
                              .attention_bwd = gpt_cuda_attention_bwd,
                              .attention_keep = gpt_cuda_attention_keep,
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
  gpt_cuda_t *x = new gpt_cuda_t();
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
  if ((e = cudaFuncSetAttribute(k_norm_bwd_any, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                x->smem)) != cudaSuccess)
    goto fail;
  /* cuBLASLt (the bias in the product's epilogue) is optional: without it the bias is
   * written first and the product added to it */
  x->lt_ws_n = (size_t)32 << 20;
  if (cublasLtCreate(&x->lt) != CUBLAS_STATUS_SUCCESS) x->lt = NULL;
  if (x->lt && cudaMalloc(&x->lt_ws, x->lt_ws_n) != cudaSuccess)
    cudaGetLastError(), cublasLtDestroy(x->lt), x->lt = NULL, x->lt_ws = NULL;
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

void gpt_cuda_launched(void *ctx) {
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess && C_(ctx)->launch == cudaSuccess) C_(ctx)->launch = e;
}

float *gpt_cuda_scratch(gpt_cuda_t *x, size_t n) {
  return static_cast<float *>(gpt_cuda_grow(x, reinterpret_cast<void **>(&x->scratch),
                                            &x->scratch_bytes, n * sizeof(float)));
}

void *gpt_cuda_grow(gpt_cuda_t *x, void **buf, size_t *have, size_t bytes) {
  if (bytes <= *have) return *buf;
  cudaStreamSynchronize(x->s); /* the old buffer's readers are done */
  cudaFree(*buf);
  *have = 0;
  if (cudaMalloc(buf, bytes) != cudaSuccess)
    return cudaGetLastError(), *buf = NULL, x->oom = 1, nullptr;
  *have = bytes;
  return *buf;
}
