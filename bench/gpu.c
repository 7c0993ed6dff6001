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

/* Whole 2 MiB pages, as PyTorch's caching allocator hands out: copy-engine writes into a peer's
 * CUDA IPC mapping of an allocation of any other size ran at 272-296 GB/s each way instead of
 * 392 (bench/results/2026-11-30-h200x2-ipc-probe.txt), which would measure that, not weft. */
int bench_gpu_alloc(size_t bytes, void **s, void **r) {
  *s = *r = NULL;
  const size_t page = (size_t)2 << 20;
  bytes = (bytes + page - 1) / page * page;
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
  if (coll == B_ALLTOALLV && /* its gaps must come back untouched */
      !cuda_ok(cudaMemsetAsync(dout, BENCH_GAP_BYTE, out_b, (cudaStream_t)o->stream),
               "cudaMemsetAsync"))
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

/* --trace: host stamps of one timed loop (barrier left, event queued, first call queued, all
 * queued, synced) and an event after every call, to find the call a stall hit. */
typedef struct {
  double stamp[5];
  cudaEvent_t *ev;
  int n;
} trace_t;

static int trace_open(trace_t *t, const bench_opts_t *o) {
  memset(t, 0, sizeof *t);
  if (!o->trace || o->graph) return 1;
  t->ev = calloc((size_t)o->iters, sizeof *t->ev);
  if (!t->ev) return 0;
  for (; t->n < o->iters; t->n++)
    if (!cuda_ok(cudaEventCreate(&t->ev[t->n]), "cudaEventCreate")) return 0;
  return 1;
}

static void trace_close(trace_t *t) {
  for (int i = 0; i < t->n; i++)
    cudaEventDestroy(t->ev[i]);
  free(t->ev);
}

static int by_value(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

/* One line per loop and rank, written at once so that the ranks' lines do not interleave;
 * CLOCK_MONOTONIC is one clock for every process of the host. Where a call took more than 3x
 * the median (a stall), every call's time follows, to show which ones and how many. */
static void trace_report(const trace_t *t, cudaEvent_t e0, float total_ms, const char *lib,
                         int coll, size_t count, int rank) {
  float first = -1, worst = -1, prev = 0, each[256], sorted[256];
  int at = -1, n = t->n < 256 ? t->n : 256;
  for (int i = 0; i < t->n; i++) {
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, t->ev[i]);
    if (i == 0) first = ms;
    if (ms - prev > worst) worst = ms - prev, at = i;
    if (i < n) each[i] = ms - prev;
    prev = ms;
  }
  memcpy(sorted, each, sizeof *each * (size_t)n);
  qsort(sorted, (size_t)n, sizeof *sorted, by_value);
  const double *st = t->stamp;
  char line[2048];
  int len = snprintf(line, sizeof line,
                     "# trace rank %d %s %s count %zu: host barrier left at %.1f us, then +%.1f "
                     "event, +%.1f first call queued, +%.1f all queued, +%.1f synced; gpu first "
                     "%.1f us, slowest call %d of %.1f us, total %.1f us",
                     rank, lib, bench_colls[coll].name, count, st[0] * 1e6, (st[1] - st[0]) * 1e6,
                     (st[2] - st[0]) * 1e6, (st[3] - st[0]) * 1e6, (st[4] - st[0]) * 1e6,
                     first * 1e3, at, worst * 1e3, total_ms * 1e3);
  if (n > 0 && worst > 3 * sorted[n / 2])
    for (int i = 0; i < n && len > 0 && (size_t)len < sizeof line - 16; i++)
      len += snprintf(line + len, sizeof line - (size_t)len, "%s%.0f", i ? " " : "; calls (us) ",
                      each[i] * 1e3);
  if (len > (int)sizeof line - 2) len = (int)sizeof line - 2; /* cut short, still a line */
  if (len >= 0) line[len++] = '\n';
  if (len > 1) fwrite(line, 1, (size_t)len, stderr);
}

/* Seconds per call of `iters` calls after `warmup`, measured on the stream. peer != NULL
 * runs NCCL instead of weft. *submit: host seconds per call spent queueing them (stream
 * launches only, else -1); near the stream time, the host is what limits. *algo is taken
 * right after weft's timed calls are queued (or captured): the barriers are calls too. */
double bench_gpu_time(int coll, void *in, void *out, size_t count, const bench_opts_t *o,
                      weft_comm_t comm, void *peer, int rank, int nranks, weft_result_t *rc,
                      double *submit, const char **algo) {
  cudaStream_t s = (cudaStream_t)o->stream;
  cudaEvent_t e0 = NULL, e1 = NULL;
  trace_t tr;
  cudaGraph_t g = NULL;
  cudaGraphExec_t ge = NULL;
  double secs = -1, t0 = 0;
  *rc = WEFT_SUCCESS;
  *submit = -1;
  *algo = "n/a";
#define CALL()                                                                                     \
  (peer ? bench_nccl_call(peer, coll, in, out, count, o, rank, nranks)                             \
        : bench_call(coll, in, out, count, o, comm, rank, nranks))
  for (int i = 0; i < o->warmup && *rc == WEFT_SUCCESS; i++)
    *rc = CALL();
  if (*rc != WEFT_SUCCESS) return -1;
  if (!trace_open(&tr, o) || !cuda_ok(cudaEventCreate(&e0), "cudaEventCreate") ||
      !cuda_ok(cudaEventCreate(&e1), "cudaEventCreate"))
    goto out;
  if (o->graph) {
    if (!cuda_ok(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "capture")) goto out;
    for (int i = 0; i < o->iters && *rc == WEFT_SUCCESS; i++)
      *rc = CALL();
    if (!peer) *algo = weft_comm_last_algo(comm);
    cudaError_t ce = cudaStreamEndCapture(s, &g);
    if (*rc != WEFT_SUCCESS || !cuda_ok(ce, "cudaStreamEndCapture")) goto out;
    if (!cuda_ok(cudaGraphInstantiate(&ge, g, 0), "cudaGraphInstantiate")) goto out;
    cudaGraphLaunch(ge, s); /* upload and warm */
  }
  if (!cuda_ok(cudaStreamSynchronize(s), "cudaStreamSynchronize")) goto out;
  /* Every rank starts its timed loop together: the host barrier, then one on the GPUs, so
   * that a rank whose thread wakes late from the host barrier (seen to take 3-170 ms on the
   * device machine's VM, bench/results/2026-11-30-h200x2-tuning-12.txt) delays only that
   * untimed barrier kernel, not the other rank's timed calls. */
  if (weft_barrier(o->ctl, NULL) != WEFT_SUCCESS) goto out;
  tr.stamp[0] = host_s();
  if ((*rc = weft_barrier(comm, (weft_stream_t)s)) != WEFT_SUCCESS) goto out;
  cudaEventRecord(e0, s);
  tr.stamp[1] = host_s();
  if (o->graph)
    cudaGraphLaunch(ge, s);
  else {
    t0 = host_s();
    for (int i = 0; i < o->iters && *rc == WEFT_SUCCESS; i++) {
      *rc = CALL();
      if (i < tr.n) cudaEventRecord(tr.ev[i], s);
      if (i == 0) tr.stamp[2] = host_s();
    }
    *submit = (host_s() - t0) / o->iters;
    if (!peer) *algo = weft_comm_last_algo(comm);
  }
  tr.stamp[3] = host_s();
  cudaEventRecord(e1, s);
  if (*rc != WEFT_SUCCESS || !cuda_ok(cudaEventSynchronize(e1), "cudaEventSynchronize")) goto out;
  tr.stamp[4] = host_s();
  float ms = 0;
  cudaEventElapsedTime(&ms, e0, e1);
  secs = ms * 1e-3 / o->iters;
  if (o->trace) trace_report(&tr, e0, ms, peer ? "nccl" : "weft", coll, count, rank);
  if (!peer) weft_comm_get_async_error(comm, rc);
#undef CALL
out:
  if (ge) cudaGraphExecDestroy(ge);
  if (g) cudaGraphDestroy(g);
  if (e0) cudaEventDestroy(e0);
  if (e1) cudaEventDestroy(e1);
  trace_close(&tr);
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
