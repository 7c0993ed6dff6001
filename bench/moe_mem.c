/* moebench's device buffers (CUDA builds): see moe_mem.h. */
#include <cuda_runtime_api.h>
#include <stdio.h>

#include "launch.h"
#include "moe_mem.h"

static int ok(cudaError_t e, const char *what) {
  if (e == cudaSuccess) return 1;
  fprintf(stderr, "moebench: %s: %s\n", what, cudaGetErrorString(e));
  return 0;
}

static int count(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
  return n > 100 ? 100 : n;
}

int moe_mem_gpus(void) { return launch_in_child(count); }

int moe_mem_open(int rank, void **stream) {
  int n = count();
  cudaStream_t s = NULL;
  if (n < 1 || !ok(cudaSetDevice(rank % n), "cudaSetDevice") ||
      !ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate"))
    return -1;
  *stream = s;
  return rank % n;
}

void moe_mem_close(void *stream) {
  if (stream) cudaStreamDestroy((cudaStream_t)stream);
}

void *moe_mem_alloc(size_t bytes) {
  void *p = NULL;
  if (!ok(cudaMalloc(&p, bytes ? bytes : 1), "cudaMalloc")) return NULL;
  /* on the legacy stream, finished before any rank stream uses the memory */
  if (!ok(cudaMemset(p, 0, bytes ? bytes : 1), "cudaMemset") ||
      !ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize")) {
    cudaFree(p);
    return NULL;
  }
  return p;
}

void moe_mem_free(void *p) { cudaFree(p); }

int moe_mem_copy(void *dst, const void *src, size_t bytes, int up, void *stream) {
  cudaStream_t s = (cudaStream_t)stream;
  return ok(cudaMemcpyAsync(dst, src, bytes, up ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost,
                            s),
            "cudaMemcpyAsync") &&
                 ok(cudaStreamSynchronize(s), "cudaStreamSynchronize")
             ? 0
             : -1;
}

int moe_mem_sync(void *stream) {
  return ok(cudaStreamSynchronize((cudaStream_t)stream), "cudaStreamSynchronize") ? 0 : -1;
}

int moe_mem_capture(void *stream) {
  return ok(cudaStreamBeginCapture((cudaStream_t)stream, cudaStreamCaptureModeGlobal),
            "cudaStreamBeginCapture")
             ? 0
             : -1;
}

void *moe_mem_captured(void *stream) {
  cudaGraph_t g = NULL;
  cudaGraphExec_t x = NULL;
  if (!ok(cudaStreamEndCapture((cudaStream_t)stream, &g), "cudaStreamEndCapture")) return NULL;
  int made = ok(cudaGraphInstantiate(&x, g, 0), "cudaGraphInstantiate");
  cudaGraphDestroy(g);
  return made ? x : NULL;
}

int moe_mem_replay(void *graph, void *stream) {
  return ok(cudaGraphLaunch((cudaGraphExec_t)graph, (cudaStream_t)stream), "cudaGraphLaunch") ? 0
                                                                                              : -1;
}

void moe_mem_graph_free(void *graph) {
  if (graph) cudaGraphExecDestroy((cudaGraphExec_t)graph);
}
