/* What the multi-rank GPU tests share: a synchronised host-to-device copy, a monotonic
 * clock, a rank's GPU and stream, weft's log caught in a file, and their main (usage: NAME
 * RANKS [--share], ranks as child processes on the GPUs in turn, or all on GPU 0 with
 * --share). */
#ifndef WEFT_TEST_GPU_TEST_H
#define WEFT_TEST_GPU_TEST_H

#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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

/* Wait reports after 1 s, said on stderr whatever WEFT_DEBUG_SUBSYS asks (they are COLL's):
 * for tests that catch them. Read once per process, so before any rank starts. */
static inline void gpu_test_wait_reports(void) {
  setenv("WEFT_WAIT_REPORT_S", "1", 1);
  unsetenv("WEFT_DEBUG_FILE");
  const char *sub = getenv("WEFT_DEBUG_SUBSYS");
  if (sub) {
    char all[256];
    snprintf(all, sizeof all, "%s,COLL", sub);
    setenv("WEFT_DEBUG_SUBSYS", all, 1);
  }
}

/* weft logs to stderr: log_catch sends it to a file of this process's until log_release,
 * which puts stderr back and returns what was logged (at most 64 KiB; "" when the file could
 * not be made or read). */
typedef struct {
  char path[64];
  int saved;
  char text[1 << 16];
} log_catch_t;

static inline int log_catch(log_catch_t *l) {
  snprintf(l->path, sizeof l->path, "/tmp/weft-gpu-test-log.%d", (int)getpid());
  fflush(stderr);
  int fd = open(l->path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  l->saved = dup(2);
  if (fd < 0 || l->saved < 0 || dup2(fd, 2) < 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  close(fd);
  return 0;
}

static inline const char *log_release(log_catch_t *l) {
  fflush(stderr);
  dup2(l->saved, 2);
  close(l->saved);
  FILE *f = fopen(l->path, "r");
  size_t got = f ? fread(l->text, 1, sizeof l->text - 1, f) : 0;
  if (f) fclose(f);
  unlink(l->path);
  l->text[got] = 0;
  return l->text;
}

/* The line of text holding needle, cut at its end (text is changed), or NULL. */
static inline const char *log_line(char *text, const char *needle) {
  char *hit = strstr(text, needle), *line = hit, *end = hit ? strchr(hit, '\n') : NULL;
  while (line && line > text && line[-1] != '\n')
    line--;
  if (end) *end = 0;
  return line;
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
