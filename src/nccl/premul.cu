/* PreMulSum's device half: each element of the input times the caller's scalar, in the
 * element type's arithmetic (f16, bf16 and fp8 through f32, rounded back as weft's kernels
 * round), before weft sums the scaled copies. */
#include <cuda_runtime.h>

#include <string.h>

#include "premul.h"
#include "types.cuh"

namespace {

template <int DT>
__global__ void premul(typename weft::Ty<DT>::S *dst, const typename weft::Ty<DT>::S *src, size_t n,
                       typename weft::Ty<DT>::S host_scalar,
                       const typename weft::Ty<DT>::S *dev_scalar) {
  typedef weft::Ty<DT> T;
  typename T::A s = T::up(dev_scalar ? *dev_scalar : host_scalar);
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    dst[i] = T::down(T::up(src[i]) * s);
}

template <int DT>
int launch(void *dst, const void *src, size_t n, const shim_premul_t *p, cudaStream_t s) {
  typedef typename weft::Ty<DT>::S S;
  S host = 0;
  memcpy(&host, &p->value, sizeof host);
  const S *dev = p->residence == ncclScalarDevice ? (const S *)p->device : nullptr;
  size_t blocks = (n + 255) / 256;
  if (blocks > 1024) blocks = 1024;
  premul<DT><<<(unsigned)blocks, 256, 0, s>>>((S *)dst, (const S *)src, n, host, dev);
  return (int)cudaGetLastError();
}

} // namespace

int shim_premul_launch(void *dst, const void *src, size_t count, int dt, const shim_premul_t *p,
                       void *stream) {
  cudaStream_t s = (cudaStream_t)stream;
  switch (dt) {
  case WEFT_F32: return launch<WEFT_F32>(dst, src, count, p, s);
  case WEFT_F64: return launch<WEFT_F64>(dst, src, count, p, s);
  case WEFT_F16: return launch<WEFT_F16>(dst, src, count, p, s);
  case WEFT_BF16: return launch<WEFT_BF16>(dst, src, count, p, s);
  case WEFT_I8: return launch<WEFT_I8>(dst, src, count, p, s);
  case WEFT_U8: return launch<WEFT_U8>(dst, src, count, p, s);
  case WEFT_I32: return launch<WEFT_I32>(dst, src, count, p, s);
  case WEFT_I64: return launch<WEFT_I64>(dst, src, count, p, s);
  case WEFT_U32: return launch<WEFT_U32>(dst, src, count, p, s);
  case WEFT_U64: return launch<WEFT_U64>(dst, src, count, p, s);
  case WEFT_FP8_E4M3: return launch<WEFT_FP8_E4M3>(dst, src, count, p, s);
  case WEFT_FP8_E5M2: return launch<WEFT_FP8_E5M2>(dst, src, count, p, s);
  default: return (int)cudaErrorInvalidValue;
  }
}
