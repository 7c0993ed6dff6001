/* Reductions of a device kernel: any type, op and number of inputs in one loop, and the
 * two-input sums training moves unrolled. Part of the device kernel's one translation unit
 * (kernels.cu includes it). */
#ifndef WEFT_REDUCE_CUH
#define WEFT_REDUCE_CUH

#include "prims.cuh"

namespace weft {

/* Every type, op and input count: one loop that picks the arithmetic per 16-byte vector (a
 * branch every thread of the block takes alike). One function instead of one per type and
 * op: each function called through the ABI adds its register saves to the kernel's stack
 * frame, and the driver reserves that frame for every thread the GPU can hold (7 KiB of
 * frame cost 1.6 GiB per GPU). A tail shorter than 16 bytes, or buffers not 16-byte
 * aligned, go through the same arithmetic a vector at a time from bytes. */
__device__ __noinline__ void reduce_general(int dtype, int op, char *const *dst, int nd,
                                            const char *const *in, int nin, uint64_t count,
                                            int nranks) {
  const uint64_t bytes = count * (uint64_t)dtype_size(dtype);
  uintptr_t al = 0;
  for (int d = 0; d < nd; d++)
    al |= (uintptr_t)dst[d];
  for (int j = 0; j < nin; j++)
    al |= (uintptr_t)in[j];
  const uint64_t nv = (al & 15) == 0 ? bytes / 16 : 0;
  const int t = threadIdx.x, nt = blockDim.x;
#pragma unroll 1
  for (uint64_t i = t; i < nv; i += nt) {
    uint4 v[WEFT_DEV_MAX_RANKS];
#pragma unroll
    for (int j = 0; j < WEFT_DEV_MAX_RANKS; j++)
      if (j < nin) v[j] = ((const uint4 *)in[j])[i];
    uint4 o = reduce_vec_any(dtype, op, v, nin, nranks);
    for (int d = 0; d < nd; d++)
      ((uint4 *)dst[d])[i] = o;
  }
#pragma unroll 1
  for (uint64_t b = nv * 16 + (uint64_t)t * 16; b < bytes; b += (uint64_t)nt * 16) {
    uint64_t len = bytes - b < 16 ? bytes - b : 16;
    union {
      uint4 v[WEFT_DEV_MAX_RANKS];
      unsigned char c[WEFT_DEV_MAX_RANKS][16];
    } u;
    for (int j = 0; j < nin; j++)
      for (int x = 0; x < 16; x++)
        u.c[j][x] = x < (int)len ? (unsigned char)in[j][b + x] : 0;
    union {
      uint4 v;
      unsigned char c[16];
    } o;
    o.v = reduce_vec_any(dtype, op, u.v, nin, nranks);
    for (int d = 0; d < nd; d++)
      for (uint64_t x = 0; x < len; x++)
        dst[d][b + x] = (char)o.c[x];
  }
}

/* Two inputs (two ranks, or a reduce with one peer) summed in the types training moves:
 * loops unrolled for them alone, several loads of both inputs in flight per thread. */
template <int DT>
__device__ __noinline__ void reduce_sum2(char *const *dst, int nd, const char *const *in,
                                         uint64_t count, int nranks) {
  reduce2<DT, WEFT_SUM>(dst, nd, in, count, nranks);
}

__device__ inline void reduce_any(int dtype, int op, char *const *dst, int nd,
                                  const char *const *in, int nin, uint64_t count, int nranks) {
  if (nin == 2 && op == WEFT_SUM) switch (dtype) {
    case WEFT_F32: reduce_sum2<WEFT_F32>(dst, nd, in, count, nranks); return;
    case WEFT_BF16: reduce_sum2<WEFT_BF16>(dst, nd, in, count, nranks); return;
    case WEFT_F16: reduce_sum2<WEFT_F16>(dst, nd, in, count, nranks); return;
    default: break;
    }
  reduce_general(dtype, op, dst, nd, in, nin, count, nranks);
}

} // namespace weft

#endif
