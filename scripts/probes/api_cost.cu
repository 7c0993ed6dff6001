// Host cost of the CUDA runtime calls on weft's launch path, per call, on the device
// machine: what queueing one operation can cost at best. Built and run there by
// scripts/gpu/tune.sh 4 (nvcc -O2 -arch=sm_90).
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <time.h>

struct Small {
  char b[160];
};
struct Big {
  char b[1400];
};
__global__ void k_small(const __grid_constant__ Small s) {
  if (s.b[threadIdx.x % 160] == 123) asm volatile("trap;");
}
__global__ void k_big(const __grid_constant__ Big s) {
  if (s.b[threadIdx.x % 1400] == 123) asm volatile("trap;");
}

static double now() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

#define TIME(name, ...)                                                                            \
  do {                                                                                             \
    cudaStreamSynchronize(s);                                                                      \
    double t0 = now();                                                                             \
    for (int i = 0; i < N; i++) {                                                                  \
      __VA_ARGS__;                                                                                 \
    }                                                                                              \
    double t1 = now();                                                                             \
    cudaStreamSynchronize(s);                                                                      \
    printf("%-34s %6.3f us\n", name, (t1 - t0) / N * 1e6);                                         \
  } while (0)

int main() {
  const int N = 20000;
  cudaStream_t s, s2;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking);
  cudaEvent_t e;
  cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
  Small sm = {};
  Big bg = {};
  void *p = nullptr;
  cudaMalloc(&p, 1 << 20);
  int dev = 0;
  enum cudaStreamCaptureStatus cap;
  cudaPointerAttributes a;
  for (int i = 0; i < 1000; i++)
    k_small<<<1, 512, 0, s>>>(sm);
  TIME("launch, 160 B of parameters", k_small<<<1, 512, 0, s>>>(sm));
  void *args[] = {&sm};
  TIME("cudaLaunchKernel, 160 B", cudaLaunchKernel((const void *)k_small, 1, 512, args, 0, s));
  typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                                unsigned, unsigned, CUstream, void **, void **);
  launch_fn cu_launch = nullptr;
  cudaDriverEntryPointQueryResult q;
  cudaFunction_t f = nullptr;
  if (cudaGetDriverEntryPointByVersion("cuLaunchKernel", (void **)&cu_launch, 12000,
                                       cudaEnableDefault, &q) == cudaSuccess &&
      cudaGetFuncBySymbol(&f, (const void *)k_small) == cudaSuccess && cu_launch) {
    TIME("cuLaunchKernel (driver), 160 B",
         cu_launch((CUfunction)f, 1, 1, 1, 512, 1, 1, 0, (CUstream)s, args, nullptr));
    TIME("cuLaunchKernel + cudaEventRecord",
         (cu_launch((CUfunction)f, 1, 1, 1, 512, 1, 1, 0, (CUstream)s, args, nullptr),
          cudaEventRecord(e, s)));
  } else {
    printf("driver entry point unavailable\n");
  }
  TIME("launch + cudaGetLastError", (k_small<<<1, 512, 0, s>>>(sm), cudaGetLastError()));
  TIME("launch, 1400 B of parameters", k_big<<<1, 512, 0, s>>>(bg));
  TIME("launch 64 blocks, 1400 B", k_big<<<64, 512, 0, s>>>(bg));
  TIME("cudaEventRecord", cudaEventRecord(e, s));
  TIME("launch + cudaEventRecord", (k_small<<<1, 512, 0, s>>>(sm), cudaEventRecord(e, s)));
  TIME("cudaStreamIsCapturing", cudaStreamIsCapturing(s, &cap));
  TIME("cudaGetDevice", cudaGetDevice(&dev));
  TIME("cudaGetLastError", cudaGetLastError());
  TIME("cudaStreamWaitEvent (other stream)", cudaStreamWaitEvent(s2, e, 0));
  TIME("cudaPointerGetAttributes", cudaPointerGetAttributes(&a, p));
  return 0;
}
