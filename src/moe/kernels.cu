/* MoE kernels for device buffers: rows gathered into the send staging by the plan's token
 * list, received rows scattered into the expert-major rows (and padding zeroed), and the two
 * reductions of combine (a token's rows with their weights on the expert side, the ranks'
 * partials in rank order at home), both accumulating in f32. A block per row. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "moe_kernels.h"

namespace {

constexpr int THREADS = 256;
constexpr unsigned MAX_BLOCKS = 4096;

/* Copies a row of `bytes`: 16 bytes a thread where both ends allow it, else 2. */
__device__ void copy_row(char *dst, const char *src, size_t bytes) {
  if (((uintptr_t)dst | (uintptr_t)src | bytes) % 16 == 0) {
    for (size_t i = threadIdx.x; i < bytes / 16; i += blockDim.x)
      ((int4 *)dst)[i] = ((const int4 *)src)[i];
  } else {
    for (size_t i = threadIdx.x; i < bytes / 2; i += blockDim.x)
      ((uint16_t *)dst)[i] = ((const uint16_t *)src)[i];
  }
}

__global__ void gather(const char *x, const uint64_t *list, uint64_t n, size_t row, char *out,
                       const float *w, float *wout, int k) {
  for (uint64_t e = blockIdx.x; e < n; e += gridDim.x) {
    copy_row(out + e * row, x + list[e] * row, row);
    for (int j = threadIdx.x; j < k; j += blockDim.x)
      wout[e * k + j] = w ? w[list[e] * k + j] : 1.0f;
  }
}

__global__ void scatter(const char *in, const float *win, const uint64_t *row_of, uint64_t n, int k,
                        size_t row, char *out, float *wout) {
  for (uint64_t i = blockIdx.x; i < n; i += gridDim.x)
    for (int j = 0; j < k; j++) {
      uint64_t r = row_of[i * k + j];
      if (r == WEFT_MOE_K_NO_ROW) continue;
      copy_row(out + r * row, in + i * row, row);
      if (wout && threadIdx.x == 0) wout[r] = win[i * k + j];
    }
}

__global__ void zero_rows(const uint64_t *rows, uint64_t n, size_t row, char *out, float *wout) {
  for (uint64_t i = blockIdx.x; i < n; i += gridDim.x) {
    char *dst = out + rows[i] * row;
    for (size_t b = threadIdx.x; b < row / 2; b += blockDim.x)
      ((uint16_t *)dst)[b] = 0;
    if (wout && threadIdx.x == 0) wout[rows[i]] = 0.0f;
  }
}

/* Overloads, not template specialisations: nvcc gives the latter host symbols that escape
 * the anonymous namespace (and libweft.so exports nothing but the API). */
__device__ __forceinline__ float load(const float *p, size_t i) { return p[i]; }
__device__ __forceinline__ float load(const __half *p, size_t i) { return __half2float(p[i]); }
__device__ __forceinline__ float load(const __nv_bfloat16 *p, size_t i) {
  return __bfloat162float(p[i]);
}
__device__ __forceinline__ void store(float *p, size_t i, float v) { p[i] = v; }
__device__ __forceinline__ void store(__half *p, size_t i, float v) { p[i] = __float2half_rn(v); }
__device__ __forceinline__ void store(__nv_bfloat16 *p, size_t i, float v) {
  p[i] = __float2bfloat16_rn(v);
}

/* Expert side: partial[i] = sum over the local rows of received token i of w * rows. */
template <typename T>
__global__ void partials(const T *rows, const float *w, const uint64_t *row_of, uint64_t n, int k,
                         size_t hidden, T *out) {
  for (uint64_t i = blockIdx.x; i < n; i += gridDim.x)
    for (size_t c = threadIdx.x; c < hidden; c += blockDim.x) {
      float acc = 0.0f;
      for (int j = 0; j < k; j++) {
        uint64_t r = row_of[i * k + j];
        if (r != WEFT_MOE_K_NO_ROW) acc += (w ? w[r] : 1.0f) * load(rows, r * hidden + c);
      }
      store(out, i * hidden + c, acc);
    }
}

