// What the device probes (scripts/device_*_probe.cu) share: a CUDA check that reports and
// returns 1 (with probe_who, e.g. "rank 1: ", before the message), and a fill of varied bytes.
#ifndef WEFT_DEVICE_PROBE_CUH
#define WEFT_DEVICE_PROBE_CUH

#include <cstdio>
#include <cuda_runtime.h>

static const char *probe_who = "";

#define CK(x)                                                                                      \
  do {                                                                                             \
    cudaError_t e = (x);                                                                           \
    if (e != cudaSuccess) {                                                                        \
      fprintf(stderr, "%s%s: %s\n", probe_who, #x, cudaGetErrorString(e));                         \
      return 1;                                                                                    \
    }                                                                                              \
  } while (0)

/* n words of a hash of their index and seed: data that no link could compress */
__global__ void fill(unsigned *p, size_t n, unsigned seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    unsigned x = (unsigned)i * 2654435761u ^ seed;
    x ^= x >> 13, x *= 0x5bd1e995u, x ^= x >> 15;
    p[i] = x;
  }
}

#endif
