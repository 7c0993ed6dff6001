/* Where the soak's buffers live: host memory, or (--device, CUDA builds) a device twin of
 * each host buffer, carved from one arena per worker. Inputs are made and results checked
 * on the host side; the twins are copied around each call. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "soak.h"

#ifdef WEFT_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

enum { ALIGN = 256 };

int soak_dev_available(void) {
#ifdef WEFT_HAVE_CUDA
  return 1;
#else
  return 0;
#endif
}

/* The arena is allocated once, before the workers start: a cudaMalloc or cudaFree under
 * load would wait for the process's other kernels, which may be waiting for peers whose
 * workers are themselves blocked in one (a deadlock of CUDA's making, not weft's). It holds
 * every pending item: each at most two buffers of max_bytes plus guards, gaps and rounding. */
int soak_dev_init(worker_t *w) {
  if (!w->device) return weft_stream_create(&w->stream) == WEFT_SUCCESS ? 0 : -1;
#ifdef WEFT_HAVE_CUDA
  cudaStream_t s = NULL;
  w->arena_bytes = SOAK_MAX_PENDING * (2 * w->max_bytes + (64u << 10));
  if (cudaSetDevice(0) != cudaSuccess ||
      cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess ||
      cudaMalloc((void **)&w->arena, w->arena_bytes) != cudaSuccess ||
      cudaEventCreateWithFlags((cudaEvent_t *)&w->event, cudaEventDisableTiming) != cudaSuccess) {
    if (s) cudaStreamDestroy(s);
    if (w->arena) cudaFree(w->arena);
    w->arena = NULL;
    return -1;
  }
  /* a non-blocking stream per worker: the legacy default stream would order the workers'
   * kernels differently on each rank and deadlock them */
  w->stream = (weft_stream_t)s;
  return 0;
#else
  return -1;
#endif
}

void soak_dev_bind(void) {
#ifdef WEFT_HAVE_CUDA
  cudaSetDevice(0);
#endif
}

void soak_dev_fini(worker_t *w) {
  if (!w->device) {
    if (w->stream) weft_stream_destroy(w->stream);
    w->stream = NULL;
    return;
  }
#ifdef WEFT_HAVE_CUDA
  if (w->stream) cudaStreamDestroy((cudaStream_t)w->stream);
  if (w->event) cudaEventDestroy((cudaEvent_t)w->event);
  cudaFree(w->arena);
  w->stream = NULL, w->arena = NULL, w->event = NULL;
#endif
}

int sbuf_alloc(worker_t *w, sbuf_t *b, size_t bytes) {
  b->bytes = bytes;
  b->host = malloc(bytes ? bytes : 1);
  b->dev = b->host;
  if (!b->host) return -1;
  if (!w->device) return 0;
  size_t at = (w->arena_used + ALIGN - 1) / ALIGN * ALIGN;
  if (at + bytes > w->arena_bytes) return -1; /* sized for SOAK_MAX_PENDING items: a bug */
  b->dev = w->arena + at;
  w->arena_used = at + bytes;
  return 0;
}

void soak_arena_reset(worker_t *w) { w->arena_used = 0; }

int sbuf_upload(worker_t *w, sbuf_t *b) {
  if (!w->device) return 0;
#ifdef WEFT_HAVE_CUDA
  /* on the worker's stream, so it lands before the collective that reads it */
  return cudaMemcpyAsync(b->dev, b->host, b->bytes, cudaMemcpyHostToDevice,
                         (cudaStream_t)w->stream) == cudaSuccess
             ? 0
             : -1;
#else
  (void)b;
  return -1;
#endif
}

int sbuf_download(worker_t *w, sbuf_t *b) {
  if (!w->device) return 0;
#ifdef WEFT_HAVE_CUDA
  cudaStream_t s = (cudaStream_t)w->stream;
  return cudaMemcpyAsync(b->host, b->dev, b->bytes, cudaMemcpyDeviceToHost, s) == cudaSuccess &&
                 cudaStreamSynchronize(s) == cudaSuccess
             ? 0
             : -1;
#else
  (void)b;
  return -1;
#endif
}

void sbuf_free(sbuf_t *b) {
  free(b->host);
  memset(b, 0, sizeof *b);
}

int soak_sync(worker_t *w, char *why, size_t len) {
  if (!w->device) {
    if (weft_stream_synchronize(w->stream) == WEFT_SUCCESS) return 0;
    snprintf(why, len, "%s", weft_get_last_error(NULL));
    return -1;
  }
#ifdef WEFT_HAVE_CUDA
  cudaError_t ce = cudaStreamSynchronize((cudaStream_t)w->stream);
  weft_result_t ae = WEFT_SUCCESS;
  weft_comm_get_async_error(w->comm, &ae);
  if (ce == cudaSuccess && ae == WEFT_SUCCESS) return 0;
  snprintf(why, len, "%s",
           ce != cudaSuccess ? cudaGetErrorString(ce) : weft_get_last_error(w->comm));
  return -1;
#else
  return -1;
#endif
}
