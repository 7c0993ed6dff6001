/* The model and optimizer every training test trains (test_zero.c, test_checkpoint.c,
 * test_tp.c): small enough for CI, large enough that a wrong reduction shows; how far a
 * run's losses are from the reference's; whether a GPU run can start. */
#ifndef WEFT_TESTS_ZERO_OPTS_H
#define WEFT_TESTS_ZERO_OPTS_H

#include <math.h>
#include <sys/wait.h>
#include <unistd.h>

#include "data.h"
#include "zero.h"

static inline zero_opts_t zero_test_opts(int stage, int batch, int steps, unsigned long long seed) {
  zero_opts_t o = {
      .stage = stage,
      .steps = steps,
      .batch = batch,
      .model = {.vocab = DATA_VOCAB, .seq = 16, .channels = 32, .layers = 2, .heads = 2},
      .opt = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f},
      .seed = seed,
      .overlap = 1};
  return o;
}

/* The worst relative difference of steps losses from the reference's. */
static inline double parity_worst(const float *a, const float *ref, int steps) {
  double w = 0;
  for (int s = 0; s < steps; s++) {
    double d = fabs((double)a[s] - ref[s]) / fabs((double)ref[s]);
    w = d > w ? d : w;
  }
  return w;
}

/* Whether a CUDA device is there, asked in a child: a process that touched CUDA cannot fork
 * ranks that use it. */
static inline int cuda_here(void) {
  int st = 0;
  pid_t p = fork();
  if (p == 0) _exit(gpt_cuda_devices() > 0 ? 0 : 1);
  return p > 0 && waitpid(p, &st, 0) == p && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

#endif
