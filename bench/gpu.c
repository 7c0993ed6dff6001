/* collbench on GPUs: device buffers, the oracle check through host copies, timing with CUDA
 * events on the rank's stream (or replays of a captured CUDA graph with -G), and the same
 * loop through NCCL when --compare nccl loaded it. */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "nccl_peer.h"

static int cuda_ok(cudaError_t e, const char *what) {
  if (e == cudaSuccess) return 1;
  fprintf(stderr, "collbench: %s: %s\n", what, cudaGetErrorString(e));
  return 0;
}

int bench_gpu_alloc(size_t bytes, void **s, void **r) {
  *s = *r = NULL;
  if (!cuda_ok(cudaMalloc(s, bytes), "cudaMalloc") || !cuda_ok(cudaMalloc(r, bytes), "cudaMalloc"))
    return -1;
  cudaMemset(*s, 0, bytes);
  cudaMemset(*r, 0, bytes);
  return cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize") ? 0 : -1;
}

void bench_gpu_free(void *s, void *r) {
  cudaFree(s);
  cudaFree(r);
}

long bench_gpu_check(int coll, char *ds, char *dr, size_t count, const bench_opts_t *o,
                     weft_comm_t comm, int rank, int nranks, int in_place, weft_result_t *rc) {
  size_t es = weft_dtype_size(o->dtype), nin, nout;
  bench_buf_elems(coll, count, nranks, &nin, &nout);
  char *din, *dout;
  bench_layout(coll, ds, dr, count, es, rank, in_place, &din, &dout);
  size_t in_b = (coll == B_ALLGATHER ? count : nin) * es, out_b = nout * es;
  char *hin = malloc(in_b + 1), *hout = malloc(out_b + 1);
  long wrong = (long)nout;
  *rc = WEFT_SUCCESS;
  if (!hin || !hout) goto out;
  bench_fill(coll, hin, count, o, rank, nranks);
  /* on the rank's stream: a plain cudaMemcpy from pageable memory may still be copying when
   * it returns, and the stream does not wait for the legacy stream */
  if (!cuda_ok(cudaMemcpyAsync(din, hin, in_b, cudaMemcpyHostToDevice, (cudaStream_t)o->stream),
               "cudaMemcpyAsync"))
    goto out;
  *rc = bench_call(coll, din, dout, count, o, comm, rank, nranks);
  if (*rc != WEFT_SUCCESS) goto out;
  if (!cuda_ok(cudaStreamSynchronize((cudaStream_t)o->stream), "cudaStreamSynchronize")) goto out;
  weft_comm_get_async_error(comm, rc);
  if (*rc != WEFT_SUCCESS) goto out;
  if (!cuda_ok(cudaMemcpy(hout, dout, out_b, cudaMemcpyDeviceToHost), "cudaMemcpy")) goto out;
  wrong = bench_wrong(coll, hout, count, o, rank, nranks);
out:
  free(hin);
  free(hout);
  return wrong;
}

static double host_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Seconds per call of `iters` calls after `warmup`, measured on the stream. peer != NULL
 * runs NCCL instead of weft. *submit: host seconds per call spent queueing them (stream
 * launches only, else -1); near the stream time, the host is what limits. */
double bench_gpu_time(int coll, void *in, void *out, size_t count, const bench_opts_t *o,
                      weft_comm_t comm, void *peer, int rank, int nranks, weft_result_t *rc,
                      double *submit) {
  cudaStream_t s = (cudaStream_t)o->stream;
  cudaEvent_t e0 = NULL, e1 = NULL;
  cudaGraph_t g = NULL;
  cudaGraphExec_t ge = NULL;
  double secs = -1, t0 = 0;
  *rc = WEFT_SUCCESS;
  *submit = -1;
#define CALL()                                                                                     \
  (peer ? bench_nccl_call(peer, coll, in, out, count, o, rank, nranks)                             \
        : bench_call(coll, in, out, count, o, comm, rank, nranks))
  for (int i = 0; i < o->warmup && *rc == WEFT_SUCCESS; i++)
    *rc = CALL();
  if (*rc != WEFT_SUCCESS) return -1;
  if (!cuda_ok(cudaEventCreate(&e0), "cudaEventCreate") ||
      !cuda_ok(cudaEventCreate(&e1), "cudaEventCreate"))
    goto out;
  if (o->graph) {
    if (!cuda_ok(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "capture")) goto out;
    for (int i = 0; i < o->iters && *rc == WEFT_SUCCESS; i++)
      *rc = CALL();
    cudaError_t ce = cudaStreamEndCapture(s, &g);
    if (*rc != WEFT_SUCCESS || !cuda_ok(ce, "cudaStreamEndCapture")) goto out;
    if (!cuda_ok(cudaGraphInstantiate(&ge, g, 0), "cudaGraphInstantiate")) goto out;
    cudaGraphLaunch(ge, s); /* upload and warm */
  }
  if (!cuda_ok(cudaStreamSynchronize(s), "cudaStreamSynchronize")) goto out;
  /* every rank starts its timed loop together */
  if (weft_barrier(o->ctl, NULL) != WEFT_SUCCESS) goto out;
  cudaEventRecord(e0, s);
  if (o->graph)
    cudaGraphLaunch(ge, s);
  else {
    t0 = host_s();
    for (int i = 0; i < o->iters && *rc == WEFT_SUCCESS; i++)
      *rc = CALL();
    *submit = (host_s() - t0) / o->iters;
  }
  cudaEventRecord(e1, s);
  if (*rc != WEFT_SUCCESS || !cuda_ok(cudaEventSynchronize(e1), "cudaEventSynchronize")) goto out;
  float ms = 0;
  cudaEventElapsedTime(&ms, e0, e1);
  secs = ms * 1e-3 / o->iters;
  if (!peer) weft_comm_get_async_error(comm, rc);
#undef CALL
out:
  if (ge) cudaGraphExecDestroy(ge);
  if (g) cudaGraphDestroy(g);
  if (e0) cudaEventDestroy(e0);
  if (e1) cudaEventDestroy(e1);
  return *rc == WEFT_SUCCESS ? secs : -1;
}

int bench_gpu_setup(int rank, void **stream) {
  int n = 0;
  if (!cuda_ok(cudaGetDeviceCount(&n), "cudaGetDeviceCount") || n < 1) return -1;
  int dev = rank % n;
  if (!cuda_ok(cudaSetDevice(dev), "cudaSetDevice")) return -1;
  cudaStream_t s = NULL;
  if (!cuda_ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate")) return -1;
  *stream = s;
  return dev;
}

void bench_gpu_teardown(void *stream) {
  if (stream) cudaStreamDestroy((cudaStream_t)stream);
}
