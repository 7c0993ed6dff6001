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

/* Entries [lo, hi) (this rank's own) are skipped: they go straight to their rows. */
__global__ void gather(const char *x, const uint64_t *list, uint64_t n, uint64_t lo, uint64_t hi,
                       size_t row, char *out, const float *w, float *wout, int k) {
  for (uint64_t q = blockIdx.x; q < n - (hi - lo); q += gridDim.x) {
    uint64_t e = q < lo ? q : q + (hi - lo);
    copy_row(out + e * row, x + list[e] * row, row);
    for (int j = threadIdx.x; j < k; j += blockDim.x)
      wout[e * k + j] = w ? w[list[e] * k + j] : 1.0f;
  }
}

/* Received entry i into its rows; the entries this rank sent itself (sf.lo..sf.hi) come
 * straight from its tokens instead of the staging. */
__global__ void scatter(const char *in, const float *win, const uint64_t *row_of, uint64_t n, int k,
                        size_t row, char *out, float *wout, weft_moe_k_self_t sf) {
  for (uint64_t i = blockIdx.x; i < n; i += gridDim.x) {
    bool own = i >= sf.lo && i < sf.hi;
    uint64_t tok = own ? sf.list[i - sf.lo] : 0;
    const char *src = own ? (const char *)sf.x + tok * row : in + i * row;
    for (int j = 0; j < k; j++) {
      uint64_t r = row_of[i * k + j];
      if (r == WEFT_MOE_K_NO_ROW) continue;
      copy_row(out + r * row, src, row);
      if (wout && threadIdx.x == 0)
        wout[r] = !own ? win[i * k + j] : sf.w ? sf.w[tok * k + j] : 1.0f;
    }
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

/* 16 bytes of T as floats: the reductions read and write whole vectors where rows allow. */
template <typename T> struct vec {
  static constexpr int N = 16 / sizeof(T);
  float v[N];
  __device__ void get(const T *p) {
    uint4 u = *(const uint4 *)p;
    const T *e = (const T *)&u;
    for (int i = 0; i < N; i++)
      v[i] = load(e, i);
  }
  __device__ void put(T *p) const {
    uint4 u;
    T *e = (T *)&u;
    for (int i = 0; i < N; i++)
      store(e, i, v[i]);
    *(uint4 *)p = u;
  }
};

/* dst = sum over q < n of scale[q] * src[at[q]] (rows of `hidden`), in f32: the block's
 * threads share the row's columns, a vector each where the rows are 16-byte aligned. */
template <typename T>
__device__ void sum_rows(const T *src, const uint64_t *at, const float *scale, int n, size_t hidden,
                         T *dst, bool whole) {
  constexpr int N = vec<T>::N;
  if (whole) {
    for (size_t c = threadIdx.x * (size_t)N; c < hidden; c += (size_t)blockDim.x * N) {
      vec<T> acc, x;
      for (int i = 0; i < N; i++)
        acc.v[i] = 0.0f;
      for (int q = 0; q < n; q++) {
        x.get(src + at[q] * hidden + c);
        for (int i = 0; i < N; i++)
          acc.v[i] += scale[q] * x.v[i];
      }
      acc.put(dst + c);
    }
    return;
  }
  for (size_t c = threadIdx.x; c < hidden; c += blockDim.x) {
    float acc = 0.0f;
    for (int q = 0; q < n; q++)
      acc += scale[q] * load(src, at[q] * hidden + c);
    store(dst, c, acc);
  }
}

template <typename T> __device__ bool aligned16(const T *a, const T *b, size_t hidden) {
  return ((uintptr_t)a | (uintptr_t)b | (hidden * sizeof(T))) % 16 == 0;
}

/* Expert side: partial[i] = sum over the local rows of received token i of w * rows. */
template <typename T>
__global__ void partials(const T *rows, const float *w, const uint64_t *row_of, uint64_t n, int k,
                         size_t hidden, T *out, uint64_t lo, uint64_t hi, T *own) {
  __shared__ uint64_t at[WEFT_MOE_K_MAX_TOPK];
  __shared__ float scale[WEFT_MOE_K_MAX_TOPK];
  __shared__ int used;
  bool whole = aligned16(rows, out, hidden) && (!own || aligned16(own, own, hidden));
  for (uint64_t i = blockIdx.x; i < n; i += gridDim.x) {
    __syncthreads(); /* the previous token's table is read no more */
    if (threadIdx.x == 0) {
      used = 0;
      for (int j = 0; j < k; j++) {
        uint64_t r = row_of[i * k + j];
        if (r == WEFT_MOE_K_NO_ROW) continue;
        at[used] = r, scale[used++] = w ? w[r] : 1.0f;
      }
    }
    __syncthreads();
    /* this rank's own tokens (lo..hi) go straight to where home() reads them */
    T *dst = i >= lo && i < hi ? own + (i - lo) * hidden : out + i * hidden;
    sum_rows(rows, at, scale, used, hidden, dst, whole);
  }
}

/* Home: y[t] = the partials of token t from each rank, added in rank order (its entries,
 * `width` a token, WEFT_MOE_K_NO_ROW after the last). */
template <typename T>
__global__ void home(const T *back, const uint64_t *entries, int width, uint64_t tokens,
                     size_t hidden, T *y) {
  __shared__ uint64_t at[WEFT_MOE_K_MAX_TOPK];
  __shared__ float one[WEFT_MOE_K_MAX_TOPK];
  __shared__ int used;
  bool whole = aligned16(back, y, hidden);
  for (uint64_t t = blockIdx.x; t < tokens; t += gridDim.x) {
    __syncthreads();
    if (threadIdx.x == 0) {
      used = 0;
      for (int q = 0; q < width && entries[t * width + q] != WEFT_MOE_K_NO_ROW; q++)
        at[used] = entries[t * width + q], one[used++] = 1.0f;
    }
    __syncthreads();
    sum_rows(back, at, one, used, hidden, y + t * hidden, whole);
  }
}

unsigned blocks(uint64_t n) { return n < MAX_BLOCKS ? (unsigned)n : MAX_BLOCKS; }

/* An error left by an earlier, unrelated call would otherwise be reported as this launch's
 * (sticky errors stay and are reported again, as they should). */
void clear_stale() { (void)cudaGetLastError(); }

} // namespace

extern "C" int weft_moe_k_gather(const void *x, const uint64_t *list, uint64_t n, uint64_t lo,
                                 uint64_t hi, size_t row, void *out, const float *w, float *wout,
                                 int k, void *stream) {
  clear_stale();
  if (n > hi - lo)
    gather<<<blocks(n - (hi - lo)), THREADS, 0, (cudaStream_t)stream>>>(
        (const char *)x, list, n, lo, hi, row, (char *)out, w, wout, k);
  return (int)cudaGetLastError();
}

extern "C" int weft_moe_k_scatter(const void *in, const float *win, const uint64_t *row_of,
                                  uint64_t n, int k, size_t row, void *out, float *wout,
                                  const uint64_t *pad, uint64_t npad, weft_moe_k_self_t own,
                                  void *stream) {
  clear_stale();
  cudaStream_t s = (cudaStream_t)stream;
  if (n)
    scatter<<<blocks(n), THREADS, 0, s>>>((const char *)in, win, row_of, n, k, row, (char *)out,
                                          wout, own);
  if (npad) zero_rows<<<blocks(npad), THREADS, 0, s>>>(pad, npad, row, (char *)out, wout);
  return (int)cudaGetLastError();
}

extern "C" int weft_moe_k_partials(int dtype, const void *rows, const float *w,
                                   const uint64_t *row_of, uint64_t n, int k, size_t hidden,
                                   void *out, weft_moe_k_self_t own, void *stream) {
  clear_stale();
  cudaStream_t s = (cudaStream_t)stream;
  if (!n) return (int)cudaSuccess;
  if (dtype == WEFT_MOE_K_F32)
    partials<<<blocks(n), THREADS, 0, s>>>((const float *)rows, w, row_of, n, k, hidden,
                                           (float *)out, own.lo, own.hi, (float *)own.out);
  else if (dtype == WEFT_MOE_K_F16)
    partials<<<blocks(n), THREADS, 0, s>>>((const __half *)rows, w, row_of, n, k, hidden,
                                           (__half *)out, own.lo, own.hi, (__half *)own.out);
  else
    partials<<<blocks(n), THREADS, 0, s>>>((const __nv_bfloat16 *)rows, w, row_of, n, k, hidden,
                                           (__nv_bfloat16 *)out, own.lo, own.hi,
                                           (__nv_bfloat16 *)own.out);
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
