/* What the multi-rank GPU tests share: a synchronised host-to-device copy, a monotonic
 * clock, a rank's GPU and stream, and their main (usage: NAME RANKS [--share], ranks as child
 * processes on the GPUs in turn, or all on GPU 0 with --share). */
#ifndef WEFT_TEST_GPU_TEST_H
#define WEFT_TEST_GPU_TEST_H

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "launch.h"

/* Synchronised: a pageable cudaMemcpy may return before its copy lands, and the tests'
 * streams do not wait for the legacy stream. */
static inline void h2d(void *dst, const void *src, size_t bytes) {
  cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice);
  cudaDeviceSynchronize();
}

static inline double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* For a rank: stdout line-buffered, its GPU (GPU 0 for every rank with share, else the GPUs
 * in turn) made current, and a non-blocking stream there; -1 without a GPU. */
static inline int gpu_rank_setup(int rank, int share, int *dev, cudaStream_t *s) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  int ngpu = 0;
  if (cudaGetDeviceCount(&ngpu) != cudaSuccess || ngpu < 1) return -1;
  *dev = share ? 0 : rank % ngpu;
  if (cudaSetDevice(*dev) != cudaSuccess) return -1;
  return cudaStreamCreateWithFlags(s, cudaStreamNonBlocking) == cudaSuccess ? 0 : -1;
}

/* Parses RANKS [--share] into *share and runs fn on that many ranks. */
static inline int gpu_test_main(int argc, char **argv, const char *name, launch_fn fn, int *share) {
  int n = argc > 1 ? atoi(argv[1]) : 2;
  *share = argc > 2 && strcmp(argv[2], "--share") == 0;
  if (n < 2) {
    fprintf(stderr, "usage: %s RANKS [--share]\n", argv[0]);
    return 2;
  }
  int rc = launch_local(n, fn, NULL, 300);
  printf("%s: %d ranks%s: %s\n", name, n, *share ? " on one GPU" : "", rc ? "FAILED" : "ok");
  return rc;
}

#endif