/* Home: y[t] = the partials of token t from each rank, added in rank order (its entries,
 * `width` a token, WEFT_MOE_K_NO_ROW after the last). */
template <typename T>
__global__ void home(const T *back, const uint64_t *entries, int width, uint64_t tokens,
                     size_t hidden, T *y) {
  for (uint64_t t = blockIdx.x; t < tokens; t += gridDim.x)
    for (size_t c = threadIdx.x; c < hidden; c += blockDim.x) {
      float acc = 0.0f;
      for (int q = 0; q < width; q++) {
        uint64_t e = entries[t * width + q];
        if (e == WEFT_MOE_K_NO_ROW) break;
        acc += load(back, e * hidden + c);
      }
      store(y, t * hidden + c, acc);
    }
}

unsigned blocks(uint64_t n) { return n < MAX_BLOCKS ? (unsigned)n : MAX_BLOCKS; }

/* An error left by an earlier, unrelated call would otherwise be reported as this launch's
 * (sticky errors stay and are reported again, as they should). */
void clear_stale() { (void)cudaGetLastError(); }

} // namespace

extern "C" int weft_moe_k_gather(const void *x, const uint64_t *list, uint64_t n, size_t row,
                                 void *out, const float *w, float *wout, int k, void *stream) {
  clear_stale();
  if (n)
    gather<<<blocks(n), THREADS, 0, (cudaStream_t)stream>>>((const char *)x, list, n, row,
                                                            (char *)out, w, wout, k);
  return (int)cudaGetLastError();
}

extern "C" int weft_moe_k_scatter(const void *in, const float *win, const uint64_t *row_of,
                                  uint64_t n, int k, size_t row, void *out, float *wout,
                                  const uint64_t *pad, uint64_t npad, void *stream) {
  clear_stale();
  cudaStream_t s = (cudaStream_t)stream;
  if (n)
    scatter<<<blocks(n), THREADS, 0, s>>>((const char *)in, win, row_of, n, k, row, (char *)out,
                                          wout);
  if (npad) zero_rows<<<blocks(npad), THREADS, 0, s>>>(pad, npad, row, (char *)out, wout);
  return (int)cudaGetLastError();
}

extern "C" int weft_moe_k_partials(int dtype, const void *rows, const float *w,
                                   const uint64_t *row_of, uint64_t n, int k, size_t hidden,
                                   void *out, void *stream) {
  clear_stale();
  cudaStream_t s = (cudaStream_t)stream;
  if (!n) return (int)cudaSuccess;
  if (dtype == WEFT_MOE_K_F32)
    partials<<<blocks(n), THREADS, 0, s>>>((const float *)rows, w, row_of, n, k, hidden,
                                           (float *)out);
  else if (dtype == WEFT_MOE_K_F16)
    partials<<<blocks(n), THREADS, 0, s>>>((const __half *)rows, w, row_of, n, k, hidden,
                                           (__half *)out);
  else
    partials<<<blocks(n), THREADS, 0, s>>>((const __nv_bfloat16 *)rows, w, row_of, n, k, hidden,
                                           (__nv_bfloat16 *)out);
  return (int)cudaGetLastError();
}

extern "C" int weft_moe_k_home(int dtype, const void *back, const uint64_t *entries, int width,
                               uint64_t tokens, size_t hidden, void *y, void *stream) {
  clear_stale();
  cudaStream_t s = (cudaStream_t)stream;
  if (!tokens) return (int)cudaSuccess;
  if (dtype == WEFT_MOE_K_F32)
    home<<<blocks(tokens), THREADS, 0, s>>>((const float *)back, entries, width, tokens, hidden,
                                            (float *)y);
  else if (dtype == WEFT_MOE_K_F16)
    home<<<blocks(tokens), THREADS, 0, s>>>((const __half *)back, entries, width, tokens, hidden,
                                            (__half *)y);
  else
    home<<<blocks(tokens), THREADS, 0, s>>>((const __nv_bfloat16 *)back, entries, width, tokens,
                                            hidden, (__nv_bfloat16 *)y);
  return (int)cudaGetLastError();
}
