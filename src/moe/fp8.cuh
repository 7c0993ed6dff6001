/* fp8 dispatch's quantization on the GPU, the same operations as the host's (fp8.c) in the
 * same order, so both give the same bits: per block of WEFT_MOE_FP8_BLOCK elements the scale
 * amax / 448 (1 for zeros), each element e4m3(x / scale) by weft's own codec (types.cuh).
 * Included by the MoE kernels. */
#ifndef WEFT_MOE_FP8_CUH
#define WEFT_MOE_FP8_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "types.cuh"
#include "weft_moe.h"

namespace moe_fp8 {

__device__ __forceinline__ float up(float v) { return v; }
__device__ __forceinline__ float up(__half v) { return __half2float(v); }
__device__ __forceinline__ float up(__nv_bfloat16 v) { return __bfloat162float(v); }

/* The block quantizes a token x of `hidden` elements into each of nd destinations: q[d]
 * (hidden bytes) and scales[d] (one per block of 128); a warp a block of 128, four elements a
 * lane, each computed once. */
template <typename T>
__device__ void quantize_to(const T *x, uint64_t hidden, uint8_t *const *q, float *const *scales,
                            int nd) {
  const int lane = threadIdx.x % 32, warps = blockDim.x / 32;
  const weft::SmallFmt e4m3 = {4, 3, 7, 0x7e, 0x7f};
  for (uint64_t b = threadIdx.x / 32; b * WEFT_MOE_FP8_BLOCK < hidden; b += warps) {
    uint64_t c0 = b * WEFT_MOE_FP8_BLOCK;
    float v[4], amax = 0.0f;
    for (int u = 0; u < 4; u++) {
      uint64_t c = c0 + (uint64_t)u * 32 + lane;
      v[u] = c < hidden ? up(x[c]) : 0.0f;
      amax = fmaxf(amax, fabsf(v[u]));
    }
    for (int off = 16; off; off /= 2)
      amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    float s = __fdiv_rn(amax, 448.0f), scale = s > 0.0f ? s : 1.0f;
    for (int d = 0; lane == 0 && d < nd; d++)
      scales[d][b] = scale;
    for (int u = 0; u < 4; u++) {
      uint64_t c = c0 + (uint64_t)u * 32 + lane;
      if (c >= hidden) continue;
      uint8_t e = (uint8_t)weft::small_encode(__fdiv_rn(v[u], scale), e4m3);
      for (int d = 0; d < nd; d++)
        q[d][c] = e;
    }
  }
}

/* ... into one destination. */
template <typename T>
__device__ void quantize(const T *x, uint64_t hidden, uint8_t *q, float *scales) {
  quantize_to(x, hidden, &q, &scales, 1);
}

} // namespace moe_fp8

#endif
