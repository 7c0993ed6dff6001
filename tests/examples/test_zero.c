/* Loss parity of the data-parallel example (examples/zero/train.c): N ranks of B sequences at
 * a ZeRO stage, with and without overlap, must follow one rank's plain data-parallel run of
 * N x B sequences on the CPU, step for step, within 1e-5 relative in f32 (only the order of
 * the sums differs); and a run whose reduction is left out must not (the check can fail).
 * With gpu, the N ranks train on the CUDA back end (sharing the devices there are), still in
 * f32 and held to the same bound: every operation sums in another order there, which moved
 * the losses by at most 1.8e-7 on an H200, against 1.7e-2 or more without the reduction.
 * With bf16, the products read bf16 copies of their inputs: the bound is BF16_TOL (below).
 * usage: test_zero NRANKS STAGE [gpu|bf16] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launch.h"
#include "zero_opts.h"

enum { STEPS = 20, B = 2 };

/* bf16 keeps 8 significant bits: each product's inputs move by up to 2^-9 (2e-3) of
 * themselves. Over 20 steps that moved the losses by at most 5.5e-4 on an H200 (4 ranks,
 * ZeRO-3), while a run without the gradient reduction is off by 1.6e-2 or more: the bound
 * sits between, 4x above the one and 8x below the other. */
static const double BF16_TOL = 2e-3;

typedef struct {
  int stage, gpu, bf16;
} arg_t;

static zero_opts_t opts(int stage, int batch) { return zero_test_opts(stage, batch, STEPS, 5); }

static int rank_main(int rank, int n, weft_unique_id_t id, void *arg) {
  const arg_t *a = arg;
  int stage = a->stage;
  float ref[STEPS], got[STEPS], late[STEPS], wrong[STEPS];
  weft_comm_t one, comm;
  weft_unique_id_t solo;
  /* the reference: this process alone, plain data parallel (nothing sharded), the whole
   * global batch */
  if (weft_get_unique_id(&solo) != WEFT_SUCCESS ||
      weft_comm_init(&one, 1, solo, 0, NULL) != WEFT_SUCCESS)
    return printf("test_zero: rank %d: the 1-rank communicator\n", rank), 1;
  zero_opts_t o = opts(0, B * n);
  int rc = zero_train(one, &o, ref, NULL);
  weft_comm_destroy(one);
  if (rc || weft_comm_init(&comm, n, id, rank, NULL) != WEFT_SUCCESS)
    return printf("test_zero: rank %d: setting up\n", rank), 1;
  o = opts(stage, B);
  o.gpu = a->gpu, o.bf16 = a->bf16;
  double tol = a->bf16 ? BF16_TOL : 1e-5;
  if (zero_train(comm, &o, got, NULL)) return printf("test_zero: rank %d: training\n", rank), 1;
  o.overlap = 0; /* every reduction after the whole backward */
  if (zero_train(comm, &o, late, NULL)) return printf("test_zero: rank %d: training\n", rank), 1;
  o.overlap = 1, o.wrong_reduction = 1;
  if (zero_train(comm, &o, wrong, NULL)) return printf("test_zero: rank %d: training\n", rank), 1;
  weft_comm_destroy(comm);
  double w = parity_worst(got, ref, STEPS), wl = parity_worst(late, ref, STEPS),
         ww = parity_worst(wrong, ref, STEPS);
  if (rank == 0)
    printf("test_zero: %d ranks%s, stage %d: loss %.4f -> %.4f, worst relative difference from "
           "one rank's DDP %.2g, %.2g without overlap (without the reduction: %.2g)\n",
           n,
           a->bf16  ? " on CUDA, bf16 products"
           : a->gpu ? " on CUDA"
                    : "",
           stage, ref[0], ref[STEPS - 1], w, wl, ww);
  if (w > tol || wl > tol)
    return printf("test_zero: rank %d: losses differ from one rank's\n", rank), 1;
  if (n > 1 && ww <= tol)
    return printf("test_zero: rank %d: a run without reduction went unnoticed\n", rank), 1;
  if (ref[STEPS - 1] >= ref[0]) return printf("test_zero: the loss did not fall\n"), 1;
  return 0;
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 2;
  const char *mode = argc > 3 ? argv[3] : "cpu";
  arg_t a = {.stage = argc > 2 ? atoi(argv[2]) : 0,
             .gpu = !strcmp(mode, "gpu") || !strcmp(mode, "bf16"),
             .bf16 = !strcmp(mode, "bf16")};
  if (n < 1 || a.stage < 0 || a.stage > 3) return 2;
  if (a.gpu && !cuda_here()) return printf("test_zero: skipped: no CUDA device\n"), 77;
  return launch_local(n, rank_main, &a, 300) ? 1 : 0;
}
