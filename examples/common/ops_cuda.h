/* What the CUDA back end's files share (C++, internal to examples/common): launch shapes and
 * warp reductions, the context's stream, its one double of device memory for a sum the host
 * waits for, and the mixture of experts' vtable (moe_ops_cuda.cu). */
#ifndef WEFT_EXAMPLES_OPS_CUDA_H
#define WEFT_EXAMPLES_OPS_CUDA_H

#include <cuda_runtime.h>

extern "C" {
#include "moe_ops.h"
}

/* Threads a block, and blocks for n elements (at least 1, at most 65535: kernels stride). */
const int TPB = 256;
static inline int blocks(long n) {
  long b = (n + TPB - 1) / TPB;
  return (int)(b < 1 ? 1 : b > 65535 ? 65535 : b);
}

#define GRID_STRIDE(i, n)                                                                          \
  for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < (long)(n);                        \
       i += (long)gridDim.x * blockDim.x)

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
/* Waits for the stream: 0, or -1 with the error on stderr (what any failed operation left). */
int gpt_cuda_finish(void *ctx);
extern const moe_ops_vt_t moe_ops_cuda;

#endif
