/* fp8 dispatch's kernels on the normal device path: each sent entry's token quantized into
 * the staging (its scales, then its e4m3 bytes: `wire` bytes an entry), and each received
 * entry's bytes and scales copied into the rows of its local experts, padding rows zeroed.
 * A block per entry or row. */
#include <stdint.h>

#include "fp8.cuh"
#include "moe_kernels.h"

namespace {

constexpr int THREADS = 256;
constexpr unsigned MAX_BLOCKS = 4096;

unsigned blocks(uint64_t n) { return n < MAX_BLOCKS ? (unsigned)n : MAX_BLOCKS; }

template <typename T>
__global__ void gather(const T *x, const uint64_t *list, uint64_t n, uint64_t hidden, uint64_t wire,
                       char *out, const float *w, float *wout, int k) {
  const uint64_t nb = WEFT_MOE_FP8_BLOCKS(hidden);
  for (uint64_t e = blockIdx.x; e < n; e += gridDim.x) {
    char *to = out + e * wire;
    moe_fp8::quantize(x + list[e] * hidden, hidden, (uint8_t *)(to + nb * 4), (float *)to);
    for (int j = threadIdx.x; j < k; j += blockDim.x)
      wout[e * k + j] = w ? w[list[e] * k + j] : 1.0f;
  }
}

__global__ void scatter(const char *in, const float *win, const uint64_t *row_of, uint64_t n, int k,
                        uint64_t hidden, uint64_t wire, uint8_t *out, float *out_s, float *wout) {
  const uint64_t nb = WEFT_MOE_FP8_BLOCKS(hidden);
  for (uint64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const float *sc = (const float *)(in + i * wire);
    const uint8_t *q = (const uint8_t *)(in + i * wire + nb * 4);
    for (int j = 0; j < k; j++) {
      uint64_t r = row_of[i * k + j];
      if (r == WEFT_MOE_K_NO_ROW) continue;
      for (uint64_t c = threadIdx.x; c < hidden; c += blockDim.x)
        out[r * hidden + c] = q[c];
      for (uint64_t b = threadIdx.x; b < nb; b += blockDim.x)
        out_s[r * nb + b] = sc[b];
      if (wout && threadIdx.x == 0) wout[r] = win[i * k + j];
    }
  }
}

__global__ void zero(const uint64_t *rows, uint64_t n, uint64_t hidden, uint8_t *out, float *out_s,
                     float *wout) {
  const uint64_t nb = WEFT_MOE_FP8_BLOCKS(hidden);
  for (uint64_t i = blockIdx.x; i < n; i += gridDim.x) {
    uint64_t r = rows[i];
    for (uint64_t c = threadIdx.x; c < hidden; c += blockDim.x)
      out[r * hidden + c] = 0;
    for (uint64_t b = threadIdx.x; b < nb; b += blockDim.x)
      out_s[r * nb + b] = 0.0f;
    if (wout && threadIdx.x == 0) wout[r] = 0.0f;
  }
}

} // namespace

extern "C" int weft_moe_k_gather_fp8(int dtype, const void *x, const uint64_t *list, uint64_t n,
                                     uint64_t hidden, uint64_t wire, void *out, const float *w,
                                     float *wout, int k, void *stream) {
  (void)cudaGetLastError();
  cudaStream_t s = (cudaStream_t)stream;
  if (!n) return (int)cudaSuccess;
  char *o = (char *)out;
  if (dtype == WEFT_MOE_K_F32)
    gather<<<blocks(n), THREADS, 0, s>>>((const float *)x, list, n, hidden, wire, o, w, wout, k);
  else if (dtype == WEFT_MOE_K_F16)
    gather<<<blocks(n), THREADS, 0, s>>>((const __half *)x, list, n, hidden, wire, o, w, wout, k);
  else
    gather<<<blocks(n), THREADS, 0, s>>>((const __nv_bfloat16 *)x, list, n, hidden, wire, o, w,
                                         wout, k);
  return (int)cudaGetLastError();
}

extern "C" int weft_moe_k_scatter_fp8(const void *in, const float *win, const uint64_t *row_of,
                                      uint64_t n, int k, uint64_t hidden, uint64_t wire,
                                      uint8_t *out, float *out_s, float *wout, const uint64_t *pad,
                                      uint64_t npad, void *stream) {
  (void)cudaGetLastError();
  cudaStream_t s = (cudaStream_t)stream;
  if (n)
    scatter<<<blocks(n), THREADS, 0, s>>>((const char *)in, win, row_of, n, k, hidden, wire, out,
                                          out_s, wout);
  if (npad) zero<<<blocks(npad), THREADS, 0, s>>>(pad, npad, hidden, out, out_s, wout);
  return (int)cudaGetLastError();
}
